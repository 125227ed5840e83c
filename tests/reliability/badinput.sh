#!/usr/bin/env bash
# The bad-input matrix, through the real shim in a real program over the fake driver.
# 1. Settings: malformed and hostile values for every variable (garbage, signs, overflow, octal
#    and hex, exponents, huge, non-ASCII, control bytes, per-device lists with bad ordinals,
#    words that are not file names, paths too long or with control bytes; an empty or blank
#    value is unset, checked apart). Each must give exactly
#    one clear message naming the variable, the value and the accepted forms, fail closed (no
#    device memory at all, get-info shows none) even next to a valid limit, never crash, never
#    write to stdout.
# 2. Arguments: tests/reliability/badargs.c passes NULL, invalid, freed and interior pointers,
#    sizes 0 and SIZE_MAX, bad handles, flags, versions and ordinals to every hooked entry
#    point, before cuInit, without a context and with one. Without a cap, gpucap's answers
#    must equal the driver's own (run without gpucap), with the pool on and off; under a cap,
#    only over-cap allocations may differ, and only by CUDA_ERROR_OUT_OF_MEMORY.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off
. "$TOP/tests/reliability/rlib.sh"

MiB=$((1 << 20))
cases=0

# One bad value of one variable, next to a valid 1 GiB limit unless the variable is the limit.
check_bad() {
  local var=$1 value=$2 shown=$3 out err lines
  cases=$((cases + 1))
  out=$(
    [ "$var" = GPUCAP_MEMORY_LIMIT ] || export GPUCAP_MEMORY_LIMIT=1GiB
    export "$var=$value"
    with_shim "$TESTBIN/captest" 0 "$MiB" 8 2>"$WORK/err"
  )
  local status=$?
  err=$(cat "$WORK/err")
  lines=$(grep -c '^gpucap: error' "$WORK/err")
  local why=""
  [ "$status" -eq 0 ] || why="$why exit status $status;"
  [ "$(field "$out" allocs)" = 0 ] || why="$why $(field "$out" allocs) allocations succeeded;"
  [ "$(field "$out" before_total)" = 0 ] || why="$why get-info total $(field "$out" before_total);"
  [ "$lines" = 1 ] || why="$why $lines error lines;"
  printf '%s\n' "$err" | grep -q "^gpucap: error: $var='.*accepted: " ||
    why="$why the message does not name $var and the accepted forms;"
  printf '%s\n' "$out" | grep -q gpucap && why="$why gpucap wrote to stdout;"
  printf '%s' "$err" | LC_ALL=C grep -q '[^[:print:][:space:]]' &&
    why="$why unescaped bytes in the message;"
  if [ -z "$why" ]; then
    ok 0 "$var=$shown fails closed with one message"
  else
    ok 1 "$var=$shown fails closed with one message"
    printf '#  %s\n' "$why"
    printf '%s\n' "$err" | head -3 | sed 's/^/#   stderr: /'
  fi
}

long=$(head -c 100000 /dev/zero | tr '\0' '9')
longpath="./$(head -c 5000 /dev/zero | tr '\0' 'a')"
sizes=(garbage '-1' '-0' '+1' '1GB' '1gb' '1 G B' '0x100' '0X1p3' '010' '00'
  '0' '8' '512' '1048575' '0:64' '0.0GiB' '1e9' '1E9' '1.5' '1.' '.GiB' 'nan' 'inf' '-inf' '18446744073709551616'
  '18446744073709551615GiB' '16777216TiB' '99999999999999999999999999' '1PiB' '1 EiB' '1 GiBs'
  '1GiB1' '1GiB 1' '1,5GiB' $'1\nGiB' $'1GiB\x01' $'\x7f' $'1\xc3\xa9' $'\xd9\xa1GiB' '１GiB'
  '1 Pi' '4GiB;rm' '1.0000000000000000001GiB' "$long"
  '0:1GiB,0:2GiB' '64:1GiB' '0:1GiB,64:1GiB' '-1:1GiB' '00:1GiB' '0x0:1GiB' '0:' ':1GiB'
  '0:1GiB,' ',0:1GiB' '0:1GiB,,1:1GiB' '0;1GiB' '0:1GiB 1:2GiB' '0:1GiB:2GiB'
  '99999999999999999999:1GiB' $'\xd9\xa0:1GiB' '0:-1' '0:0' '0:1GB' 'a:1GiB')
