#!/usr/bin/env bash
# Oversubscription (GPUCAP_OVERSUBSCRIBE, GPUCAP_SPILL): programs that need more than their cap
# (tests/integ/spilltest.c) run on, with what does not fit in host memory, and the device never
# holds more than the cap. Judged from outside by the fake driver's figures, where managed pages
# a device holds count in its peak (tests/fakecuda/README.md, "Managed memory"): each program
# runs without gpucap (the device holds more than the cap: the oracle bites), under the cap
# alone (refused, as before), and with a spill budget (served; the device's peak within the
# cap). gpucap's exit report, trace and refusal messages must say what spilled.
. "$TOP/tests/integ/lib.sh"

MiB=$((1 << 20))
cap=$((64 * MiB))
# The driver's own memory is off: the device's peak is then what the allocations alone made it.
export FAKECUDA_BACKING=1 FAKECUDA_MEMORY=256MiB FAKECUDA_DRIVER_MEMORY=off

# spilltest with|without VAR=VALUE... -- ARGS...: the program with those settings, with the
# shim or without.
spilltest() {
  (
    shim=$1
    shift
    while [ "$1" != -- ]; do
      export "${1?}"
      shift
    done
    shift
    "${shim}_shim" timeout 300 "$TESTBIN/spilltest" "$@" # a bound for hangs, not a timing
  )
}

# run NAME SETTINGS... -- ARGS...: spilltest ARGS with the shim and SETTINGS (none: without the
# shim), its TAP folded into one check; the fake's report in $WORK/NAME.json, gpucap's JSON in
# $WORK/NAME.report.json, its stderr in $WORK/NAME.err.
run() {
  local name=$1 shim=with
  shift
  [ "$1" = -- ] && shim=without
  rm -f "$WORK/$name.json" "$WORK/$name.report.json"
  tap_program "$name" spilltest $shim FAKECUDA_STATS="$WORK/$name.json" \
    GPUCAP_REPORT_JSON="$WORK/$name.report.json" "$@"
  cp "$WORK/stderr" "$WORK/$name.err"
}

# fake NAME KEY: KEY of device 0 in the fake's report of run NAME.
fake() {
  json_num "$WORK/$1.json" "$2"
}

# report NAME KEY: KEY of the first device's usage in gpucap's JSON report of run NAME.
report() {
  json_num "$WORK/$1.report.json" "$2"
}

below() {
  [ -n "$2" ] && [ "$2" -le "$3" ]
  ok $? "$1 ($2 <= $3)"
}

# 1. cudaMalloc one allocation past the cap.
run bare-malloc -- malloc $cap fit
ok "$([ "$(fake bare-malloc peak_bytes)" -gt $cap ]; echo $?)" \
  "without gpucap the device holds more than the cap ($(fake bare-malloc peak_bytes))"
for pool in on regions off; do
  run "capped-$pool" GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=$cap GPUCAP_REPORT=off -- \
    malloc $cap refuse
  run "budget-only-$pool" GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=$cap GPUCAP_REPORT=off \
    GPUCAP_OVERSUBSCRIBE=128MiB -- malloc $cap refuse
  n="spill-$pool"
  run "$n" GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=$cap GPUCAP_OVERSUBSCRIBE=128MiB \
    GPUCAP_SPILL=on GPUCAP_TRACE="$WORK/$n.csv" GPUCAP_REPORT="$WORK/$n.txt" -- \
    malloc $cap spill
  below "pool $pool, --spill: the device's peak stays within the cap" "$(fake "$n" peak_bytes)" $cap
  is "$(fake "$n" managed_peak_bytes)" 0 \
    "pool $pool: no page of the spilled block reached the device, prefetched or advised"
  is "$(report "$n" spilled_allocations)/$(report "$n" peak_spilled_bytes)/$(report "$n" spilled_bytes)" \
    "1/$((16 * MiB))/0" "pool $pool: the report: one allocation spilled, 16 MiB at peak, none left"
  is "$(report "$n" spill_budget_bytes)" $((128 * MiB)) "pool $pool: the report names the budget"
  ok "$([ "$(report "$n" right_size_bytes)" -ge $((80 * MiB)) ]; echo $?)" \
    "pool $pool: the right size ($(report "$n" right_size_bytes)) is a cap that would not spill"
  grep -q "device 0 spilled to host: 0 B now, 16.0 MiB at peak, 1 allocation (budget 128.0 MiB)" \
    "$WORK/$n.txt"
  ok $? "pool $pool: the exit report's table says what spilled"
  head -n 1 "$WORK/$n.csv" | grep -q ',Library,Spilled$'
  ok $? "pool $pool: the trace has a Spilled column after gpucap's others"
  is "$(awk -F, '$11 != "" && $12 == 16777216 { print $8 }' "$WORK/$n.csv" | tr '\n' ' ')" \
    "alloc free " "pool $pool: the spilled block's rows (and only they) carry its 16 MiB"
  "$BUILD/gpucap" plot "$WORK/$n.csv" -o "$WORK/$n.svg" --cap $cap 2>"$WORK/plot.err"
  ok $? "pool $pool: gpucap plot reads a trace with the Spilled column"
