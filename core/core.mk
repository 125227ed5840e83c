# core module: the BFC pool (CUDA-agnostic), the text writer its reports share (strbuf), their
# unit tests and the replay benchmark.
#
# CORE_OBJS is what the shim links. The replay tool and the trace generator are PROGRAMS;
# `make bench` (tests/bench/bench.sh) generates traces under $(BUILD)/traces and prints the
# results table. Run the bench from a plain build: DEBUG=1 checks every invariant per operation.

CORE_SRCS := core/bfc.c core/addrmap.c core/bfc_dump.c core/strbuf.c
CORE_OBJS := $(CORE_SRCS:%.c=$(BUILD)/obj/%.o)

CORE_TEST_NAMES := test_bfc test_bfc_random test_bfc_dump test_bfc_threads test_strbuf
CORE_TEST_BINS := $(CORE_TEST_NAMES:%=$(BUILD)/tests/%)
TEST_PROGRAMS += $(CORE_TEST_BINS) $(BUILD)/tests/test_bfc_check
THREAD_TESTS += $(BUILD)/tests/test_bfc_threads

CORE_BENCH_BINS := $(BUILD)/gpucap-replay $(BUILD)/gpucap-tracegen
PROGRAMS += $(CORE_BENCH_BINS)

$(CORE_TEST_BINS): private LINK_LIBS = -pthread
$(CORE_TEST_BINS): $(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(CORE_OBJS)
	$(link)

# White-box: the test #includes core/bfc.c, so bfc.o is left out.
$(BUILD)/tests/test_bfc_check: $(BUILD)/obj/tests/unit/test_bfc_check.o \
                               $(BUILD)/obj/core/addrmap.o $(BUILD)/obj/core/bfc_dump.o \
                               $(BUILD)/obj/core/strbuf.o
	$(link)

# The replay reads traces with the CLI's reader: one parser for the command and the bench.
$(BUILD)/gpucap-replay: private LINK_LIBS = -pthread -ldl
$(BUILD)/gpucap-replay: $(BUILD)/obj/tests/bench/replay.o $(BUILD)/obj/scripts/tracecsv.o \
                        $(CORE_OBJS)
	$(link)

$(BUILD)/gpucap-tracegen: $(BUILD)/obj/tests/bench/tracegen.o
	$(link)

bench: $(CORE_BENCH_BINS)
	$(Q)BUILD=$(BUILD) sh tests/bench/bench.sh