for v in "${sizes[@]}"; do
  shown=$(printf '%q' "$v" | cut -c1-40)
  check_bad GPUCAP_MEMORY_LIMIT "$v" "$shown"
done
fractions=(garbage '0' '0.0' '-0.5' '1.5' '1.0000000000000000001' '2' '150%' '0%' '50%%' '1e-1'
  '0x0.8' '.' '0.' '00.5' '01' 'nan' '0,5' '0:0.5,0:0.25' '64:0.5' '0:1.5' '0:' '0:0'
  $'0.5\x01' $'\xc2\xbd' "$long")
for v in "${fractions[@]}"; do
  check_bad GPUCAP_MEMORY_FRACTION "$v" "$(printf '%q' "$v" | cut -c1-40)"
done
for var in GPUCAP_ALLOW_GROWTH GPUCAP_POOL; do
  for v in maybe '2' '-1' 'tru' 'truee' 'yes please' $'on\x01' 'ＯＮ' "$long"; do
    check_bad "$var" "$v" "$(printf '%q' "$v" | cut -c1-40)"
  done
done
for v in '-1' '4' '01' '1.0' '0x1' 'debug' '99999999999999999999' $'1\xc3\xa9' "$long"; do
  check_bad GPUCAP_VERBOSE "$v" "$(printf '%q' "$v" | cut -c1-40)"
done
for var in GPUCAP_REPORT GPUCAP_REPORT_JSON GPUCAP_TRACE; do
  for v in '-' 'stdout' '1' 'none' $'./a\nb' $'./a\x01' $'./a\tb' "$longpath"; do
    check_bad "$var" "$v" "$(printf '%q' "$v" | cut -c1-40)"
  done
done

# An empty or blank value is unset (a template expanding an unset value), never "no cap": the
# 4 MiB cap next to it holds, and no error is reported.
for var in GPUCAP_MEMORY_LIMIT GPUCAP_MEMORY_FRACTION GPUCAP_ALLOW_GROWTH GPUCAP_POOL \
    GPUCAP_VERBOSE GPUCAP_REPORT GPUCAP_REPORT_JSON GPUCAP_TRACE; do
  for v in '' ' ' $'\t\n'; do
    out=$(
      export FAKECUDA_MEMORY=16MiB GPUCAP_REPORT=off
      [ "$var" = GPUCAP_MEMORY_LIMIT ] && export GPUCAP_MEMORY_FRACTION=0.25
      [ "$var" = GPUCAP_MEMORY_LIMIT ] || export GPUCAP_MEMORY_LIMIT=4MiB
      export "$var=$v"
      with_shim "$TESTBIN/captest" 0 "$MiB" 8 2>"$WORK/err"
    )
    cases=$((cases + 1))
    [ "$(field "$out" allocs)" = 4 ] && ! grep -q '^gpucap: error' "$WORK/err"
    ok $? "$var=$(printf '%q' "$v") is unset: the 4 MiB cap holds, no error"
  done
done

# A TensorFlow variable TensorFlow itself would ignore leaves the cap in force, with a warning.
out=$(TF_FORCE_GPU_ALLOW_GROWTH=$'tr\xffue' GPUCAP_MEMORY_LIMIT=4MiB \
  with_shim "$TESTBIN/captest" 0 "$MiB" 8 2>"$WORK/err")
is "$(field "$out" allocs)" 4 "TF_FORCE_GPU_ALLOW_GROWTH=garbage: the 4 MiB cap holds"
like "$(cat "$WORK/err")" "^gpucap: warning: TF_FORCE_GPU_ALLOW_GROWTH='tr\\\\xffue'" \
  "  with one warning, the byte escaped"
