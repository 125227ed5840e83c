# Test orchestration. Fragments add compiled TAP programs to TEST_PROGRAMS, shell/bats TAP
# scripts to TEST_SCRIPTS, and the subset that exercises threads to THREAD_TESTS. Every test
# prints TAP; tests/harness.pl runs them all as `prove` does, prints prove's closing summary CI
# reads, then how many checks were skipped and why (also kept in $(BUILD)/skipped.txt, which
# `make test` sums up at its end).
#
# Scripts find built artefacts through the exported BUILD variable. In sanitizer builds
# SAN_PRELOAD names the sanitizer runtime that must precede the shim in LD_PRELOAD.
#
#   make quick   the fast loop: every test but the framework rows, JOBS at a time
#   make check   every test of this build's configuration, JOBS at a time (T=FILE: that one)
#   make test    frameworks installed if needed, then check: plain, ASan+UBSan, TSan (threads)
# JOBS defaults to the number of processors; each file's result prints as it ends.

.PHONY: check check-files check-threads quick


SAN_RUNTIME :=
ifneq ($(findstring address,$(SANITIZER)),)
  SAN_RUNTIME := $(shell $(CC) -print-file-name=libasan.so)
else ifneq ($(findstring thread,$(SANITIZER)),)
  SAN_RUNTIME := $(shell $(CC) -print-file-name=libtsan.so)
else ifneq ($(findstring undefined,$(SANITIZER)),)
  SAN_RUNTIME := $(shell $(CC) -print-file-name=libubsan.so)
endif

TEST_ENV := BUILD=$(abspath $(BUILD)) SAN_PRELOAD=$(SAN_RUNTIME) TOP=$(CURDIR) \
            ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1

