# The GPU kit's common part (sourced by tests/gpu/check.sh, bench.sh and dryrun.sh; needs BUILD
# and TOP, as make's test environment gives them): the driver to run on, the watcher, the
# programs' environment, and the checks' records that become the report.
#
# GPU_CHECK_DRIVER   real (default): the libcuda.so.1 and libnvidia-ml.so.1 the loader finds
#                    (build/fakecuda is taken off LD_LIBRARY_PATH); fake: the fakes in
#                    build/fakecuda, every process on one fake machine (FAKECUDA_MACHINE) so that
#                    NVML and cuMemGetInfo see all of them, as on a GPU
# GPU_CHECK_FAKE_DEVICES, GPU_CHECK_FAKE_MEMORY
#                    the fake machine's devices (default 1, like the H200 machines lent) and the
#                    memory of each (default 4GiB)
# GPU_CHECK_SHIM     the library preloaded as gpucap (default build/libgpucap.so)
# GPU_CHECK_INTERVAL the watcher's sampling interval in microseconds (default 1000)
# GPU_CHECK_TIMEOUT  seconds one watched run may take before it is killed (default 120)
# GPU_CHECK_HOLD_MS  how long a program holds still at its end (TEST_HOLD_MS) for the watcher
#                    to measure what it holds then (default 300; the watcher's settle time is
#                    half of it)
# GPU_CHECK_DEADLINE a time (seconds since the epoch) after which no new check starts: the ones
#                    left are skipped, saying so, and the report is still written
. "$TOP/tests/real/lib.sh"

KIT_DRIVER=${GPU_CHECK_DRIVER:-real}
KIT_BIN="$BUILD/tests/gpu"
WATCH="$KIT_BIN/gpuwatch"
HOLD="$KIT_BIN/gpuhold"
KIT_SHIM=${GPU_CHECK_SHIM:-$SHIM}
KIT_INTERVAL=${GPU_CHECK_INTERVAL:-1000}
KIT_TIMEOUT=${GPU_CHECK_TIMEOUT:-120}
KIT_HOLD_MS=${GPU_CHECK_HOLD_MS:-300}
KIT_MACHINE=""
KIT_BALLAST=""
MiB=$((1 << 20))
# Under ASan: host memory the closed libraries leak themselves is not the kit's to judge.
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$TOP/tests/real/lsan.supp"

# kit_cleanup: stops the ballast and removes the fake machine's ledger (run at exit).
kit_cleanup() {
  kit_ballast_stop
  [ -z "$KIT_MACHINE" ] || rm -f "/dev/shm/fakecuda.$(id -u).$KIT_MACHINE"
}
trap 'kit_cleanup; rm -rf "$WORK"' EXIT

# kit_driver OUTDIR: sets the driver up and describes the machine into OUTDIR/machine.json
# (gpuwatch info): KIT_NDEV devices, and per device KIT_TOTAL (bytes cuMemGetInfo_v2 reports),
# KIT_GRAN (the VMM allocation granularity) and KIT_CTX (what a bare process's context costs
# there: the larger of NVML's figure for the watcher itself and the rise of the device's used
# memory when it made its context). Returns 1, saying why on stderr, when the driver found is
# not the one asked for or cannot be used.
kit_driver() {
  local out=$1 fake
  case $KIT_DRIVER in
  fake)
    KIT_MACHINE="gpucheck.$$.$RANDOM"
    export FAKECUDA_MACHINE=$KIT_MACHINE FAKECUDA_DEVICES=${GPU_CHECK_FAKE_DEVICES:-1} \
      FAKECUDA_MEMORY=${GPU_CHECK_FAKE_MEMORY:-4GiB} FAKECUDA_BACKING=1
    export LD_LIBRARY_PATH="$FAKE_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    ;;
  real)
    unset FAKECUDA_BACKING
    LD_LIBRARY_PATH=$(printf '%s\n' "${LD_LIBRARY_PATH:-}" | tr ':' '\n' | grep -v "^$FAKE_DIR\$" |
      grep -v '^$' | paste -sd: -)
    export LD_LIBRARY_PATH
    ;;
  *)
    echo "gpu-check: error: GPU_CHECK_DRIVER='$KIT_DRIVER': real or fake" >&2
    return 1
    ;;
  esac
  if ! "$WATCH" info > "$out/machine.json" 2> "$out/machine.err"; then
    sed 's/^/gpu-check: /' "$out/machine.err" >&2
    return 1
  fi
  fake=$(json_bool "$out/machine.json" fake)
  if [ "$KIT_DRIVER" = real ] && [ "$fake" = true ]; then
    echo "gpu-check: error: GPU_CHECK_DRIVER=real, but the loader found gpucap's fake driver" \
      "($(json_str "$out/machine.json" libcuda)); take build/fakecuda off LD_LIBRARY_PATH" >&2
    return 1
  fi
  if [ "$KIT_DRIVER" = fake ] && [ "$fake" != true ]; then
    echo "gpu-check: error: GPU_CHECK_DRIVER=fake, but the loader found" \
      "$(json_str "$out/machine.json" libcuda)" >&2
    return 1
  fi
  kit_machine "$out/machine.json"
}

