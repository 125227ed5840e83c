#!/bin/sh
# Shared budgets (GPUCAP_SHARE) checked from outside, with real processes on one fake device
# shared by all of them (FAKECUDA_MACHINE: the fake driver's ledger counts what every process
# holds, and its machine-wide peak is the oracle): two processes capped together; NVML (an
# nvidia-smi-like tool, and inside each process) showing the budget and agreeing with
# cuMemGetInfo; a process killed with kill -9 in the middle of allocating while four others
# allocate at random from four threads each (the machine's peak never above the budget, every
# block's contents intact, the dead one's charges back); a process with other settings refused;
# a bad or foreign budget file refused with a clear line; a stale budget file starting afresh; the
# guarantee; idle pool memory given back on request; gpucap top.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off
probe=$TESTBIN/fakecuda_probe
worker=$TESTBIN/fakecuda_machine_worker
nvml=$TESTBIN/test_fakenvml
uid=$(id -u)
name=share-$$
MiB=1048576
trap 'rm -f /dev/shm/fakecuda.$uid.$name* /dev/shm/gpucap-budget.$uid.$name*; rm -rf "$WORK"' EXIT
export FAKECUDA_MEMORY=1GiB GPUCAP_REPORT=off

# flat TEXT: TEXT on one line, for patterns across a program's output lines.
flat() {
  printf '%s' "$1" | tr '\n' ' '
}

# free_of OUTPUT: the free figure of a probe's last "info" line.
free_of() {
  printf '%s\n' "$1" | sed -n 's/^info 0 free=\([0-9]*\) .*/\1/p' | tail -n 1
}

# bg CMD...: with_shim for a background job, exec'ing so that $! is CMD's own pid.
bg() {
  LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$(preload)" exec "$@"
}

# top: gpucap top's JSON for this test's budgets.
top() {
  "$BUILD/gpucap" top --once --json --budget "$1"
}

# ---- Two processes under one 300 MiB budget on a 1 GiB device. ----
export FAKECUDA_MACHINE=$name-m1 GPUCAP_SHARE=$name-a GPUCAP_MEMORY_LIMIT=300MiB GPUCAP_POOL=off
mkfifo "$WORK/fa"
rm -f "$WORK/a.out" # await must not read a previous process's output
bg "$probe" init ctx alloc:$((200 * MiB)) info hold <"$WORK/fa" >"$WORK/a.out" 2>&1 &
a=$!
exec 3>"$WORK/fa"
await "$WORK/a.out" holding
out=$(with_shim "$probe" init ctx info alloc:$((150 * MiB)) alloc:$((90 * MiB)) info 2>&1)
is "$(free_of "$out")" $((10 * MiB)) \
  "a second process of the budget sees 300 - 200 MiB free, then 10 after taking 90"
like "$out" "alloc 2" "... and is refused 150 MiB (CUDA_ERROR_OUT_OF_MEMORY) though the device has 824 free"
budget_file=/dev/shm/gpucap-budget.$uid.$name-a
is "$(stat -c %a "$budget_file")" 600 "the budget's file is owner-only (0600)"
smi=$(with_shim "$nvml" child smi 2>&1)
like "$smi" "used $((200 * MiB)) free $((100 * MiB)) total $((300 * MiB))" \
  "an NVML tool under the budget (like nvidia-smi under gpucap run): total = the cap, used = the budget's"
is "$(procs_of "$smi")" "$a $((200 * MiB))" \
  "... and its one live process with its bytes"
smi=$(without_shim "$nvml" child smi 2>&1)
like "$smi" "used $((200 * MiB)) free $((824 * MiB)) total $((1024 * MiB))" \
  "the same tool without gpucap sees the whole device (the fake's NVML reads its own ledger)"
json=$(top "$name-a")
like "$(flat "$json")" "\"name\": \"$name-a\".*\"cap\": $((300 * MiB)).*\"used\": $((200 * MiB))" \
  "gpucap top --once --json: the budget, its cap and its use"
like "$json" "\"pid\": $a, \"used\": $((200 * MiB))" "... and the process"
like "$("$BUILD/gpucap" top -n 2 --interval 0.05 --budget "$name-a")" \
  "$name-a .*200.0 MiB.*300.0 MiB" "gpucap top without a terminal: snapshots as text"

# ---- Five processes holding 100 MiB each: NVML and CUDA agree in each, and from outside. ----
exec 3>&-
wait "$a"
export FAKECUDA_MACHINE=$name-m5 GPUCAP_SHARE=$name-five GPUCAP_MEMORY_LIMIT=800MiB
mkfifo "$WORK/fs"
pids=
for i in 1 2 3 4 5; do
  bg "$worker" share 5 $((100 * MiB)) <"$WORK/fs" >"$WORK/share$i.out" 2>&1 &
  pids="$pids $!"
