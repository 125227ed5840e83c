#!/usr/bin/env bash
# make gpu-check: gpucap's cap proven on the driver at hand, judged from outside the programs by
# the watcher (build/tests/gpu/gpuwatch: NVML's per-process used memory, and cuMemGetInfo of the
# device from a second process), with a report naming the GPU, the driver, the CUDA version and
# every check with its figures ($GPU_CHECK_OUT/report.md and report.json; the runs' own output
# and the watcher's files beside them in runs/). Prints TAP; exits 1 when a check failed.
# tests/gpu/kit.sh lists the settings; beyond them:
#   GPU_CHECK_OUT    where the report goes (default $BUILD/gpu-check)
#   GPU_CHECK_ONLY   an extended regular expression: only the groups of checks whose name
#                    matches ("hold", "row malloc", "invariant", "capholes vmm",
#                    "threads", "life fork", "framework torch-caching", ...)
#   GPU_CHECK_SKIP   an extended regular expression: the groups left out (each one skip)
#   GPU_CHECK_KINDS  the runtimes the rows of tests/real run with (default "static shared")
#   GPU_CHECK_ROOM   the free memory the ballast leaves on each device for the rows and the
#                    framework rows (default 2 GiB; over the fake, whose device bytes are host
#                    memory, 512 MiB)
#   GPU_CHECK_INVARIANT_OPS, GPU_CHECK_INVARIANT_SEEDS
#                    operations per worker of the cap-invariant test (default 1500 over the fake,
#                    300 on a GPU, where contexts take the driver tenths of a second) and its seeds
#   GPU_CHECK_PYTHON a Python with the frameworks (default $FRAMEWORKS_VENV/bin/python when that
#                    environment is complete, else python3): a framework row runs when its
#                    module imports there
#
# What a check means (docs/compatibility.md, "Real GPUs"):
#   - a program is run bare and under gpucap with a cap; both must run to their end with every
#     expectation they print holding, and print the same facts: they may differ only in the
#     memory they were given (the rows' "~" facts, which must read the device's total bare and
#     the cap under gpucap);
#   - under gpucap, no process of the run may show NVML more than its cap plus the tolerance,
#     and the device's used memory, seen from the watcher's own context, may not rise by more
#     than (processes x (cap + tolerance));
#   - the tolerance is what the driver holds for a process outside its allocations, which
#     gpucap does not charge (docs/design.md, "The cap"), measured in the same run: CONTEXTS x
#     the context of a bare process (the watcher's own, gpuwatch info), or for a row the larger
#     of that and what its bare run still held at its end (TEST_HOLD_MS: its context, modules
#     and what its libraries keep), plus one unit of the device's allocation granularity (the
#     driver's rounding of the last block).
. "$TOP/tests/gpu/kit.sh"

KIT_OUT=${GPU_CHECK_OUT:-$BUILD/gpu-check}
KIT_KINDS=${GPU_CHECK_KINDS:-static shared}
KIT_ROOM=${GPU_CHECK_ROOM:-$((2 << 30))}
[ "$KIT_DRIVER" != fake ] || KIT_ROOM=${GPU_CHECK_ROOM:-$((512 << 20))}
rm -rf "$KIT_OUT"
mkdir -p "$KIT_OUT/runs"
KIT_RECORDS="$KIT_OUT/checks.jsonl"
: > "$KIT_RECORDS"
KIT_STARTED=$(date +%s)

if ! kit_driver "$KIT_OUT"; then
  kit_record fail "the driver" "$(cat "$KIT_OUT/machine.err" 2>/dev/null)"
  KIT_NDEV=0
  . "$TOP/tests/gpu/report.sh"
  echo "Bail out! no usable $KIT_DRIVER driver (see $KIT_OUT/report.md)"
  exit 1
fi
if [ "$KIT_DRIVER" = fake ]; then
  INV_OPS=${GPU_CHECK_INVARIANT_OPS:-1500}
else
  INV_OPS=${GPU_CHECK_INVARIANT_OPS:-300}
fi
INV_SEEDS=${GPU_CHECK_INVARIANT_SEEDS:-1}
echo "# $KIT_DRIVER driver: $(json_str "$KIT_OUT/machine.json" libcuda)," \
  "$KIT_NDEV device(s): $(json_str "$KIT_OUT/machine.json" name)"
