#!/usr/bin/env bash
# The cap after contexts go away (tests/reliability/teardown.c): destroying a context, resetting
# the primary context or releasing it for the last time frees the memory allocated in it, so
# gpucap must give its charges back: the whole cap is allocatable again and get-info shows it
# free. One process per scenario, with the pool and with GPUCAP_POOL=off. The trace must end with
# nothing in use: every block the teardown freed has its `free` row.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off
. "$TOP/tests/reliability/rlib.sh"

export GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off
for mode in on off; do
  for scenario in destroy reset release; do
    GPUCAP_POOL=$mode GPUCAP_TRACE="$WORK/trace.csv" \
      with_shim "$TESTBIN/reliability/teardown" $scenario 2>"$WORK/err" > "$WORK/out"
    status=$?
    relay "pool=$mode $scenario: " < "$WORK/out"
    ok $? "pool=$mode $scenario: the program printed its checks"
    grep -q '^1\.\.[0-9]' "$WORK/out"
    ok $? "pool=$mode $scenario: the program ran to the end (status $status)"
    allocs=$(grep -c ',allocate,' "$WORK/trace.csv")
    frees=$(grep -c ',free,' "$WORK/trace.csv")
    [ "$allocs" -gt 0 ] && [ "$allocs" = "$frees" ]
    ok $? "pool=$mode $scenario: the trace frees every block it allocates ($frees of $allocs)"
  done
done
done_testing