done
exec 4>"$WORK/fs"
for i in 1 2 3 4 5; do
  await "$WORK/share$i.out" '^bad='
done
is "$(cat "$WORK"/share?.out | grep -c '^bad=0$')" 5 \
  "five processes of 100 MiB under an 800 MiB budget: in each, NVML (v1, v2) says used 500 of 800 MiB and equals cuMemGetInfo_v2, and lists the five (v1, v2, v3 lists, the size protocol)"
cat "$WORK"/share?.out | grep -v '^bad=0$' | sed 's/^/# /'
out=$(with_shim "$TESTBIN/smi" 2>&1)
like "$(flat "$out")" "memory used=$((500 * MiB)) free=$((300 * MiB)) total=$((800 * MiB)) memory2 used=$((500 * MiB)) free=$((300 * MiB)) total=$((800 * MiB))" \
  "an nvidia-smi-like tool (dlopen, dlsym, no CUDA) under the budget: 500 of 800 MiB used"
is "$(procs_of "$out")" "$(each_holding "$pids" $((100 * MiB)))" "... and the five processes"
out=$(with_shim "$TESTBIN/smi" cuda $((50 * MiB)) 2>&1)
like "$(flat "$out")" "memory used=$((550 * MiB)) free=$((250 * MiB)) total=$((800 * MiB)) .*agree" \
  "a sixth process through dlopen/dlsym: NVML's figures equal its cuMemGetInfo_v2's"
exec 4>&-
wait_all "$pids"
is "$bad" 0 "the five freed and exited cleanly"
# gpucap itself reads NVML's figure for the process (the driver's memory, which the cap covers):
# NVML is loaded once the program uses a device, and it prints nothing.
out=$(with_shim "$TESTBIN/smi" none $MiB 2>&1)
is "$out" "nvml loaded" "a program that does not use NVML: gpucap loads NVML to measure, prints nothing"
export FAKECUDA_MACHINE=$name-m1 GPUCAP_SHARE=$name-a GPUCAP_MEMORY_LIMIT=300MiB
rm -f "$WORK/a.out" # await must not read a previous process's output
bg "$probe" init ctx alloc:$((200 * MiB)) info hold <"$WORK/fa" >"$WORK/a.out" 2>&1 &
a=$!
exec 3>"$WORK/fa"
await "$WORK/a.out" holding

# ---- Settings: a process with other settings is refused, never given the creator's. ----
out=$(GPUCAP_MEMORY_LIMIT=400MiB with_shim "$probe" init ctx info alloc:$MiB 2>&1)
like "$out" "gpucap: error: shared budget '$name-a': made with GPUCAP_MEMORY_LIMIT=300MiB .*this process has GPUCAP_MEMORY_LIMIT=400MiB.*every allocation is refused" \
  "a process naming the budget with another limit: one clear error line"
like "$out" "info 0 free=0 total=0" "... it sees no memory"
like "$out" "alloc 2" "... and every allocation is refused (not uncapped, not the creator's cap)"
out=$(GPUCAP_SHARE_MIN=10MiB with_shim "$probe" init ctx alloc:$MiB 2>&1)
like "$out" "GPUCAP_SHARE_MIN=10MiB.*every allocation is refused" "... another guarantee too"
out=$(GPUCAP_SHARE_MAX=50MiB with_shim "$probe" init ctx info alloc:$((60 * MiB)) alloc:$((40 * MiB)) 2>&1)
like "$out" "info 0 free=$((50 * MiB)) total=$((50 * MiB))" \
  "GPUCAP_SHARE_MAX is the process's own: accepted, and its burst cap (50 MiB)"
like "$(flat "$out")" "alloc 2.*alloc 0" "... 60 MiB refused, 40 admitted"
exec 3>&-
wait "$a"

# ---- A budget whose processes are all gone starts afresh, with the next one's settings. ----
hold_killed() {
  rm -f "$WORK/b.out" # await must not read a previous process's output
  bg "$probe" init ctx alloc:$((250 * MiB)) hold <"$WORK/fb" >"$WORK/b.out" 2>&1 &
  b=$!
  exec 3>"$WORK/fb"
  await "$WORK/b.out" holding
  kill -9 "$b"
  wait "$b" 2>/dev/null
  exec 3>&-
}
mkfifo "$WORK/fb"
hold_killed
out=$(with_shim "$probe" init ctx info alloc:$((300 * MiB)) 2>&1)
like "$(flat "$out")" "info 0 free=$((300 * MiB)) .*alloc 0" \
  "a process killed with kill -9 holding 250 MiB: its charge is reclaimed by the next process"