echo "# a bare process's context: $(mib "${KIT_CTX[0]}") on device 0;" \
  "granularity $(mib "${KIT_GRAN[0]}")"

# ---- The oracle's own test: what a process took, NVML and cuMemGetInfo must see. ----
# gpuhold takes 256 MiB in 8 MiB blocks and holds them for GPU_CHECK_HOLD_MS: bare, both figures
# must show at least that (the oracle is not blind) and at most that plus a context and a unit;
# under a 64 MiB cap it must get at most the cap, and the oracle must see what it got and no more
# than the cap plus the tolerance.
hold_check() {
  local d="$KIT_OUT/runs/hold" took peak rise tol
  mkdir -p "$d"
  kit_watch "$d" bare bare -- "$HOLD" take $((256 * MiB)) "$KIT_HOLD_MS"
  took=$(sed -n 's/^took //p' "$d/bare.out")
  peak=$(tree_peak "$d/bare.json" 0)
  rise=$(dev_num "$d/bare.json" 0 peak_delta_bytes)
  tol=$(tolerance 1 0)
  [ "${took:-0}" = $((256 * MiB)) ] && [ "$peak" -ge "$took" ] && [ "$peak" -le $((took + tol)) ] &&
    [ "${rise:-0}" -ge "$took" ] && [ "$rise" -le $((took + tol)) ]
  kit_check $? "hold bare: NVML and cuMemGetInfo see what a process took, and no more" "" \
    took_bytes="${took:-?}" nvml_peak_bytes="$peak" device_rise_bytes="${rise:-?}" \
    tolerance_bytes="$tol" samples="$(json_num "$d/bare.json" samples)"
  kit_watch "$d" capped capped GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off -- \
    "$HOLD" take $((256 * MiB)) "$KIT_HOLD_MS"
  took=$(sed -n 's/^took //p' "$d/capped.out")
  peak=$(tree_peak "$d/capped.json" 0)
  [ -n "$took" ] && [ "$took" -gt 0 ] && [ "$took" -le $((64 * MiB)) ] && [ "$peak" -ge "$took" ]
  kit_check $? "hold under gpucap: took at most the cap, and NVML saw what it took" "" \
    took_bytes="${took:-?}" cap_bytes=$((64 * MiB)) nvml_peak_bytes="$peak"
  judge "hold under gpucap" "$d/capped.json" 64MiB 1 1
}

# ---- The rows of tests/real, bare and under gpucap (tests/real/rows.sh). ----

