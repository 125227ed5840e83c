#!/usr/bin/env bash
# Per-thread fronts (docs/design.md, "Per-thread fronts") seen from outside: the driver's own
# record (FAKECUDA_STATS) shows its peak never passed the cap while many threads allocated and
# freed through their fronts; a thread that needs the room other threads'
# fronts cache gets it (the fronts are flushed before a refusal); an exiting thread's front goes
# back to the pool; a fork child never answers from the parent's fronts. Also run under TSan by
# `make test`.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off
export GPUCAP_FRONTS=true # off by default

for pool in vmm regions; do
  for fronts in true false; do
    stats="$WORK/churn-$pool-$fronts.json"
    GPUCAP_POOL=$pool GPUCAP_FRONTS=$fronts GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off \
      FAKECUDA_STATS="$stats" tap_program "8 threads churn under a 64 MiB cap ($pool, fronts $fronts)" \
      with_shim "$TESTBIN/fronts" churn 8 3000
    peak_within "$stats" $((64 << 20)) "  "
  done

  # Seven threads each cache 1 MiB (a front keeps 1/64 of the 64 MiB pool): get-info counts it
  # free, as the pool's idle memory; 60 MiB more fit the cap only once those blocks are back in
  # the pool and its regions or units given back.
  stats="$WORK/room-$pool.json"
  GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off FAKECUDA_STATS="$stats" \
    tap_program "one thread gets the room seven others' fronts cache ($pool)" \
    with_shim "$TESTBIN/fronts" room 7 $((60 << 20)) $((64 << 20))
  peak_within "$stats" $((64 << 20)) "  "
done

# At a tight cap, fronts must not refuse what the pool alone serves: one thread keeps up to
# SLOTS blocks of a few sizes live near the 64 MiB cap, the same sequence with fronts on and off
# (the program counts its refused allocations; the driver's peak is checked too). Blocks held
# apart in a front used to make the pool place misses elsewhere, and refuse more (117 against
# 59 at 750 slots).
for pool in vmm regions; do
  for slots in 750 800; do
    for fronts in true false; do
      GPUCAP_POOL=$pool GPUCAP_FRONTS=$fronts GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off \
        FAKECUDA_STATS="$WORK/mix-$pool-$slots-$fronts.json" \
        with_shim "$TESTBIN/fronts" mix $slots 40000 > "$WORK/mix-$pool-$slots-$fronts.out" 2>&1
      ok $? "$slots slots near a 64 MiB cap ($pool, fronts $fronts)"
      peak_within "$WORK/mix-$pool-$slots-$fronts.json" $((64 << 20)) "  "
    done
    on=$(sed -n 's/^# refused //p' "$WORK/mix-$pool-$slots-true.out")
    off=$(sed -n 's/^# refused //p' "$WORK/mix-$pool-$slots-false.out")
    [ -n "$on" ] && [ -n "$off" ] && [ "$on" -le "$off" ]
    ok $? "  fronts on refused no more than off ($on against $off)"
  done
done

# Threads that cached blocks and exited: each front's blocks went back to the pool.
GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off GPUCAP_VERBOSE=1 FAKECUDA_STATS="$WORK/exit.json" \
  with_shim "$TESTBIN/fronts" exit 3 > "$WORK/exit.out" 2> "$WORK/exit.err"
ok $? "three threads cached blocks and exited"
is "$(grep -c 'a thread exited: its front gave 4 cached blocks (1048576 bytes) back' \
  "$WORK/exit.err")" 3 "  each one's front gave its 4 blocks back to the pool"

GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off tap_program \
  "a fork child answers as the driver does, not from its parent's front" \
  with_shim "$TESTBIN/fronts" fork
done_testing
