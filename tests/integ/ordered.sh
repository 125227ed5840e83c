#!/usr/bin/env bash
# The driver's stream-ordered pools beside gpucap's own (tests/integ/ordered.c), with the pool
# (VMM-backed and regions) and without it: a pool that keeps what is freed into it is charged
# for it, counted by cuMemGetInfo and trimmed before another allocation is refused; with no cap,
# the driver's own refusal makes gpucap give back what its pools hold idle and ask again; a pool
# destroyed with a block live leaves that block charged; threads that need room at once all get
# it, whichever of them gave it back. Judged from outside by the fake
# driver's per-device peak: the device never held more than the 64 MiB cap.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

cap=$((64 << 20))
export GPUCAP_REPORT=off
for pool in on regions off; do
  for mode in retained destroyed spare threads race; do
    name="$mode (pool $pool)"
    latency= # race: a release that takes time widens the window in which threads meet
    [ $mode = race ] && latency=cuMemRelease:1ms
    GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=64MiB FAKECUDA_STATS="$WORK/$mode.json" \
      FAKECUDA_LATENCY=$latency tap_program "$name" with_shim "$TESTBIN/ordered" $mode
    peak_within "$WORK/$mode.json" $cap "  $name: "
  done
  # No cap, a 1 GiB device: the driver's peak is the device's, whatever gpucap's pools held.
  name="uncapped (pool $pool)"
  GPUCAP_POOL=$pool FAKECUDA_MEMORY=1GiB FAKECUDA_STATS="$WORK/uncapped.json" \
    tap_program "$name" with_shim "$TESTBIN/ordered" uncapped
  peak_within "$WORK/uncapped.json" $((1 << 30)) "  $name: "
done

# Without gpucap the retaining pool and cuMemAlloc_v2 together hold more than 64 MiB: what the
# cap prevents.
FAKECUDA_STATS="$WORK/bare.json" without_shim "$TESTBIN/ordered" retained >/dev/null 2>&1
peak=$(json_num "$WORK/bare.json" peak_bytes)
[ -n "$peak" ] && [ "$peak" -gt $cap ]
ok $? "without gpucap the retained pool and the next allocation go past 64 MiB (peak ${peak:-?})"
done_testing