done

# The same through the command's own options: gpucap run --oversubscribe --spill.
rm -f "$WORK/cli.json"
tap_program "gpucap run --limit 64MiB --oversubscribe 128MiB --spill: the fifth block spills" \
  env LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="${SAN_PRELOAD:-}" FAKECUDA_STATS="$WORK/cli.json" \
  "$BUILD/gpucap" run --limit 64MiB --oversubscribe 128MiB --spill --quiet -- \
  "$TESTBIN/spilltest" malloc $cap spill
below "  the device's peak stays within the cap" "$(json_num "$WORK/cli.json" peak_bytes)" $cap

# 2. Half of a block spilled (a quarter of the cap left), prefetched whole; pitched beyond.
run split GPUCAP_MEMORY_LIMIT=$cap GPUCAP_OVERSUBSCRIBE=128MiB GPUCAP_SPILL=on \
  GPUCAP_REPORT=off -- split $cap
below "split: the device's peak stays within the cap" "$(fake split peak_bytes)" $cap
is "$(fake split managed_peak_bytes)" $((16 * MiB)) \
  "split: the part under the cap came to the device, and only it"

# 3. TensorFlow's per_process_gpu_memory_fraction=1.5: one managed allocation of 1.5 x the cap.
run bare-tf -- managed $cap ok
ok "$([ "$(fake bare-tf peak_bytes)" -gt $cap ]; echo $?)" \
  "fraction 1.5 without gpucap: the device holds more than the cap ($(fake bare-tf peak_bytes))"
run capped-tf GPUCAP_MEMORY_LIMIT=$cap GPUCAP_REPORT=off -- managed $cap refuse
run spill-tf GPUCAP_MEMORY_LIMIT=$cap GPUCAP_OVERSUBSCRIBE=64MiB GPUCAP_REPORT=off -- \
  managed $cap ok
below "fraction 1.5 under --oversubscribe: the device's peak stays within the cap" \
  "$(fake spill-tf peak_bytes)" $cap
is "$(report spill-tf peak_spilled_bytes)" $((32 * MiB)) "  the half beyond the cap spilled"

# 3b. The same with the driver's own memory (401 MiB a context on the fake) in a 1 GiB cap that
# counts it (GPUCAP_CAP_COVERS=process, the default): what stays on the device is the cap less
# that memory, the rest spills, and the device never holds more than the cap for the process.
GiB=$((1 << 30))
run spill-driver FAKECUDA_DRIVER_MEMORY=on FAKECUDA_MEMORY=4GiB GPUCAP_MEMORY_LIMIT=1GiB \
  GPUCAP_OVERSUBSCRIBE=2GiB GPUCAP_REPORT=off -- managed $GiB ok
below "driver memory on: the device's peak for the process stays within the cap" \
  "$(fake spill-driver peak_bytes)" $GiB
