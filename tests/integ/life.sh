#!/usr/bin/env bash
# The ends of a process's life under gpucap, judged from outside: timeouts catch hangs (each
# race is run many times), and the files written, the exit statuses and other processes say
# what happened. tests/integ/life.c is the program; see docs/design.md ("Process exit, fork,
# signals") for what each check stands for.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

LIFE="$TESTBIN/life"
LINKED="$TESTBIN/lifelinked"
# Each race is run RUNS times (twice that for the cheap ones); under TSan, which is there to find
# data races rather than to reproduce hangs, fewer.
case "${SAN_PRELOAD:-}" in
*tsan*) RUNS=${LIFE_RUNS:-3} ;;
*) RUNS=${LIFE_RUNS:-10} ;;
esac

# valid_report FILE: gpucap report reads FILE (a JSON exit report).
valid_report() {
  ASAN_OPTIONS=detect_leaks=0 "$BUILD/gpucap" report "$1" >/dev/null 2>&1
}

# ---- fork: no deadlock with the driver's own fork handlers ----
# Four threads in contexts of their own grow, fail and trim pools under a tight cap (driver
# calls made with a pool lock held) while the main thread forks. The driver registers its
# pthread_atfork handlers when the program dlopen()s it, after gpucap's constructor, so its
# prepare handler runs first and holds its lock while gpucap's handlers run.
hung=0
forked=0
for i in $(seq "$RUNS"); do
  out=$(GPUCAP_MEMORY_LIMIT=32MiB GPUCAP_REPORT=off with_shim timeout 60 "$LIFE" fork 200 \
    2>/dev/null)
  rc=$?
  [ "$rc" -eq 124 ] && hung=$((hung + 1))
  [ "$out" = "forked 200" ] && forked=$((forked + 1))
done
is "$hung" 0 "fork stress: no run hung ($RUNS runs of 200 forks while threads trim pools)"
is "$forked" "$RUNS" "fork stress: every run forked 200 children and ended normally"

# ---- exit while other threads allocate: the report is always written, never silently cut --
missing=0
invalid=0
for i in $(seq "$((2 * RUNS))"); do
  rm -f "$WORK/busy.json"
  GPUCAP_MEMORY_LIMIT=32MiB GPUCAP_REPORT=off GPUCAP_REPORT_JSON="$WORK/busy.json" \
    with_shim timeout 60 "$LIFE" busyexit >/dev/null 2>&1
  if [ ! -s "$WORK/busy.json" ]; then
    missing=$((missing + 1))
  elif ! valid_report "$WORK/busy.json" || ! grep -q '"complete": true' "$WORK/busy.json" &&
    ! grep -q 'are left out: their list was in use\|left out, its pool was in use' \
      "$WORK/busy.json"; then
    invalid=$((invalid + 1))
  fi
done
is "$missing" 0 "exit while 4 threads allocate: the JSON report is written ($((2 * RUNS)) runs)"
is "$invalid" 0 "and it is valid, complete or saying which pools it left out"

# ---- a signal handler calls exit() while the trace is being written ----
# The trace goes to a FIFO that nobody reads, so the program blocks in a write made with the
# trace's lock held; once it does (the kernel says it waits in pipe_write, or in the write
# system call), SIGALRM's handler calls exit() on that very thread. (Under TSan the fake
# driver's destructors, which free memory, its VMM state included, are reported as unsafe in a
# signal handler: the program's doing. gpucap's exit path is not excused.)
mkfifo "$WORK/fifo"
sleep 120 <"$WORK/fifo" >/dev/null 2>&1 &
reader=$!
printf 'signal:fk_%s_teardown\n' mem stream vmm >"$WORK/tsan.supp"
GPUCAP_TRACE="$WORK/fifo" GPUCAP_REPORT=off GPUCAP_REPORT_JSON="$WORK/sig.json" \
  TSAN_OPTIONS="suppressions=$WORK/tsan.supp" LD_LIBRARY_PATH="$FAKE_DIR" \
  LD_PRELOAD="$(preload)" timeout 60 "$LINKED" sigexit >/dev/null 2>"$WORK/sig.err" &
waiter=$!
write_nr=$([ "$(uname -m)" = aarch64 ] && echo 64 || echo 1)
pid=
for i in $(seq 1000); do
  pid=$(pgrep -P "$waiter" | head -n 1)
  [ -n "$pid" ] && grep -qs pipe_write "/proc/$pid/wchan" && break
  [ -n "$pid" ] && [ "$(cut -d' ' -f1 "/proc/$pid/syscall" 2>/dev/null)" = "$write_nr" ] && break
  sleep 0.02
