# The shim: build/libgpucap.so. It links only libc, libdl and libpthread (by name: glibc before
# 2.34 defines the dl and pthread functions there; see shim/base/glibc.c), exports exactly dlsym,
# dlopen, the hooked names of shim/base/hooks.def and the C library functions of shim/entry/libc.def
# (through a generated version script), and carries its own copy of core/ and config/ objects.

# One list per layer, top to bottom (docs/design.md, "Layers and data flow"; scripts/layers.sh).
SHIM_ENTRY_SRCS      := array.c async.c ctxapi.c deepbind.c dlsym.c exec.c graph.c init.c ipc.c \
                        ipcwire.c limit.c managed.c memory.c module.c nvml.c procaddr.c ptrquery.c \
                        route.c shutdown.c stream.c vmm.c
SHIM_CONTEXT_SRCS    := capture.c ctx.c ctx_alloc.c
SHIM_POOL_SRCS       := charges.c ordered.c passthru.c pending.c pool.c
SHIM_ACCOUNTING_SRCS := budget.c cap.c ledger.c nvmlq.c oom.c overhead.c runinfo.c share.c spill.c \
                        trace.c
SHIM_ACCOUNTING_SRCS += roster.c # the per-process entries gpucap top reads
SHIM_BASE_SRCS       := check.c exit.c glibc.c log.c real.c settings.c signals.c
SHIM_SRCS := $(addprefix shim/entry/,$(SHIM_ENTRY_SRCS)) \
             $(addprefix shim/context/,$(SHIM_CONTEXT_SRCS)) \
             $(addprefix shim/pool/,$(SHIM_POOL_SRCS)) \
             $(addprefix shim/accounting/,$(SHIM_ACCOUNTING_SRCS)) \
             $(addprefix shim/base/,$(SHIM_BASE_SRCS))
TEST_SCRIPTS += tests/unit/glibc_versions.sh tests/unit/layers.sh
SHIM_OBJS := $(SHIM_SRCS:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/shim/entry/dlsym_entry.o \
             $(CORE_OBJS) $(REPORT_OBJS)
SHIM_LIB  := $(BUILD)/libgpucap.so
SHIM_MAP  := $(BUILD)/libgpucap.map
PROGRAMS  += $(SHIM_LIB)

$(BUILD)/obj/%.o: %.S $(FLAGS_STAMP)
	$(call say,AS,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -c $< -o $@

# The exported names, generated from the hook table so the two cannot drift apart.
$(SHIM_MAP): shim/base/hooks.def shim/entry/libc.def shim/entry/nvml.def shim/shim.mk
	$(Q)mkdir -p $(@D)
	$(Q){ echo '{ global: dlsym; dlopen;'; \
	     sed -n 's/^HOOK([^,]*,[^,]*,[^,]*, *\([A-Za-z0-9_]*\)).*/  \1;/p' shim/base/hooks.def; \
	     sed -n 's/^LIBC(\([A-Za-z0-9_]*\))$$/  \1;/p' shim/entry/libc.def; \
	     sed -n 's/^NVML(\([A-Za-z0-9_]*\))$$/  \1;/p' shim/entry/nvml.def; \
	     echo 'local: *; };'; } > $@

$(SHIM_LIB): private LINK_LIBS = -Wl,--version-script=$(SHIM_MAP) -Wl,-z,now -Wl,-z,relro \
  -Wl,--no-undefined -Wl,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0 -Wl,--as-needed
$(SHIM_LIB): $(SHIM_OBJS) $(CONFIG_OBJS) $(SHIM_MAP)
	$(link)

# ---- The checked build's preconditions (shim/base/check.h), with their failure path. ----
$(BUILD)/tests/test_check: private LINK_LIBS = -lpthread
$(BUILD)/tests/test_check: $(BUILD)/obj/tests/unit/test_check.o $(BUILD)/obj/shim/base/check.o \
    $(BUILD)/obj/shim/base/log.o $(CONFIG_OBJS)
	$(link)
TEST_PROGRAMS += $(BUILD)/tests/test_check

# ---- The shared budget's file arithmetic (shim/accounting/budget.c), on a ledger in ordinary memory. ----
$(BUILD)/tests/test_budget: private LINK_LIBS = -lpthread
$(BUILD)/tests/test_budget: $(BUILD)/obj/tests/unit/test_budget.o $(BUILD)/obj/shim/accounting/budget.o
	$(link)
TEST_PROGRAMS += $(BUILD)/tests/test_budget

# shim/spill on its own, with config/ and stand-ins for what it calls in the shim.
$(BUILD)/tests/test_spill: private LINK_LIBS = -lpthread
$(BUILD)/tests/test_spill: $(BUILD)/obj/tests/unit/test_spill.o $(BUILD)/obj/shim/accounting/spill.o \
                           $(CONFIG_OBJS)
	$(link)
TEST_PROGRAMS += $(BUILD)/tests/test_spill
