#!/usr/bin/env bash
# make memcheck: the integration programs and the reliability workloads under valgrind
# memcheck, with the shim preloaded over the fake driver (plain build only: valgrind and the
# sanitizers do not mix). Every run must end with valgrind's status (--error-exitcode=99)
# untouched: no invalid read or write, no use of uninitialised memory, no definite or possible
# leak (--leak-check=full), and the program's own checks passing. Suppressions:
# tests/reliability/valgrind.supp (none for gpucap's own code). MEMCHECK_FILTER=REGEX runs
# only the cases whose description matches; MEMCHECK_ORIGINS=1 adds --track-origins=yes.
. "$TOP/tests/integ/lib.sh"
. "$TOP/tests/reliability/rlib.sh"

if [ -n "${SAN_PRELOAD:-}" ]; then
  echo "1..0 # SKIP memcheck needs a build without sanitizers"
  exit 0
fi
if ! command -v valgrind >/dev/null; then
  echo "Bail out! valgrind is not installed (apt-get install valgrind)"
  exit 1
fi

VG=(valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,possible
  --show-leak-kinds=definite,possible --num-callers=30
  --suppressions="$TOP/tests/reliability/valgrind.supp" --log-file="$WORK/vg.%p")
# Origin tracking finds where an uninitialised value came from, at ~15 s per run over the fake.
[ -n "${MEMCHECK_ORIGINS:-}" ] && VG+=(--track-origins=yes)
# The fake reserves twice its memory as address space at cuInit: keep it small under valgrind.
# The programs' figures are exact, as in their own suites: a context costs the device nothing
# here (the driver's own memory is tests/integ/overhead.sh's subject).
export FAKECUDA_MEMORY=1GiB GPUCAP_REPORT=off FAKECUDA_DRIVER_MEMORY=off
nm -D --defined-only "$SHIM" | awk '{print $3}' | sed 's/@.*//' > "$WORK/hooked"
runs=0

# case DESCRIPTION [VAR=VALUE...] -- PROGRAM ARGS...: one program under valgrind with the shim.
case_() {
  local desc=$1 status
  shift
  local envs=()
  while [ "$1" != -- ]; do
    envs+=("$1")
    shift
  done
  shift
  if [ -n "${MEMCHECK_FILTER:-}" ] && ! printf '%s' "$desc" | grep -Eq "$MEMCHECK_FILTER"; then
    return
  fi
  if [ ! -x "$1" ]; then
    skip "$desc" "$1 is not built"
    return
  fi
  rm -f "$WORK"/vg.*
  local t0=$SECONDS
  env "${envs[@]}" LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$SHIM" "${VG[@]}" "$@" \
    >"$WORK/out" 2>"$WORK/err"
  status=$?
  runs=$((runs + 1))
  ok $status "memcheck: $desc ($((SECONDS - t0)) s)"
  if [ "$status" -ne 0 ]; then
    cat "$WORK"/vg.* 2>/dev/null | grep -v '^==[0-9]*== *$' | head -40 | sed 's/^/#   /'
    grep '^not ok' "$WORK/out" | head -5 | sed 's/^/#   /'
  fi
}

T="$TESTBIN"
R="$TESTBIN/reliability"
case_ "captest under a cap, to the refusal" GPUCAP_MEMORY_LIMIT=64MiB -- \
  "$T/captest" 0 $((16 << 20))
case_ "captest, fail-closed setting" GPUCAP_MEMORY_LIMIT=1GB -- "$T/captest" 0 $((1 << 20)) 4
case_ "captest, GPUCAP_POOL=off" GPUCAP_POOL=off GPUCAP_MEMORY_LIMIT=64MiB -- \
  "$T/captest" 0 $((16 << 20))
case_ "linked" GPUCAP_MEMORY_LIMIT=64MiB -- "$T/linked"
case_ "mimic over cuGetProcAddress_v2" -- "$T/mimic" "$REQUESTS" "$WORK/hooked"
case_ "mimic over the dlsym fallback" -- "$T/mimic" "$REQUESTS" "$WORK/hooked" --fallback
for mode in many reuse pitch errors; do
  case_ "pooltest $mode" GPUCAP_TRACE="$WORK/trace.csv" GPUCAP_REPORT_JSON="$WORK/r.json" -- \
    "$T/pooltest" $mode 500
