#!/usr/bin/env bash
# The cap covers what the process costs the device (GPUCAP_CAP_COVERS=process, the default), with
# the fake driver's own memory on (a context holds 401 MiB, tests/fakecuda/README.md). Judged
# from outside gpucap: what the fake driver counts for each process (its NVML figure, printed by
# tests/integ/fill.c as held=, and its own peak), the machine's peak, and the driver's answers in
# its trace. Four quarter-card jobs filling one shared device at once: none is refused before its
# cap, none meets the driver's out-of-memory, the machine never passes the device, no process's
# figure passes its cap; the same with GPUCAP_CAP_COVERS=allocations shows the old overshoot. A
# program raising CU_LIMIT_STACK_SIZE once full; a module load that takes the process over its
# cap (reported, the next allocation refused); NVML absent (deltas); a shared budget.
. "$TOP/tests/integ/lib.sh"

MiB=$((1 << 20))
block=$((64 * MiB))
quarter=$((4 << 30)) # a quarter of the fake's 16 GiB
fill="$TESTBIN/fill"

# field OUTPUT STEP KEY: KEY=... on the line of fill's OUTPUT that starts with STEP.
field() {
  printf '%s\n' "$1" | grep "^$2 " | tail -n 1 | tr ' ' '\n' | sed -n "s/^$3=//p"
}

# driver_ooms TRACE: the driver's own CUDA_ERROR_OUT_OF_MEMORY answers to allocations.
driver_ooms() {
  grep -c 'trace: .*\] cu\(MemCreate\|MemAlloc_v2\|MemAllocPitch_v2\|MemAllocAsync\) = 2$' "$1"
}

# quarter MODE: four processes on one shared machine, each capped at a quarter of the device
# covering MODE, start filling it together (64 MiB blocks until refused), then hold what they
# took until all four have filled. Their output in $WORK/MODE{1..4}.*.
quarter() {
  local mode=$1 machine="quarter$$-$1" i
  pids=
  for i in 1 2 3 4; do
    mkfifo "$WORK/$mode$i.go"
    GPUCAP_CAP_COVERS=$mode GPUCAP_MEMORY_FRACTION=0.25 GPUCAP_REPORT=off \
      GPUCAP_REPORT_JSON="$WORK/$mode$i.report.json" FAKECUDA_MACHINE=$machine \
      FAKECUDA_TRACE="$WORK/$mode$i.trace" FAKECUDA_STATS="$WORK/$mode$i.json" \
      with_shim "$fill" $block start fill start <"$WORK/$mode$i.go" >"$WORK/$mode$i.out" \
      2>"$WORK/$mode$i.err" &
    pids="$pids $!"
  done
  exec 5>"$WORK/${mode}1.go" 6>"$WORK/${mode}2.go" 7>"$WORK/${mode}3.go" 8>"$WORK/${mode}4.go"
  for i in 1 2 3 4; do
    await "$WORK/$mode$i.out" '^ready'
  done
  echo go >&5 && echo go >&6 && echo go >&7 && echo go >&8 # all four fill at once
  for i in 1 2 3 4; do
    await "$WORK/$mode$i.out" '^fill'
  done
  exec 5>&- 6>&- 7>&- 8>&- # all four held their memory together; now they end
  wait_all "$pids"
  rm -f "/dev/shm/fakecuda.$(id -u).$machine"
}

quarter process
is "$bad" 0 "four quarter-card jobs, the cap covering each process: all ran to their end"
peak=0
for i in 1 2 3 4; do
  out=$(cat "$WORK/process$i.out")
  held=$(field "$out" fill held)
  own=$(json_num "$WORK/process$i.json" peak_bytes)
  echo "# job $i: $(field "$out" fill blocks) blocks of 64 MiB, then refused holding $held bytes" \
    "(peak $own) under a cap of $quarter"
  is "$(field "$out" fill rc)" 2 "job $i: filled until refused (CUDA_ERROR_OUT_OF_MEMORY)"
  [ "${held:-0}" -le $quarter ] && [ $((held + block)) -gt $quarter ]
  ok $? "job $i: refused at its cap, not before: ${held:-?} B held, one more block passes the cap"
  [ -n "$own" ] && [ "$own" -le $quarter ]
  ok $? "job $i: its NVML figure never passed its cap (its peak: ${own:-?} B)"
  is "$(driver_ooms "$WORK/process$i.trace")" 0 "job $i: the driver never answered out of memory"
  p=$(json_num "$WORK/process$i.json" machine_peak_bytes)
  [ "${p:-0}" -gt "$peak" ] && peak=$p
