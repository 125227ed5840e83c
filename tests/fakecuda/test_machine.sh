#!/bin/sh
# TAP test of the fake driver's shared machine (FAKECUDA_MACHINE) from outside, with real
# processes: without the setting each process has a device of its own; with it the processes of
# a machine see each other's memory in cuMemGetInfo_v2 and are refused what the others hold;
# processes racing for the last bytes (exactly one wins); five processes seeing each other
# through the fake NVML (its memory figures and process lists), from inside and from a tool
# without CUDA (like nvidia-smi); a process killed with kill -9 while it holds the ledger's lock
# (the others go on); a ledger left by a killed run (a new run starts afresh); a process killed
# with kill -9 in the middle of allocating while four others allocate at random from four
# threads each (every call answers success or out of memory, their bytes intact, the machine's
# peak of the sum within the total, the dead one's memory back); the report's machine figures;
# a ledger made for other settings, malformed or foreign, refused at cuInit (and nvmlInit) with
# a clear line.
. "$TOP/tests/integ/lib.sh"
probe=$TESTBIN/fakecuda_probe
worker=$TESTBIN/fakecuda_machine_worker
nvml=$TESTBIN/test_fakenvml
uid=$(id -u)
name=test-$$
ledger=/dev/shm/fakecuda.$uid.$name
MiB=1048576
trap 'rm -f /dev/shm/fakecuda.$uid.test-$$*; rm -rf "$WORK"' EXIT
export FAKECUDA_MEMORY=1GiB
export FAKECUDA_DRIVER_MEMORY=off # exact figures; test_driver.sh has the driver's own memory

# free_of OUTPUT: the free figure of a probe's "info" line.
free_of() {
  printf '%s\n' "$1" | sed -n 's/^info 0 free=\([0-9]*\) .*/\1/p'
}

# hold N FIFO ARGS...: a probe that runs ARGS then holds what it took until FIFO's writer closes;
# its output in $WORK/N.out, its pid in $held.
hold() {
  n=$1
  fifo=$2
  shift 2
  [ -p "$fifo" ] || mkfifo "$fifo"
  rm -f "$WORK/$n.out" # await must not read a previous holder's output
  "$probe" "$@" hold <"$fifo" >"$WORK/$n.out" 2>"$WORK/$n.err" &
  held=$!
}

# ---- Without the setting: one device per process, as before. ----
hold a "$WORK/fa" init ctx alloc:$((300 * MiB))
exec 3>"$WORK/fa"
await "$WORK/a.out" holding
out=$("$probe" init ctx info)
is "$(free_of "$out")" $((1024 * MiB)) \
  "without FAKECUDA_MACHINE another process does not see the 300 MiB one holds"
exec 3>&-
wait "$held"

# ---- With it: one device for both. ----
export FAKECUDA_MACHINE=$name
hold a "$WORK/fa" init ctx alloc:$((300 * MiB))
exec 3>"$WORK/fa"
await "$WORK/a.out" holding
like "$(cat "$WORK/a.out")" "alloc 0" "process A takes 300 MiB of the machine"
[ -f "$ledger" ] && [ "$(stat -c %a "$ledger")" = 600 ] && [ "$(stat -c %u "$ledger")" = "$uid" ]
ok $? "the ledger $ledger exists, mode 600, ours"
out=$(FAKECUDA_STATS="$WORK/b.json" "$probe" init ctx info alloc:$((800 * MiB)) \
  alloc:$((700 * MiB)) info)
is "$(free_of "$(printf '%s\n' "$out" | head -3)")" $((724 * MiB)) \
  "process B: cuMemGetInfo_v2's free is the total less A's 300 MiB"
like "$out" "alloc 2" "B is refused 800 MiB (CUDA_ERROR_OUT_OF_MEMORY): only 724 are free"
like "$out" "alloc 0" "... and gets 700"
is "$(free_of "$(printf '%s\n' "$out" | tail -1)")" $((24 * MiB)) "... leaving 24 MiB free"
is "$(json_num "$WORK/b.json" live_bytes)" $((700 * MiB)) "B's report: it holds 700 MiB"
is "$(json_num "$WORK/b.json" machine_used_bytes)" $((1000 * MiB)) \
  "... the machine 1000 MiB (machine_used_bytes)"
is "$(json_num "$WORK/b.json" machine_peak_bytes)" $((1000 * MiB)) \
  "... its peak of the sum 1000 MiB (machine_peak_bytes)"
is "$(json_num "$WORK/b.json" machine_processes)" 2 "... two processes (machine_processes)"
grep -q "\"machine\": \"$name\"" "$WORK/b.json"
ok $? "... and names the machine"
out=$("$probe" init ctx info)
is "$(free_of "$out")" $((724 * MiB)) "B exited: its 700 MiB came back, A's 300 are still held"
exec 3>&-
wait "$held"
out=$("$probe" init ctx info)
is "$(free_of "$out")" $((1024 * MiB)) "A exited: the whole device is free"

