#!/usr/bin/env bash
# Ways past the cap, each tried the way a real program does it (tests/reliability/capholes.c):
# VMM memory released at once but still mapped, retained again, or imported again from its own
# file-descriptor export; stream-ordered memory from
# another device's pool or stream, or with no current context, kept across a context's
# destruction, freed by a primary reset, or freed on a stream that has not reached the free;
# an over-cap pitched request without the pool; the legacy get-info deciding a fractional cap;
# two threads freeing one block. Judged by the program's own checks and, from outside, by the
# fake driver's per-device peak: no device ever held more than its cap.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off
. "$TOP/tests/reliability/rlib.sh"

export GPUCAP_REPORT=off FAKECUDA_DEVICES=2

# device_peak FILE ORDINAL: the fake's peak_bytes of one device.
device_peak() {
  grep "\"ordinal\": $2," "$1" | grep -o '"peak_bytes": *[0-9]*' | sed 's/.*: *//'
}

# scenario NAME CAP0 CAP1 [VAR=VALUE...]: runs one scenario with the settings given; a cap of
# '-' is not checked (the table: tests/reliability/holes.sh).
scenario() {
  local name=$1 cap0=$2 cap1=$3 status
  shift 3
  (
    export "$@" FAKECUDA_STATS="$WORK/$name.json"
    with_shim "$TESTBIN/reliability/capholes" "$name" > "$WORK/out" 2> "$WORK/err"
  )
  status=$?
  relay "$name: " < "$WORK/out"
  ok $? "$name: the program printed its checks"
  grep -q '^1\.\.[0-9]' "$WORK/out"
  ok $? "$name: the program ran to the end (status $status)"
  [ $status -eq 0 ] || sed 's/^/# stderr: /' "$WORK/err" | head -5
  for dev in 0 1; do
    local cap=$cap0
    [ $dev -eq 1 ] && cap=$cap1
    [ "$cap" = - ] && continue
    local peak
    peak=$(device_peak "$WORK/$name.json" $dev)
    [ -n "$peak" ] && [ "$peak" -le "$cap" ]
    ok $? "$name: device $dev never held more than its cap (peak ${peak:-?} <= $cap)"
  done
}

. "$TOP/tests/reliability/holes.sh"
hole_scenarios
done_testing