done
[ -n "$pid" ] && kill -ALRM "$pid"
wait "$waiter"
is "$?" 0 "exit() from a signal handler that interrupted the trace's write does not hang"
kill "$reader" 2>/dev/null
wait "$reader" 2>/dev/null
grep -q 'GPUCAP_TRACE: its last [0-9]* events were not written: the trace was in use' \
  "$WORK/sig.json" && grep -q '"complete": false' "$WORK/sig.json"
ok $? "the report is written and says what the trace lost"

# ---- full disk: never a silently cut file ----
# A file size limit (RLIMIT_FSIZE, SIGXFSZ ignored) cuts the trace after 16 KiB.
(
  trap '' XFSZ
  ulimit -f 16
  GPUCAP_TRACE="$WORK/cut.csv" GPUCAP_REPORT=off GPUCAP_REPORT_JSON="$WORK/cut.json" \
    with_shim "$LIFE" many 3000 2>"$WORK/cut.err"
)
size=$(stat -c %s "$WORK/cut.csv")
[ "$size" -gt 0 ] && [ "$size" -le 16384 ] && [ "$(tail -c 1 "$WORK/cut.csv" | od -An -c | tr -d ' ')" = '\n' ]
ok $? "a trace over the file size limit ends at its last whole line ($size bytes)"
lines=$(($(wc -l <"$WORK/cut.csv") - 1))
# The same run uncut: its rows (6000 events and the pool's reserve rows) are what the cut one lost.
GPUCAP_TRACE="$WORK/uncut.csv" GPUCAP_REPORT=off with_shim "$LIFE" many 3000 2>/dev/null
total=$(($(wc -l <"$WORK/uncut.csv") - 1))
grep -q "GPUCAP_TRACE: cannot write '$WORK/cut.csv': File too large" "$WORK/cut.err"
ok $? "one warning says so"
is "$(grep -c 'warning' "$WORK/cut.err")" 1 "only one"
grep -q "GPUCAP_TRACE: writing failed at .* (File too large): the file ends there; $((total - lines)) events were left out" "$WORK/cut.json"
ok $? "the report notes it, with the $((total - lines)) events left out"
ASAN_OPTIONS=detect_leaks=0 "$BUILD/gpucap" plot "$WORK/cut.csv" -o "$WORK/cut.svg" 2>/dev/null
ok $? "gpucap plot reads the trace"
# A report larger than the limit is left empty, with a warning, rather than cut.
(
  trap '' XFSZ
  ulimit -f 1
  GPUCAP_REPORT_JSON="$WORK/big.json" GPUCAP_REPORT="$WORK/big.txt" with_shim "$LIFE" many 30 \
    2>"$WORK/big.err"
)
is "$(stat -c %s "$WORK/big.json")" 0 "a JSON report over the file size limit is left empty"
grep -q "GPUCAP_REPORT_JSON: cannot write '$WORK/big.json': File too large" "$WORK/big.err"
ok $? "with a warning naming it"
GPUCAP_REPORT_JSON=/dev/full with_shim "$LIFE" many 3 2>"$WORK/full.err" >/dev/null
grep -q "GPUCAP_REPORT_JSON: cannot write '/dev/full': No space left on device" "$WORK/full.err"
ok $? "a full device (/dev/full): a warning"
# A really full filesystem, where one can be mounted (root).
mkdir "$WORK/tiny"
if mount -t tmpfs -o size=48k tmpfs "$WORK/tiny" 2>/dev/null; then
  GPUCAP_TRACE="$WORK/tiny/t.csv" GPUCAP_REPORT=off with_shim "$LIFE" many 3000 2>"$WORK/tiny.err"
  [ "$(tail -c 1 "$WORK/tiny/t.csv" | od -An -c | tr -d ' ')" = '\n' ] &&
    grep -q "GPUCAP_TRACE: cannot write '$WORK/tiny/t.csv': No space left on device" \
      "$WORK/tiny.err"
  ok $? "a full tmpfs: the trace ends at a whole line, and a warning says why"
  umount "$WORK/tiny"
else
  skip "a full tmpfs" "mounting a tmpfs needs root"
fi

# ---- exec: the buffered trace is written before the image is replaced ----
GPUCAP_TRACE="$WORK/exec.csv" GPUCAP_REPORT=off with_shim "$LIFE" exec 100
is "$(grep -c -e ',alloc,' -e ',free,' "$WORK/exec.csv")" 200 \
  "exec: the trace holds all 200 events"

