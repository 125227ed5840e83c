# Fake CUDA driver: $(BUILD)/fakecuda/libcuda.so.1 (+ libcuda.so), its tests and probe tool.
#
# The export table and the ~500 catch-all entry points are generated at build time by gen.awk
# from the committed exports.txt and the names the hand-written fk_*.c define. The library is
# linked -Bsymbolic so the pointers cuGetProcAddress hands out are its own, as a real driver's.

FAKECUDA_DIR := tests/fakecuda
FAKECUDA_SRCS := $(addprefix $(FAKECUDA_DIR)/,fk_core.c fk_env.c fk_gpa.c fk_ctx.c fk_stream.c \
                   fk_mem.c fk_pool.c fk_managed.c fk_vmm.c fk_copy.c fk_array.c fk_ipc.c \
                   fk_export.c fk_integrity.c fk_image.c fk_module.c fk_settings.c \
                   fk_errors.c fk_graph.c fk_gnode.c fk_line.c fk_machine.c fk_ipcevent.c \
                   fk_tensormap.c fk_host.c fk_driver.c)
FAKECUDA_OBJS := $(FAKECUDA_SRCS:%.c=$(BUILD)/obj/%.o)
FAKECUDA_GEN := $(BUILD)/gen/fakecuda/fk_gen.c
FAKECUDA_GEN_OBJ := $(BUILD)/obj/gen/fakecuda/fk_gen.o
FAKECUDA_LIB := $(BUILD)/fakecuda/libcuda.so.1

$(FAKECUDA_GEN): $(FAKECUDA_DIR)/gen.awk $(FAKECUDA_DIR)/exports.txt $(FAKECUDA_SRCS)
	$(call say,GEN,$@)
	$(Q)mkdir -p $(@D)
	$(Q)awk -f $(FAKECUDA_DIR)/gen.awk $(FAKECUDA_SRCS) $(FAKECUDA_DIR)/exports.txt >$@.tmp
	$(Q)mv $@.tmp $@

