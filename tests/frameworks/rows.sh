# The framework rows' harness, sourced by frameworks.sh, tensorflow.sh and jax.sh after
# tests/integ/lib.sh. A row runs one workload (tests/frameworks/*_workload.py) over the fake
# driver twice: without gpucap (devices of FAKECUDA_MEMORY) and under gpucap (the row's caps).
# Each run is judged from inside, by the workload's own checks (TAP), and from outside: the fake
# driver's own per-device peak for the process (what its NVML lists: allocations and the
# driver's own memory) stays within the device or the cap, no hazards and no work left pending
# at exit, and gpucap's exit report agrees with the fake.
#
# Rows are queued by `row` and run by `rows_run`, ROWS_JOBS runs at a time (TensorFlow waits
# 10 s before it reports an allocation it cannot serve, so runs overlap well), then reported in
# order. The workload's environment: EXPECT_TOTAL (the memory each device should show, bytes,
# comma-separated per device) and the row's settings.

device=$((4 << 30))
ROWS_JOBS=${ROWS_JOBS:-2}
export PYTHONPATH="$TOP/tests/frameworks" PYTHONDONTWRITEBYTECODE=1
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 # Python's own allocations live to exit
# Under a sanitizer, libstdc++ loads with the runtime, before the frameworks' C++ libraries:
# ASan resolves its __cxa_throw interceptor only at start-up.
if [ -n "${SAN_PRELOAD:-}" ]; then
  SAN_PRELOAD="$SAN_PRELOAD $(${CC:-cc} -print-file-name=libstdc++.so.6)"
fi

# rows_venv VENV ROW...: the interpreter of environment VENV as $py; when VENV is unset or not
# complete, every ROW is skipped with the reason and the script ends.
rows_venv() {
  local venv=$1 why r
  shift
  py="$venv/bin/python"
  if [ -n "$venv" ] && [ -f "$venv/.complete" ]; then
    return 0
  fi
  why="frameworks not installed: run 'make frameworks'"
  [ -z "$venv" ] && why="switched off (its environment variable is empty)"
  [ -n "$venv" ] && [ -f "$venv.failed" ] && why="$(head -n 1 "$venv.failed")"
  for r in "$@"; do skip "framework row $r" "$why"; done
  done_testing
}

rows_n=0
noise='^(WARNING: All log messages|[IW][0-9]{4} |Current allocation summary|If the cause is memory|To enable the following|(Limit|InUse|MaxInUse|NumAllocs|MaxAllocSize|Reserved|PeakReserved|LargestFreeBlock):|$)'

# row NAME CAPS SCRIPT [VAR=VALUE...]: queues a row; when ROWS_ONLY (a list of names) is set and
# does not name it, the row is skipped, saying ROWS_SKIP_WHY. CAPS: the cap in bytes, or one per device
# ("C0,C1": FAKECUDA_DEVICES is their count), or "none" (gpucap without a cap). VAR=A|B: A
# without gpucap, B under it.
# DRIVER_CALL=NAME: the fake must also have served NAME (the path the row is about).
# LIBRARY=NAME: gpucap's per-library ledger must name NAME as holding memory.
# GPUCAP_CAP_COVERS=allocations: the cap on allocations alone, under which the process's peak
# (its driver memory included) passes the cap: that is checked instead.
row() {
  case " ${ROWS_ONLY:-$1} " in
  *" $1 "*) ;;
  *)
    skip "framework row $1" "${ROWS_SKIP_WHY:-not in ROWS_ONLY}"
    return 0
    ;;
  esac
  rows_n=$((rows_n + 1))
  eval "row_$rows_n=(\"\$@\")"
}

# side_value SIDE VALUE: VALUE, or its part for SIDE when it is "WITHOUT|WITH".
side_value() {
  case $2 in
  *"|"*) if [ "$1" = with ]; then echo "${2#*|}"; else echo "${2%%|*}"; fi ;;
  *) echo "$2" ;;
  esac
}

