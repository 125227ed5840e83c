# Shared helpers for gpucap's integration tests (sourced; needs BUILD and TOP from make).
# Programs run over the fake driver in build/fakecuda, with the shim preloaded after the
# sanitizer runtime when the build is sanitized.
. "$TOP/tests/tap.sh"

FAKE_DIR="$BUILD/fakecuda"
SHIM="$BUILD/libgpucap.so"
TESTBIN="$BUILD/tests"
REQUESTS="$TOP/tests/fakecuda/cudart-probe-gpa-requests.txt"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpucap-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# Clear gpucap's and the fake's settings so the caller's environment cannot leak in.
for v in $(env | sed -n 's/^\(GPUCAP_[A-Z_]*\|FAKECUDA_[A-Z_]*\|TF_FORCE_GPU_ALLOW_GROWTH\)=.*/\1/p'); do
  unset "$v"
done

preload() {
  if [ -n "${SAN_PRELOAD:-}" ]; then
    echo "$SAN_PRELOAD $SHIM"
  else
    echo "$SHIM"
  fi
}

# with_shim CMD...: runs CMD over the fake driver with the shim preloaded.
with_shim() {
  LD_LIBRARY_PATH="$FAKE_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LD_PRELOAD="$(preload)" "$@"
}

# without_shim CMD...: the same, fake driver only (the sanitizer runtime still first, for
# programs not built with it, such as those built against NVIDIA's runtime).
without_shim() {
  LD_LIBRARY_PATH="$FAKE_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    LD_PRELOAD="${SAN_PRELOAD:-}${SAN_PRELOAD:+${LD_PRELOAD:+ }}${LD_PRELOAD:-}" "$@"
}

# await FILE TEXT: waits until FILE holds TEXT (at most a minute: a bound for hangs, not a timing).
await() {
  i=0
  while ! grep -q "$2" "$1" 2>/dev/null && [ $i -lt 1200 ]; do
    sleep 0.05
    i=$((i + 1))
  done
}

# wait_all PIDS: waits for each of the background processes PIDS; $bad: how many failed.
wait_all() {
  bad=0
  for p in $1; do
    wait "$p" || bad=$((bad + 1))
  done
}

# procs_of OUTPUT: the "proc PID BYTES" lines of an NVML tool's output as "PID BYTES", sorted.
procs_of() {
  printf '%s\n' "$1" | sed -n 's/^proc \([0-9]*\) \([0-9]*\)$/\1 \2/p' | sort
}

# each_holding PIDS BYTES: "PID BYTES" for each of PIDS, sorted (what procs_of should say).
each_holding() {
  for p in $1; do echo "$p $2"; done | sort
}

# stress_start [PREFIX]: the shared machine's stress (tests/fakecuda/machine_worker.c, $worker):
# a victim allocating without end, then four workers of four threads each started together
# (each waits until NVML lists all five), the victim killed with kill -9 in the middle of
# allocating; one check that SIGKILL ended it. PREFIX (a function such as one that preloads
# gpucap and execs) runs each process. Outputs in $WORK/victim.out, $WORK/stress{1..4}.*.
stress_start() {
  "$@" "$worker" loop 99 >"$WORK/victim.out" 2>&1 &
  victim=$!
  await "$WORK/victim.out" running
  stress_pids=
  mkfifo "$WORK/gs"
  for i in 1 2 3 4; do
    FAKECUDA_STATS="$WORK/stress$i.json" "$@" "$worker" stress "$i" 400 5 <"$WORK/gs" \
      >"$WORK/stress$i.out" 2>"$WORK/stress$i.err" &
    stress_pids="$stress_pids $!"
  done
  exec 4>"$WORK/gs" # they start now; each waits until NVML lists all five (the victim included)
  for i in 1 2 3 4; do
    await "$WORK/stress$i.out" started
  done
  kill -9 "$victim"
  wait "$victim" 2>/dev/null
  is $? 137 "the victim was killed by SIGKILL while allocating"
  for i in 1 2 3 4; do
    await "$WORK/stress$i.out" 'stress ok'
  done
}

# stress_finish DESCRIPTION: lets the four workers end (each kept its context, so stayed listed
# in NVML, until all four were done), one check that all passed their own checks, their output
# as comments; sets $stress_peak (the highest machine peak their reports saw), $stress_oom
# (allocations refused) and $stress_reclaimed (dead slots the fake reclaimed).
stress_finish() {
  exec 4>&-
  wait_all "$stress_pids"
  is "$bad" 0 "$1"
  cat "$WORK"/stress?.out | sed 's/^/# /'
  [ "$bad" -eq 0 ] || sed 's/^/# /' "$WORK"/stress?.err
  stress_peak=0
  stress_oom=0
  stress_reclaimed=0
  for i in 1 2 3 4; do
    p=$(json_num "$WORK/stress$i.json" machine_peak_bytes)
    [ "${p:-0}" -gt "$stress_peak" ] && stress_peak=$p
    r=$(json_num "$WORK/stress$i.json" machine_reclaimed)
    stress_reclaimed=$((stress_reclaimed + ${r:-0}))
    o=$(sed -n 's/.*oom=\([0-9]*\).*/\1/p' "$WORK/stress$i.out")
    stress_oom=$((stress_oom + ${o:-0}))
  done
}

# json_num FILE KEY: the first numeric value of "KEY": in FILE (flat JSON written by the fake).
json_num() {
  grep -o "\"$2\": *-\{0,1\}[0-9][0-9]*" "$1" | head -n 1 | sed 's/.*: *//'
}

# peak_within STATS CAP [PREFIX]: one check that the fake driver's peak (its FAKECUDA_STATS file
# STATS) never passed CAP bytes, its text led by PREFIX.
peak_within() {
  local peak
  peak=$(json_num "$1" peak_bytes)
  [ -n "$peak" ] && [ "$peak" -le "$2" ]
  ok $? "${3:-}the driver's peak ($peak bytes) never passed the cap"
}

# json_obj_num FILE OBJECT KEY: the numeric "KEY" inside the first "OBJECT": { ... }.
json_obj_num() {
  tr -d '\n' < "$1" | grep -o "\"$2\": *{[^}]*}" | head -n 1 | grep -o "\"$3\": *[0-9][0-9]*" \
    | sed 's/.*: *//'
}

# report_sides DESC DIR ESTATUS ISTATUS: the output of the two sides of a two-process exchange
# (DIR/e.out and e.err: the exporter; i.out and i.err: the importer), each side one check.
report_sides() {
  sed 's/^/    /' "$2/e.out"
  sed 's/^/# exporter stderr: /' "$2/e.err" | head -5
  ok "$3" "$1: the exporter's checks"
  sed 's/^/    /' "$2/i.out"
  sed 's/^/# importer stderr: /' "$2/i.err" | head -5
  ok "$4" "$1: the importer's checks"
}

# Runs a nested TAP program and folds its result into one check of this script.
tap_program() {
  desc=$1
  shift
  out=$("$@" 2>"$WORK/stderr")
  status=$?
  printf '%s\n' "$out" | sed 's/^/    /'
  if [ -s "$WORK/stderr" ]; then
    sed 's/^/# stderr: /' "$WORK/stderr" | head -20
  fi
  ok "$status" "$desc"
}
