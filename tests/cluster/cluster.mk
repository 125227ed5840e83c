# The cluster integration: caps the cluster set (GPUCAP_DISCOVER), the Slurm plug-in on a real
# Slurm, and the CDI spec for containers. Programs run over the fake driver like the other
# integration tests (tests/integ/lib.sh).

# softtest asks the fake driver (its test hook) what the process holds: linked with it.
$(BUILD)/tests/softtest: private LINK_LIBS = $(FAKECUDA_LIB)
$(BUILD)/tests/softtest: $(BUILD)/obj/tests/cluster/softtest.o $(FAKECUDA_LIB)
	$(link)

# jobtask is what the Slurm test's jobs run: linked with -lcuda like a CUDA program.
$(BUILD)/tests/jobtask: private LINK_LIBS = $(FAKECUDA_LIB)
$(BUILD)/tests/jobtask: $(BUILD)/obj/tests/cluster/jobtask.o $(FAKECUDA_LIB)
	$(link)

TEST_DEPS += $(BUILD)/tests/softtest $(BUILD)/tests/jobtask
TEST_SCRIPTS += tests/cluster/discover.sh tests/cluster/slurm.sh tests/cluster/cdi.sh