# totals SIDE CAPS NDEV: what each device should show, comma-separated.
totals() {
  local t="" c
  for c in ${2//,/ }; do
    [ "$1" = with ] && [ "$c" != none ] || c=$device
    t="$t${t:+,}$c"
  done
  echo "$t"
}

# run_side I SIDE: row I's workload on SIDE, its output in $WORK/NAME.SIDE.{out,err,rc}.
run_side() {
  local -n spec="row_$1"
  local name=${spec[0]} caps=${spec[1]} script=${spec[2]} side=$2 kv
  local base="$WORK/$name.$side" ndev
  ndev=$(echo "${caps//,/ }" | wc -w)
  local limit=$caps
  [ "$caps" = none ] && limit=""
  if [ "$ndev" -gt 1 ]; then # per device: 0:C0,1:C1
    limit=$(echo "$caps" | awk -F, '{ for (i = 1; i <= NF; i++) printf "%s%d:%s", (i > 1 ? "," : ""), i - 1, $i }')
  fi
  (
    for kv in "${spec[@]:3}"; do
      export "${kv%%=*}=$(side_value "$side" "${kv#*=}")"
    done
    export EXPECT_TOTAL="$(totals "$side" "$caps")" FAKECUDA_MEMORY=4GiB \
      FAKECUDA_DEVICES="$ndev" FAKECUDA_STATS="$base.json" GPUCAP_MEMORY_LIMIT="$limit" \
      GPUCAP_REPORT=off GPUCAP_REPORT_JSON="$base.report.json"
    "${side}_shim" "$py" "$TOP/tests/frameworks/$script" > "$base.out" 2> "$base.err"
    echo $? > "$base.rc"
  )
}

# report_side I SIDE: the checks of row I's run on SIDE.
report_side() {
  local -n spec="row_$1"
  local name=${spec[0]} caps=${spec[1]} side=$2 kv call="" lib="" over="" d=0 peak total n pool
  local base="$WORK/$name.$side"
  for kv in "${spec[@]:3}"; do
    case $kv in
    DRIVER_CALL=*) call=${kv#DRIVER_CALL=} ;;
    LIBRARY=*) lib=${kv#LIBRARY=} ;;
    GPUCAP_CAP_COVERS=allocations) over=1 ;;
    esac
  done
  sed 's/^/    /' "$base.out"
  # The last lines of stderr, without the frameworks' informational and warning logs (absl's
  # I/W lines, the allocators' summaries after an out-of-memory error).
  grep -v -E "$noise" "$base.err" | tail -n 20 | sed 's/^/# stderr: /'
  ok "$(cat "$base.rc" 2>/dev/null || echo 1)" "$name, $side gpucap: the workload's own checks"
  for total in ${caps//,/ }; do
    [ "$side" = with ] && [ "$total" != none ] || total=$device
    peak=$(grep -o '"peak_bytes": [0-9]*' "$base.json" 2>/dev/null | sed -n "$((d + 1))p" |
      sed 's/.*: //')
    if [ "$side" = with ] && [ -n "$over" ]; then
      ok "$([ -n "$peak" ] && [ "$peak" -gt "$total" ]; echo $?)" \
        "$name, with gpucap: the cap on allocations alone: device $d's peak ${peak:-?} B passes $total B"
    else
      ok "$([ -n "$peak" ] && [ "$peak" -le "$total" ]; echo $?)" \
        "$name, $side gpucap: device $d's peak ${peak:-?} B stays within $total B"
    fi
    d=$((d + 1))
  done
  is "$(json_num "$base.json" hazards)/$(json_num "$base.json" pending_work)" "0/0" \
    "$name, $side gpucap: no hazards and no pending work at exit"
  if [ -n "$call" ]; then
    n=$(json_obj_num "$base.json" calls "$call")
    ok "$([ "${n:-0}" -gt 0 ]; echo $?)" "$name, $side gpucap: the driver served $call (${n:-0})"
  fi
  [ "$side" = with ] || return 0
  is "$("$py" - "$base.report.json" "$base.json" <<'EOF' 2>&1
import json, re, sys
report = json.load(open(sys.argv[1]))
peaks = [int(p) for p in re.findall(r'"peak_bytes": (\d+)', open(sys.argv[2]).read())]
pools = {}
for d in report["devices"]:
    pools[d["device"]] = max(pools.get(d["device"], 0), d["peak_pool_bytes"])
bad = [f"device {d}: {p} > {peaks[d]}" for d, p in pools.items() if p > peaks[d]]
print("; ".join(bad) or "agrees")
EOF
  )" agrees "$name, with gpucap: every pool's peak in the report is memory the driver held"
  if [ -n "$lib" ]; then
    is "$("$py" -c 'import json, sys
u = json.load(open(sys.argv[1]))["usage"][0]
libs = {l["name"]: l for l in u["libraries"]}
adds = sum(l["held_bytes"] for l in libs.values()) == u["held_bytes"]
print(adds and sys.argv[2] in libs and libs[sys.argv[2]]["peak_held_bytes"] > 0)' \
      "$base.report.json" "$lib" 2>&1)" True \
      "$name, with gpucap: the ledger names $lib, and the libraries add up to the total"
  fi
}

# rows_run: runs every queued row without and with gpucap, ROWS_JOBS runs at a time, then
# reports them in order.
rows_run() {
  local i side running=0
  for i in $(seq 1 "$rows_n"); do
    for side in without with; do
      if [ "$running" -ge "$ROWS_JOBS" ]; then
        wait -n
        running=$((running - 1))
      fi
      run_side "$i" "$side" &
      running=$((running + 1))
    done
  done
  wait
  for i in $(seq 1 "$rows_n"); do
    for side in without with; do
      report_side "$i" "$side"
    done
  done
}