# kit_machine FILE: KIT_NDEV, KIT_TOTAL, KIT_GRAN and KIT_CTX from a machine's description.
kit_machine() {
  local d
  KIT_NDEV=$(grep -c '"ordinal":' "$1")
  KIT_TOTAL=() KIT_GRAN=() KIT_CTX=()
  for d in $(seq 0 $((KIT_NDEV - 1))); do
    KIT_TOTAL[d]=$(dev_num "$1" "$d" total_bytes)
    KIT_GRAN[d]=$(dev_num "$1" "$d" granularity_bytes)
    KIT_CTX[d]=$(larger "$(dev_num "$1" "$d" context_nvml_bytes)" \
      "$(dev_num "$1" "$d" context_rise_bytes)")
  done
}

# ---- The judgement of a capped run ----

# tolerance CONTEXTS DEV [END]: the bytes a process may show NVML beyond its cap on DEV.
tolerance() {
  local c=$((${1} * KIT_CTX[$2]))
  c=$(larger "$c" "${3:-0}")
  echo $((c + KIT_GRAN[$2]))
}

# judge NAME FILE CAPSPEC PROCS CONTEXTS [END...]: the checks of a capped run from the watcher's
# FILE, for each device whose cap CAPSPEC names: NVML's figure of each process of the run within
# the cap plus the tolerance (on device 0 NVML must have listed the run: else the oracle is
# blind), and the device's rise within PROCS x (cap + tolerance). END: the bare run's end
# figure per device (rows).
judge() {
  local name=$1 file=$2 spec=$3 procs=$4 contexts=$5 d cap tol peak n rise st end
  local ends=("${@:6}")
  for d in $(seq 0 $((KIT_NDEV - 1))); do
    cap=$(cap_of "$spec" "$d")
    [ -n "$cap" ] || continue
    end=()
    [ -z "${ends[d]:-}" ] || end=(bare_end_bytes="${ends[d]}")
    tol=$(tolerance "$contexts" "$d" "${ends[d]:-0}")
    peak=$(tree_peak "$file" "$d")
    n=$(tree_count "$file" "$d")
    st=0
    [ "$peak" -le $((cap + tol)) ] || st=1
    [ "$d" != 0 ] || [ "$n" -gt 0 ] || st=1
    kit_check "$st" "$name: NVML's per-process figure within the cap (device $d)" \
      "$([ "$n" -gt 0 ] || echo "NVML listed no process of the run on device $d, and" \
        "$(grep '"kind": "foreign"' "$file" | grep -c "\"device\": $d,") others" \
        "(another pid namespace, or a run too short to be seen?)")" \
      nvml_peak_bytes="$peak" cap_bytes="$cap" tolerance_bytes="$tol" processes="$n" \
      contexts="$contexts" "${end[@]}" samples="$(json_num "$file" samples)" \
      max_gap_us="$(json_num "$file" max_gap_us)"
    rise=$(dev_num "$file" "$d" peak_delta_bytes)
    [ -n "$rise" ] && [ "$rise" -le $((procs * (cap + tol))) ]
    kit_check $? "$name: the device's used memory, from a second process, within the cap (device $d)" \
      "" device_rise_bytes="${rise:-?}" cap_bytes="$cap" tolerance_bytes="$tol" procs="$procs"
  done
}