# ---- Settings the machine was not made with, malformed and foreign ledgers. ----
out=$(FAKECUDA_MEMORY=2GiB "$probe" init ctx 2>"$WORK/err")
like "$out" "init 803" "another FAKECUDA_MEMORY: cuInit fails (CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)"
like "$out" "ctx 3" "... and the driver stays uninitialised"
like "$(cat "$WORK/err")" \
  "^fakecuda: error: machine ledger $ledger: device 0 has 1073741824 bytes there [(]FAKECUDA_MEMORY[)], 2147483648 in this process;.* cuInit fails with CUDA_ERROR_SYSTEM_DRIVER_MISMATCH$" \
  "... saying why on one line"
out=$(FAKECUDA_DEVICES=2 "$probe" init 2>"$WORK/err")
like "$(cat "$WORK/err")" "made for FAKECUDA_DEVICES=1, this process has 2" \
  "another FAKECUDA_DEVICES: refused"
bad=/dev/shm/fakecuda.$uid.$name-bad
printf 'not a ledger' >"$bad"
chmod 600 "$bad"
out=$(FAKECUDA_MACHINE=$name-bad "$probe" init 2>"$WORK/err")
like "$out" "init 803" "a malformed ledger: cuInit fails"
like "$(cat "$WORK/err")" "machine ledger $bad: 12 bytes, not the" "... saying why"
cp "$ledger" "$bad"
chmod 644 "$bad"
FAKECUDA_MACHINE=$name-bad "$probe" init >/dev/null 2>"$WORK/err"
like "$(cat "$WORK/err")" "mode 0644, not 0600" "a ledger others may read: refused"
if [ "$uid" = 0 ]; then
  chmod 600 "$bad"
  chown 65534 "$bad"
  out=$(FAKECUDA_MACHINE=$name-bad "$probe" init 2>"$WORK/err")
  like "$out" "init 803" "a ledger owned by another user: cuInit fails"
  like "$(cat "$WORK/err")" "owned by uid 65534, not by this user" "... saying why"
else
  skip "a ledger owned by another user: cuInit fails" "needs root to give a file away"
  skip "... saying why" "needs root"
fi
rm -f "$bad"
out=$(FAKECUDA_MACHINE=a/b "$probe" init 2>"$WORK/err")
like "$out" "init 1" "FAKECUDA_MACHINE=a/b: a malformed setting (CUDA_ERROR_INVALID_VALUE)"
like "$(cat "$WORK/err")" "FAKECUDA_MACHINE='a/b': must be 1..64 letters" "... saying why"

# ---- Processes racing for the last bytes. ----
hold a "$WORK/fa" init ctx alloc:$((960 * MiB))
exec 3>"$WORK/fa"
await "$WORK/a.out" holding
apid=$held
mkfifo "$WORK/go"
pids=
for i in 1 2 3 4 5 6; do
  hold "r$i" "$WORK/go" init ctx alloc:$((64 * MiB))
  pids="$pids $held"
done
exec 4>"$WORK/go" # every racer starts now
for i in 1 2 3 4 5 6; do
  await "$WORK/r$i.out" holding
done
is "$(cat "$WORK"/r?.out | grep -c '^alloc 0$')" 1 \
  "six processes race for the last 64 MiB: exactly one gets them"
is "$(cat "$WORK"/r?.out | grep -c '^alloc 2$')" 5 "... the five others CUDA_ERROR_OUT_OF_MEMORY"
exec 4>&-
exec 3>&-
for p in $apid $pids; do
  wait "$p"
done

# ---- Five processes sharing the device, seen through NVML from inside and outside. ----
export FAKECUDA_MACHINE=$name-share
mkfifo "$WORK/fs"
pids=
for i in 1 2 3 4 5; do
  "$worker" share 5 $((100 * MiB)) <"$WORK/fs" >"$WORK/share$i.out" 2>&1 &
  pids="$pids $!"
done
exec 4>"$WORK/fs" # they start now, together
for i in 1 2 3 4 5; do
  await "$WORK/share$i.out" '^bad='
done
is "$(cat "$WORK"/share?.out | grep -c '^bad=0$')" 5 \
  "five processes of 100 MiB each: each sees all five in NVML (v1, v2, v3 lists, INSUFFICIENT_SIZE and the count for a short buffer) and NVML's used/free equal its cuMemGetInfo_v2"
cat "$WORK"/share?.out | grep -v '^bad=0$' | sed 's/^/# /'
smi=$("$nvml" child smi 2>&1)
like "$smi" "used $((500 * MiB)) free $((524 * MiB)) total $((1024 * MiB))" \
  "an NVML-only tool (no CUDA in it, like nvidia-smi): 500 MiB used, 524 free"
is "$(procs_of "$smi")" "$(each_holding "$pids" $((100 * MiB)))" \
  "... and lists the five processes, 100 MiB each"