done
# Legacy IPC exports need the region pool; the VMM-backed pool (the default) runs without.
case_ "threads, pooled (regions)" GPUCAP_POOL=regions GPUCAP_MEMORY_LIMIT=256MiB -- \
  "$T/threads" 3 300
case_ "threads, pooled (vmm)" GPUCAP_MEMORY_LIMIT=256MiB -- "$T/threads" 3 300 noipc
case_ "threads, GPUCAP_POOL=off" GPUCAP_POOL=off GPUCAP_MEMORY_LIMIT=256MiB -- "$T/threads" 3 300
for mode in async managed vmm pointers contexts fork; do
  case_ "fidelity $mode" GPUCAP_MEMORY_LIMIT=64MiB -- "$T/fidelity" $mode
done
# IPC: each side of a pooled-block exchange (legacy IPC: the region pool) under valgrind, the other side running beside it.
for side in export import; do
  d="$WORK/ipc-$side"
  mkdir -p "$d"
  other=import
  [ "$side" = import ] && other=export
  GPUCAP_POOL=regions FAKECUDA_BACKING=1 IPCPEER_EXPECT_WRITE=1 IPCPEER_STALE_FAILS=1 \
    with_shim "$T/ipcpeer" "$other" "$d" > "$d/peer.out" 2>&1 &
  case_ "ipc, the ${side}er" GPUCAP_POOL=regions FAKECUDA_BACKING=1 IPCPEER_EXPECT_WRITE=1 \
    IPCPEER_STALE_FAILS=1 -- "$T/ipcpeer" "$side" "$d"
  touch "$d/exported" "$d/imported" "$d/freed" "$d/done"
  wait $!
done
for mode in "charge 2d" "charge mipmap" refuse destroy ctxdestroy reset; do
  # shellcheck disable=SC2086 # two words: mode and kind
  case_ "arrays $mode" GPUCAP_MEMORY_LIMIT=64MiB -- "$T/arrays" $mode
done
case_ "fidelity devices" FAKECUDA_DEVICES=2 GPUCAP_MEMORY_LIMIT=0:64MiB,1:32MiB -- \
  "$T/fidelity" devices
case_ "early constructor" GPUCAP_MEMORY_LIMIT=64MiB -- "$T/early"
case_ "demo workload" GPUCAP_MEMORY_LIMIT=2GiB -- "$T/workload"
case_ "faultload, no failure" GPUCAP_MEMORY_LIMIT=64MiB -- "$R/faultload"
for fail in cuMemAlloc_v2:2:999 cuMemAlloc_v2:3:2 cuCtxSynchronize:1:999 cuStreamCreate:1:999 \
    cuCtxDestroy_v2:1:999 cuMemFree_v2:1:999 cuEventSynchronize:1:999; do
  for mode in on off; do
    case_ "faultload, pool=$mode, $fail" GPUCAP_POOL=$mode GPUCAP_MEMORY_LIMIT=64MiB \
      FAKECUDA_FAIL=$fail -- "$R/faultload"
  done
done
case_ "integrity, host-backed memory" FAKECUDA_BACKING=1 GPUCAP_MEMORY_LIMIT=8MiB -- \
  "$R/integrity" 2 2 300
for s in destroy reset release; do
  for mode in on off; do
    case_ "teardown $s, pool=$mode" GPUCAP_POOL=$mode GPUCAP_MEMORY_LIMIT=64MiB -- \
      "$R/teardown" $s
  done
done
case_ "badargs, pooled" -- "$R/badargs"
case_ "badargs, GPUCAP_POOL=off" GPUCAP_POOL=off -- "$R/badargs"
case_ "badargs under a cap" GPUCAP_MEMORY_LIMIT=64MiB -- "$R/badargs"
# Control: the same checks fail over an allocator that leaks host memory.
if [ -z "${MEMCHECK_FILTER:-}" ]; then
  BADPOOL=leak LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$TESTBIN/reliability/libbadpool.so" \
    "${VG[@]}" "$T/captest" 0 $((1 << 20)) 4 >/dev/null 2>&1
  is $? 99 "control: memcheck fails a run that leaks host memory"
fi
echo "# memcheck: $runs programs"
record_figure memcheck "$runs program runs under valgrind memcheck, 0 errors"
done_testing
