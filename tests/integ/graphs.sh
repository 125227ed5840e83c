#!/usr/bin/env bash
# Graph memory under the cap (tests/integ/graphs.c): captured and hand-built allocation nodes,
# launches, uploads, trims, relaunches, a graph whose nodes cannot be read, a capture that a pool synchronisation would have
# invalidated, and four threads launching at once, with the pool and
# with GPUCAP_POOL=off. Judged from outside by the fake driver's per-device peak: the device
# never held more than the 64 MiB cap (graph memory is held in 512-byte units, like every
# allocation the program makes here, so no rounding is allowed for); the ledger's lines include
# the graph pool and reach the driver's peak.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

cap=$((64 << 20))
export GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off
for pool in on off; do
  for mode in captured alternate refuse upload kept capture threads; do
    name="$mode (pool $pool)"
    GPUCAP_POOL=$pool FAKECUDA_STATS="$WORK/$mode.json" tap_program "$name" \
      with_shim "$TESTBIN/graphs" $mode
    peak=$(json_num "$WORK/$mode.json" peak_bytes)
    [ -n "$peak" ] && [ "$peak" -le $cap ]
    ok $? "  $name: the device never held more than the cap (peak ${peak:-?})"
  done
done

# Captures under the pools (VMM-backed and regions): what was freed before a capture serves it
# (retired as it begins), the pool grows past what is freed during one, and refuses only what
# nothing but those frees could serve, with the verdict "capture". The same warm-up without
# the pool (every free a driver free) for comparison.
for pool in on regions off; do
  modes="warm during"
  [ $pool = off ] && modes=warm
  for mode in $modes; do
    name="$mode (pool $pool)"
    GPUCAP_POOL=$pool GPUCAP_REPORT_JSON="$WORK/$mode-$pool-report.json" \
      FAKECUDA_STATS="$WORK/$mode-$pool.json" tap_program "$name" \
      with_shim "$TESTBIN/graphs" $mode
    peak_within "$WORK/$mode-$pool.json" $cap "  $name: "
  done
done
for pool in on regions; do
  is "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['usage'][0]['refusals'])" \
    "$WORK/during-$pool-report.json")" \
    "{'cap_full': 0, 'fragmentation': 0, 'device_full': 0, 'other_pools': 0, 'capture': 1, 'spill_full': 0}" \
    "during (pool $pool): the one refusal has the verdict capture"
done

# The per-library ledger counts the graph pool as its own line, "CUDA graphs": the captured
# graph's 48 MiB beside the program's own 16 MiB block, so the libraries add up to the total and
# the total's peak is what the driver held at its peak (64 MiB, measured by the fake).
usage() {
  python3 -c "import json,sys; u=json.load(open(sys.argv[1]))['usage'][0]; print($2)" "$1"
}
for pool in on off; do
  GPUCAP_POOL=$pool GPUCAP_REPORT_JSON="$WORK/ledger-$pool.json" \
    FAKECUDA_STATS="$WORK/ledger-$pool-stats.json" with_shim "$TESTBIN/graphs" captured \
    >/dev/null 2>&1
  is "$(usage "$WORK/ledger-$pool.json" "sorted((l['name'], l['peak_held_bytes'], l['held_bytes']) for l in u['libraries'])")" \
    "[('CUDA graphs', $((48 << 20)), 0), ('graphs', $((16 << 20)), 0)]" \
    "ledger (pool $pool): a CUDA graphs line of 48 MiB beside the program's 16 MiB, none left"
  is "$(usage "$WORK/ledger-$pool.json" "u['peak_held_bytes']")" \
    "$(json_num "$WORK/ledger-$pool-stats.json" peak_bytes)" \
    "  the total's peak is the driver's own peak"
done

# A graph gpucap cannot read is refused, not let through uncharged (fault injected in the fake).
FAKECUDA_FAIL=cuGraphMemAllocNodeGetParams:1 FAKECUDA_STATS="$WORK/unreadable.json" \
  tap_program "unreadable allocation node" with_shim "$TESTBIN/graphs" unreadable
peak=$(json_num "$WORK/unreadable.json" peak_bytes)
[ -n "$peak" ] && [ "$peak" -le $cap ]
ok $? "  unreadable: the device never held more than the cap (peak ${peak:-?})"

# Without gpucap the same program shows what the cap prevents.
FAKECUDA_STATS="$WORK/uncapped.json" without_shim "$TESTBIN/graphs" captured >/dev/null 2>&1
peak=$(json_num "$WORK/uncapped.json" peak_bytes)
[ -n "$peak" ] && [ "$peak" -gt $cap ]
ok $? "without gpucap the captured program goes past 64 MiB (peak ${peak:-?})"
done_testing
