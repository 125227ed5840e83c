#!/bin/sh
# The shim's own cost through its hooks (`make bench`, after the replay tables): build/tests/
# hookbench over the fake driver alone, under build/libgpucap.so, and under a shim built without
# the per-library ledger (build/noledger/libgpucap.so). Times are the best of RUNS rounds of N
# calls (noisy on a shared host); instruction counts come from callgrind when valgrind is
# installed (steady: the figure to compare). The fake's share of a pooled pair (the context
# queries gpucap's hooks make) is measured alone and subtracted; so is core/'s own cost of the
# same pattern (build/gpucap-replay over a trace of N alike pairs), which leaves what the hooks
# add beyond the pool. Then the modelled cost, over the fake's latency model, of a pooled pair,
# of a pair spilled beyond the cap to host memory (GPUCAP_OVERSUBSCRIBE, GPUCAP_SPILL) and of a
# migrated managed page (LATENCY, MIGRATION). Prints markdown.
set -eu
# gpucap's own cost over a fixed fake: the driver's own memory (a 401 MiB context on small fake
# devices) left out.
export FAKECUDA_DRIVER_MEMORY=off

BUILD=${BUILD:-build}
RUNS=${RUNS:-11}
N=${N:-200000}
BENCH="$BUILD/tests/hookbench"
FAKE="$BUILD/fakecuda"
# NVIDIA's shared runtime, for the cudart rows: the toolkit's, when one is installed.
for d in "${CUDA_HOME:-}" /usr/local/cuda; do
  if [ -n "$d" ] && [ -d "$d/lib64" ]; then
    FAKE="$FAKE:$d/lib64"
    break
  fi
done
SHIM="$(cd "$BUILD" && pwd)/libgpucap.so"
REPLAY="$BUILD/gpucap-replay"
NOLEDGER="$(cd "$BUILD" && pwd)/noledger/libgpucap.so"
# The fake's suggested latencies (tests/fakecuda/README.md), with assumptions for the calls of
# managed memory (no published figures: an allocation that reserves address space and sets up
# its ranges, between cuMemAddressReserve and cuMemAlloc; advice and a prefetch's call a few
# microseconds), and 1 us per migrated 4 KiB page (on-demand migration at about 4 GB/s).
LATENCY=${LATENCY:-cuMemCreate:200us,cuMemMap:2us,cuMemSetAccess:36us,cuMemUnmap:26us,cuMemAddressReserve:19us,cuMemAlloc_v2:100us,cuMemFree_v2:50us}
MANAGED_LATENCY=${MANAGED_LATENCY:-cuMemAllocManaged:40us,cuMemAdvise_v2:5us,cuMemPrefetchAsync_v2:10us}
MIGRATION=${MIGRATION:-1us}

# ns SHIM WHAT [POOL]: ns per operation in the best of RUNS rounds ("" SHIM: the fake alone;
# POOL: GPUCAP_POOL). The best round, not the median: on a host shared with other work the
# median moves by 2x between runs, the best round by a few percent.
ns() {
  LD_LIBRARY_PATH="$FAKE" LD_PRELOAD="$1" RUNS=$RUNS GPUCAP_REPORT=off GPUCAP_POOL="${3:-on}" \
    "$BENCH" "$2" "$N" | sed -n 's/.*"ns_min":\([0-9.]*\).*/\1/p'
}

# least VALUES...: the smallest of the numbers given.
least() { printf '%s\n' "$@" | sort -n | head -n 1; }

# ir SHIM WHAT [POOL]: instructions per operation (callgrind, 11000 minus 1000 operations), or
# "-" without valgrind.
ir() {
  command -v valgrind >/dev/null 2>&1 || { echo -; return; }
  one() {
    FAKECUDA_MEMORY=256MiB LD_LIBRARY_PATH="$FAKE" LD_PRELOAD="$1" RUNS=1 GPUCAP_REPORT=off \
      GPUCAP_POOL="$4" valgrind --tool=callgrind --callgrind-out-file=/dev/null "$BENCH" "$2" \
      "$3" 2>&1 | sed -n 's/.*Collected : *//p' | tr -d ','
  }
  a=$(one "$1" "$2" 1000 "${3:-on}")
  b=$(one "$1" "$2" 11000 "${3:-on}")
  echo $(((b - a) / 20000)) # a warm-up round and a timed round of each
}

sub() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%.1f\n", a - b }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.1f%%\n", 100 * a / b }'; }

# With and without the ledger, and the fake's share alone, alternately, five times each: the
# host's drift hits all three alike (the share is subtracted from the pair, so a share measured
# at another moment would move gpucap's own figure by the host's drift).
with=""
without=""
queries=""
for i in 1 2 3 4 5; do
  with="$with $(ns "$SHIM" pair)"
  without="$without $(ns "$NOLEDGER" pair)"
  queries="$queries $(ns "" query)"