# capfacts_ok DIR CAPSPEC CAPFACTS: the "~" facts of both runs as declared: the device's total
# bare (free_at_start at most that: the ballast's room is not exact) and the cap under gpucap,
# unless the row declares NAME=BARE|CAPPED. Prints the mismatches.
capfacts_ok() {
  local dir=$1 spec=$2 m line key val dev expect spec_kv bad=""
  for m in bare capped; do
    while IFS= read -r line; do
      key=${line%%=*}
      key=${key#\~}
      val=${line#*=}
      dev=$(printf '%s\n' "$key" | sed -n 's/^dev\([0-9]*\)_.*/\1/p')
      dev=${dev:-0}
      expect=""
      for spec_kv in $3; do
        if [ "${spec_kv%%=*}" = "$key" ]; then
          spec_kv=${spec_kv#*=}
          if [ $m = bare ]; then expect=${spec_kv%%|*}; else expect=${spec_kv#*|}; fi
        fi
      done
      if [ -z "$expect" ]; then
        case $key in
        *_total | total_global_mem)
          if [ $m = bare ]; then expect=${KIT_TOTAL[dev]}; else expect=$(cap_of "$spec" "$dev"); fi ;;
        free_at_start)
          if [ $m = capped ]; then
            expect=$(cap_of "$spec" "$dev")
          elif [ "$val" -le "${KIT_TOTAL[dev]}" ]; then
            expect=$val
          fi ;;
        esac
      fi
      [ -z "$expect" ] || [ "$val" = "$expect" ] || bad="$bad $m:$key=$val(want $expect)"
    done < <(grep '^~' "$dir/$m.out")
  done
  printf '%s' "$bad"
}

# row FAMILY [OPTION...]: tests/real/lib.sh's row, on the driver at hand: the program of
# FAMILY, static and shared runtime, bare (beside the ballast) and under gpucap, judged as the
# header says. mem, teardown and leaks are the fake's and are not used here.
row() {
  local family=$1 cap mem ndev procs teardown leaks pool capfacts knowns kind
  shift
  row_options "$@"
  local group="row $family"
  [ "$pool" = on ] || group="$group pool=$pool"
  kit_wanted "$group" || return 0
  for kind in $KIT_KINDS; do
    local bin="$REAL/${family}_$kind" d="$KIT_OUT/runs/$family.$pool.$kind"
    local name="$family ($kind runtime)"
    [ "$pool" = on ] || name="$family ($kind runtime, GPUCAP_POOL=$pool)"
    if [ ! -x "$bin" ]; then
      kit_skip "$name" "not built: no nvcc (or no header of its library) when the kit was built"
      continue
    fi
    if [ "$ndev" -gt "$KIT_NDEV" ]; then
      kit_skip "$name" "needs $ndev devices; this machine has $KIT_NDEV"
      continue
    fi
    mkdir -p "$d"
    kit_watch "$d" bare bare TEST_HOLD_MS=$KIT_HOLD_MS -- "$bin"
    local rc0=$?
    kit_watch "$d" capped capped GPUCAP_MEMORY_LIMIT="$cap" GPUCAP_POOL="$pool" \
      GPUCAP_REPORT=off TEST_HOLD_MS=$KIT_HOLD_MS -- "$bin"
    local rc1=$?
    local m rc bad
    for m in bare capped; do
      rc=$rc0
      [ $m = capped ] && rc=$rc1
      bad=$(failed "$d/$m.out" | paste -sd ' ' -)
      [ -z "$bad" ] && { [ "$rc" = 0 ] || { [ "$rc" = 1 ] && grep -Eq "^($known_re)=" "$d/$m.out"; }; }
      kit_check $? "$name $m: runs to its end, every expectation holds" \
        "${bad:+$bad; }$(grep -v '^Bin (' "$d/$m.err" | head -3 | paste -sd ' ' -)" \
        status="$rc" nvml_peak_bytes="$(tree_peak "$d/$m.json" 0)" \
        processes="$(tree_count "$d/$m.json" 0)" duration_ms="$(json_num "$d/$m.json" duration_ms)"
    done
    local fact why v0 v1
    while IFS=: read -r fact _ why; do
      [ -n "$fact" ] || continue
      v0=$(grep "^$fact=" "$d/bare.out")
      v1=$(grep "^$fact=" "$d/capped.out")
      [ "$v1" = "$v0" ]
      kit_todo $? "$name: $fact" "$why" bare="$v0" capped="$v1"
    done <<< "$knowns"
    local diff
    diff=$(diff <(facts "$d/bare.out") <(facts "$d/capped.out") | grep '^[<>]' | head -5 |
      paste -sd ' ' -)
    kit_check "$([ -z "$diff" ]; echo $?)" "$name: the same facts bare and under gpucap" "$diff" \
      facts="$(facts "$d/bare.out" | wc -l)"
    bad=$(capfacts_ok "$d" "$cap" "$capfacts")
    kit_check "$([ -z "$bad" ]; echo $?)" \
      "$name: sees the device's memory bare and the cap under gpucap" "$bad"
    local ends=() dev
    for dev in $(seq 0 $((KIT_NDEV - 1))); do
      ends[dev]=$(tree_settled "$d/bare.json" "$dev")
    done
    judge "$name" "$d/capped.json" "$cap" "$procs" 1 "${ends[@]}"
  done
}

# ---- The framework rows whose environment is installed (tests/frameworks). ----
kit_python

# framework NAME MODULE CAP EXPECT_OOM SCRIPT [VAR=VALUE...]: the workload of tests/frameworks
# (it checks itself that it sees the device or the cap, that its framework raises its own
# out-of-memory error, and goes on), bare and under gpucap, through tests/gpu/hold.py, which
# runs it and then holds still with the framework's caches emptied (its end figure).
framework() {
  local name=$1 module=$2 cap=$3 oom=$4 script=$5 d="$KIT_OUT/runs/framework.$1" m
  shift 5
  kit_wanted "framework $name" || return 0
  if [ -n "${SAN_PRELOAD:-}" ]; then
    kit_skip "framework $name" "not in a sanitizer build (tests/frameworks/frameworks.sh runs them there)"
    return 0
  fi
  if [ -z "$KIT_PY" ] || ! "$KIT_PY" -c "import $module" > /dev/null 2>&1; then
    kit_skip "framework $name" "no Python with $module (GPU_CHECK_PYTHON, FRAMEWORKS_VENV)"
    return 0
  fi
  mkdir -p "$d"
  kit_watch "$d" bare bare PYTHONPATH="$TOP/tests/frameworks" PYTHONDONTWRITEBYTECODE=1 \
    EXPECT_TOTAL="${KIT_TOTAL[0]}" EXPECT_OOM="${oom%%|*}" TEST_HOLD_MS=$KIT_HOLD_MS "$@" -- \
    "$KIT_PY" "$TOP/tests/gpu/hold.py" "$TOP/tests/frameworks/$script"
  local rc0=$?
  kit_watch "$d" capped capped PYTHONPATH="$TOP/tests/frameworks" PYTHONDONTWRITEBYTECODE=1 \
    EXPECT_TOTAL="$(cap_of "$cap" 0)" EXPECT_OOM="${oom#*|}" GPUCAP_MEMORY_LIMIT="$cap" \
    GPUCAP_REPORT=off TEST_HOLD_MS=$KIT_HOLD_MS "$@" -- "$KIT_PY" "$TOP/tests/gpu/hold.py" "$TOP/tests/frameworks/$script"
  local rc1=$?
  for m in bare capped; do
    local rc=$rc0
    [ $m = capped ] && rc=$rc1
    kit_check "$rc" "framework $name $m: the workload's own checks" \
      "$(grep '^not ok' "$d/$m.out" | head -3 | paste -sd ' ' -)" status="$rc" \
      nvml_peak_bytes="$(tree_peak "$d/$m.json" 0)" duration_ms="$(json_num "$d/$m.json" duration_ms)"
  done
  judge "framework $name" "$d/capped.json" "$cap" 1 1 "$(tree_settled "$d/bare.json" 0)"
}

# ---- Under gpucap only: the cap invariant and the hostile programs. ----

# program GROUP NAME CAPSPEC PROCS CONTEXTS EXPECT [VAR=VALUE...] -- COMMAND...: COMMAND under
# gpucap and the watcher (with TEST_HOLD_MS: a program that reads it holds still at its end); its own checks (TAP: every line ok; or EXPECT, a line it must print)
# and the judge's; EXPECT "-": its status alone. CONTEXTS: the most contexts one of its processes
# holds at once on a device.
program() {
  local group=$1 name=$2 spec=$3 procs=$4 contexts=$5 expect=$6 d
  shift 6
  kit_wanted "$group" || return 0
  d="$KIT_OUT/runs/$(printf '%s' "$name" | tr -c 'A-Za-z0-9.=_-' '_')"
  mkdir -p "$d"
  kit_watch "$d" capped capped GPUCAP_MEMORY_LIMIT="$spec" GPUCAP_REPORT=off \
    TEST_HOLD_MS=$KIT_HOLD_MS "$@"
  local rc=$? st=0 bad="" skips
  if [ "$expect" = TAP ]; then
    bad=$(grep '^not ok' "$d/capped.out" | head -3 | paste -sd ' ' -)
    grep -q '^1\.\.[0-9]' "$d/capped.out" && [ -z "$bad" ] && [ "$rc" = 0 ] || st=1
  elif [ "$expect" != - ]; then
    grep -qx "$expect" "$d/capped.out" && [ "$rc" = 0 ] || st=1
  else
    [ "$rc" = 0 ] || st=1
  fi
  skips=$(grep -c '# SKIP' "$d/capped.out")
  kit_check "$st" "$name: runs to its end, its own checks hold" \
    "${bad:-$(grep -v '^Bin (' "$d/capped.err" | head -3 | paste -sd ' ' -)}" status="$rc" \
    checks="$(grep -c '^ok' "$d/capped.out")" skipped="$skips" \
    duration_ms="$(json_num "$d/capped.json" duration_ms)"
  judge "$name" "$d/capped.json" "$spec" "$procs" "$contexts"
}

# The cap invariant (tests/reliability/invariant.sh): 4 workers, each with a created context per
# device beside the primary one, every allocation family, tight caps.
invariant_checks() {
  local mode seed backing=0
  [ "$KIT_DRIVER" = fake ] && backing=1
  for mode in on regions off; do
    for seed in $(seq 1 "$INV_SEEDS"); do
      program invariant "invariant pool=$mode seed $seed" 0:24MiB,1:16MiB 1 5 TAP \
        GPUCAP_POOL=$mode GPUCAP_RELEASE_AFTER=1 -- \
        "$TESTBIN/reliability/invariant" 4 "$INV_OPS" "$seed" $((24 * MiB)) $((16 * MiB)) "$backing"
    done
  done
}

# Ways past the cap (tests/reliability/holes.sh: VMM released early, retained, imported again;
# other devices' pools and streams; contexts destroyed and reset; frees pending on a stream;
# pitch; two threads freeing one block). getinfo-v1's checks are the fake's 16 GiB device's.
scenario() {
  local name=$1 cap0=$2 cap1=$3 spec=""
  shift 3
  [ "$name" = getinfo-v1 ] && return 0
  if [ "$name" = pool-device ] || [ "$name" = stream-device ]; then
    if [ "$KIT_NDEV" -lt 2 ]; then
      kit_wanted "capholes $name" && kit_skip "capholes $name" "needs 2 devices; this machine has $KIT_NDEV"
      return 0
    fi
  fi
  [ "$cap0" = - ] || spec="0:$cap0"
  [ "$cap1" = - ] || spec="${spec:+$spec,}1:$cap1"
  program "capholes $name" "capholes $name" "$spec" 1 2 TAP "$@" -- \
    "$TESTBIN/reliability/capholes" "$name"
}

# ---- The run ----
kit_wanted hold && hold_check

# The ballast, for the rows and the framework rows: their programs fill what they are given.
kit_ballast_start "$KIT_ROOM" "$KIT_OUT"
kit_check $? "ballast: every device left with $(mib "$KIT_ROOM") free for the bare runs" \
  "$(paste -sd ' ' "$KIT_OUT/ballast.out" "$KIT_OUT/ballast.err")" room_bytes="$KIT_ROOM"
. "$TOP/tests/real/rows.sh"
program_rows
library_rows
framework torch-caching torch $((1 << 30)) OutOfMemoryError torch_workload.py
framework torch-async torch $((1 << 30)) OutOfMemoryError torch_workload.py \
  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
framework torch-expandable torch $((1 << 30)) OutOfMemoryError torch_workload.py \
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
framework cupy-pool cupy $((256 << 20)) - cupy_workload.py CUPY_MODE=pool
framework cupy-async cupy $((256 << 20)) - cupy_workload.py CUPY_MODE=async
kit_ballast_stop

invariant_checks
. "$TOP/tests/reliability/holes.sh"
hole_scenarios
# Many threads allocating and freeing (and exporting over IPC with the region pool) at once.
program threads "threads (VMM pool)" 256MiB 1 1 TAP -- "$TESTBIN/threads" 4 3000 noipc
program threads "threads (region pool, IPC exports)" 256MiB 1 1 TAP GPUCAP_POOL=regions -- \
  "$TESTBIN/threads" 4 3000
# fork while 4 threads in their own contexts allocate under a tight cap (the driver's fork
# handlers run before gpucap's); a parent without CUDA whose forked workers allocate.
program "life fork" "life fork: 200 forks while 4 threads allocate" 32MiB 1 5 "forked 200" -- \
  "$TESTBIN/life" fork 200
program "life workers" "life workers: 3 forked workers allocate" 32MiB 3 1 - -- \
  "$TESTBIN/life" workers 3

echo "# $(($(date +%s) - KIT_STARTED)) s"
. "$TOP/tests/gpu/report.sh"
echo "# report: $KIT_OUT/report.md, $KIT_OUT/report.json"
done_testing