# json_bool FILE KEY, json_str FILE KEY: the first true/false or string value of "KEY":.
json_bool() {
  grep -o "\"$2\": *[a-z]*" "$1" | head -n 1 | sed 's/.*: *//'
}
json_str() {
  grep -o "\"$2\": *\"[^\"]*\"" "$1" | head -n 1 | sed 's/.*: *"//; s/"$//'
}

# dev_num FILE DEV KEY: KEY of device DEV in a watcher file (info or run).
dev_num() {
  grep "\"ordinal\": $2," "$1" | grep -o "\"$3\": *[0-9]*" | sed 's/.*: *//'
}

larger() {
  if [ "${1:-0}" -ge "${2:-0}" ]; then echo "${1:-0}"; else echo "${2:-0}"; fi
}

# tree_figures FILE DEV: "PEAK SETTLED" for each process of the watched command's tree that NVML
# listed on device DEV (SETTLED -1: never held still for the watcher's settle time).
tree_figures() {
  grep '"kind": "tree"' "$1" 2>/dev/null | grep "\"device\": $2," |
    sed 's/.*"peak_bytes": \([0-9]*\), "settled_bytes": \(-\{0,1\}[0-9]*\).*/\1 \2/'
}

# tree_peak FILE DEV: the highest NVML figure of any process of the tree on DEV (0: none listed).
tree_peak() {
  tree_figures "$1" "$2" | awk '$1 > m { m = $1 } END { print m + 0 }'
}

# tree_settled FILE DEV: the highest settled figure of the tree's processes on DEV (-1: none).
tree_settled() {
  tree_figures "$1" "$2" | awk 'BEGIN { m = -1 } $2 > m { m = $2 } END { print m }'
}

# tree_count FILE DEV: how many processes of the tree NVML listed on DEV.
tree_count() {
  tree_figures "$1" "$2" | wc -l
}

# kit_watch DIR TAG bare|capped [VAR=VALUE...] -- COMMAND...: runs COMMAND in DIR under the
# watcher, bare or with gpucap preloaded (after the sanitizer runtime of a sanitized build), with
# the settings given; its output in DIR/TAG.out and .err, the watcher's figures in DIR/TAG.json.
# Returns the command's status (124 when it ran past GPU_CHECK_TIMEOUT and was killed).
kit_watch() {
  local dir=$1 tag=$2 how=$3 pre=${SAN_PRELOAD:-}
  local vars=()
  shift 3
  while [ "$1" != -- ]; do
    vars+=("$1")
    shift
  done
  shift
  [ "$how" = capped ] && pre="${pre:+$pre }$KIT_SHIM"
  (cd "$dir" && timeout -s TERM "$KIT_TIMEOUT" "$WATCH" run -i "$KIT_INTERVAL" \
    -s $((KIT_HOLD_MS / 2)) -o "$dir/$tag.json" -- env LD_PRELOAD="$pre" "${vars[@]}" "$@" > "$dir/$tag.out" \
    2> "$dir/$tag.err")
}

# kit_ballast_start ROOM DIR: the ballast (gpuhold leave): every device left with ROOM bytes free
# until kit_ballast_stop. Returns 1 when it did not get ready.
kit_ballast_start() {
  LD_PRELOAD="${SAN_PRELOAD:-}" "$HOLD" leave "$1" > "$2/ballast.out" 2> "$2/ballast.err" &
  KIT_BALLAST=$!
  await "$2/ballast.out" ready
  grep -q ready "$2/ballast.out"
}

kit_ballast_stop() {
  [ -n "$KIT_BALLAST" ] || return 0
  kill -TERM "$KIT_BALLAST" 2>/dev/null
  wait "$KIT_BALLAST" 2>/dev/null
  KIT_BALLAST=""
}

# ---- The checks' records ----
# Each check is one TAP line and one record in $KIT_RECORDS (a JSON object a line: name, status
# pass|fail|skip|todo, holds for a todo, figures, detail), from which kit_report writes the
# report. Figures are KEY=VALUE words: numbers stay numbers; KEY_bytes are shown in MiB.

