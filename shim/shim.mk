# The shim: build/libgpucap.so. It links only libc, libdl and libpthread (by name: glibc before
# 2.34 defines the dl and pthread functions there; see shim/glibc.c), exports exactly dlsym,
# dlopen, the hooked names of shim/hooks.def and the C library functions of shim/libc.def
# (through a generated version script), and carries its own copy of core/ and config/ objects.

SHIM_SRCS := shim/array.c shim/async.c shim/budget.c shim/cap.c shim/capture.c shim/charges.c shim/check.c \
             shim/context.c shim/ctx.c shim/ctx_alloc.c shim/ctx_front.c shim/deepbind.c shim/dlsym.c shim/exec.c \
             shim/exit.c shim/finish.c shim/graph.c shim/hooks.c shim/init.c shim/ipc.c shim/ipcwire.c \
             shim/ledger.c shim/limit.c shim/log.c shim/managed.c shim/memory.c shim/module.c \
             shim/nvml.c shim/nvmlq.c shim/oom.c shim/ordered.c shim/overhead.c shim/passthru.c \
             shim/pending.c shim/pool.c shim/procaddr.c shim/ptrquery.c shim/real.c shim/runinfo.c \
             shim/settings.c shim/share.c shim/signals.c shim/spill.c \
             shim/trace.c shim/vmm.c
SHIM_SRCS += shim/glibc.c
SHIM_SRCS += shim/roster.c # the per-process entries gpucap top reads
TEST_SCRIPTS += tests/unit/glibc_versions.sh tests/unit/layers.sh
SHIM_OBJS := $(SHIM_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/shim/dlsym_entry.o \
             $(CORE_OBJS) $(REPORT_OBJS)
SHIM_LIB  := $(BUILD)/libgpucap.so
SHIM_MAP  := $(BUILD)/libgpucap.map
PROGRAMS  += $(SHIM_LIB)

$(BUILD)/obj/%.o: %.S $(FLAGS_STAMP)
	$(call say,AS,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -c $< -o $@

# The exported names, generated from the hook table so the two cannot drift apart.
$(SHIM_MAP): shim/hooks.def shim/libc.def shim/nvml.def shim/shim.mk
	$(Q)mkdir -p $(@D)
	$(Q){ echo '{ global: dlsym; dlopen;'; \
	     sed -n 's/^HOOK([^,]*,[^,]*,[^,]*, *\([A-Za-z0-9_]*\)).*/  \1;/p' shim/hooks.def; \
	     sed -n 's/^LIBC(\([A-Za-z0-9_]*\))$$/  \1;/p' shim/libc.def; \
	     sed -n 's/^NVML(\([A-Za-z0-9_]*\))$$/  \1;/p' shim/nvml.def; \
	     echo 'local: *; };'; } > $@

$(SHIM_LIB): $(SHIM_OBJS) $(CONFIG_OBJS) $(SHIM_MAP)
	$(call say,LD,$@)
	$(Q)$(CC) -shared -o $@ $(SHIM_OBJS) $(CONFIG_OBJS) -Wl,--version-script=$(SHIM_MAP) \
	  -Wl,-z,now -Wl,-z,relro -Wl,--no-undefined $(ALL_LDFLAGS) \
	  -Wl,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0 -Wl,--as-needed

# ---- The checked build's preconditions (shim/check.h), with their failure path. ----
$(BUILD)/tests/test_check: $(BUILD)/obj/tests/unit/test_check.o $(BUILD)/obj/shim/check.o \
    $(BUILD)/obj/shim/log.o $(CONFIG_OBJS)
	$(call say,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) -lpthread
TEST_PROGRAMS += $(BUILD)/tests/test_check

# ---- The shared budget's ledger arithmetic (shim/budget.c), on a ledger in ordinary memory. ----
$(BUILD)/tests/test_budget: $(BUILD)/obj/tests/unit/test_budget.o $(BUILD)/obj/shim/budget.o
	$(call say,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) -lpthread
TEST_PROGRAMS += $(BUILD)/tests/test_budget

# shim/spill on its own, with config/ and stand-ins for what it calls in the shim.
$(BUILD)/tests/test_spill: $(BUILD)/obj/tests/unit/test_spill.o $(BUILD)/obj/shim/spill.o \
                           $(CONFIG_OBJS)
	$(call say,LD,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $^ -o $@ $(ALL_LDFLAGS) -lpthread
TEST_PROGRAMS += $(BUILD)/tests/test_spill