# ---- forked workers of a parent that never used CUDA report like any process ----
mkdir "$WORK/workers"
GPUCAP_REPORT="$WORK/workers/r-%p.txt" GPUCAP_REPORT_JSON="$WORK/workers/j-%p.json" \
  GPUCAP_TRACE="$WORK/workers/t-%p.csv" with_shim "$LIFE" workers 3
is "$(ls "$WORK/workers" | grep -c '^j-')" 3 "3 workers: 3 JSON reports"
is "$(ls "$WORK/workers" | grep -c '^r-')" 3 "3 reports"
is "$(ls "$WORK/workers" | grep -c '^t-')" 3 "3 traces"
ok=0
for j in "$WORK"/workers/j-*.json; do
  valid_report "$j" && grep -q '"num_allocs": [1-9]' "$j" || ok=1
done
ok "$ok" "each a valid report of that worker's allocations"

# ---- IPC exports: a process that exits while threads export (its server thread answering)
# exits cleanly and leaves nothing behind: no file, no socket ----
left=0
for pool in vmm regions; do
  for i in $(seq "$RUNS"); do
    GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off LD_LIBRARY_PATH="$FAKE_DIR" \
      LD_PRELOAD="$(preload)" "$LIFE" exports >/dev/null 2>&1 &
    pid=$!
    wait "$pid"
    status=$?
    n=$(find "/dev/shm/gpucap-$(id -u)" -maxdepth 1 -name "$pid-*" 2>/dev/null | wc -l)
    m=$(grep -c "@gpucap-ipc\.$(id -u)\.$pid\." /proc/net/unix)
    [ "$status/$n/$m" = "0/0/0" ] || left=$((left + 1))
  done
done
is "$left" 0 "exit while 4 threads export: every run exits 0 and leaves no file or socket ($((2 * RUNS)) runs)"

# ---- output files: planted files, one path for two settings, %% ----
mkdir -m 1777 "$WORK/sticky"
if chown nobody "$WORK/sticky" 2>/dev/null && echo planted >"$WORK/sticky/r.json" &&
  chown nobody "$WORK/sticky/r.json" && chmod 666 "$WORK/sticky/r.json"; then
  GPUCAP_REPORT=off GPUCAP_REPORT_JSON="$WORK/sticky/r.json" with_shim "$LIFE" many 3 \
    2>"$WORK/planted.err"
  is "$(cat "$WORK/sticky/r.json")" planted "a report file another user planted is not written"
  grep -q "GPUCAP_REPORT_JSON: '$WORK/sticky/r.json' belongs to user [0-9]*, not to this user" \
    "$WORK/planted.err"
  ok $? "a warning says whose it is"
else
  skip "a report file another user planted" "needs root to plant it"
  skip "a warning says whose it is" "needs root"
fi
GPUCAP_TRACE="$WORK/same" GPUCAP_REPORT="$WORK/same" GPUCAP_REPORT_JSON="$WORK/./same" \
  with_shim "$LIFE" many 3 2>"$WORK/same.err"
is "$(head -n 1 "$WORK/same")" "Thread,Time,Action,Pointer,Size,Stream,Device,Event,Held,Verdict,Library,Spilled" \
  "three settings naming one file: the trace (created first) is not overwritten"
is "$(grep -c -e ',alloc,' -e ',free,' "$WORK/same")" 6 "it holds all 6 events"
grep -q "GPUCAP_REPORT: '$WORK/same' is the file GPUCAP_TRACE writes: not written" \
  "$WORK/same.err" &&
  grep -q "GPUCAP_REPORT_JSON: '$WORK/./same' is the file GPUCAP_TRACE writes: not written" \
    "$WORK/same.err"
ok $? "the other two say why they were not written"
GPUCAP_REPORT="$WORK/two" GPUCAP_REPORT_JSON="$WORK/two" with_shim "$LIFE" many 3 \
  2>"$WORK/two.err"
like "$(head -n 1 "$WORK/two")" '^gpucap: memory report' "report and JSON on one path: the report stays"
GPUCAP_REPORT=off GPUCAP_REPORT_JSON="$WORK/pct-%%p-%p.json" with_shim "$LIFE" many 3
ls "$WORK" | grep -Eq '^pct-%p-[0-9]+\.json$'
ok $? "%% in a path is a literal %"

