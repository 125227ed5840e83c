#!/usr/bin/env bash
# CUDA arrays and mipmapped arrays under the cap: each kind is charged what the driver used
# (the fake's own report says how much it holds), arrays over the cap never reach the driver,
# destruction by the program or with a context gives the charge back, a failed destroy keeps
# it, bad descriptors get the driver's code, deferred-mapping arrays cost nothing.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

export GPUCAP_MEMORY_LIMIT=64MiB
for kind in 2d 1d 3d layered cubemap mipmap mipmap-layered; do
  FAKECUDA_STATS="$WORK/$kind.json" tap_program "a $kind array is charged" \
    with_shim "$TESTBIN/arrays" charge $kind
  charged=$(printf '%s\n' "$out" | sed -n 's/^# charged \([0-9]*\) bytes$/\1/p')
  live=$(json_num "$WORK/$kind.json" live_bytes)
  is "$charged" "$live" "  the charge is what the driver holds for it ($live bytes)"
done
is "$(json_num "$WORK/2d.json" leaked_bytes)" "$(json_num "$WORK/2d.json" live_bytes)" \
  "the driver reports an array never destroyed as leaked"

FAKECUDA_STATS="$WORK/skewed.json" tap_program "narrow rows: the driver's padded layout is charged" \
  with_shim "$TESTBIN/arrays" charge skewed
charged=$(printf '%s\n' "$out" | sed -n 's/^# charged \([0-9]*\) bytes$/\1/p')
is "$charged" "$(json_num "$WORK/skewed.json" live_bytes)" "  what the driver holds (32 MiB)"

FAKECUDA_STATS="$WORK/refuse.json" tap_program "arrays over the cap are refused" \
  with_shim "$TESTBIN/arrays" refuse
is "$(json_num "$WORK/refuse.json" peak_bytes)" 52428800 \
  "  the driver never held more than the 50 MiB array that fits (the 75 MiB one: never made)"
is "$(json_num "$WORK/refuse.json" live_bytes)" 0 "  and nothing at the end"

FAKECUDA_STATS="$WORK/narrow.json" tap_program "arrays the driver pads far beyond their lower bound" \
  with_shim "$TESTBIN/arrays" narrow
peak=$(json_num "$WORK/narrow.json" peak_bytes)
[ -n "$peak" ] && [ "$peak" -le $((64 << 20)) ]
ok $? "  the driver never held more than the cap (peak ${peak:-?})"

for mode in destroy bad deferred ctxdestroy reset release; do
  tap_program "$mode" with_shim "$TESTBIN/arrays" $mode
done
GPUCAP_POOL=off tap_program "arrays and cuMemAlloc share the cap" \
  with_shim "$TESTBIN/arrays" share

done_testing