# kit_figures KEY=VALUE...: the JSON object of the figures.
kit_figures() {
  local kv sep="" out="{"
  for kv in "$@"; do
    case ${kv#*=} in
    '' | *[!0-9-]* | -) out="$out$sep$(jstr "${kv%%=*}"): $(jstr "${kv#*=}")" ;;
    *) out="$out$sep$(jstr "${kv%%=*}"): ${kv#*=}" ;;
    esac
    sep=", "
  done
  echo "$out}"
}

# jstr TEXT: TEXT as a JSON string (control characters become spaces).
jstr() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "$(printf '%s' "$s" | tr '\000-\037' ' ')"
}

# kit_record STATUS NAME DETAIL [KEY=VALUE...]: one record (no TAP line).
kit_record() {
  local status=$1 name=$2 detail=$3
  shift 3
  printf '{"name": %s, "status": "%s", "figures": %s, "detail": %s}\n' "$(jstr "$name")" \
    "$status" "$(kit_figures "$@")" "$(jstr "$detail")" >> "$KIT_RECORDS"
}

# kit_check STATUS NAME DETAIL [KEY=VALUE...]: a check that passes when STATUS is 0.
kit_check() {
  local st=$1 name=$2 detail=$3
  shift 3
  ok "$st" "$name"
  if [ "$st" = 0 ]; then
    kit_record pass "$name" "$detail" "$@"
  else
    kit_record fail "$name" "$detail" "$@"
    [ -z "$detail" ] || printf '#   %s\n' "$detail"
    [ $# = 0 ] || printf '#   figures: %s\n' "$*"
  fi
}

# kit_skip NAME REASON
kit_skip() {
  skip "$1" "$2"
  kit_record skip "$1" "$2"
}

# kit_todo HOLDS NAME REASON [KEY=VALUE...]: an expectation known to fail (HOLDS 0: it held).
kit_todo() {
  local holds=$1 name=$2 why=$3
  shift 3
  tap_n=$((tap_n + 1))
  echo "$([ "$holds" = 0 ] || echo 'not ')ok $tap_n - $name # TODO $why"
  kit_record todo "$name" "$why" holds="$([ "$holds" = 0 ] && echo true || echo false)" "$@"
}

# kit_python: KIT_PY, the Python of the framework rows and the training step: GPU_CHECK_PYTHON,
# else the frameworks' environment when complete (FRAMEWORKS_VENV), else python3 (maybe none).
kit_python() {
  KIT_PY=${GPU_CHECK_PYTHON:-}
  [ -z "$KIT_PY" ] || return 0
  if [ -n "${FRAMEWORKS_VENV:-}" ] && [ -f "$FRAMEWORKS_VENV/.complete" ]; then
    KIT_PY="$FRAMEWORKS_VENV/bin/python"
  else
    KIT_PY=$(command -v python3 || true)
  fi
}

# kit_time_left: whether GPU_CHECK_DEADLINE (if set) is still ahead.
kit_time_left() {
  [ -z "${GPU_CHECK_DEADLINE:-}" ] || [ "$(date +%s)" -lt "$GPU_CHECK_DEADLINE" ]
}

# kit_wanted GROUP: whether the group of checks GROUP ("row malloc", "invariant", ...) is to run:
# it matches GPU_CHECK_ONLY (an extended regular expression; all when unset), does not match
# GPU_CHECK_SKIP (one skip, saying so, when it does) and time is left.
kit_wanted() {
  if [ -n "${GPU_CHECK_ONLY:-}" ] && ! printf '%s\n' "$1" | grep -Eq -- "$GPU_CHECK_ONLY"; then
    return 1
  fi
  if [ -n "${GPU_CHECK_SKIP:-}" ] && printf '%s\n' "$1" | grep -Eq -- "$GPU_CHECK_SKIP"; then
    kit_skip "$1" "left out (GPU_CHECK_SKIP)"
    return 1
  fi
  kit_time_left && return 0
  kit_skip "$1" "GPU_CHECK_DEADLINE passed before it could start"
  return 1
}

# mib BYTES: BYTES in MiB with one decimal.
mib() {
  awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'
}
