#!/usr/bin/env bash
# The pool costs the program no room under its cap (issue 13's reproductions): equal-size
# blocks get as many as on the bare driver, several contexts share a cap, idle or unused pool
# memory does not refuse other kinds of allocation, and the pool never asks the driver for more
# than another process left on the device. Judged by the program's own results against the same
# program without the shim, and by the fake driver's counters.
#
# TEST_POOLS: the pool settings to run over (GPUCAP_POOL values, default "on regions": on is
# the VMM-backed pool over the fake, regions the region pool).
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

MiB=$((1 << 20))
GiB=$((1 << 30))
machine=room-$$
trap 'rm -f "/dev/shm/fakecuda.$(id -u).$machine"*; rm -rf "$WORK"' EXIT

# val KEY OUTPUT: the value of KEY=... in the program's output.
val() {
  printf '%s\n' "$2" | sed -n "s/^.*\b$1=\([-0-9]*\).*$/\1/p" | head -n 1
}

for pool in ${TEST_POOLS:-on regions}; do
  # (a) Equal-size blocks on a 1 GiB device under a 1 GiB cap (`gpucap run --limit 1GiB`):
  # the doubling took 512 MiB for a 300 MiB block and stranded the rest.
  for size in 30 50 100 150 200 300; do
    bytes=$((size * MiB))
    bare=$(FAKECUDA_MEMORY=1GiB without_shim "$TESTBIN/captest" 0 $bytes)
    stats="$WORK/fill-$size.json"
    capped=$(FAKECUDA_MEMORY=1GiB FAKECUDA_STATS="$stats" GPUCAP_POOL=$pool \
      GPUCAP_MEMORY_LIMIT=1GiB with_shim "$TESTBIN/captest" 0 $bytes 2>/dev/null)
    is "$(val allocs "$capped")" "$(val allocs "$bare")" \
      "pool $pool: ${size} MiB blocks under a 1 GiB cap: as many as on the bare driver"
    peak=$(json_num "$stats" peak_bytes)
    ok "$([ -n "$peak" ] && [ "$peak" -le $GiB ] && echo 0 || echo 1)" \
      "  the driver's peak ($peak bytes) stays under the cap"
  done
  out=$(FAKECUDA_MEMORY=1GiB GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=1GiB \
    with_shim "$TESTBIN/captest" 0 $((300 * MiB)) 2>/dev/null)
  is "$(val allocs "$out")" 3 "pool $pool: three 300 MiB blocks on a 1 GiB device, cap 1 GiB"

  stats="$WORK/ctxs.json"
  out=$(FAKECUDA_STATS="$stats" GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=64MiB \
    with_shim "$TESTBIN/roomtest" ctxs 3 $((20 * MiB)) 2>/dev/null)
  is "$(val ctxs_ok "$out")" 3 "pool $pool: three contexts x 20 MiB under a 64 MiB cap"
  ok "$([ "$(json_num "$stats" peak_bytes)" -le $((64 * MiB)) ] && echo 0 || echo 1)" \
    "  the driver's peak stays under the cap"

  # (b) Other kinds of allocation beside the pool, under a 64 MiB cap.
  for mode in growth prealloc; do
    growth=true
    [ $mode = prealloc ] && growth=false
    out=$(GPUCAP_POOL=$pool GPUCAP_ALLOW_GROWTH=$growth GPUCAP_MEMORY_LIMIT=64MiB \
      with_shim "$TESTBIN/roomtest" kinds $((40 * MiB)) $((32 * MiB)) 2>/dev/null)
    for kind in managed async create array; do
      is "$(val $kind "$out")" 0 \
        "pool $pool, $mode: 32 MiB $kind allocation after 40 MiB pooled and freed"
    done
  done

  # A JAX-style preallocation of 75 % of the cap, then NCCL-style cuMemCreate buffers.
  stats="$WORK/hold.json"
  bare=$(FAKECUDA_MEMORY=64MiB without_shim "$TESTBIN/roomtest" hold $((48 * MiB)) $((2 * MiB)) 8)
  out=$(FAKECUDA_STATS="$stats" GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=64MiB \
    with_shim "$TESTBIN/roomtest" hold $((48 * MiB)) $((2 * MiB)) 8 2>/dev/null)
  is "$(val created "$out")" "$(val created "$bare")" \
    "pool $pool: 2 MiB cuMemCreate buffers beside a 48 MiB block: as many as on a 64 MiB device"
  ok "$([ "$(json_num "$stats" peak_bytes)" -le $((64 * MiB)) ] && echo 0 || echo 1)" \
    "  the driver's peak stays under the cap"

  # With --preallocate the region pool holds the whole cap in one region: the 16 MiB its
  # 48 MiB block leaves idle cannot be given back without unmapping part of the region.
  out=$(GPUCAP_POOL=$pool GPUCAP_ALLOW_GROWTH=false GPUCAP_MEMORY_LIMIT=64MiB \
    with_shim "$TESTBIN/roomtest" hold $((48 * MiB)) $((2 * MiB)) 8 2>/dev/null)
  if [ "$pool" = regions ]; then
    tap_n=$((tap_n + 1))
    [ "$(val created "$out")" = "$(val created "$bare")" ] || printf 'not '
    echo "ok $tap_n - pool $pool, prealloc: cuMemCreate beside a 48 MiB block" \
      "# TODO the region pool cannot release part of a region (issue 13's VMM pool can)"
  else
    is "$(val created "$out")" "$(val created "$bare")" \
      "pool $pool, prealloc: cuMemCreate beside a 48 MiB block"
  fi

  # Another process holds 1000 MiB of a 1 GiB device (a shared machine, FAKECUDA_MACHINE):
  # growth reads the device's free memory, so regions fit what is left and the driver is never
  # asked for more; the refusal says who holds the device.
  mkfifo "$WORK/holder"
  FAKECUDA_MEMORY=1GiB FAKECUDA_MACHINE=$machine without_shim "$TESTBIN/fakecuda_probe" init ctx \
    alloc:$((1000 * MiB)) hold <"$WORK/holder" >"$WORK/holder.out" 2>&1 &
  holder=$!
  exec 3>"$WORK/holder"
  i=0
  while ! grep -q holding "$WORK/holder.out" && [ $i -lt 1200 ]; do # a bound for hangs
    sleep 0.05
    i=$((i + 1))
  done
  for size in 1 3 5 7; do
    bare=$(FAKECUDA_MEMORY=1GiB FAKECUDA_MACHINE=$machine without_shim "$TESTBIN/captest" 0 \
      $((size * MiB)))
    stats="$WORK/full-$size.json"
    capped=$(FAKECUDA_MEMORY=1GiB FAKECUDA_MACHINE=$machine FAKECUDA_STATS="$stats" \
      GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=1GiB with_shim "$TESTBIN/captest" 0 $((size * MiB)) \
      2>"$WORK/full.err")
    is "$(val allocs "$capped")" "$(val allocs "$bare")" \
      "pool $pool: ${size} MiB blocks beside another process's 1000 MiB: as many as bare"
    regions=$(json_obj_num "$stats" calls cuMemAlloc_v2)
    units=$(json_obj_num "$stats" calls cuMemCreate) # the VMM-backed pool's
    is "$((${regions:-0} + ${units:-0}))" \
      "$(grep -o '"alloc_calls": [0-9]*' "$stats" | head -n 1 | sed 's/.*: //')" \
      "  the driver refused no region (every cuMemAlloc_v2 or cuMemCreate call succeeded)"
  done
  like "$(cat "$WORK/full.err")" "other processes and the driver hold 1000.0 MiB" \
    "pool $pool: the refusal says the device is full and what other processes hold"
  exec 3>&-
  wait "$holder"
  rm -f "$WORK/holder"
done

done_testing