hold_killed
out=$(GPUCAP_MEMORY_LIMIT=500MiB with_shim "$probe" init ctx info 2>&1)
like "$out" "info 0 free=$((500 * MiB)) total=$((500 * MiB))" \
  "a budget left by a dead run: the next process's settings (500 MiB) become the budget's"

# ---- A process killed with kill -9 while it holds the budget file's lock: the others go on. ----
export GPUCAP_MEMORY_LIMIT=300MiB GPUCAP_SHARE=$name-wedge
rm -f "$WORK/a.out"
bg "$probe" init ctx alloc:$((100 * MiB)) hold <"$WORK/fa" >"$WORK/a.out" 2>&1 &
a=$!
exec 3>"$WORK/fa"
await "$WORK/a.out" holding
"$TESTBIN/budgetlock" "$name-wedge" >"$WORK/lock.out" 2>&1 &
locker=$!
await "$WORK/lock.out" locked
like "$(cat "$WORK/lock.out")" "^locked" "a process takes the budget's file lock and stays"
kill -9 "$locker"
wait "$locker" 2>/dev/null
# timeout: a bound for a wedged lock (a hang fails the test), not a timing.
out=$(with_shim timeout 60 "$probe" init ctx info alloc:$((200 * MiB)) 2>&1)
like "$(flat "$out")" "info 0 free=$((200 * MiB)) .*alloc 0" \
  "killed inside the lock: the next process takes it over (EOWNERDEAD), sees 200 MiB free and gets them"
like "$(flat "$(top "$name-wedge")")" "\"recoveries\": 1,.*\"pid\": $a, \"used\": $((100 * MiB))" \
  "... gpucap top counts one recovery, and A still holds its 100 MiB"
exec 3>&-
wait "$a"
is $? 0 "A went on past the dead holder and exited normally"

# ---- A wake lost to a holder's death: a waiter asleep on a free lock goes on. ----
# (A holder killed between its release's store and its wake, with another process taking and
# releasing the lock in between, leaves the waiters asleep on a free lock; budgetlock's "lose"
# mode leaves that state directly.)
export GPUCAP_SHARE=$name-lost
with_shim "$probe" init ctx info >/dev/null 2>&1 # makes the budget's file
mkfifo "$WORK/fl"
rm -f "$WORK/lock.out"
"$TESTBIN/budgetlock" "$name-lost" lose <"$WORK/fl" >"$WORK/lock.out" 2>&1 &
locker=$!
exec 5>"$WORK/fl"
await "$WORK/lock.out" locked
# timeout: a bound for a lost wake (a hang fails the test), not a timing.
bg timeout 60 "$probe" init ctx alloc:$((100 * MiB)) >"$WORK/w.out" 2>&1 &
waiter=$!
asleep=1
for i in $(seq 1 400); do
  p=$(pgrep -P "$waiter")
  if [ -n "$p" ] && grep -q futex "/proc/$p/wchan" 2>/dev/null; then
    asleep=0
    break
  fi
  sleep 0.05
done
ok $asleep "a process of the budget waits asleep on the held budget file lock"
echo go >&5
await "$WORK/lock.out" lost
kill -9 "$locker"
wait "$locker" 2>/dev/null
exec 5>&-
wait "$waiter"
is $? 0 "the lock freed without a wake, its holder killed: the waiter takes it and goes on"
like "$(flat "$(cat "$WORK/w.out")")" "alloc 0" "... and gets its 100 MiB"

# ---- A budget file gpucap cannot use is refused with a clear line, never ignored. ----
bad=/dev/shm/gpucap-budget.$uid.$name-bad
export GPUCAP_SHARE=$name-bad
printf 'garbage' >"$bad"
chmod 600 "$bad"
out=$(with_shim "$probe" init ctx alloc:$MiB 2>&1)
like "$out" "gpucap: error: shared budget '$name-bad': budget file $bad: not the size of a budget file of this gpucap version \\(remove the file if no process of the budget is running\\); every allocation is refused" \
  "a budget file of the wrong size: refused with the path and the reason"
like "$out" "alloc 2" "... and allocations refused"
head -c "$(stat -c %s "$budget_file")" /dev/zero >"$bad"
out=$(with_shim "$probe" init ctx alloc:$MiB 2>&1)
like "$out" "$bad: not a gpucap budget file \\(bad magic\\)" "a budget file of the right size but no magic: refused"
chmod 644 "$bad"
out=$(with_shim "$probe" init ctx alloc:$MiB 2>&1)
like "$out" "$bad: not mode 0600" "a budget file others may read or write: refused"
rm -f "$bad"
ln -s "$budget_file" "$bad"
out=$(with_shim "$probe" init ctx alloc:$MiB 2>&1)
like "$out" "$bad: a symbolic link" "a symbolic link in its place: refused"
rm -f "$bad"
# (Only this run's budget files: a test run of another gpucap version may have its own meanwhile.)
err=$("$BUILD/gpucap" top --once 2>&1 >/dev/null | grep -F "gpucap-budget.$uid.$name")
is "$err" "" "gpucap top: nothing to say about good budget files"
printf 'garbage' >"$bad"
chmod 600 "$bad"
like "$("$BUILD/gpucap" top --once 2>&1 >/dev/null)" "gpucap: warning: budget file $bad: not the size" \
  "... a warning naming a bad one"