ok "$([ "$(report spill-driver peak_spilled_bytes)" -gt $((GiB / 2 + 256 * MiB)) ]; echo $?)" \
  "  more than the half beyond the cap spilled: the driver's share of the cap too ($(report spill-driver peak_spilled_bytes))"
# CuPy's managed pool: the second block asked for before a kernel touched the first, whose pages
# are then not yet on the device; NVML's figure must not make the driver's memory look smaller.
run pair-driver FAKECUDA_DRIVER_MEMORY=on FAKECUDA_MEMORY=4GiB GPUCAP_MEMORY_LIMIT=1GiB \
  GPUCAP_OVERSUBSCRIBE=2GiB GPUCAP_REPORT=off -- pair $GiB
below "two managed blocks, untouched at the second: the device's peak stays within the cap" \
  "$(fake pair-driver peak_bytes)" $GiB

# 4. A spill budget too small: refused, and the verdict says the budget was the limit.
run small GPUCAP_MEMORY_LIMIT=$cap GPUCAP_OVERSUBSCRIBE=8MiB GPUCAP_SPILL=on -- \
  malloc $cap refuse
is "$(json_obj_num "$WORK/small.report.json" refusals spill_full)" 1 \
  "a spill budget too small: one refusal, verdict spill_full"
grep -q "verdict    spill_full: the request fits neither under the cap nor in the spill budget" \
  "$WORK/small.err" && grep -q "evidence   spill budget 8.0 MiB, spilled 0 B" "$WORK/small.err"
ok $? "  the out-of-memory message says the spill budget was the limit"

# 5. Threads, each in a context of its own, under one cap and one spill budget.
run threads GPUCAP_MEMORY_LIMIT=$cap GPUCAP_OVERSUBSCRIBE=128MiB GPUCAP_SPILL=on \
  GPUCAP_REPORT=off -- threads $cap 4 $((8 * MiB))
below "4 threads x contexts: the device's peak stays within the cap" "$(fake threads peak_bytes)" $cap
below "  the spill budget was never passed" "$(report threads peak_spilled_bytes)" $((128 * MiB))
is "$(report threads peak_spilled_bytes)" $((128 * MiB)) "  and was used whole"
is "$(json_obj_num "$WORK/threads.report.json" refusals spill_full)" 4 \
  "  each thread's last request refused by the spill budget"

# 6. fork: a child of a process that spilled starts with nothing spilled.
rm -f "$WORK"/fork.*.json
tap_program "fork after a spill" spilltest with GPUCAP_MEMORY_LIMIT=$cap GPUCAP_OVERSUBSCRIBE=64MiB \
  GPUCAP_SPILL=on GPUCAP_REPORT=off GPUCAP_REPORT_JSON="$WORK/fork.%p.json" -- fork $cap
is "$(ls "$WORK"/fork.*.json 2>/dev/null | wc -l | tr -d ' ')" 1 \
  "  only the parent writes a report (the child spilled nothing)"

# 7. A spill budget the host cannot hold: refused before anything runs, or fail closed.
"$BUILD/gpucap" run --limit 64MiB --oversubscribe 1048576TiB true 2>"$WORK/run.err"
is $? 125 "gpucap run --oversubscribe 1 EiB: refused, status 125"
grep -q "GPUCAP_OVERSUBSCRIBE='1048576TiB': the spill budget of every device (1048576TiB) is more than this host's memory" "$WORK/run.err"
ok $? "  with a message naming the budget and the host's memory"
out=$(GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_OVERSUBSCRIBE=1048576TiB GPUCAP_REPORT=off \
  with_shim "$TESTBIN/captest" 0 $MiB 2>"$WORK/bare.err")
printf '%s\n' "$out" | grep -q '^allocs=0'
ok $? "under LD_PRELOAD the same setting fails closed: nothing is allocated"
is "$(grep -c "gpucap: error: GPUCAP_OVERSUBSCRIBE=" "$WORK/bare.err")" 1 "  one error line says why"

done_testing