JOBS ?= $(shell getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
PROVE := perl tests/harness.pl $(JOBS) $(BUILD)/skipped.txt
QUICK_SKIP := tests/frameworks/frameworks.sh tests/frameworks/readme.sh \
              tests/frameworks/tensorflow.sh tests/frameworks/jax.sh

# make check T=FILE runs one test file of any kind: a script (tests/integ/cap.sh, tests/cli/run.bats)
# or a C test by its source (tests/unit/test_bfc.c, tests/fakecuda/test_ctx.c) or its program.
T_NAME = $(basename $(notdir $(T)))
T_DIR = $(notdir $(patsubst %/,%,$(dir $(T))))
T_FILES = $(filter $(T),$(TEST_SCRIPTS) $(THREAD_TESTS)) \
          $(filter $(T) %/$(T_NAME) %/$(subst test_,test_$(T_DIR)_,$(T_NAME)) \
                   %/$(subst test_,test_fake,$(T_NAME)),$(TEST_PROGRAMS))
CHECK_FILES = $(if $(T),$(or $(sort $(T_FILES)),$(error T=$(T): no test file of that name (tests/README.md lists them))),$(TEST_PROGRAMS) $(TEST_SCRIPTS))

check: check-files all
	$(Q)env $(TEST_ENV) $(PROVE) $(CHECK_FILES)

# Names the files before anything is built: a T that names no test stops at once.
check-files:
	@: $(CHECK_FILES)

quick: all
	$(Q)env $(TEST_ENV) $(PROVE) $(TEST_PROGRAMS) $(filter-out $(QUICK_SKIP),$(TEST_SCRIPTS))

check-threads: all
	$(Q)env $(TEST_ENV) $(PROVE) $(THREAD_TESTS)

# The command README.md and .ci/run name: plain, then ASan+UBSan, then TSan on threaded tests,
# then the checks the three passes skipped, and why.
test:
	$(Q)$(MAKE) --no-print-directory frameworks
	$(Q)$(MAKE) --no-print-directory check
	$(Q)$(MAKE) --no-print-directory check BUILD=build/asan SANITIZER=address,undefined
	$(Q)$(MAKE) --no-print-directory check-threads BUILD=build/tsan SANITIZER=thread
	$(Q)sh tests/skipped.sh $(BUILD)/skipped.txt build/asan/skipped.txt build/tsan/skipped.txt

# ---- Integration programs: run over the fake driver with the shim preloaded. ----
INTEG_PROGRAMS := $(BUILD)/tests/mimic $(BUILD)/tests/captest $(BUILD)/tests/linked \
                  $(BUILD)/tests/threads $(BUILD)/tests/pooltest $(BUILD)/tests/fidelity \
                  $(BUILD)/tests/ipcpeer $(BUILD)/tests/sharepeer \
                  $(BUILD)/tests/early $(BUILD)/tests/arrays \
                  $(BUILD)/tests/nexttest $(BUILD)/tests/libnext.so $(BUILD)/tests/life \
                  $(BUILD)/tests/lifelinked $(BUILD)/tests/graphs $(BUILD)/tests/roomtest \
                  $(BUILD)/tests/oomtest $(BUILD)/tests/smi $(BUILD)/tests/budgetlock \
                  $(BUILD)/tests/arenatest $(BUILD)/tests/ctxswitch $(BUILD)/tests/ordered \
                  $(BUILD)/tests/spilltest $(BUILD)/tests/fill
TEST_DEPS += $(INTEG_PROGRAMS)
TEST_SCRIPTS += tests/unit/cudadefs_check.sh tests/unit/hooks_table.sh tests/unit/harness.sh \
                tests/integ/routing.sh tests/integ/interpose.sh tests/integ/cap.sh \
                tests/integ/noncuda.sh tests/integ/cudart.sh tests/integ/exports.sh \
                tests/integ/threads.sh tests/integ/pool.sh tests/integ/report.sh \
                tests/integ/fidelity.sh tests/integ/ipc.sh tests/integ/share.sh \
                tests/integ/arrays.sh tests/integ/life.sh tests/integ/graphs.sh \
                tests/integ/room.sh tests/integ/ledger.sh tests/integ/budget.sh \
                tests/integ/ctxswitch.sh tests/integ/arenas.sh \
                tests/integ/ordered.sh tests/integ/oom.sh tests/integ/spill.sh \
                tests/integ/overhead.sh
THREAD_TESTS += tests/integ/threads.sh tests/integ/life.sh tests/integ/graphs.sh tests/integ/ipc.sh \
                tests/integ/ledger.sh tests/integ/budget.sh \
                tests/integ/ctxswitch.sh tests/integ/arenas.sh tests/integ/ordered.sh \
                tests/integ/spill.sh

$(BUILD)/tests/mimic: private LINK_LIBS = -ldl
$(BUILD)/tests/mimic: $(BUILD)/obj/tests/integ/mimic.o
	$(link)

# Linked against the fake driver like a real program against libcuda.so.1 (-lcuda).
INTEG_LINKED := $(addprefix $(BUILD)/tests/,captest linked pooltest fidelity ipcpeer sharepeer \
                  arrays graphs roomtest oomtest ctxswitch ordered fill)
$(INTEG_LINKED): private LINK_LIBS = $(FAKECUDA_LIB) -ldl -lpthread
$(INTEG_LINKED): $(BUILD)/tests/%: $(BUILD)/obj/tests/integ/%.o $(FAKECUDA_LIB)
	$(link)

$(BUILD)/tests/nexttest: private LINK_LIBS = $(FAKECUDA_LIB) -ldl
$(BUILD)/tests/nexttest: $(BUILD)/obj/tests/integ/nexttest.o $(FAKECUDA_LIB)
	$(link)

# life is not linked with the driver: it dlopen()s libcuda.so.1 after every constructor, as
# cudart does. lifelinked is the same program linked with it.
$(BUILD)/tests/life: private LINK_LIBS = -ldl -lpthread
$(BUILD)/tests/life: $(BUILD)/obj/tests/integ/life.o
	$(link)

# smi reads NVML as nvidia-smi and pynvml do: dlopen and dlsym, nothing linked.
$(BUILD)/tests/smi: private LINK_LIBS = -ldl
$(BUILD)/tests/smi: $(BUILD)/obj/tests/integ/smi.o
	$(link)

# budgetlock holds a shared budget's file lock until killed: the shim's budget module alone.
$(BUILD)/tests/budgetlock: private LINK_LIBS = -lpthread
$(BUILD)/tests/budgetlock: $(BUILD)/obj/tests/integ/budgetlock.o $(BUILD)/obj/shim/accounting/budget.o
	$(link)

$(BUILD)/tests/lifelinked: private LINK_LIBS = -Wl,--no-as-needed $(FAKECUDA_LIB) -Wl,--as-needed \
  -ldl -lpthread
$(BUILD)/tests/lifelinked: $(BUILD)/obj/tests/integ/life.o $(FAKECUDA_LIB)
	$(link)

$(BUILD)/tests/threads: private LINK_LIBS = $(FAKECUDA_LIB) -lpthread
$(BUILD)/tests/threads: $(BUILD)/obj/tests/integ/threads.o $(FAKECUDA_LIB)
	$(link)

$(BUILD)/tests/spilltest: private LINK_LIBS = $(FAKECUDA_LIB) -lpthread
$(BUILD)/tests/spilltest: $(BUILD)/obj/tests/integ/spilltest.o $(FAKECUDA_LIB)
	$(link)

$(BUILD)/tests/arenatest: private LINK_LIBS = $(FAKECUDA_LIB) -lpthread
$(BUILD)/tests/arenatest: $(BUILD)/obj/tests/integ/arenatest.o $(FAKECUDA_LIB)
	$(link)

$(BUILD)/tests/libearly.so: private LINK_LIBS = $(FAKECUDA_LIB)
$(BUILD)/tests/libearly.so: $(BUILD)/obj/tests/integ/earlylib.o $(FAKECUDA_LIB)
	$(link)

$(BUILD)/tests/early: private LINK_LIBS = $(BUILD)/tests/libearly.so -Wl,-rpath,'$$ORIGIN' \
  -Wl,-rpath-link,$(BUILD)/fakecuda
$(BUILD)/tests/early: $(BUILD)/obj/tests/integ/early.o $(BUILD)/tests/libearly.so
	$(link)

$(BUILD)/tests/libnext.so: private LINK_LIBS = -ldl
$(BUILD)/tests/libnext.so: $(BUILD)/obj/tests/integ/nextlib.o
	$(link)

# ---- A libcuda.so.1 layered over the fake that hands out addresses off a 256-byte boundary
# (tests/integ/misalign.sh): the fake's own objects under another soname, below a wrapper. ----
MISALIGN_DIR := $(BUILD)/tests/misalign
$(MISALIGN_DIR)/libfakeinner.so: private LINK_LIBS = -Wl,-Bsymbolic -Wl,-soname,libfakeinner.so \
  -lpthread
$(MISALIGN_DIR)/libfakeinner.so: $(FAKECUDA_OBJS) $(FAKECUDA_GEN_OBJ)
	$(link)

$(MISALIGN_DIR)/libcuda.so.1: private LINK_LIBS = -Wl,-soname,libcuda.so.1 -Wl,--no-as-needed \
  $(MISALIGN_DIR)/libfakeinner.so -Wl,--as-needed -Wl,-rpath,'$$ORIGIN' -ldl -lpthread
$(MISALIGN_DIR)/libcuda.so.1: $(BUILD)/obj/tests/integ/misalign.o $(MISALIGN_DIR)/libfakeinner.so
	$(link)
TEST_DEPS += $(MISALIGN_DIR)/libcuda.so.1
TEST_SCRIPTS += tests/integ/misalign.sh

# ---- RTLD_DEEPBIND (tests/integ/deepbind.sh): a program, a loader library and the two shapes
# of a deep-bound library, placed so that a bare name is found only through its caller's
# RUNPATH: deep1 holds the linked shape and the loader (the program's RUNPATH), deep2 the dlsym
# shape (the loader's RUNPATH). ----
DEEP_BINS := $(BUILD)/tests/deeptest $(BUILD)/tests/deep1/libdeeplinked.so \
             $(BUILD)/tests/deep1/libdeeploader.so $(BUILD)/tests/deep2/libdeepdlsym.so
$(BUILD)/obj/tests/integ/deeplib_linked.o: tests/integ/deeplib.c
	$(call say,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -DDEEPLIB_LINKED -c $< -o $@

$(BUILD)/tests/deep1/libdeeplinked.so: private LINK_LIBS = $(FAKECUDA_LIB)
$(BUILD)/tests/deep1/libdeeplinked.so: $(BUILD)/obj/tests/integ/deeplib_linked.o $(FAKECUDA_LIB)
	$(link)

$(BUILD)/tests/deep2/libdeepdlsym.so: private LINK_LIBS = -ldl
$(BUILD)/tests/deep2/libdeepdlsym.so: $(BUILD)/obj/tests/integ/deeplib.o
	$(link)

$(BUILD)/tests/deep1/libdeeploader.so: private LINK_LIBS = -Wl,--enable-new-dtags \
  -Wl,-rpath,'$$ORIGIN/../deep2' -ldl
$(BUILD)/tests/deep1/libdeeploader.so: $(BUILD)/obj/tests/integ/deeploader.o
	$(link)

$(BUILD)/tests/deeptest: private LINK_LIBS = -Wl,--enable-new-dtags \
  -Wl,-rpath,'$$ORIGIN/deep1' -ldl
$(BUILD)/tests/deeptest: $(BUILD)/obj/tests/integ/deeptest.o
	$(link)
TEST_DEPS += $(DEEP_BINS)
TEST_SCRIPTS += tests/integ/deepbind.sh

# ---- Unit test of core/addrmap on its own. ----
$(BUILD)/tests/test_addrmap: $(BUILD)/obj/tests/unit/test_addrmap.o $(BUILD)/obj/core/addrmap.o
	$(link)
TEST_PROGRAMS += $(BUILD)/tests/test_addrmap

# ---- The workload `make demo` runs (the recipe: scripts/scripts.mk). ----
DEMO_BIN := $(BUILD)/tests/workload
TEST_DEPS += $(DEMO_BIN)
$(DEMO_BIN): private LINK_LIBS = $(FAKECUDA_LIB)
$(DEMO_BIN): $(BUILD)/obj/tests/demo/workload.o $(FAKECUDA_LIB)
	$(link)

# ---- The shim's own cost through its hooks (`make bench`, tests/bench/hooks.sh). ----
# hookbench runs over the fake driver with and without the shim, and with a shim built without
# the per-library ledger (GPUCAP_NO_LEDGER), so the ledger's share is measured, not guessed.
HOOKBENCH := $(BUILD)/tests/hookbench
PROGRAMS += $(HOOKBENCH)
$(HOOKBENCH): private LINK_LIBS = $(FAKECUDA_LIB) -ldl
$(HOOKBENCH): $(BUILD)/obj/tests/bench/hookbench.o $(FAKECUDA_LIB)
	$(link)

.PHONY: bench-noledger
bench-noledger:
	$(Q)$(MAKE) --no-print-directory BUILD=$(BUILD)/noledger \
	  CFLAGS="$(CFLAGS) -DGPUCAP_NO_LEDGER" $(BUILD)/noledger/libgpucap.so

bench: $(HOOKBENCH) $(SHIM_LIB) bench-noledger
