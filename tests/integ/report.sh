#!/usr/bin/env bash
# The exit report, checked against the fake driver's own record of the same run: where it goes
# (GPUCAP_REPORT, GPUCAP_REPORT_JSON), that it appears only for processes that allocated, and
# that its numbers are the driver's.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

json="$WORK/report.json"
stats="$WORK/stats.json"
GPUCAP_POOL=regions GPUCAP_MEMORY_LIMIT=512MiB GPUCAP_REPORT_JSON="$json" \
  FAKECUDA_STATS="$stats" with_shim "$TESTBIN/pooltest" many 4000 >/dev/null 2>"$WORK/err"
like "$(head -n 1 "$WORK/err")" '^gpucap: memory report \(pid [0-9]+\)$' "the table goes to stderr"
[ -s "$json" ]
ok $? "GPUCAP_REPORT_JSON writes the JSON report"
is "$(json_num "$json" driver_alloc_calls)" "$(json_obj_num "$stats" calls cuMemAlloc_v2)" \
  "driver_alloc_calls equals the driver's count of cuMemAlloc_v2"
is "$(json_num "$json" pool_bytes)" "$(json_num "$stats" leaked_bytes)" \
  "pool_bytes equals what the driver still has allocated at exit"
is "$(json_num "$json" bytes_in_use)" 0 "bytes_in_use is 0: the program freed everything"
# The VMM-backed pool: its unit calls are the driver's, and what it maps is what it charges.
vjson="$WORK/report-vmm.json"
GPUCAP_POOL=vmm GPUCAP_MEMORY_LIMIT=512MiB GPUCAP_REPORT_JSON="$vjson" GPUCAP_REPORT=off \
  FAKECUDA_STATS="$stats" with_shim "$TESTBIN/pooltest" many 4000 >/dev/null 2>&1
like "$(cat "$vjson")" '"backing": "vmm"' "GPUCAP_POOL=vmm: the report says what backs the pool"
is "$(json_num "$vjson" driver_map_calls)" "$(json_obj_num "$stats" calls cuMemMap)" \
  "driver_map_calls equals the driver's count of cuMemMap"
unmaps=$(json_obj_num "$stats" calls cuMemUnmap) # the fake lists no call it never had
is "$(json_num "$vjson" driver_unmap_calls)" "${unmaps:-0}" \
  "driver_unmap_calls equals the driver's count of cuMemUnmap"
is "$(json_num "$vjson" driver_alloc_calls)" "$(json_obj_num "$stats" calls cuMemCreate)" \
  "driver_alloc_calls equals the driver's count of cuMemCreate"
is "$(json_num "$vjson" pool_bytes)" "$(json_num "$stats" live_bytes)" \
  "pool_bytes equals the physical memory the driver holds at exit"
is "$(( $(json_num "$vjson" mapped_bytes_total) - $(json_num "$vjson" released_bytes_total) ))" \
  "$(json_num "$vjson" pool_bytes)" "mapped_bytes_total - released_bytes_total = pool_bytes"
[ "$(json_num "$vjson" address_space_bytes)" -ge $((512 << 20)) ]
ok $? "address_space_bytes covers the cap"
is "$(json_num "$json" cap_bytes)" $((512 << 20)) "cap_bytes is the cap"
allocs=$(json_num "$json" num_allocs)
[ "${allocs:-0}" -ge 1500 ]
ok $? "num_allocs counts the program's allocations ($allocs)"
for key in num_allocs bytes_in_use peak_bytes_in_use largest_alloc_size bytes_limit pool_bytes \
    peak_pool_bytes largest_free_block_bytes fragmentation driver_alloc_calls driver_free_calls \
    num_ooms; do
  grep -q "\"$key\":" "$json"
  ok $? "JSON has $key"
  grep -q "\`$key\`" "$TOP/docs/report.md"
  ok $? "docs/report.md documents $key"
done

