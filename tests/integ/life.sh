#!/usr/bin/env bash
# The ends of a process's life under gpucap, judged from outside: timeouts catch hangs (each
# race is run many times), and the files written, the exit statuses and other processes say
# what happened. tests/integ/life.c is the program; see docs/design.md ("Process exit, fork,
# signals") for what each check stands for.
. "$TOP/tests/integ/lib.sh"

LIFE="$TESTBIN/life"
LINKED="$TESTBIN/lifelinked"
# Each race is run RUNS times (twice that for the cheap ones); under TSan, which is there to find
# data races rather than to reproduce hangs, fewer.
case "${SAN_PRELOAD:-}" in
*tsan*) RUNS=${LIFE_RUNS:-3} ;;
*) RUNS=${LIFE_RUNS:-10} ;;
esac
SHM="/dev/shm/gpucap-$(id -u)"

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
