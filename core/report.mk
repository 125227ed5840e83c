# report module: the exit report (human table and JSON) over pool counters; CUDA-agnostic.
#
# REPORT_OBJS is what the shim links next to CORE_OBJS (report.o needs CORE_OBJS' strbuf.o).
# test_report builds its rows from real pools, so it links the pool too. Include this fragment
# after core/core.mk (it uses CORE_OBJS).

REPORT_OBJS := $(BUILD)/obj/core/report.o

REPORT_TESTS := $(BUILD)/tests/test_report

$(REPORT_TESTS): $(BUILD)/obj/tests/unit/test_report.o $(REPORT_OBJS) $(CORE_OBJS)
	$(link)

TEST_PROGRAMS += $(REPORT_TESTS)
