#!/usr/bin/env bash
# gpucap_spank.so on a real Slurm: a one-node cluster of its own under the test's directory
# (munged on its own socket with a fresh key; slurmctld and slurmd on loopback ports free at
# start; a node with two GPUs of eight shards each, as device files made here; plugstack.conf
# naming the built plug-in), jobs through srun and sbatch over the fake driver (one machine of
# 8 GiB devices shared by every process, FAKECUDA_MACHINE). Checks the caps the jobs got (what
# cuMemGetInfo shows them, gpucap env in a job), a shard job's share, options refused at
# submission, a job without GPUs left alone, two tasks under one budget, and a cancelled job's
# memory coming back (its budget file removed, the device free for the next job). Every daemon it
# started is stopped on exit, whatever failed.
#
# Needs root (slurmd starts jobs as their user) and Debian's slurmctld, slurmd, slurm-client,
# munge and libslurm-dev (.ci/run installs them); without them it skips, saying so.
. "$TOP/tests/integ/lib.sh"

MiB=$((1 << 20))
GiB=$((1 << 30))
PLUGIN="$BUILD/gpucap_spank.so"

# skip_all REASON...: the whole file skipped, the reason on prove's summary line.
skip_all() {
  echo "1..0 # SKIP $*"
  exit 0
}

if [ -n "${SAN_PRELOAD:-}" ]; then
  skip_all "Slurm's daemons cannot load a sanitizer build of the plug-in; the plain build runs this"
fi
missing=
for c in slurmctld slurmd srun sbatch scancel squeue sinfo munged mungekey python3; do
  command -v "$c" >/dev/null || PATH="$PATH:/usr/sbin" command -v "$c" >/dev/null ||
    missing="$missing $c"
done
if [ -n "$missing" ] || [ ! -f "$PLUGIN" ]; then
  skip_all "SKIPPED: no Slurm here (missing:${missing:- the plug-in, built only with libslurm-dev});" \
    "install slurmctld slurmd slurm-client munge libslurm-dev (.ci/run does) and rebuild"
fi
if [ "$(id -u)" != 0 ]; then
  skip_all "SKIPPED: slurmd must run as root to start jobs (run the tests as root, as CI does)"
fi
PATH="$PATH:/usr/sbin"

