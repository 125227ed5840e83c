#!/usr/bin/env bash
# The cap, seen from a real program over the fake driver: absolute limits, fractions, per-device
# lists, the smaller of two, get-info and total-mem reporting it, and fail-closed settings.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

MiB=$((1 << 20))
GiB=$((1 << 30))

# captest ARGS...: runs the cap probe under the shim; its stderr goes to $WORK/err.
captest() {
  with_shim "$TESTBIN/captest" "$@" 2>"$WORK/err"
}

# field OUTPUT KEY: the value of KEY=... in captest's output.
field() {
  printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

out=$(GPUCAP_MEMORY_LIMIT=1GiB captest 0 $((256 * MiB)))
is "$(field "$out" allocs)" 4 "1GiB cap: four 256 MiB blocks fit"
is "$(field "$out" last_rc)" 2 "the fifth gets CUDA_ERROR_OUT_OF_MEMORY"
is "$(field "$out" totalmem)" $GiB "cuDeviceTotalMem_v2 reports the cap"
is "$(field "$out" before_total)" $GiB "cuMemGetInfo_v2 total is the cap"
is "$(field "$out" before_free)" $GiB "free is the cap while nothing is allocated"
is "$(field "$out" full_free)" 0 "free is 0 when the cap is used up, not an underflow"
is "$(field "$out" full_rc)" 0 "get-info never errors past the cap"
is "$(field "$out" after_free)" $GiB "frees give the cap back"
is "$(field "$out" burst_rc)" 2,2 "the next two attempts fail the same way"
is "$(grep -c '^gpucap: out of memory on device 0 (pid [0-9]*): ' "$WORK/err")" 1 \
  "one out-of-memory report for the first of three refusals, not one per call"
is "$(grep -c '^gpucap: warning: device 0: out of memory: [0-9.]* [KMGT]*i*B ([0-9]* bytes) refused: cap_full; raise the cap' \
  "$WORK/err")" 2 "  then one line each for the other two, with the verdict and the action"
like "$(cat "$WORK/err")" '  evidence   cap 1.0 GiB, pool 1.0 GiB, in use 1.0 GiB; free under cap 0 B' \
  "  it shows the evidence, in the exit report's names"
is "$(grep -c '^gpucap: error' "$WORK/err")" 0 "a valid setting prints no error"

out=$(captest 0 $((4 * GiB)))
is "$(field "$out" allocs)" 4 "no cap: the fake's 16 GiB hold four 4 GiB blocks"
is "$(field "$out" totalmem)" $((16 * GiB)) "no cap: total is the device's"

out=$(GPUCAP_MEMORY_FRACTION=0.25 captest 0 $((512 * MiB)))
is "$(field "$out" allocs)" 8 "fraction 0.25 of 16 GiB holds eight 512 MiB blocks"
is "$(field "$out" before_total)" $((4 * GiB)) "get-info total is a quarter of the card"

out=$(GPUCAP_MEMORY_FRACTION=0.5 GPUCAP_MEMORY_LIMIT=2GiB captest 0 $GiB)
is "$(field "$out" allocs)" 2 "limit 2GiB and fraction 0.5: the smaller (2 GiB) wins"
out=$(GPUCAP_MEMORY_FRACTION=0.0625 GPUCAP_MEMORY_LIMIT=2GiB captest 0 $GiB)
is "$(field "$out" allocs)" 1 "limit 2GiB and fraction 1/16: the smaller (1 GiB) wins"

export FAKECUDA_DEVICES=2 FAKECUDA_MEMORY=0:16GiB,1:8GiB
out0=$(GPUCAP_MEMORY_LIMIT=0:3GiB,1:1GiB captest 0 $GiB)
out1=$(GPUCAP_MEMORY_LIMIT=0:3GiB,1:1GiB captest 1 $GiB)
is "$(field "$out0" allocs)/$(field "$out1" allocs)" 3/1 "per-device limits: 3 GiB on 0, 1 GiB on 1"
out1=$(GPUCAP_MEMORY_FRACTION=1:0.5 captest 1 $GiB)
is "$(field "$out1" totalmem)" $((4 * GiB)) "a per-device fraction uses that device's total"
out0=$(GPUCAP_MEMORY_FRACTION=1:0.5 captest 0 $((8 * GiB)))
is "$(field "$out0" allocs)" 2 "a device missing from the list is not capped"
unset FAKECUDA_DEVICES FAKECUDA_MEMORY

for bad in 1GB 0x100 -1 010 '4 GiBs' 0 '0:1GiB,0:2GiB'; do
  out=$(GPUCAP_MEMORY_LIMIT="$bad" captest 0 $MiB)
  is "$(field "$out" allocs)" 0 "GPUCAP_MEMORY_LIMIT='$bad' fails closed: no memory at all"
  is "$(field "$out" before_total)" 0 "  and get-info reports nothing to use"
  lines=$(grep -c '^gpucap: error' "$WORK/err")
  like "$(cat "$WORK/err")" "^gpucap: error: GPUCAP_MEMORY_LIMIT='$bad'.*accepted" \
    "  one message names the variable, the value and the accepted forms"
  is "$lines" 1 "  exactly one error line (the exit report shows the refusals)"
done
# An empty value is unset (what a template that expands an unset value means), not an error.
out=$(GPUCAP_MEMORY_LIMIT= GPUCAP_MEMORY_FRACTION=0.25 captest 0 $GiB)
is "$(field "$out" allocs)" 4 "GPUCAP_MEMORY_LIMIT='' is unset: the fraction alone caps"
is "$(grep -c '^gpucap: error' "$WORK/err")" 0 "  and nothing is said"
out=$(GPUCAP_MEMORY_FRACTION=1.5 captest 0 $MiB)
is "$(field "$out" allocs)" 0 "GPUCAP_MEMORY_FRACTION=1.5 fails closed"
like "$(cat "$WORK/err")" "GPUCAP_MEMORY_FRACTION='1.5'" "  and says so"

out=$(TF_FORCE_GPU_ALLOW_GROWTH=yes GPUCAP_MEMORY_LIMIT=64MiB captest 0 \
  $((16 * MiB)))
is "$(field "$out" allocs)" 4 "a TF_FORCE_GPU_ALLOW_GROWTH TensorFlow would reject leaves the cap"
like "$(cat "$WORK/err")" "^gpucap: warning: TF_FORCE_GPU_ALLOW_GROWTH" "  with a warning"

# A misspelled setting is named, with the setting meant, once, when the program uses CUDA.
out=$(GPUCAP_MEMROY_LIMIT=1GiB GPUCAP_REPORT=off captest 0 $((256 * MiB)))
is "$(grep -c 'GPUCAP_MEMROY_LIMIT' "$WORK/err")" 1 "a misspelled setting gets one warning ..."
is "$(grep 'GPUCAP_MEMROY_LIMIT' "$WORK/err")" "gpucap: warning: GPUCAP_MEMROY_LIMIT is not a \
gpucap setting and is ignored (did you mean GPUCAP_MEMORY_LIMIT?)" "  ... naming the setting meant"

# Out-of-memory reports that say what is so. A request too large to round says so (it is not
# "rounded to 0" into bin 0); a device that is itself full is not blamed on the cap.
out=$(GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_OOM_DUMP=stderr captest 0 18446744073709551615 1)
is "$(field "$out" allocs)" 0 "SIZE_MAX bytes: refused"
is "$(grep -c 'rounded to 0\|bin for the request: 0' "$WORK/err")" 0 \
  "  the pool's dump does not call it rounded to 0 in bin 0"
like "$(cat "$WORK/err")" '18446744073709551615 bytes: larger than any pool can hold' \
  "  it says the request is larger than any pool can hold"
out=$(FAKECUDA_MEMORY=256MiB GPUCAP_MEMORY_LIMIT=1GiB captest 0 $((64 * MiB)))
is "$(field "$out" allocs)" 4 "a 1 GiB cap on a 256 MiB device: the device runs out first"
is "$(grep -c 'raise the cap' "$WORK/err")" 0 "  the verdict does not say to raise the cap"
like "$(cat "$WORK/err")" '  verdict    device_full: device 0 itself is full, and this process filled it' \
  "  it says the device itself is full, filled by this process"
like "$(cat "$WORK/err")" '  helps      the program needs more than the device has' \
  "  and that the program needs more than the device has"
done_testing
