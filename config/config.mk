# config module: the settings table (options.def), their parsers and cfg_load.
#
# CONFIG_OBJS is what the shim and the gpucap CLI link; test_config checks every accepted
# form and every rejection class of every setting, plus the fail-closed rules; test_job the
# job identifiers of the exit report; test_discover the caps the cluster set (discover.h).

CONFIG_OBJS := $(BUILD)/obj/config/parse.o $(BUILD)/obj/config/cfg.o $(BUILD)/obj/config/unknown.o \
               $(BUILD)/obj/config/job.o $(BUILD)/obj/config/discover.o $(BUILD)/obj/config/cgroup.o

CONFIG_TESTS := $(BUILD)/tests/test_config $(BUILD)/tests/test_job $(BUILD)/tests/test_discover

$(BUILD)/tests/test_config: $(BUILD)/obj/tests/unit/test_config.o $(CONFIG_OBJS)
	$(link)

$(BUILD)/tests/test_job: $(BUILD)/obj/tests/unit/test_job.o $(BUILD)/obj/config/job.o
	$(link)

$(BUILD)/tests/test_discover: $(BUILD)/obj/tests/unit/test_discover.o $(CONFIG_OBJS)
	$(link)

# `make $PWD/build/tests/test_config` names the same file by its absolute path.
ifneq ($(abspath $(CONFIG_TESTS)),$(CONFIG_TESTS))
$(abspath $(CONFIG_TESTS)): $(CONFIG_TESTS)
endif

TEST_PROGRAMS += $(CONFIG_TESTS)