exec 4>&-
wait_all "$pids"
is "$bad" 0 "the five freed and exited cleanly"
smi=$("$nvml" child smi 2>&1)
like "$smi" "used 0 free $((1024 * MiB))" "NVML: all memory back once they exited"
like "$smi" "processes 0" "... and no process listed"
out=$(FAKECUDA_MEMORY=2GiB "$nvml" child smi 2>&1)
like "$out" "init 18" \
  "NVML with other settings than the machine's: nvmlInit fails (NVML_ERROR_LIB_RM_VERSION_MISMATCH)"
like "$out" "fakenvml: error: machine ledger .*: device 0 has 1073741824 bytes there" \
  "... saying why on one line"

# An NVML tool first on a machine no process has used: it sees an idle device, and the ledger
# it made serves the CUDA processes after it.
export FAKECUDA_MACHINE=$name-nvmlfirst
smi=$("$nvml" child smi 2>&1)
like "$smi" "used 0 free $((1024 * MiB))" "NVML first on a new machine: an idle device"
[ "$(stat -c %a "/dev/shm/fakecuda.$uid.$name-nvmlfirst")" = 600 ]
ok $? "... its ledger made owner-only"
out=$("$probe" init ctx alloc:$((1024 * MiB)) info)
like "$out" "alloc 0" "... and a CUDA process after it gets the whole device"

# ---- kill -9 of a process holding the ledger's lock: the others go on. ----
export FAKECUDA_MACHINE=$name-wedge
mkfifo "$WORK/fw"
rm -f "$WORK/a.out"
# timeout: a bound for a wedged lock (a hang fails the test), not a timing.
timeout 120 "$probe" init ctx alloc:$((200 * MiB)) hold <"$WORK/fw" >"$WORK/a.out" 2>&1 &
held=$!
exec 3>"$WORK/fw"
await "$WORK/a.out" holding
"$worker" wedge $((100 * MiB)) >"$WORK/wedge.out" 2>&1 &
wedged=$!
await "$WORK/wedge.out" locked
like "$(cat "$WORK/wedge.out")" "^locked" "a process holding 100 MiB takes the ledger's lock and stays"
kill -9 "$wedged"
wait "$wedged" 2>/dev/null
smi=$(timeout 60 "$nvml" child smi 2>&1)
like "$smi" "used $((200 * MiB)) " "NVML, first to look after the kill: A's 200 MiB used, not 300"
is "$(printf '%s\n' "$smi" | grep -c '^proc ')" 1 "... one process listed (A)"
out=$(FAKECUDA_STATS="$WORK/w.json" timeout 60 "$probe" init ctx info alloc:$((824 * MiB)))
is "$(free_of "$out")" $((824 * MiB)) \
  "killed inside the lock: a new process still starts, and sees its 100 MiB back (A's 200 held)"
like "$out" "alloc 0" "... and gets all the rest"
is "$(json_num "$WORK/w.json" machine_lock_recoveries)" 1 \
  "... its report: the lock was recovered from the dead holder once"
is "$(json_num "$WORK/w.json" machine_reclaimed)" 1 "... and the dead process's slot reclaimed"
exec 3>&-
wait "$held"
is $? 0 "A went on past the dead holder and exited normally"

# ---- A ledger left by a previous run (its processes killed) does not confuse a new one. ----
export FAKECUDA_MACHINE=$name-stale
hold a "$WORK/fa" init ctx alloc:$((600 * MiB))
exec 3>"$WORK/fa"
await "$WORK/a.out" holding
kill -9 "$held"
wait "$held" 2>/dev/null
exec 3>&-
smi=$("$nvml" child smi 2>&1)
like "$smi" "used 0 free $((1024 * MiB))" "NVML on a stale ledger: nothing used"
like "$smi" "processes 0" "... no process"
out=$(FAKECUDA_STATS="$WORK/s.json" "$probe" init ctx info alloc:$((100 * MiB)))
is "$(free_of "$out")" $((1024 * MiB)) "a new run on a stale ledger: the dead run's 600 MiB are free"
is "$(json_num "$WORK/s.json" machine_peak_bytes)" $((100 * MiB)) \
  "... the machine's peak is this run's (100 MiB), not the dead run's 600"
is "$(json_num "$WORK/s.json" machine_reclaimed)" 0 "... and so are its counters"

# ---- kill -9 in the middle of allocating, four processes x four threads around it. ----
export FAKECUDA_MACHINE=$name-stress FAKECUDA_MEMORY=32MiB FAKECUDA_BACKING=1
stress_start
stress_finish \
  "four processes x four threads allocating at random beside it: every check passed (CUDA's and NVML's figures, NVML listing the four throughout)"
peak=$stress_peak
oom=$stress_oom
reclaimed=$stress_reclaimed
[ "$peak" -gt 0 ] && [ "$peak" -le $((32 * MiB)) ]
ok $? "the machine's peak of the sum over processes ($peak) never exceeded the 32 MiB total"
[ "$oom" -gt 0 ]
ok $? "the device was full at times: $oom allocations refused"
[ "$reclaimed" -gt 0 ]
ok $? "the victim's slot was reclaimed by a survivor"
out=$("$probe" init ctx info)
is "$(free_of "$out")" $((32 * MiB)) "all exited: every byte came back, the victim's included"
done_testing
