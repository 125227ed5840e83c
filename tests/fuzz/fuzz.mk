# Fuzzing with libFuzzer: four targets, their committed corpora and dictionaries.
#
#   fuzz_config  the settings parsers and cfg_load, against a reference grammar
#   fuzz_pool    core/bfc driven by an operation stream, against a reference model
#   fuzz_router  the cuGetProcAddress routing rule, against gpa_table.inc's rule
#   fuzz_cap     operation streams through the real shim over the fake driver, against the
#                fake's own per-device peak (the cap invariant); links both as shared objects
#
#   make fuzz [FUZZ_SECONDS=60]  build with clang (-fsanitize=fuzzer,address,undefined) in
#                                build/fuzz and run each target for FUZZ_SECONDS; fails when
#                                libFuzzer is missing or a target finds a failing input
#   make fuzz-merge              fold what the last runs found into the committed corpora
#                                (minimised: only inputs that add coverage)
#
# The fuzz build lives in its own folder with its own compiler and never touches the gcc
# builds. Independently of clang, every `make test` pass replays the committed corpora through
# the same targets built with the project's compiler (tests/fuzz/corpus.sh).

.PHONY: fuzz fuzz-build fuzz-toolchain fuzz-merge

FUZZ_NAMES   := config pool router cap
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_BUILD   := build/fuzz
FUZZ_FLAGS   := -std=c11 $(WARN) -D_GNU_SOURCE -DGPUCAP_VERSION=\"$(VERSION)\" -I. -g -O1 \
                -fno-omit-frame-pointer -MMD -MP -fno-sanitize-recover=undefined
FUZZ_COMPILE := -fsanitize=fuzzer-no-link,address,undefined
FUZZ_LINK    := -fsanitize=fuzzer,address,undefined
FUZZ_BINS    := $(FUZZ_NAMES:%=$(FUZZ_BUILD)/fuzz_%)
FUZZ_LIBS    := $(FUZZ_BUILD)/lib/libgpucap.so $(FUZZ_BUILD)/lib/libcuda.so.1

# The fuzz build links with the project's link recipe ($(link), Makefile) under its own compiler,
# FUZZ_CC even where CC is given on the command line, and its own sanitizers.
$(FUZZ_BINS) $(FUZZ_LIBS): private override CC = $(FUZZ_CC)
$(FUZZ_BINS): private ALL_LDFLAGS = $(FUZZ_LINK)
$(FUZZ_LIBS): private ALL_LDFLAGS = -fsanitize=address,undefined

$(FUZZ_BUILD)/obj/%.o: %.c | fuzz-toolchain
	$(call say,FUZZCC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_COMPILE) -c $< -o $@

# Each target with what it links besides its own object: the modules' own object lists,
# moved to the fuzz build.
$(FUZZ_BUILD)/fuzz_config: $(patsubst $(BUILD)/obj/%,$(FUZZ_BUILD)/obj/%,$(CONFIG_OBJS))
$(FUZZ_BUILD)/fuzz_pool: $(patsubst $(BUILD)/obj/%,$(FUZZ_BUILD)/obj/%,$(CORE_OBJS))
$(filter-out $(FUZZ_BUILD)/fuzz_cap,$(FUZZ_BINS)): $(FUZZ_BUILD)/fuzz_%: \
    $(FUZZ_BUILD)/obj/tests/fuzz/fuzz_%.o
	$(link)

# fuzz_cap: the shim (with coverage) and the fake driver as shared objects of their own, built
# position-independent; the shim comes first, so the target's cu* calls reach it as they
# would with LD_PRELOAD.
FUZZ_PIC := $(FUZZ_BUILD)/pic
$(FUZZ_PIC)/%.o: %.c | fuzz-toolchain
	$(call say,FUZZCC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_COMPILE) -fPIC -fvisibility=hidden -c $< -o $@
$(FUZZ_PIC)/%.o: %.S | fuzz-toolchain
	$(call say,FUZZAS,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_FLAGS) -fPIC -c $< -o $@
