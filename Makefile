# gpucap: build, test, demo, bench and install.
#
# Plain GNU make, out-of-tree objects under $(BUILD). Project flags come first and the
# user's CFLAGS/LDFLAGS are appended, so `make CFLAGS=-O3` refines rather than replaces.
# Each module contributes a fragment (`*/*.mk`) that adds its objects, programs and tests.
#
#   make              build the shim, the fake driver and every test program
#   make test         run every test (plain build, then ASan+UBSan build, then TSan threaded tests)
#   make check        run the tests of the current configuration only
#   make quick        the fast loop: the tests of this configuration but the framework rows
#   make demo         run the bundled workload under a cap over the fake driver
#   make bench        replay the bundled traces through the pool and print the results table
#   make gpu-check    prove the cap on the GPU at hand, judged through NVML from outside, with a
#                     report (GPU_CHECK_DRIVER=fake: the same over the fake driver)
#   make gpu-bench    the driver's calls against gpucap's on the GPU at hand
#   make format       clang-format every tracked .c and .h file in place
#   make format-check fail on any file clang-format would change (CI runs it)
#   make lint         the shim's include layers (scripts/layers.sh) and clang-tidy (.clang-tidy),
#                     every kept check an error (CI runs it)
#   DEBUG=1           -O0, assertions and invariant checks after every pool operation
#   SANITIZER=address|undefined|thread|address,undefined
#                     a sanitizer build; DEBUG=1 and every sanitizer build are the checked
#                     build (shim preconditions asserted: shim/base/check.h)
#   WERROR=1          warnings are errors (CI builds so, with gcc and with clang)
#   V=1               show full command lines
#
# Objects depend on $(BUILD)/cflags, which changes only when the compiler or the flags do, so a
# build with other flags into the same BUILD recompiles everything.

BUILD   ?= build
PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= cc

VERSION := 0.1.0

WARN := -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wconversion -Wsign-conversion
ifeq ($(WERROR),1)
  WARN += -Werror
endif
PROJECT_CFLAGS := -std=c11 $(WARN) -fPIC -fvisibility=hidden -MMD -MP -D_GNU_SOURCE \
                  -DGPUCAP_VERSION=\"$(VERSION)\" -I.

ifeq ($(DEBUG),1)
  PROJECT_CFLAGS += -O0 -g -DGPUCAP_DEBUG=1
else
  PROJECT_CFLAGS += -O2 -g
endif

comma := ,
SAN_FLAGS :=
ifneq ($(SANITIZER),)
  ifneq ($(filter-out address undefined thread,$(subst $(comma), ,$(SANITIZER))),)
    $(error SANITIZER must be address, undefined, thread or address,undefined (got '$(SANITIZER)'))
  endif
  SAN_FLAGS := -fsanitize=$(SANITIZER) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif

# The checked build (shim/base/check.h): DEBUG=1 and every sanitizer build.
ifneq ($(filter 1,$(DEBUG))$(SANITIZER),)
  PROJECT_CFLAGS += -DGPUCAP_CHECKED=1
endif

ALL_CFLAGS  := $(PROJECT_CFLAGS) $(SAN_FLAGS) $(CFLAGS)
ALL_LDFLAGS := $(SAN_FLAGS) $(LDFLAGS)

ifeq ($(V),1)
  Q :=
  say :=
else
  Q := @
  say = @printf '  %-7s %s\n' $(1) $(2);
endif

# The one link recipe: a rule's recipe is `$(link)`, which links the rule's object prerequisites
# (only its .o files: a version script, a library or a program it waits for is not an input),
# then ALL_LDFLAGS, then the target's LINK_LIBS. A target named *.so or *.so.1 is a shared
# object (-shared). LINK_LIBS holds, in link order, the libraries and linker options of that one
# link, the shared objects it links with included (named there, not taken from $^, so that their
# place on the command line is the link's, not the prerequisite list's). A target sets it
# privately (`target: private LINK_LIBS = ...`), so that what it builds first does not inherit it.
LINK_LIBS :=
define link
$(call say,LD,$@)
$(Q)mkdir -p $(@D)
$(Q)$(CC)$(if $(filter %.so %.so.1,$@), -shared) $(filter %.o,$^) -o $@ $(ALL_LDFLAGS) $(LINK_LIBS)
endef

# The compiler and flags of this build; rewritten only when they change.
FLAGS_STAMP := $(BUILD)/cflags
FLAGS_NOW := $(CC) $(ALL_CFLAGS) | $(ALL_LDFLAGS)
ifneq ($(FLAGS_NOW),$(shell cat $(FLAGS_STAMP) 2>/dev/null))
  $(shell mkdir -p $(BUILD) && printf '%s\n' '$(subst ','\'',$(FLAGS_NOW))' > $(FLAGS_STAMP))
endif

.DEFAULT_GOAL := all
.PHONY: all test check quick demo bench install uninstall clean format format-check lint

# Filled in by the fragments.
PROGRAMS :=
TEST_PROGRAMS :=
TEST_SCRIPTS :=
TEST_DEPS :=
THREAD_TESTS :=

include config/config.mk
include core/core.mk
include core/report.mk
include scripts/scripts.mk
include scripts/slurm/slurm.mk
include shim/shim.mk
include tests/fakecuda/fakecuda.mk
include tests/tests.mk
include tests/cluster/cluster.mk
include tests/fuzz/fuzz.mk
include tests/reliability/reliability.mk
include tests/frameworks/frameworks.mk
include tests/real/real.mk
include tests/gpu/gpu.mk

$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP)
	$(call say,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -c $< -o $@

all: $(PROGRAMS) $(TEST_PROGRAMS) $(TEST_DEPS)

clean:
	rm -rf $(BUILD)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

format-check:
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')

CLANG_TIDY ?= clang-tidy
LINT_FLAGS := -std=c11 -D_GNU_SOURCE -DGPUCAP_VERSION=\"$(VERSION)\" -DGPUCAP_CHECKED=1 -I.
lint:
	scripts/layers.sh
	git ls-files 'core/*.c' 'config/*.c' 'shim/*.c' | \
	  xargs -P $(JOBS) -I{} $(CLANG_TIDY) --quiet {} -- $(LINT_FLAGS)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
