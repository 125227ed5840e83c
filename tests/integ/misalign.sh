#!/usr/bin/env bash
# A driver that hands out regions not 256-byte aligned (tests/integ/misalign.c: a libcuda.so.1
# layered over the fake) must not make every pooled allocation fail with an error code gpucap
# invents: gpucap aligns its regions inside what the driver gives, under the cap, and says so
# at debug verbosity.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off
# The regions are what the layered driver misaligns (cuMemAlloc_v2): the region pool.
export GPUCAP_POOL=regions

MiB=$((1 << 20))
dir="$TESTBIN/misalign"
# field OUTPUT KEY: the value of KEY=... in captest's output.
field() {
  printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}
run() {
  LD_LIBRARY_PATH="$dir:$FAKE_DIR" LD_PRELOAD="$(preload)" "$@"
}

out=$(LD_LIBRARY_PATH="$dir:$FAKE_DIR" "$TESTBIN/captest" 0 $MiB 4 2>/dev/null)
is "$(field "$out" misaligned)" 4 "the layered driver hands out addresses off a 256-byte boundary"

out=$(GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_VERBOSE=1 FAKECUDA_STATS="$WORK/stats.json" \
  run "$TESTBIN/captest" 0 $MiB 2>"$WORK/err")
allocs=$(field "$out" allocs)
[ "${allocs:-0}" -ge 60 ] && [ "$allocs" -le 64 ]
ok $? "pooled 1 MiB blocks over it: $allocs of them fit under a 64 MiB cap"
is "$(field "$out" last_rc)" 2 "  the next is refused with CUDA_ERROR_OUT_OF_MEMORY, no invented code"
is "$(field "$out" misaligned)" 0 "  every block is 256-byte aligned"
is "$(field "$out" free_errors)" 0 "  and every one is freed"
# What the layer's 64 extra bytes per region hold in the driver (a 512-byte unit each) is the
# driver's memory for the process, which the cap covers: it is not free.
free=$(field "$out" after_free)
[ "${free:-0}" -le $((64 * MiB)) ] && [ "${free:-0}" -ge $((64 * MiB - 64 * 512)) ]
ok $? "  get-info: the cap is free again but for what the layer's extra bytes hold ($free)"
peak=$(json_num "$WORK/stats.json" peak_bytes)
[ -n "$peak" ] && [ "$peak" -le $((64 * MiB)) ]
ok $? "  the driver never held more than the cap (peak ${peak:-?})"
like "$(cat "$WORK/err")" 'not 256-byte aligned; regions are aligned inside' \
  "  GPUCAP_VERBOSE=1 says why the regions are larger"
is "$(grep -c '^gpucap: error' "$WORK/err")" 0 "  no error message"
done_testing