# ---- terminated by a signal it does not handle: the report, the trace, the status ----
# run_until_killed SIG MODE: starts life MODE, sends SIG once it is ready; sets $status.
run_until_killed() {
  rm -f "$WORK/term.json" "$WORK/term.csv" "$WORK/term.out"
  GPUCAP_REPORT_JSON="$WORK/term.json" GPUCAP_TRACE="$WORK/term.csv" GPUCAP_REPORT=off \
    LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$(preload)" "$LIFE" "$2" >"$WORK/term.out" 2>&1 &
  local pid=$! k
  for k in $(seq 500); do
    grep -qs ready "$WORK/term.out" && break
    sleep 0.02
  done
  kill -"$1" "$pid"
  wait "$pid"
  status=$?
}
run_until_killed TERM term
is "$status" 143 "SIGTERM: the exit status is still the signal's (128 + 15)"
grep -q '"ended_by": "SIGTERM"' "$WORK/term.json" && valid_report "$WORK/term.json"
ok $? "the JSON report is written, ended by SIGTERM"
is "$(grep -c -e ',alloc,' -e ',free,' "$WORK/term.csv")" 3 "the trace holds its last buffer (3 events)"
run_until_killed INT term
is "$status" 130 "SIGINT: status 130"
grep -q '"ended_by": "SIGINT"' "$WORK/term.json"
ok $? "the report is written, ended by SIGINT"
run_until_killed TERM ownterm
is "$status" 3 "a program's own SIGTERM handler runs (it exits 3)"
grep -q "handled 15" "$WORK/term.out" && grep -q '"ended_by": "exit"' "$WORK/term.json"
ok $? "it saw the signal, then exited normally with its report"
run_until_killed TERM lateterm
is "$(head -n 1 "$WORK/term.out")" "old default" \
  "a handler installed after CUDA was used sees the default as the previous action"
is "$status" 3 "and replaces gpucap's: it runs"
out=$(GPUCAP_REPORT=off with_shim "$LIFE" ignterm 2>&1)
is "$out" "survived" "an ignored SIGTERM stays ignored"

# ---- the exit report: fragmentation that means something, and the run around the pools ----
GPUCAP_MEMORY_LIMIT=8MiB GPUCAP_REPORT_JSON="$WORK/two.json" with_shim "$LIFE" tworegions \
  2>"$WORK/two.txt"
grep -q '"available_fragmentation": 0.000000' "$WORK/two.json" &&
  grep -q '"largest_request_bytes": 8388608' "$WORK/two.json" &&
  grep -Eq '^ +0 +0\.0%' "$WORK/two.txt"
ok $? "nothing in use in two regions: frag 0.0% (the whole cap is one request away)"
GPUCAP_MEMORY_LIMIT=8MiB GPUCAP_REPORT=off GPUCAP_REPORT_JSON="$WORK/holes.json" \
  with_shim "$LIFE" holes
grep -q '"available_fragmentation": 0.750000' "$WORK/holes.json" &&
  grep -q '"largest_request_bytes": 1048576' "$WORK/holes.json"
ok $? "4 MiB free in 1 MiB holes at the cap: frag 75%, largest request 1 MiB"
SLURM_JOB_ID=4711 SLURM_ARRAY_TASK_ID=3 POD_NAME=train-0 GPUCAP_REPORT=off \
  GPUCAP_REPORT_JSON="$WORK/run.json" with_shim "$LIFE" many 3 x
grep -q '"slurm_job_id": "4711"' "$WORK/run.json" &&
  grep -q '"slurm_array_task_id": "3"' "$WORK/run.json" &&
  grep -q '"k8s_pod_name": "train-0"' "$WORK/run.json"
ok $? "the JSON names the Slurm job and the Kubernetes pod"
grep -q "\"command\": \[\"$LIFE\", \"many\", \"3\", \"x\"\]" "$WORK/run.json" &&
  grep -q "\"hostname\": \"$(uname -n)\"" "$WORK/run.json" &&
  grep -Eq '"start_time": "20[0-9-]{8}T[0-9:.]{12}Z"' "$WORK/run.json" &&
  grep -Eq '"end_time": "20[0-9-]{8}T[0-9:.]{12}Z"' "$WORK/run.json"
ok $? "the command line, the host, the start and the end"
grep -q '"device": 0, "name": "Fake CUDA Device 0", "uuid": "GPU-[0-9a-f-]\{36\}"' "$WORK/run.json"
ok $? "the device's name and UUID, as the driver gave them while the program ran"

done_testing