GPUCAP_REPORT=off with_shim "$TESTBIN/pooltest" many 100 >/dev/null 2>"$WORK/err"
is "$(grep -c 'memory report' "$WORK/err")" 0 "GPUCAP_REPORT=off: no table"
GPUCAP_REPORT="$WORK/table.txt" with_shim "$TESTBIN/pooltest" many 100 >/dev/null 2>"$WORK/err"
is "$(grep -c 'memory report' "$WORK/err")" 0 "GPUCAP_REPORT=path: nothing on stderr ..."
like "$(head -n 1 "$WORK/table.txt")" '^gpucap: memory report' "... the table is in the file"

GPUCAP_REPORT_JSON="$WORK/report.%p.json" GPUCAP_TRACE="$WORK/trace.%p.csv" \
  LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$(preload)" "$TESTBIN/pooltest" many 100 \
  >/dev/null 2>&1 &
pid=$!
wait $pid
[ -s "$WORK/report.$pid.json" ] && [ -s "$WORK/trace.$pid.csv" ]
ok $? "%p in GPUCAP_REPORT_JSON and GPUCAP_TRACE becomes the process id"

# Two processes of one job naming one file: the later writer says it replaces the other's
# report, and how to keep both (%p); a file from before it started is replaced in silence.
probe="$TESTBIN/fakecuda_probe"
echo old >"$WORK/both.json"
GPUCAP_REPORT=off GPUCAP_REPORT_JSON="$WORK/both.json" \
  with_shim "$probe" init ctx alloc:1048576 free:0 "wait:$WORK/go" >"$WORK/b.out" 2>"$WORK/b.err" &
b=$!
await "$WORK/b.out" "^free"
GPUCAP_REPORT=off GPUCAP_REPORT_JSON="$WORK/both.json" \
  with_shim "$probe" init ctx alloc:1048576 free:0 >/dev/null 2>"$WORK/a.err"
touch "$WORK/go"
wait "$b"
is "$(cat "$WORK/a.err")" "" "one process replaces an older file in silence"
is "$(cat "$WORK/b.err")" "gpucap: warning: GPUCAP_REPORT_JSON: '$WORK/both.json' was written by \
another process since this one started, and is replaced now; to keep each process's, put %p (its \
pid) in the name: $WORK/both.%p.json" "the other, which started before it wrote, says it replaces its report"
like "$(cat "$WORK/both.json")" '"wait:' "  and its report is the one left"

# A CUDA program that never allocates device memory reports nothing.
out=$(with_shim "$TESTBIN/captest" 0 $((1 << 20)) 0 2>"$WORK/err")
is "$(cat "$WORK/err")" "" "no allocation, no report"

# Pools of destroyed contexts stay in the report, marked, with their figures of that moment:
# fidelity's "contexts" scenario destroys two created contexts (the first still holding 8 MiB)
# and resets the primary one, then allocates in it again.
GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT_JSON="$WORK/ctx.json" \
  with_shim "$TESTBIN/fidelity" contexts >/dev/null 2>"$WORK/err"
rows=$(awk '/"context":/ { c = $2 } /"context_destroyed":/ { d = $2 }
  /"bytes_in_use":/ { print c d $2 }' "$WORK/ctx.json" | tr -d ',' | tr '\n' ' ')
is "$rows" "1true8388608 2true0 0true0 3false0 " \
  "destroyed contexts keep their rows (context, destroyed, bytes in use at that moment)"
# Context 2's blocks were all freed before it was destroyed: their memory is free in its row
# (the driver finished the context's work), not deferred, neither in use nor free.
rows=$(awk '/"context":/ { c = $2 } /"pool_bytes":/ { p = $2 } /"largest_free_block_bytes":/ { l = $2 }
  /"deferred_bytes":/ { print c ":" p ":" l ":" $2 }' "$WORK/ctx.json" | tr -d ',' | tr '\n' ' ')
is "$rows" "1:8388608:0:0 2:50331648:50331648:0 0:0:0:0 3:62914560:62914560:0 " \
  "  a destroyed context's freed blocks are free in its row (pool, largest free, deferred)"
like "$(cat "$WORK/err")" $'\n    0:1\\*     8.0 MiB' "  the table marks them d:c*"
like "$(cat "$WORK/err")" '\* = context destroyed before exit' "  and says what the mark means"

done_testing