rm -f "$bad"

# ---- The guarantee: one process cannot starve another. ----
export GPUCAP_SHARE=$name-min GPUCAP_SHARE_MIN=100MiB GPUCAP_MEMORY_LIMIT=300MiB
rm -f "$WORK/a.out" # await must not read a previous process's output
bg "$probe" init ctx alloc:$((10 * MiB)) hold <"$WORK/fa" >"$WORK/a.out" 2>&1 &
a=$!
exec 3>"$WORK/fa"
await "$WORK/a.out" holding
out=$(with_shim "$probe" init ctx info alloc:$((210 * MiB)) alloc:$((200 * MiB)) info 2>&1)
like "$out" "info 0 free=$((200 * MiB)) " \
  "with a 100 MiB guarantee each, B sees 300 - 10 (A's) - 90 (what A may still claim) free"
like "$(flat "$out")" "alloc 2.*alloc 0" "... is refused 210 MiB and admitted 200"
exec 3>&-
wait "$a"
unset GPUCAP_SHARE_MIN

# ---- Idle pool memory is given back when another process asks. ----
export GPUCAP_SHARE=$name-idle GPUCAP_MEMORY_LIMIT=400MiB GPUCAP_POOL=on
rm -f "$WORK/go" "$WORK/retry"
rm -f "$WORK/a.out" # await must not read a previous process's output
bg "$probe" init ctx alloc:$((200 * MiB)) free:0 sync hold alloc:$MiB info "wait:$WORK/go" \
  <"$WORK/fa" >"$WORK/a.out" 2>&1 &
a=$!
exec 3>"$WORK/fa"
await "$WORK/a.out" holding
rm -f "$WORK/b.out" # await must not read a previous process's output
GPUCAP_REPORT=stderr bg "$probe" init ctx alloc:$((300 * MiB)) "wait:$WORK/retry" \
  alloc:$((300 * MiB)) >"$WORK/b.out" 2>&1 3>&- & # reports on: its refusal's verdict
b=$!
await "$WORK/b.out" "^alloc"
like "$(cat "$WORK/b.out")" "alloc 2" \
  "A's pool keeps its freed 200 MiB: B is refused 300 MiB, and asks for it"
like "$(cat "$WORK/b.out")" "  verdict    cap_full: the shared budget '$name-idle' is full on device 0" \
  "... its out-of-memory report's hint names the budget, not its own cap (which had room)"
exec 3>&- # A makes its next call
await "$WORK/a.out" "^info"
touch "$WORK/retry"
await "$WORK/b.out" "^wait"
wait "$b"
like "$(flat "$(cat "$WORK/b.out")")" "alloc 2 wait 0 alloc 0" \
  "A gave its idle memory back at its next allocation (and did not take it again): B's retry gets 300 MiB"
like "$(flat "$(cat "$WORK/a.out")")" "hold 0 .*alloc 0 info" "... and A's own allocation succeeded"
touch "$WORK/go"
wait "$a"

# ---- kill -9 in the middle of allocating, four processes x four threads around it. ----
export FAKECUDA_MACHINE=$name-stress FAKECUDA_MEMORY=64MiB FAKECUDA_BACKING=1
export GPUCAP_SHARE=$name-stress GPUCAP_MEMORY_LIMIT=24MiB GPUCAP_POOL=on
stress_start bg
json=$(top "$name-stress")
stress_finish \
  "four processes x four threads under one budget beside it: every check passed (contents intact, cuMemGetInfo and NVML sane, NVML listing the budget's processes)"
peak=$stress_peak
oom=$stress_oom
[ "$peak" -gt 0 ] && [ "$peak" -le $((24 * MiB)) ]
ok $? "the device's peak across all processes ($peak bytes) never exceeded the 24 MiB budget"
[ "$oom" -gt 0 ]
ok $? "the budget was full at times: $oom allocations refused"
unlike "$json" "\"pid\": $victim," "the victim's slot was reclaimed (gpucap top no longer lists it)"
like "$json" "\"reclaimed\": [1-9]" "... and counted"
out=$(with_shim "$probe" init ctx info alloc:$((24 * MiB)) 2>&1)
like "$(flat "$out")" "info 0 free=$((24 * MiB)) .*alloc 0" "all exited: the whole budget is free, the victim's charges included"

done_testing
