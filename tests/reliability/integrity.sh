#!/usr/bin/env bash
# Data integrity under load: several threads and streams write a unique pattern into every
# block they own, asynchronously, over host-backed fake memory, and check it before freeing
# (tests/reliability/integrity.c), under a cap tight enough that the pool is full, refuses,
# retires deferred frees and reuses memory all the time. Zero corrupted blocks, zero hazards
# (the program claims every block; the fake's own counter agrees), zero overlapping blocks.
# Negative controls: the same workload over a deliberately wrong allocator (immediate reuse;
# overlapping blocks) must fail those checks, so they are known to be able to fail.
# INTEGRITY_SECONDS=N runs each workload for N seconds instead (make soak).
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off
. "$TOP/tests/reliability/rlib.sh"

PROG="$TESTBIN/reliability/integrity"
BAD="$TESTBIN/reliability/libbadpool.so"
ITER=${INTEGRITY_ITERATIONS:-1500}
# ThreadSanitizer makes every copy and compare ~20x slower: fewer operations keep it short.
case "${SAN_PRELOAD:-}" in *tsan*) ITER=${INTEGRITY_ITERATIONS:-300} ;; esac
SECS=${INTEGRITY_SECONDS:-0}
export FAKECUDA_BACKING=1 GPUCAP_REPORT=off

total_blocks=0
total_bytes=0
total_ops=0
for mode in on off; do
  stats="$WORK/stats-$mode.json"
  json="$WORK/report-$mode.json"
  GPUCAP_POOL=$mode GPUCAP_MEMORY_LIMIT=8MiB FAKECUDA_STATS="$stats" GPUCAP_REPORT_JSON="$json" \
    run_tap "pool=$mode: 4 threads x 3 streams under an 8 MiB cap" \
    with_shim "$PROG" 4 3 "$ITER" "$SECS" 11
  figures=$(printf '%s\n' "$out" | sed -n 's/^ *# figures: //p')
  total_blocks=$((total_blocks + $(field "$figures" blocks)))
  total_bytes=$((total_bytes + $(field "$figures" bytes)))
  total_ops=$((total_ops + $(field "$figures" ops)))
  is "$(json_num "$stats" hazards)/$(json_num "$stats" stale_work)" 0/0 \
    "pool=$mode: the fake saw no hazard and no work on freed memory"
  is "$(json_num "$stats" pending_work)" 0 "pool=$mode: no device work left pending"
  pool=$(json_sum_live "$json" pool_bytes)
  [ "$mode" = off ] && pool=0
  leaked=$(json_num "$stats" leaked_bytes)
  slack=$((256 * $(json_sum_live "$json" num_regions)))
  [ "${leaked:-x}" -ge "$pool" ] && [ "$leaked" -le $((pool + slack)) ]
  ok $? "pool=$mode: the driver holds exactly the pool's regions at exit ($leaked bytes)"
done

# Two extra threads and one more stream each, under a larger cap, through the checked shim
# (core/bfc.c built with GPUCAP_DEBUG=1: bfc_check() == 0 asserted after every pool operation).
SHIM="$TESTBIN/reliability/libgpucap-checked.so" GPUCAP_MEMORY_LIMIT=32MiB \
  FAKECUDA_STATS="$WORK/stats-6.json" \
  run_tap "pool=on, checked pool: 6 threads x 4 streams under a 32 MiB cap" \
  with_shim "$PROG" 6 4 "$((ITER / 2))" "$SECS" 12
is "$(json_num "$WORK/stats-6.json" hazards)" 0 "  the fake saw no hazard"

# Negative controls: the checks fail over an allocator that breaks the rules.
out=$(BADPOOL=reuse GPUCAP_MEMORY_LIMIT=8MiB LD_LIBRARY_PATH="$FAKE_DIR" \
  LD_PRELOAD="${SAN_PRELOAD:+$SAN_PRELOAD }$BAD" "$PROG" 2 2 400 0 5 2>/dev/null)
like "$out" 'not ok [0-9]+ - no block was handed out while device work' \
  "control: immediate reuse is caught as a hazard"
like "$out" 'not ok [0-9]+ - no block read back anything but its own pattern' \
  "control: immediate reuse is caught as corruption"
out=$(BADPOOL=overlap LD_LIBRARY_PATH="$FAKE_DIR" \
  LD_PRELOAD="${SAN_PRELOAD:+$SAN_PRELOAD }$BAD" "$PROG" 2 2 400 0 5 2>/dev/null)
like "$out" 'not ok [0-9]+ - no block overlapped another live block' \
  "control: overlapping blocks are caught"

echo "# integrity: $total_ops operations, $total_blocks blocks, $total_bytes bytes checked"
record_figure integrity \
  "$total_ops operations, $total_blocks blocks written and checked ($total_bytes bytes)"
done_testing