$(FUZZ_PIC)/fake/%.o: %.c | fuzz-toolchain
	$(call say,FUZZCC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=address,undefined -fPIC -fvisibility=hidden -c $< \
	  -o $@
FUZZ_SHIM_OBJS := $(patsubst $(BUILD)/obj/%,$(FUZZ_PIC)/%,$(SHIM_OBJS) $(CONFIG_OBJS))
FUZZ_FAKE_OBJS := $(FAKECUDA_SRCS:%.c=$(FUZZ_PIC)/fake/%.o) \
                  $(patsubst $(BUILD)/%.c,$(FUZZ_PIC)/fake/%.o,$(FAKECUDA_GEN))
$(FUZZ_PIC)/fake/gen/%.o: $(BUILD)/gen/%.c | fuzz-toolchain
	$(call say,FUZZCC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_FLAGS) -fsanitize=address,undefined -fPIC -fvisibility=hidden -c $< \
	  -o $@
$(FUZZ_BUILD)/lib/libgpucap.so: private LINK_LIBS = -Wl,--version-script=$(SHIM_MAP) -ldl -lpthread
$(FUZZ_BUILD)/lib/libgpucap.so: $(FUZZ_SHIM_OBJS) $(SHIM_MAP)
	$(link)
$(FUZZ_BUILD)/lib/libcuda.so.1: private LINK_LIBS = -Wl,-Bsymbolic -Wl,-soname,libcuda.so.1 -lpthread
$(FUZZ_BUILD)/lib/libcuda.so.1: $(FUZZ_FAKE_OBJS)
	$(link)
$(FUZZ_BUILD)/fuzz_cap: private LINK_LIBS = -Wl,--no-as-needed $(FUZZ_LIBS) -Wl,--as-needed \
  -Wl,-rpath,'$$ORIGIN/lib' -ldl -lpthread
$(FUZZ_BUILD)/fuzz_cap: $(FUZZ_BUILD)/obj/tests/fuzz/fuzz_cap.o \
    $(FUZZ_BUILD)/obj/tests/reliability/capops.o $(FUZZ_LIBS)
	$(link)

# Fails, saying why, when the compiler cannot build a libFuzzer target.
fuzz-toolchain:
	@mkdir -p $(FUZZ_BUILD)
	@{ echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n);'; \
	   echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return !d && n; }'; \
	 } > $(FUZZ_BUILD)/probe.c
	@if ! $(FUZZ_CC) $(FUZZ_LINK) $(FUZZ_BUILD)/probe.c -o $(FUZZ_BUILD)/probe \
	    >$(FUZZ_BUILD)/probe.log 2>&1; then \
	  echo "make fuzz: error: '$(FUZZ_CC) -fsanitize=fuzzer,address,undefined' cannot build a" \
	       "libFuzzer target:" >&2; \
	  sed 's/^/  /' $(FUZZ_BUILD)/probe.log | head -5 >&2; \
	  echo "make fuzz: install clang with libFuzzer (Debian: apt-get install clang" \
	       "libclang-rt-14-dev) or name one with FUZZ_CC=" >&2; \
	  exit 1; \
	fi

fuzz-build: $(FUZZ_BINS)

fuzz: fuzz-build
	$(Q)FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/fuzz/run.sh $(FUZZ_NAMES)

fuzz-merge: fuzz-build
	$(Q)for t in $(FUZZ_NAMES); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
	  $(FUZZ_BUILD)/fuzz_$$t -merge=1 tests/fuzz/corpus/$$t $(FUZZ_BUILD)/corpus/$$t \
	    >$(FUZZ_BUILD)/merge-$$t.log 2>&1 || { tail -20 $(FUZZ_BUILD)/merge-$$t.log; exit 1; }; \
	  echo "fuzz_$$t: $$(ls tests/fuzz/corpus/$$t | wc -l) inputs in tests/fuzz/corpus/$$t"; \
	done

# ---- The corpora replayed by every make test pass, built with $(CC) and the pass's sanitizers.
FUZZ_REPLAY_BINS := $(FUZZ_NAMES:%=$(BUILD)/tests/fuzz_%_replay)

$(BUILD)/tests/fuzz_config_replay: $(BUILD)/obj/tests/fuzz/fuzz_config.o \
    $(BUILD)/obj/tests/fuzz/replay.o $(CONFIG_OBJS)
$(BUILD)/tests/fuzz_pool_replay: $(BUILD)/obj/tests/fuzz/fuzz_pool.o \
    $(BUILD)/obj/tests/fuzz/replay.o $(CORE_OBJS)
$(BUILD)/tests/fuzz_router_replay: $(BUILD)/obj/tests/fuzz/fuzz_router.o \
    $(BUILD)/obj/tests/fuzz/replay.o
$(filter-out %/fuzz_cap_replay,$(FUZZ_REPLAY_BINS)):
	$(link)
# The shim in front of the fake driver, as in the fuzz build (absolute run paths: the replay
# lives in $(BUILD)/tests).
$(BUILD)/tests/fuzz_cap_replay: private LINK_LIBS = -Wl,--no-as-needed $(abspath $(SHIM_LIB)) \
  $(abspath $(FAKECUDA_LIB)) -Wl,--as-needed \
  -Wl,-rpath,$(abspath $(BUILD)):$(abspath $(BUILD)/fakecuda) -ldl -lpthread
$(BUILD)/tests/fuzz_cap_replay: $(BUILD)/obj/tests/fuzz/fuzz_cap.o \
    $(BUILD)/obj/tests/reliability/capops.o $(BUILD)/obj/tests/fuzz/replay.o $(SHIM_LIB) \
    $(FAKECUDA_LIB)
	$(link)

TEST_DEPS += $(FUZZ_REPLAY_BINS)
TEST_SCRIPTS += tests/fuzz/corpus.sh

-include $(shell find $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)
