#!/usr/bin/env bash
# Many threads allocating (and exporting some blocks over IPC, which races the other threads'
# frees) at once under a cap: the driver's own record shows its peak never passed the cap and
# nothing leaked. The region pool's exports are the regions' driver handles, the VMM-backed
# pool's the units' file descriptors. Also run under TSan by `make test`.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

stats="$WORK/pooled.json"
GPUCAP_POOL=regions GPUCAP_MEMORY_LIMIT=256MiB FAKECUDA_STATS="$stats" tap_program \
  "4 threads under a 256 MiB cap" with_shim "$TESTBIN/threads" 4 3000
peak_within "$stats" $((256 << 20))
exports=$(json_obj_num "$stats" calls cuIpcGetMemHandle)
[ "${exports:-0}" -gt 100 ]
ok $? "blocks were exported meanwhile ($exports driver exports)"
stats="$WORK/vmm.json"
GPUCAP_MEMORY_LIMIT=256MiB GPUCAP_REPORT_JSON="$WORK/vmm-report.json" FAKECUDA_STATS="$stats" \
  tap_program "4 threads under a 256 MiB cap, VMM-backed" with_shim "$TESTBIN/threads" 4 3000
peak_within "$stats" $((256 << 20)) "VMM-backed: "
like "$(cat "$WORK/vmm-report.json")" '"backing": "vmm"' "VMM-backed: the pool was"
maps=$(json_obj_num "$stats" calls cuMemMap)
[ "${maps:-0}" -gt 0 ]
ok $? "VMM-backed: the driver mapped units ($maps cuMemMap calls)"
exports=$(json_obj_num "$stats" calls cuMemExportToShareableHandle)
[ "${exports:-0}" -gt 100 ]
ok $? "VMM-backed: blocks were exported meanwhile ($exports unit descriptors)"
stats="$WORK/threads.json"
GPUCAP_POOL=off GPUCAP_MEMORY_LIMIT=256MiB FAKECUDA_STATS="$stats" tap_program \
  "4 threads under a 256 MiB cap, GPUCAP_POOL=off" with_shim "$TESTBIN/threads" 4 3000
peak_within "$stats" $((256 << 20)) "pass-through: "
is "$(json_num "$stats" leaked_allocations)" 0 "pass-through: nothing leaked"

# The trace of 8 threads under a cap that held: its rows are in the order of the operations, so
# a replay pairs every free with its allocation and the bytes in use never pass the cap. (Rows
# once came out of order: a free written after another thread reused the address.)
for pool in vmm regions off; do
  trace="$WORK/trace-$pool.csv"
  GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=256MiB GPUCAP_TRACE="$trace" FAKECUDA_STATS="$WORK/t.json" \
    tap_program "8 threads traced, GPUCAP_POOL=$pool" with_shim "$TESTBIN/threads" 8 6000
  peak=$(json_num "$WORK/t.json" peak_bytes)
  [ -n "$peak" ] && [ "$peak" -le $((256 << 20)) ]
  ok $? "GPUCAP_POOL=$pool: the cap held (the driver's peak: $peak bytes)"
  r=$("$BUILD/gpucap-replay" "$trace" --runs 1)
  like "$r" '"unmatched_frees":0,' "GPUCAP_POOL=$pool: the trace replays with no unmatched free"
  live=$(printf '%s\n' "$r" | sed -n 's/.*"peak_live_bytes":\([0-9]*\).*/\1/p')
  [ -n "$live" ] && [ "$live" -le $((256 << 20)) ]
  ok $? "GPUCAP_POOL=$pool: the trace's bytes in use peak at $live, under the cap"
done
done_testing
