#!/usr/bin/env bash
# Fault injection through the fake driver: a clean run of the faultload workload lists every
# driver call it makes (the program's own and gpucap's on its behalf); then, one position at a
# time, the fake fails exactly that call (FAKECUDA_FAIL=NAME:N:CODE) and the run is judged:
#   - faultload's per-call rules (the program sees the driver's code, or a correct success);
#   - no crash, no sanitizer report, and the pool's invariants (the preloaded shim is the
#     checked build: bfc_check() == 0 after every pool operation, or it aborts);
#   - at exit, from the fake's own record and gpucap's JSON report: no hazard, nothing leaked
#     beyond the regions the pool keeps by design (fake leaked_bytes == the report's pool_bytes;
#     0 with GPUCAP_POOL=off), nothing left in use, every successful allocation accounted for
#     (in the report and in GPUCAP_TRACE), and the driver's peak never above the cap.
# Every alloc failure is also injected as CUDA_ERROR_OUT_OF_MEMORY (the pool backs off); every
# other call fails with CUDA_ERROR_UNKNOWN (999). FAULTS_REPEAT=N repeats the matrix N times.
# GPUCAP_POOL=on is the VMM-backed pool over the fake (its cuMemCreate, cuMemMap,
# cuMemSetAccess, cuMemRelease and cuMemUnmap fail in turn), regions the region pool.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off
. "$TOP/tests/reliability/rlib.sh"

SHIM="$TESTBIN/reliability/libgpucap-checked.so"
PROG="$TESTBIN/reliability/faultload"
CAP=$((64 << 20))
runs=0

# run MODE FAIL: one run of the workload; leaves $WORK/out, $WORK/err, $WORK/r.json, $WORK/s.json.
run() {
  rm -f "$WORK/r.json" "$WORK/s.json" "$WORK/t.csv"
  GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_POOL="$1" GPUCAP_REPORT=off GPUCAP_REPORT_JSON="$WORK/r.json" \
    GPUCAP_TRACE="$WORK/t.csv" FAKECUDA_STATS="$WORK/s.json" FAKECUDA_FAIL="$2" \
    with_shim "$PROG" >"$WORK/out" 2>"$WORK/err"
  status=$?
  runs=$((runs + 1))
}

# judge MODE FAIL: the end-of-run checks; prints one TAP line (with diagnostics on failure).
judge() {
  local mode=$1 fail=$2 why=""
  local allocs live fired leaked leaked_n pool regions in_use nallocs peak hazards want_allocs
  local traced
  allocs=$(field "$(cat "$WORK/out")" allocs)
  live=$(field "$(cat "$WORK/out")" live_allocs)
  fired=$(field "$(cat "$WORK/out")" fired)
  leaked=$(json_num "$WORK/s.json" leaked_bytes)
  hazards=$(json_num "$WORK/s.json" hazards)
  peak=$(json_max "$WORK/s.json" peak_bytes)
  leaked_n=$(json_num "$WORK/s.json" leaked_allocations)
  pool=$(json_sum_live "$WORK/r.json" pool_bytes)
  regions=$(json_sum_live "$WORK/r.json" num_regions)
  in_use=$(json_sum_live "$WORK/r.json" bytes_in_use)
  nallocs=$(json_sum_live "$WORK/r.json" num_allocs)
  want_allocs=$live
  [ "$mode" = off ] && want_allocs=$allocs && pool=0 && regions=0
  # A VMM-backed pool holds one driver allocation per 2 MiB unit (the fake's granularity).
  grep -q '"backing": "vmm"' "$WORK/r.json" 2>/dev/null && regions=$((pool / (2 << 20)))
  [ "$status" -eq 0 ] || why="$why exit status $status;"
  grep -q 'Sanitizer\|runtime error\|Assertion' "$WORK/err" && why="$why sanitizer or assertion;"
  [ -n "$fail" ] && [ "$fired" != 1 ] && why="$why the failure never fired;"
  [ "${hazards:-x}" = 0 ] || why="$why hazards=$hazards;"
  # The fake holds memory in 512-byte units and a backed-off region may be an odd multiple of
  # 256: each region may cost the fake up to 256 bytes more than the pool counts.
  [ -n "$leaked" ] || leaked=0
  [ "${leaked_n:-0}" = "$regions" ] && [ "$leaked" -ge "$pool" ] &&
    [ "$leaked" -le $((pool + 256 * regions)) ] ||
    why="$why fake leaked $leaked bytes in ${leaked_n:-0} blocks, report $pool in $regions regions;"
  [ "$in_use" = 0 ] || why="$why report bytes_in_use=$in_use;"
  [ "$nallocs" = "$want_allocs" ] ||
    why="$why report num_allocs=$nallocs, program saw $want_allocs;"
  traced=$(grep -c ',allocate,' "$WORK/t.csv" 2>/dev/null)
  [ "${traced:-0}" = "${allocs:-0}" ] ||
    why="$why trace shows ${traced:-0} allocations, program received ${allocs:-0};"
  [ "${peak:-0}" -le "$CAP" ] || why="$why driver peak $peak above the cap;"
  desc="pool=$mode fail ${fail:-nothing}: $(grep -o 'outcome=[a-z]*' "$WORK/out" | head -1 |
    sed 's/outcome=//')"
  if [ -z "$why" ]; then
    ok 0 "$desc"
  else
    fail_with_detail "$desc" "$why"
  fi
}

# fail_with_detail DESCRIPTION WHY: a failed run, with what went wrong and the program's output.
fail_with_detail() {
  ok 1 "$1"
  printf '#   %s\n' "$2"
  grep -v '^step=.*outcome=propagated' "$WORK/out" | grep -v '^allocs=' | head -5 | sed 's/^/#   /'
  grep -v '^ *$' "$WORK/err" | grep -v '^ \|^Bin\|^Stats\|^[A-Z][A-Za-z]*: ' | head -5 |
    sed 's/^/#   stderr: /'
}

points=0
for mode in on regions off; do
  run "$mode" ""
  judge "$mode" ""
  calls=$(sed -n '/"calls": {/,/}/p' "$WORK/s.json" |
    sed -n 's/^ *"\([A-Za-z0-9_]*\)": *\([0-9]*\).*/\1 \2/p')
  n_names=$(printf '%s\n' "$calls" | wc -l)
  while read -r name count; do
    for ((i = 1; i <= count; i++)); do
      codes=999
      [ "$name" = cuMemAlloc_v2 ] && codes="999 2"
      for code in $codes; do
        run "$mode" "$name:$i:$code"
        judge "$mode" "$name:$i:$code"
        points=$((points + 1))
      done
    done
  done <<< "$calls"
  echo "# pool=$mode: $n_names driver entry points, $points faults injected so far"
done
echo "# faults injected: $points in $runs runs"
record_figure faults "$points faults injected ($runs runs)"
done_testing