done
# shellcheck disable=SC2086 # word splitting intended
pair_ns=$(least $with)
# shellcheck disable=SC2086
pair_nl_ns=$(least $without)
# shellcheck disable=SC2086
query_ns=$(least $queries)
query_ir=$(ir "" query)
# measure NAME SHIM WHAT [POOL]: NAME_ns and NAME_ir of one configuration.
measure() {
  eval "$1_ns=\$(ns \"\$2\" \"\$3\" \"\${4:-on}\")"
  eval "$1_ir=\$(ir \"\$2\" \"\$3\" \"\${4:-on}\")"
}
pair_ir=$(ir "$SHIM" pair)
pair_nl_ir=$(ir "$NOLEDGER" pair)
measure pt "$SHIM" pair off
measure fake "" pair
measure info "$SHIM" info
measure info_fake "" info
rt_ns=$(ns "$SHIM" cudart)
rt_nl_ns=$(ns "$NOLEDGER" cudart)
rt_ir=-
rt_nl_ir=-
if [ -n "$rt_ns" ]; then
  rt_ir=$(ir "$SHIM" cudart)
  rt_nl_ir=$(ir "$NOLEDGER" cudart)
fi
# core/ alone: the pattern hookbench's pair makes (one 4096-byte block allocated and freed,
# again and again) as an RMM trace, replayed by gpucap-replay: its best warm run, no lock (the
# shim's lock is part of what the hooks add), and its instructions (callgrind, one warm pass:
# the replay loop's included, about 56 per pair).
core_ns=-
core_ir=-
if [ -x "$REPLAY" ]; then
  trace="$BUILD/traces/pair4096.csv"
  mkdir -p "$BUILD/traces"
  awk -v n=20000 'BEGIN {
    print "Thread,Time,Action,Pointer,Size,Stream"
    for (i = 0; i < n; i++) {
      printf "1,00:00:00.%06d,allocate,0x7f0000000000,4096,0\n", i % 1000000
      printf "1,00:00:00.%06d,free,0x7f0000000000,4096,0\n", i % 1000000
    }
  }' > "$trace"
  core_ns=$("$REPLAY" "$trace" --runs "$RUNS" | sed -n 's/.*"ns_per_pair_warm_min":\([0-9.]*\).*/\1/p')
  if command -v valgrind >/dev/null 2>&1; then
    n=$(valgrind --tool=callgrind --toggle-collect='count_warm_pass*' \
      --callgrind-out-file=/dev/null "$REPLAY" "$trace" --count 2>&1 >/dev/null |
      sed -n 's/.*Collected : *//p' | tr -d ',')
    core_ir=$(awk -v n="${n:-}" 'BEGIN { if (n == "") print "-"; else printf "%.0f\n", n / 20000 }')
  fi
fi
own_ns=$(sub "$pair_ns" "$query_ns")
own_ir=$(sub "$pair_ir" "$query_ir")
ledger_ns=$(sub "$pair_ns" "$pair_nl_ns")
ledger_ir=$(sub "$pair_ir" "$pair_nl_ir")

echo "### Through the hooks (over the fake driver; ns: best of $RUNS rounds of $N calls)"
echo
echo "| figure | ns per call | instructions per call |"
echo "| --- | ---: | ---: |"
echo "| pooled cuMemAlloc_v2 + cuMemFree_v2 pair through the hooks | $pair_ns | $pair_ir |"
echo "| the fake's share of it (the context queries the hooks make) | $query_ns | $query_ir |"
echo "| gpucap's own pooled pair (the difference) | $own_ns | $own_ir |"
echo "| core/'s pair of the same pattern (gpucap-replay, no lock) | $core_ns | $core_ir |"
echo "| what the hooks add beyond core/ (own pair - core/'s) | $(sub "$own_ns" "$core_ns") | $(sub "$own_ir" "$core_ir") |"
echo "| pooled pair, shim built without the ledger | $pair_nl_ns | $pair_nl_ir |"
echo "| the ledger (pair with it - pair without) | $ledger_ns | $ledger_ir |"
echo "| the fake's own cuMemAlloc_v2 + cuMemFree_v2, no gpucap | $fake_ns | $fake_ir |"
if [ -n "$rt_ns" ]; then
  echo "| pooled cudaMalloc + cudaFree pair through NVIDIA's shared runtime | $rt_ns | $rt_ir |"
  echo "| the same, shim built without the ledger | $rt_nl_ns | $rt_nl_ir |"
  echo "| the ledger there (it looks past the runtime) | $(sub "$rt_ns" "$rt_nl_ns") | $(sub "$rt_ir" "$rt_nl_ir") |"