cases=$((cases + 1))

# ---- Arguments.
run_badargs() {
  "$@" "$TESTBIN/reliability/badargs" 2>"$WORK/badargs.err"
}
run_badargs without_shim > "$WORK/none.txt"
ok $? "badargs without gpucap runs to the end ($(wc -l < "$WORK/none.txt") calls)"
calls=$(grep -c '' "$WORK/none.txt")

# compare NAME FILE ALLOWED: equal to the driver's answers except lines matching ALLOWED
# (an extended regex on "label rc").
compare() {
  local name=$1 file=$2 allowed=$3 diffs unexplained
  diffs=$(diff "$WORK/none.txt" "$file" | grep '^>' | sed 's/^> //')
  unexplained=$(printf '%s\n' "$diffs" | grep -v '^$' | grep -Ev "$allowed")
  [ -z "$unexplained" ] && [ "$(wc -l < "$file")" = "$calls" ]
  ok $? "$name: every answer is the driver's own"
  [ -z "$unexplained" ] || printf '%s\n' "$unexplained" | head -10 | sed 's/^/#   differs: /'
}
NONE='^$'
# Over-cap allocations are refused before the driver is asked: CUDA_ERROR_OUT_OF_MEMORY (after
# cuInit: before it, every answer is the driver's NOT_INITIALIZED).
OVERCAP='^(noctx|ctx):(alloc_v1|alloc_v2|pitch_v1|pitch_v2|managed|memcreate|allocasync|array_v2|array3d'
OVERCAP="$OVERCAP"'|mipmap)'
OVERCAP="$OVERCAP"'\(.*(SIZE_MAX|UINT_MAX|2\^6|2\^31).*\) 2$'
# Every pool exports its blocks as the driver exports cuMemAlloc memory (the VMM-backed pool's
# through its units); regions last: the IPC checks below read its run.
for cap in none 64MiB; do
  for mode in off on regions; do
    if [ "$cap" = none ]; then
      GPUCAP_POOL=$mode run_badargs with_shim > "$WORK/$mode.txt"
    else
      GPUCAP_MEMORY_LIMIT=$cap GPUCAP_POOL=$mode run_badargs with_shim > "$WORK/$mode.txt"
    fi
    status=$?
    ok $status "cap $cap, pool=$mode: badargs runs to the end (no crash)"
    [ "$status" -eq 0 ] || { tail -1 "$WORK/$mode.txt" | sed 's/^/#   last call: /'; tail -3 \
      "$WORK/badargs.err" | sed 's/^/#   stderr: /'; }
    allowed=$NONE
    [ "$cap" = none ] || allowed=$OVERCAP
    compare "cap $cap, pool=$mode" "$WORK/$mode.txt" "$allowed"
    if [ "$mode" != off ]; then
      got=$(grep '^~freeasync(block,bogus stream) ' "$WORK/$mode.txt")
      want=$(grep '^~freeasync(block,bogus stream) ' "$WORK/none.txt")
      is "$got" "$want" "cap $cap, pool=$mode: cuMemFreeAsync of a pooled block on an invalid stream"
    fi
    cases=$((cases + calls))
  done
done
is "$(grep '^~ipc(h,block) ' "$WORK/regions.txt")" "~ipc(h,block) 0" \
  "pool=regions: a pooled block is exported"
is "$(grep '^~ipcopen(p,unknown export,1) ' "$WORK/regions.txt")" "~ipcopen(p,unknown export,1) 1" \
  "pool=regions: a gpucap handle naming no export is refused (CUDA_ERROR_INVALID_VALUE) ..."
like "$(cat "$WORK/badargs.err")" "cuIpcOpenMemHandle: process [0-9]* no longer shares this block" \
  "  ... saying why"

echo "# bad inputs tried: $cases"
record_figure badinput "$cases bad inputs ($calls hooked calls with hostile arguments per run)"
done_testing