done
echo "# the machine's peak: $peak of $((16 << 30)) B"
[ "$peak" -gt 0 ] && [ "$peak" -le $((16 << 30)) ]
ok $? "the four together never passed the device (peak $peak B)"
like "$(cat "$WORK/process1.report.json")" '"driver_measured_by": "nvml"' \
  "gpucap measured the driver's memory through NVML's figure for the process"

# The rule before: the cap on allocations alone. Each job's figure passes its quarter by its
# context, and the four do not fit on the card: some are refused before their cap (the device is
# full) or meet the driver's out-of-memory.
quarter allocations
over=0 short=0
for i in 1 2 3 4; do
  own=$(json_num "$WORK/allocations$i.json" peak_bytes)
  n=$(driver_ooms "$WORK/allocations$i.trace")
  blocks=$(field "$(cat "$WORK/allocations$i.out")" fill blocks)
  echo "# allocations, job $i: $blocks blocks, peak $own B, $n out-of-memory answers from the driver"
  [ "${own:-0}" -gt $quarter ] && over=$((over + 1))
  [ $(((${blocks:-0} + 1) * block)) -le $quarter ] || [ "$n" -gt 0 ] && short=$((short + 1))
done
[ $over -ge 1 ] && [ $short -ge 1 ]
ok $? "GPUCAP_CAP_COVERS=allocations: $over jobs passed their quarter, $short were cut short"

# One process alone: full, then CU_LIMIT_STACK_SIZE raised (792 MiB more local memory).
solo() {
  GPUCAP_MEMORY_FRACTION=0.25 FAKECUDA_STATS="$WORK/$1.json" with_shim "$fill" $block "${@:2}" \
    2>"$WORK/$1.err"
}
out=$(solo stack fill stack:4096 alloc)
echo "# $(printf '%s\n' "$out" | tr '\n' ' ')"
is "$(field "$out" stack rc)/$(field "$out" stack limit)" 2/1024 \
  "raising the stack once full: refused (CUDA_ERROR_OUT_OF_MEMORY), the limit unchanged"
like "$(cat "$WORK/stack.err")" 'cuCtxSetLimit\(CU_LIMIT_STACK_SIZE, 4096\) refused' "... and said"
own=$(json_num "$WORK/stack.json" peak_bytes)
[ -n "$own" ] && [ "$own" -le $quarter ]
ok $? "... the process's NVML figure never passed its cap (peak ${own:-?} B)"
out=$(solo stackfit stack:4096 fill)
held=$(field "$out" fill held)
is "$(field "$out" stack rc)" 0 "raising the stack with room for it: done"
[ "${held:-0}" -le $quarter ] && [ $((held + block)) -gt $quarter ]
ok $? "... and the allocations after it fill the cap less the deeper stack (${held:-?} B held)"
out=$(GPUCAP_CAP_COVERS=allocations solo stackold fill stack:4096)
own=$(json_num "$WORK/stackold.json" peak_bytes)
[ "$(field "$out" stack rc)" = 0 ] && [ "${own:-0}" -gt $((quarter + 512 * MiB)) ]
ok $? "GPUCAP_CAP_COVERS=allocations: the stack passes the cap as before (peak ${own:-?} B)"

# A module load that takes a full process over its cap: the driver does it (gpucap cannot
# refuse it), gpucap says so, and refuses allocations until the process is back under its cap.
out=$(solo module fill module:$block alloc unload free alloc)
echo "# $(printf '%s\n' "$out" | tr '\n' ' ')"
after=$(printf '%s\n' "$out" | sed -n '/^module/{n;p}')
is "$(field "$out" module rc)/$(field "$after" alloc rc)" 0/2 \
  "a module load once full: the driver loads it, the next allocation is refused"