fi
echo "| pass-through pair (GPUCAP_POOL=off) through the hooks | $pt_ns | $pt_ir |"
echo "| the pass-through pair's overhead (minus the fake's own pair) | $(sub "$pt_ns" "$fake_ns") | $(sub "$pt_ir" "$fake_ir") |"
echo "| cuMemGetInfo_v2 through its hook | $info_ns | $info_ir |"
echo "| cuMemGetInfo_v2, fake alone | $info_fake_ns | $info_fake_ir |"
echo "| cuMemGetInfo_v2's hook overhead (the difference) | $(sub "$info_ns" "$info_fake_ns") | $(sub "$info_ir" "$info_fake_ir") |"
echo
beyond=$(sub "$own_ns" "$core_ns")
echo "- through the hooks <= 30 ns beyond core/: $(awk -v b="$beyond" 'BEGIN {
  if (b == "-") print "-"; else if (b <= 30) print "met"; else print "MISSED" }') ($beyond ns)"
echo "- the ledger <= 10% of a pooled pair through the hooks: $(pct "$ledger_ir" "$pair_ir") of" \
  "its instructions, $(pct "$ledger_ns" "$pair_ns") of its time;" \
  "$(pct "$ledger_ir" "$own_ir") of gpucap's own instructions"
if [ -n "$rt_ns" ]; then
  echo "- through the shared runtime: $(pct "$(sub "$rt_ir" "$rt_nl_ir")" "$rt_ir") of a pair's" \
    "instructions, $(pct "$(sub "$rt_ns" "$rt_nl_ns")" "$rt_ns") of its time"
fi

# modelled POOL WHAT BYTES [HOLD]: the fake's modelled driver time (charged, not slept) per
# operation of WHAT under the shim with GPUCAP_POOL=POOL, a 64 MiB cap, a 1 GiB spill budget and
# GPUCAP_SPILL, from two runs of 1000 and 2000 operations (a warm round and a timed round each):
# their difference leaves out what setting up costs. Prints "ns_per_op host_ns_per_op".
modelled() {
  t1=0
  for n in 1000 2000; do
    j=$(LD_LIBRARY_PATH="$FAKE" LD_PRELOAD="$SHIM" RUNS=1 GPUCAP_REPORT=off GPUCAP_POOL="$1" \
      GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_OVERSUBSCRIBE=1GiB GPUCAP_SPILL=on \
      FAKECUDA_LATENCY="$LATENCY,$MANAGED_LATENCY" FAKECUDA_MIGRATION="$MIGRATION" \
      FAKECUDA_LATENCY_SLEEP=0 FAKECUDA_STATS="$BUILD/hookbench-model.json" \
      "$BENCH" "$2" $n "$3" ${4:+"$4"})
    t=$(sed -n 's/^"driver_time_ns": *\([0-9]*\).*/\1/p' "$BUILD/hookbench-model.json")
    host=$(printf '%s\n' "$j" | sed -n 's/.*"ns_min":\([0-9.]*\).*/\1/p')
    [ $n = 1000 ] && t1=$t
  done
  awk -v a="$t1" -v b="$t" -v h="$host" 'BEGIN { printf "%.0f %s\n", (b - a) / 2000, h }'
}
pool_m=$(modelled on pair 4096)
off_m=$(modelled off pair 4096)
spill_m=$(modelled on spill 4096 $((64 << 20)))
page_m=$(modelled on migrate $((2 << 20)))
echo
echo "### Beyond the cap: a spilled pair, a migrated page (modelled driver time)"
echo
echo "Modelled time in the driver (FAKECUDA_LATENCY charged, not slept:"
echo "\`$LATENCY,$MANAGED_LATENCY\`; FAKECUDA_MIGRATION=$MIGRATION per 4 KiB page) and the host's"
echo "own time through the fake (best round), per operation:"
echo
echo "| figure | modelled driver us | host ns |"
echo "| --- | ---: | ---: |"
echo "| pooled cuMemAlloc_v2 + cuMemFree_v2 pair under the cap | $(echo "$pool_m" | awk '{ printf "%.1f", $1 / 1000 }') | $(echo "$pool_m" | cut -d' ' -f2) |"
echo "| the pair passed through (GPUCAP_POOL=off) under the cap | $(echo "$off_m" | awk '{ printf "%.1f", $1 / 1000 }') | $(echo "$off_m" | cut -d' ' -f2) |"
echo "| the same pair beyond the cap, spilled (cuMemAllocManaged, 2 x cuMemAdvise_v2, cuMemFree_v2) | $(echo "$spill_m" | awk '{ printf "%.1f", $1 / 1000 }') | $(echo "$spill_m" | cut -d' ' -f2) |"
echo "| a 4 KiB page migrated by a 2 MiB prefetch (to the device and back: per page) | $(echo "$page_m" | awk '{ printf "%.2f", $1 / 1000 / 1024 }') | $(echo "$page_m" | awk '{ printf "%.1f", $2 / 1024 }') |"
