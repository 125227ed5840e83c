# Reliability tests: fault injection through the fake driver, data integrity under load, the
# bad-input matrix, the security checks, the ways past the cap and the cap invariant
# (tests/reliability/*.sh, docs/reliability.md).
#
#   make test       runs them in every pass (plain, ASan+UBSan; the threaded ones under TSan too)
#   make memcheck   the integration suite and these workloads under valgrind memcheck
#   make soak       the integrity workload for SOAK_SECONDS (default 600) instead of seconds
#
# The fault matrix preloads a "checked" shim: the same objects as build/libgpucap.so except
# core/bfc.c built with GPUCAP_DEBUG=1, so the pool asserts bfc_check() == 0 after every
# operation while the driver fails under it.

.PHONY: memcheck soak

REL_BIN := $(BUILD)/tests/reliability
REL_CHECKED_SHIM := $(REL_BIN)/libgpucap-checked.so
REL_PROGRAMS := $(REL_BIN)/faultload $(REL_BIN)/integrity $(REL_BIN)/badargs \
                $(REL_BIN)/teardown $(REL_BIN)/capholes $(REL_BIN)/invariant
REL_SECURE := $(REL_BIN)/secure
REL_BADPOOL := $(REL_BIN)/libbadpool.so

# Programs linked with -lcuda (the fake), like a program linked against libcuda.so.1.
REL_LINKED_DL := $(REL_BIN)/faultload $(REL_BIN)/badargs $(REL_BIN)/teardown
$(REL_LINKED_DL): private LINK_LIBS = $(FAKECUDA_LIB) -ldl
$(REL_LINKED_DL): $(REL_BIN)/%: $(BUILD)/obj/tests/reliability/%.o $(FAKECUDA_LIB)
	$(link)

$(REL_BIN)/integrity $(REL_BIN)/capholes: private LINK_LIBS = $(FAKECUDA_LIB) -lpthread
$(REL_BIN)/integrity $(REL_BIN)/capholes: $(REL_BIN)/%: $(BUILD)/obj/tests/reliability/%.o \
    $(FAKECUDA_LIB)
	$(link)

# The cap invariant: random operations of every family (capops.c, shared with fuzz_cap).
$(REL_BIN)/invariant: private LINK_LIBS = $(FAKECUDA_LIB) -lpthread
$(REL_BIN)/invariant: $(BUILD)/obj/tests/reliability/invariant.o \
    $(BUILD)/obj/tests/reliability/capops.o $(FAKECUDA_LIB)
	$(link)

# The deliberately wrong allocator of the integrity test's negative controls.
$(REL_BADPOOL): private LINK_LIBS = -ldl -lpthread
$(REL_BADPOOL): $(BUILD)/obj/tests/reliability/badpool.o
	$(link)

# Linked with the shim itself (no LD_PRELOAD) and absolute run paths, so that it still runs
# with gpucap when the loader is in secure-execution mode (setgid copy, AT_SECURE).
$(REL_SECURE): private LINK_LIBS = $(abspath $(SHIM_LIB)) $(abspath $(FAKECUDA_LIB)) \
  -Wl,-rpath,$(abspath $(BUILD)):$(abspath $(BUILD)/fakecuda) -ldl
$(REL_SECURE): $(BUILD)/obj/tests/reliability/secure.o $(SHIM_LIB) $(FAKECUDA_LIB)
	$(link)

$(BUILD)/obj/tests/reliability/bfc_checked.o: core/bfc.c $(FLAGS_STAMP)
	$(call say,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -DGPUCAP_DEBUG=1 -c $< -o $@

REL_CHECKED_OBJS := $(filter-out $(BUILD)/obj/core/bfc.o,$(SHIM_OBJS)) \
                    $(BUILD)/obj/tests/reliability/bfc_checked.o $(CONFIG_OBJS)
$(REL_CHECKED_SHIM): private LINK_LIBS = -Wl,--version-script=$(SHIM_MAP) -Wl,-z,now \
  -Wl,-z,relro -Wl,--no-undefined -ldl -lpthread
$(REL_CHECKED_SHIM): $(REL_CHECKED_OBJS) $(SHIM_MAP)
	$(link)

TEST_DEPS += $(REL_PROGRAMS) $(REL_CHECKED_SHIM) $(REL_BADPOOL) $(REL_SECURE)
TEST_SCRIPTS += tests/reliability/faults.sh tests/reliability/integrity.sh \
                tests/reliability/badinput.sh tests/reliability/security.sh \
                tests/reliability/teardown.sh tests/reliability/capholes.sh \
                tests/reliability/invariant.sh
THREAD_TESTS += tests/reliability/integrity.sh tests/reliability/capholes.sh \
                tests/reliability/invariant.sh

memcheck: all
	$(Q)if [ -n "$(SANITIZER)" ]; then echo "make memcheck: use a build without SANITIZER" >&2; \
	  exit 1; fi
	$(Q)env $(TEST_ENV) $(PROVE) tests/reliability/memcheck.sh

SOAK_SECONDS ?= 600
soak: all
	$(Q)env $(TEST_ENV) INTEGRITY_SECONDS=$$(( $(SOAK_SECONDS) / 3 )) $(PROVE) \
	  tests/reliability/integrity.sh
