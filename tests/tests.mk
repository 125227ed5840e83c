# Test orchestration. Fragments add compiled TAP programs to TEST_PROGRAMS, shell/bats TAP
# scripts to TEST_SCRIPTS, and the subset that exercises threads to THREAD_TESTS. Every test
# prints TAP; `prove` runs them all and prints the closing summary CI reads.
#
# Scripts find built artefacts through the exported BUILD variable. In sanitizer builds
# SAN_PRELOAD names the sanitizer runtime that must precede the shim in LD_PRELOAD.

.PHONY: check check-threads test-plain test-asan test-tsan

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

PROVE := prove --exec '' --timer --merge

check: all
	$(Q)env $(TEST_ENV) $(PROVE) $(TEST_PROGRAMS) $(TEST_SCRIPTS)

check-threads: all
	$(Q)env $(TEST_ENV) $(PROVE) $(THREAD_TESTS)

# The command README.md and .ci/run name: plain, then ASan+UBSan, then TSan on threaded tests.
test:
	$(Q)$(MAKE) --no-print-directory check
	$(Q)$(MAKE) --no-print-directory check BUILD=build/asan SANITIZER=address,undefined
	$(Q)$(MAKE) --no-print-directory check-threads BUILD=build/tsan SANITIZER=thread
