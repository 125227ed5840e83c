#!/usr/bin/env bash
# The cap invariant (tests/reliability/invariant.c): 4 threads x contexts x 2 devices x every
# allocation family, random frees (with device work pending), context destroys and primary
# resets, host-backed data checked, under tight caps (24 MiB on device 0, 16 MiB on device 1),
# with the VMM-backed pool (GPUCAP_POOL=on over the fake; idle memory released after 1 ms, so
# units are unmapped and mapped again all the time), the region pool and GPUCAP_POOL=off, and
# the VMM-backed pool with a spill budget and GPUCAP_SPILL (allocations beyond the cap served
# as managed memory kept on the host, which the workers touch, prefetch and advise to the
# device: its managed pages count in the fake's peak).
# Judged from outside by the fake driver's per-device
# peak: no device ever held more than its cap, plus the driver's rounding. gpucap charges the
# bytes it asks the driver for; the fake holds each allocation in 512-byte units. The program's
# sizes are multiples of 512, but a pool region clipped to the headroom under the cap is a
# multiple of 256 only, so each live region may hold 256 bytes more than charged: the bound
# allows 64 KiB (256 regions), far below any block the program allocates.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off
. "$TOP/tests/reliability/rlib.sh"

MiB=$((1 << 20))
cap0=$((24 * MiB))
cap1=$((16 * MiB))
ops=${INVARIANT_OPS:-1500}
rounding=$((64 << 10))
case "${SAN_PRELOAD:-}" in *tsan*) ops=$((ops / 4)) ;; esac
export FAKECUDA_DEVICES=2 FAKECUDA_MEMORY=256MiB FAKECUDA_BACKING=1 GPUCAP_REPORT=off
export GPUCAP_MEMORY_LIMIT=0:24MiB,1:16MiB

total_ops=0
for mode in on regions off spill; do
  for seed in 1 2; do
    name="pool=$mode seed $seed"
    pool=$mode budget="" spill=""
    [ $mode = spill ] && pool=on budget=0:32MiB,1:16MiB spill=on
    GPUCAP_POOL=$pool GPUCAP_OVERSUBSCRIBE=$budget GPUCAP_SPILL=$spill GPUCAP_RELEASE_AFTER=1 \
      FAKECUDA_STATS="$WORK/stats.json" with_shim \
      "$TESTBIN/reliability/invariant" 4 "$ops" "$seed" $cap0 $cap1 1 "$([ -n "$spill" ] && echo 1)" \
      >"$WORK/out" 2>"$WORK/err"
    status=$?
    relay "$name: " < "$WORK/out"
    ok $? "$name: the program printed its checks"
    ok $status "$name: the program ran to the end (status $status)"
    [ $status -eq 0 ] || grep -v '^ \|^Bin\|^Stats' "$WORK/err" | head -5 | sed 's/^/# stderr: /'
    for dev in 0 1; do
      cap=$cap0
      [ $dev -eq 1 ] && cap=$cap1
      peak=$(grep "\"ordinal\": $dev," "$WORK/stats.json" | grep -o '"peak_bytes": *[0-9]*' |
        sed 's/.*: *//')
      [ -n "$peak" ] && [ "$peak" -le $((cap + rounding)) ]
      ok $? "$name: device $dev never held more than its cap (peak ${peak:-?}, cap $cap)"
    done
    is "$(json_num "$WORK/stats.json" hazards)" 0 "$name: the fake saw no hazard"
    is "$(grep -o '"managed_bytes": *[0-9]*' "$WORK/stats.json" | sed 's/.*: *//' | tr '\n' ' ')" \
      "0 0 " "$name: no managed page left on a device at the end"
    figure=$(sed -n 's/^# figure //p' "$WORK/out")
    n=$(printf '%s\n' "$figure" | tr ' ' '\n' | sed -n 's/^ops=//p')
    total_ops=$((total_ops + ${n:-0}))
  done
done
echo "# $total_ops operations; last run: $figure"
record_figure invariant "$total_ops operations in 8 runs (pool vmm/regions/off/vmm+spill x 2 seeds); last run: $figure"
done_testing