S="$WORK/slurm"
mkdir -p "$S/state" "$S/spool" "$S/dev" "$S/munge" "$S/out"
chmod 700 "$S/munge"
pids=
stop_all() {
  local p i
  if [ -n "${SLURM_CONF:-}" ] && [ -n "$(squeue -h 2>/dev/null)" ]; then
    # Jobs left by a failed check: their slurmstepd would outlive slurmd.
    timeout 20 scancel --user="$(id -un)" 2>/dev/null
    for i in $(seq 1 100); do
      [ -z "$(squeue -h 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  for p in $pids; do
    kill "$p" 2>/dev/null
  done
  for p in $pids; do
    wait "$p" 2>/dev/null
  done
  rm -rf "$WORK"
}
trap stop_all EXIT

# ---- munge: a key of our own, its own socket.
mungekey -c -k "$S/munge/key" >"$S/munge/keygen.out" 2>&1
ok $? "mungekey makes a key of our own"
munged -F -f -S "$S/munge/sock" --key-file="$S/munge/key" --pid-file="$S/munge/pid" \
  --log-file="$S/munge/log" --seed-file="$S/munge/seed" >"$S/munge/out" 2>&1 &
pids="$pids $!"
i=0
while [ ! -S "$S/munge/sock" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
[ -S "$S/munge/sock" ]
ok $? "munged listens on its own socket" || { sed 's/^/# /' "$S/munge/log" "$S/munge/out"; done_testing; }

# ---- The cluster: two GPUs (device files of our own) of eight shards each.
for d in 0 1; do
  mknod "$S/dev/nvidia$d" c 1 3 # what /dev/null is: slurmd wants a character device
done
read -r ctld_port slurmd_port < <(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
cluster="gpucap$$"
node=gpunode
cat >"$S/slurm.conf" <<EOF
ClusterName=$cluster
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$S/munge/sock
CredType=cred/munge
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
SlurmdDebug=verbose
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=2
GresTypes=gpu,shard
PlugStackConfig=$S/plugstack.conf
NodeName=$node NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=2 Gres=gpu:2,shard:16 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
cat >"$S/gres.conf" <<EOF
NodeName=$node Name=gpu File=$S/dev/nvidia0
NodeName=$node Name=gpu File=$S/dev/nvidia1
NodeName=$node Name=shard Count=8 File=$S/dev/nvidia0
NodeName=$node Name=shard Count=8 File=$S/dev/nvidia1
EOF
echo "required $PLUGIN lib=$BUILD/libgpucap.so" >"$S/plugstack.conf"
export SLURM_CONF="$S/slurm.conf"

slurmctld -D -i -f "$SLURM_CONF" >"$S/slurmctld.out" 2>&1 &
pids="$pids $!"
slurmd -D -f "$SLURM_CONF" -N "$node" >"$S/slurmd.out" 2>&1 &
pids="$pids $!"
state=
for i in $(seq 1 200); do
  state=$(sinfo -h -n "$node" -o %T 2>/dev/null)
  [ "$state" = idle ] && break
  sleep 0.1
done
is "$state" idle "slurmctld and slurmd on ports $ctld_port and $slurmd_port: the node is idle"
if [ "$state" != idle ]; then
  tail -5 "$S/slurmctld.log" "$S/slurmd.log" "$S/slurmctld.out" "$S/slurmd.out" 2>&1 |
    sed 's/^/# /'
  done_testing
fi

# ---- What every job inherits from here (srun and sbatch pass the environment on): the fake
# driver, one machine of 8 GiB devices for every process, no exit reports.
# The jobs' block counts are the caps' alone: contexts cost the fake device nothing here.
export LD_LIBRARY_PATH="$FAKE_DIR" FAKECUDA_DEVICES=1 FAKECUDA_MEMORY=8GiB \
  FAKECUDA_MACHINE="slurm$$" GPUCAP_REPORT=off FAKECUDA_DRIVER_MEMORY=off
task="$TESTBIN/jobtask"
field() {
  printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}
# run_srun ARGS...: srun with a bound on how long it may take; stdout, stderr in $S/out/srun.*.
run_srun() {
  timeout 120 srun "$@" >"$S/out/srun.out" 2>"$S/out/srun.err"
}

# ---- srun: --gpucap-limit on a job with a GPU.
run_srun --gres=gpu:1 --gpucap-limit=2GiB "$task" $((256 * MiB)) 100
is $? 0 "srun --gres=gpu:1 --gpucap-limit=2GiB runs"
out=$(cat "$S/out/srun.out")
is "$(field "$out" total)" $((2 * GiB)) "  the task's cuMemGetInfo shows 2 GiB"
is "$(field "$out" allocs)" 8 "  and eight 256 MiB blocks fit, no more"
run_srun --gres=gpu:1 --gpucap-limit=1536MiB sh -c \
  'echo "preload=$LD_PRELOAD share=$GPUCAP_SHARE job=$SLURM_JOB_ID"; "$0" env' "$BUILD/gpucap"
out=$(cat "$S/out/srun.out")
job=$(sed -n 's/.* job=\([0-9]*\)$/\1/p' "$S/out/srun.out")
like "$out" "preload=$BUILD/libgpucap.so share=slurm-$cluster-$job " \
  "  the task's LD_PRELOAD has the library; GPUCAP_SHARE names the job's budget"
like "$out" "GPUCAP_MEMORY_LIMIT +1536MiB +environment" "  gpucap env in the job shows the limit"
like "$out" "GPUCAP_SHARE +slurm-$cluster-$job +environment" "  and the budget"

# ---- A job that asked for shards: its share of a GPU, from the node's eight a GPU.
run_srun --gres=shard:2 "$task" $((256 * MiB)) 100
out=$(cat "$S/out/srun.out")
is "$(field "$out" total)" $((2 * GiB)) "srun --gres=shard:2: 2 of 8 shards, a quarter of 8 GiB"
is "$(field "$out" allocs)" 8 "  eight 256 MiB blocks"
run_srun --gres=shard:4 --gpucap-fraction=25% sh -c 'echo "fraction=$GPUCAP_MEMORY_FRACTION"'
is "$(cat "$S/out/srun.out")" "fraction=0.25" "  an option can lower a shard job's share (4 shards, 25%)"

# ---- sbatch: the options, the batch script and the steps inside it.
cat >"$S/job.sh" <<EOF
#!/bin/sh
echo "batch: limit=\$GPUCAP_MEMORY_LIMIT fraction=\$GPUCAP_MEMORY_FRACTION share=\$GPUCAP_SHARE"
srun "$task" $((128 * MiB)) 100
EOF
timeout 120 sbatch --wait -o "$S/out/batch.out" --gres=shard:4 --gpucap-limit=1GiB "$S/job.sh" \
  >"$S/out/sbatch.out" 2>&1
is $? 0 "sbatch --wait --gres=shard:4 --gpucap-limit=1GiB"
job=$(sed -n 's/^Submitted batch job //p' "$S/out/sbatch.out")
out=$(cat "$S/out/batch.out")
like "$out" "batch: limit=1GiB fraction=0.5 share=slurm-$cluster-$job" \
  "  the batch script gets the limit, the shard share (4 of 8) and the job's budget"
is "$(field "$out" total)" $GiB "  a step it starts with srun sees the smaller, 1 GiB"
is "$(field "$out" allocs)" 8 "  eight 128 MiB blocks"

# ---- Options refused at submission, with the parser's message; nothing runs.
run_srun --gres=gpu:1 --gpucap-limit=1GB touch "$S/ran"
st=$?
[ "$st" -ne 0 ] && [ ! -e "$S/ran" ]
ok $? "srun --gpucap-limit=1GB fails (exit $st) and the task never runs"
like "$(cat "$S/out/srun.err")" "gpucap: --gpucap-limit='1GB': .*did you mean '1GiB'.*; accepted: a size" \
  "  the message names the option, the value and what it accepts"
timeout 60 sbatch --gres=gpu:1 --gpucap-fraction=2 --wrap "touch $S/ran" >"$S/out/sbatch.out" 2>&1
st=$?
[ "$st" -ne 0 ] && ! grep -q "Submitted batch job" "$S/out/sbatch.out"
ok $? "sbatch --gpucap-fraction=2 fails (exit $st): no job is submitted"
like "$(cat "$S/out/sbatch.out")" "gpucap: --gpucap-fraction='2': .*more than 1" "  and says why"

# ---- A job without GPUs is untouched.
run_srun sh -c 'echo "preload=[$LD_PRELOAD] share=[$GPUCAP_SHARE] limit=[$GPUCAP_MEMORY_LIMIT]"'
is "$(cat "$S/out/srun.out")" "preload=[] share=[] limit=[]" "a job without GPUs: no preload, no settings"
run_srun --gpucap-limit=1GiB sh -c 'echo "preload=[$LD_PRELOAD]"'
is "$(cat "$S/out/srun.out")" "preload=[]" "  even with --gpucap-limit"
like "$(cat "$S/out/srun.err")" "gpucap: warning: job [0-9]* has no GPU on this node" \
  "  which gets a warning"

# ---- Two tasks of one job share one budget: 2 GiB for both together.
rm -f "$S/ready" "$S/go"
FAKECUDA_STATS="$S/out/stats.%p.json" timeout 120 srun -n2 -l --gres=gpu:1 --gpucap-limit=2GiB \
  "$task" $((256 * MiB)) 100 "$S/ready" "$S/go" >"$S/out/two.out" 2>"$S/out/two.err" &
two=$!
await "$S/ready" 'allocs=.*' # the first task is done allocating; wait for the second
i=0
while [ "$(grep -c allocs "$S/ready" 2>/dev/null)" -lt 2 ] && [ $i -lt 1200 ]; do
  sleep 0.05
  i=$((i + 1))
done
sum=$(sed -n 's/^allocs=//p' "$S/ready" | awk '{s += $1} END {print s + 0}')
is "$sum" 8 "two tasks of one job hold 8 blocks of 256 MiB together, the job's 2 GiB ($(tr '\n' ' ' <"$S/ready"))"
touch "$S/go"
wait "$two"
is $? 0 "  both tasks end well"
peak=0
for f in "$S"/out/stats.*.json; do
  p=$(json_num "$f" machine_peak_bytes)
  [ "${p:-0}" -gt "$peak" ] && peak=$p
done
[ "$peak" -gt 0 ] && [ "$peak" -le $((2 * GiB)) ]
ok $? "  the machine's peak, as the fake driver saw it, stayed within 2 GiB ($peak)"

# ---- A cancelled job's memory comes back: 6 GiB held, scancel, then 6 GiB for the next job
# (the device has 8: both at once cannot fit).
rm -f "$S/ready" "$S/go"
timeout 60 sbatch -o "$S/out/held.out" --gres=gpu:1 --gpucap-limit=7GiB \
  --wrap "exec $task $((6 * GiB)) 1 $S/ready $S/go" >"$S/out/sbatch.out" 2>&1
job=$(sed -n 's/^Submitted batch job //p' "$S/out/sbatch.out")
await "$S/ready" 'allocs='
is "$(cat "$S/ready")" "allocs=1" "job $job holds 6 GiB"
budget_file="/dev/shm/gpucap-budget.0.slurm-$cluster-$job"
[ -f "$budget_file" ]
ok $? "  its budget's file exists ($budget_file)"
out=$(LD_PRELOAD= "$BUILD/gpucap" top --once 2>&1)
like "$out" "slurm-$cluster-$job" "  gpucap top on the node shows the job's budget"
run_srun --gres=gpu:1 "$task" $((6 * GiB)) 1
is "$(field "$(cat "$S/out/srun.out")" allocs)" 0 "  meanwhile another job cannot have 6 GiB of the device"
scancel "$job"
for i in $(seq 1 300); do
  [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && [ ! -f "$budget_file" ] && break
  sleep 0.1
done
is "$(squeue -h -j "$job" 2>/dev/null)" "" "scancel: job $job is gone"
[ ! -f "$budget_file" ]
ok $? "  the job's epilog removed its budget's file"
run_srun --gres=gpu:1 "$task" $((6 * GiB)) 1
is "$(field "$(cat "$S/out/srun.out")" allocs)" 1 "  and the next job gets the 6 GiB back"

# ---- The daemons logged no error of the plug-in's.
is "$(grep -c 'gpucap: error' "$S/slurmd.log")" 0 "slurmd's log has no gpucap error"

done_testing