like "$(cat "$WORK/module.err")" 'passes its cap of 4294967296 bytes after cuModuleLoadData' \
  "... with one warning naming the call"
last=$(printf '%s\n' "$out" | grep '^alloc' | tail -n 1)
is "$(field "$last" alloc rc)" 0 "after the module's unload and a free, an allocation fits again"

# Without NVML (a library of that name that is not one): measured by cuMemGetInfo deltas.
mkdir -p "$WORK/nonvml"
printf 'int gpucap_not_nvml;\n' >"$WORK/nonvml/empty.c"
${CC:-cc} -shared -fPIC -o "$WORK/nonvml/libnvidia-ml.so.1" "$WORK/nonvml/empty.c"
out=$(GPUCAP_MEMORY_FRACTION=0.25 GPUCAP_REPORT=off GPUCAP_REPORT_JSON="$WORK/deltas.report.json" \
  LD_LIBRARY_PATH="$WORK/nonvml:$FAKE_DIR" LD_PRELOAD="$(preload)" "$fill" $block fill \
  module:$MiB 2>"$WORK/deltas.err")
held=$(field "$out" fill held)
like "$(cat "$WORK/deltas.report.json")" '"driver_measured_by": "deltas"' \
  "without NVML the driver's memory is measured by deltas"
[ "${held:-0}" -le $quarter ] && [ $((held + block)) -gt $quarter ]
ok $? "... alone on the device, exactly: refused at the cap, not before (${held:-?} B held)"
like "$(tr -d '\n' <"$WORK/deltas.report.json")" '"modules": 1048576' \
  "... and a module load by the change across it (1 MiB)"

# A shared budget: each process's driver memory counts against it.
machine="budget$$"
bpids=
for i in 1 2; do
  mkfifo "$WORK/b$i.go"
  GPUCAP_SHARE="ovh$$" GPUCAP_MEMORY_LIMIT=2GiB FAKECUDA_MACHINE=$machine \
    FAKECUDA_STATS="$WORK/b$i.json" with_shim "$fill" $block start fill start <"$WORK/b$i.go" \
    >"$WORK/b$i.out" 2>"$WORK/b$i.err" &
  bpids="$bpids $!"
done
exec 5>"$WORK/b1.go" 6>"$WORK/b2.go"
await "$WORK/b1.out" '^ready'
await "$WORK/b2.out" '^ready'
echo go >&5 && echo go >&6 # both made their context; now they fill together
await "$WORK/b1.out" '^fill'
await "$WORK/b2.out" '^fill'
"$BUILD/gpucap" top --once --json --budget "ovh$$" >"$WORK/top.json" 2>&1
"$BUILD/gpucap" top --once --budget "ovh$$" | sed 's/^/# /'
exec 5>&- 6>&-
wait_all "$bpids"
peak=$(json_num "$WORK/b2.json" machine_peak_bytes)
p1=$(json_num "$WORK/b1.json" machine_peak_bytes)
[ "${p1:-0}" -gt "${peak:-0}" ] && peak=$p1
echo "# budget: $(field "$(cat "$WORK/b1.out")" fill blocks) + $(field "$(cat "$WORK/b2.out")" fill blocks) blocks, machine peak $peak"
[ "${peak:-0}" -le $((2 << 30)) ] && [ "${peak:-0}" -gt $(((2 << 30) - block)) ]
ok $? "two processes under one 2 GiB budget, their contexts included: the machine's peak ${peak:-?} B"
context=$(((128 << 20) + 132 * 2048 * 1024 + (9 << 20)))
is "$(grep -o '"driver": [0-9]*' "$WORK/top.json" | sed 's/.*: //' | tr '\n' ' ')" \
  "$((2 * context)) $context $context " "gpucap top shows each process's driver memory in the budget"
rm -f "/dev/shm/fakecuda.$(id -u).$machine" "/dev/shm/gpucap-budget.$(id -u).ovh$$"
done_testing