$(FAKECUDA_GEN_OBJ): $(FAKECUDA_GEN)
	$(call say,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -c $< -o $@

$(FAKECUDA_LIB): private LINK_LIBS = -Wl,-Bsymbolic -Wl,-soname,libcuda.so.1 -lpthread
$(FAKECUDA_LIB): $(FAKECUDA_OBJS) $(FAKECUDA_GEN_OBJ)
	$(link)
	$(Q)ln -sf libcuda.so.1 $(@D)/libcuda.so

PROGRAMS += $(FAKECUDA_LIB)

# Tests. Programs linked against the fake find it through $ORIGIN. test_gpa dlopens it by name the
# way libcudart does, with a library that exports the same names loaded first; it carries a
# DT_RPATH (not RUNPATH) because under ASan dlopen is called from libasan, whose lookups only
# see the executable's DT_RPATH.
FAKECUDA_RPATH := -Wl,-rpath,'$$ORIGIN/../fakecuda'
FAKECUDA_LINKED_TESTS := test_fakecuda_ctx test_fakecuda_mem test_fakecuda_stream \
                         test_fakecuda_threads test_fakecuda_array test_fakecuda_export \
                         test_fakecuda_settings test_fakecuda_graph test_fakecuda_pool \
                         test_fakecuda_copy test_fakecuda_share test_fakecuda_ipcevent \
                         test_fakecuda_managed test_fakecuda_tensormap test_fakecuda_gnode
FAKECUDA_TESTS := $(addprefix $(BUILD)/tests/,test_fakecuda_gpa test_fakecuda_md2 \
                    test_fakecuda_machine \
                    $(FAKECUDA_LINKED_TESTS))
FAKECUDA_PROBE := $(BUILD)/tests/fakecuda_probe
FAKECUDA_INTERPOSE := $(BUILD)/tests/libfk_interpose.so
FAKECUDA_CALLER := $(BUILD)/tests/libfk_caller.so

$(FAKECUDA_INTERPOSE): private LINK_LIBS = -Wl,-soname,libfk_interpose.so
$(FAKECUDA_INTERPOSE): $(BUILD)/obj/$(FAKECUDA_DIR)/interpose.o
	$(link)

$(BUILD)/tests/test_fakecuda_gpa: private LINK_LIBS = -Wl,--no-as-needed $(FAKECUDA_INTERPOSE) \
  -Wl,--as-needed -Wl,--disable-new-dtags -Wl,-rpath,'$$ORIGIN' $(FAKECUDA_RPATH) -ldl -lpthread
$(BUILD)/tests/test_fakecuda_gpa: $(BUILD)/obj/$(FAKECUDA_DIR)/test_gpa.o $(FAKECUDA_INTERPOSE) \
                                  | $(FAKECUDA_LIB)
	$(link)

FAKECUDA_LINKED_LIBS := $(FAKECUDA_LIB) $(FAKECUDA_RPATH) -lpthread
$(addprefix $(BUILD)/tests/,$(FAKECUDA_LINKED_TESTS)): private LINK_LIBS = $(FAKECUDA_LINKED_LIBS)
$(addprefix $(BUILD)/tests/,$(FAKECUDA_LINKED_TESTS)): $(BUILD)/tests/test_fakecuda_%: \
    $(BUILD)/obj/$(FAKECUDA_DIR)/test_%.o $(FAKECUDA_LIB)
	$(link)

# Loaded by test_module.sh with device code nvcc builds at test time.
$(BUILD)/tests/fakecuda_module_check: private LINK_LIBS = $(FAKECUDA_LINKED_LIBS)
$(BUILD)/tests/fakecuda_module_check: $(BUILD)/obj/$(FAKECUDA_DIR)/module_check.o $(FAKECUDA_LIB)
	$(link)
PROGRAMS += $(BUILD)/tests/fakecuda_module_check

# The driver's own memory, run by test_driver.sh in each setting.
$(BUILD)/tests/fakecuda_driver_check: private LINK_LIBS = $(FAKECUDA_LINKED_LIBS)
$(BUILD)/tests/fakecuda_driver_check: $(BUILD)/obj/$(FAKECUDA_DIR)/driver_check.o $(FAKECUDA_LIB)
	$(link)
PROGRAMS += $(BUILD)/tests/fakecuda_driver_check

# The handshake's MD2 on its own, against RFC 1319's suite.
$(BUILD)/tests/test_fakecuda_md2: $(BUILD)/obj/$(FAKECUDA_DIR)/test_md2.o \
                                  $(BUILD)/obj/$(FAKECUDA_DIR)/fk_integrity.o
	$(link)

# The machine ledger on its own, with real processes.
$(BUILD)/tests/test_fakecuda_machine: private LINK_LIBS = -lpthread
$(BUILD)/tests/test_fakecuda_machine: $(BUILD)/obj/$(FAKECUDA_DIR)/test_machine.o \
                                      $(BUILD)/obj/$(FAKECUDA_DIR)/fk_machine.o
	$(link)

$(FAKECUDA_PROBE): private LINK_LIBS = $(FAKECUDA_LIB) $(FAKECUDA_RPATH) -ldl -lpthread
$(FAKECUDA_PROBE): $(BUILD)/obj/$(FAKECUDA_DIR)/probe.o $(FAKECUDA_LIB) $(FAKECUDA_CALLER)
	$(link)

$(FAKECUDA_CALLER): private LINK_LIBS = -Wl,-soname,libfk_caller.so -ldl
$(FAKECUDA_CALLER): $(BUILD)/obj/$(FAKECUDA_DIR)/caller.o
	$(link)

# One process of a shared machine, for test_machine.sh; linked with the fake NVML too
# (nvml.mk's $(NVML_LIB), named here by its path since nvml.mk is read below).
FAKECUDA_MACHINE_WORKER := $(BUILD)/tests/fakecuda_machine_worker
$(FAKECUDA_MACHINE_WORKER): private LINK_LIBS = $(FAKECUDA_LIB) \
  $(BUILD)/fakecuda/libnvidia-ml.so.1 $(FAKECUDA_RPATH) -lpthread
$(FAKECUDA_MACHINE_WORKER): $(BUILD)/obj/$(FAKECUDA_DIR)/machine_worker.o $(FAKECUDA_LIB) \
                            $(BUILD)/fakecuda/libnvidia-ml.so.1
	$(link)
PROGRAMS += $(FAKECUDA_MACHINE_WORKER)

# Shell tests need the library and the probe; make them prerequisites of the test programs'
# build so `make` and `make check` build them.
PROGRAMS += $(FAKECUDA_PROBE)
TEST_PROGRAMS += $(FAKECUDA_TESTS)
TEST_SCRIPTS += $(FAKECUDA_DIR)/test_exports.sh $(FAKECUDA_DIR)/test_env.sh \
                $(FAKECUDA_DIR)/test_module.sh $(FAKECUDA_DIR)/test_machine.sh \
                $(FAKECUDA_DIR)/test_driver.sh
THREAD_TESTS += $(BUILD)/tests/test_fakecuda_threads $(BUILD)/tests/test_fakecuda_machine \
                $(BUILD)/tests/test_fakecuda_graph \
                $(FAKECUDA_DIR)/test_machine.sh

.PHONY: fakecuda-regen
fakecuda-regen:
	$(FAKECUDA_DIR)/regen.sh

# The fake NVML beside it.
include tests/fakecuda/nvml/nvml.mk
