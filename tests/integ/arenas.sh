#!/usr/bin/env bash
# Arenas (GPUCAP_ARENAS, docs/design.md "Arenas") seen from outside: one context's threads
# allocate from pools of their own, all under the one cap, and the driver's own record
# (FAKECUDA_STATS) shows its peak never passed the cap; a thread gets the room other arenas hold
# free (their wholly free regions are given back before a refusal); a thread that comes late to
# a cap another arena grew into gets all the rest of it (its own units over VMM, chunks lent
# over regions); a block is freed into the
# arena that holds it, whichever thread frees it; a preallocating pool keeps one arena. The
# program is tests/integ/arenatest.c. Also run under TSan by `make test`.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off
export GPUCAP_ARENAS=4

for pool in vmm regions; do
  stats="$WORK/one-$pool.json"
  GPUCAP_ARENAS=1 GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off \
    GPUCAP_REPORT_JSON="$WORK/one-$pool-report.json" FAKECUDA_STATS="$stats" \
    tap_program "8 threads on one pool churn under a 64 MiB cap ($pool)" \
    with_shim "$TESTBIN/arenatest" churn 8 3000
  peak_within "$stats" $((64 << 20)) "  "
  is "$(grep -c '"arena": 0' "$WORK/one-$pool-report.json")" 1 "  the report has one pool"

  stats="$WORK/churn-$pool.json"
  GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off \
    GPUCAP_REPORT_JSON="$WORK/churn-$pool-report.json" FAKECUDA_STATS="$stats" \
    tap_program "8 threads on 4 arenas churn under a 64 MiB cap ($pool)" \
    with_shim "$TESTBIN/arenatest" churn 8 3000
  peak_within "$stats" $((64 << 20)) "  "
  refused=$(printf '%s\n' "$out" | sed -n 's/.* \([0-9]*\) refused at the cap.*/\1/p')
  is "$(grep -o '"num_ooms": [0-9]*' "$WORK/churn-$pool-report.json" |
    awk '{ n += $2 } END { print n + 0 }')" "$refused" \
    "  the report's refusals add up to those the program saw ($refused)"
  is "$(grep -o '"arena": [0-9]*' "$WORK/churn-$pool-report.json" | sort -u | tr -d '\n')" \
    '"arena": 0"arena": 1"arena": 2"arena": 3' "  the report has a row for each of the 4 arenas"
  if [ $pool = vmm ]; then
    is "$(json_obj_num "$stats" calls cuMemAddressReserve)" 4 \
      "  the driver reserved one address range per arena"
  fi

  # Seven threads each hold 1 MiB of free blocks in their arenas: the main thread's
  # 60 MiB fit the cap only once the other arenas' regions or units are given back.
  stats="$WORK/room-$pool.json"
  GPUCAP_ARENAS=8 GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off \
    FAKECUDA_STATS="$stats" tap_program "one thread gets the room seven other arenas hold ($pool)" \
    with_shim "$TESTBIN/arenatest" room 7 $((60 << 20)) $((64 << 20))
  peak_within "$stats" $((64 << 20)) "  "

  # The last megabyte of the cap lies in another arena's region, beside a block it holds: lent.
  stats="$WORK/borrow-$pool.json"
  GPUCAP_ARENAS=2 GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=8MiB GPUCAP_REPORT=off \
    GPUCAP_REPORT_JSON="$WORK/borrow-$pool-report.json" FAKECUDA_STATS="$stats" \
    tap_program "a free chunk of another arena is lent before a refusal ($pool)" \
    with_shim "$TESTBIN/arenatest" borrow $((8 << 20))
  peak_within "$stats" $((8 << 20)) "  "
  is "$(grep -o '"num_ooms": [0-9]*' "$WORK/borrow-$pool-report.json" | tr -d '\n')" \
    '"num_ooms": 0"num_ooms": 1' "  the report counts the one refusal the program saw"

  # One arena grows while another, already open, waits; then the late thread gets all the rest
  # of the cap. Over VMM the first arena mapped only what it needed, so the late thread's blocks
  # all come from units of its own arena (arena 0: it looked its arena up first). Over regions
  # the first arena's doubling took most of the cap, and the rest is lent from its regions
  # (docs/design.md, "Arenas").
  stats="$WORK/share-$pool.json"
  GPUCAP_ARENAS=2 GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off \
    GPUCAP_REPORT_JSON="$WORK/share-$pool-report.json" FAKECUDA_STATS="$stats" \
    tap_program "a thread holds 40 MiB of a 64 MiB cap, then another takes the rest ($pool)" \
    with_shim "$TESTBIN/arenatest" share 40 $((64 << 20))
  peak_within "$stats" $((64 << 20)) "  "
  second=$(printf '%s\n' "$out" | sed -n 's/^# second //p')
  own=$(tr -d '\n ' <"$WORK/share-$pool-report.json" |
    sed -n 's/.*"arena":0,[^}]*"num_allocs":\([0-9]*\).*/\1/p')
  if [ $pool = vmm ]; then
    is "$own" "$second" "  the late thread's $second blocks all came from its own arena"
  else
    [ -n "$own" ] && [ -n "$second" ] && [ "$own" -lt "$second" ]
    ok $? "  $((second - ${own:-0})) of the late thread's $second blocks were lent by the other arena"
  fi

  # Blocks of one arena freed by a thread of another, then the room they held used elsewhere.
  stats="$WORK/cross-$pool.json"
  GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off FAKECUDA_STATS="$stats" \
    tap_program "blocks freed by a thread of another arena ($pool)" \
    with_shim "$TESTBIN/arenatest" cross 48 $((56 << 20))
  peak_within "$stats" $((64 << 20)) "  "
done

# Borrowing grows the lender: one arena holds a unit half free, the other's thread needs 3 MiB
# with one unit of room left under the cap. Only the first arena's free half and a unit mapped
# after it fit (as one pool's would); its chunks alone would not.
GPUCAP_ARENAS=2 GPUCAP_POOL=vmm GPUCAP_MEMORY_LIMIT=8MiB GPUCAP_REPORT=off \
  GPUCAP_REPORT_JSON="$WORK/tail-report.json" FAKECUDA_STATS="$WORK/tail.json" \
  tap_program "a block lent by an arena that grows for it" with_shim "$TESTBIN/arenatest" tail
peak_within "$WORK/tail.json" $((8 << 20)) "  "
is "$(grep -o '"num_ooms": [0-9]*' "$WORK/tail-report.json" | awk '{ n += $2 } END { print n + 0 }')" \
  0 "  the report counts no refusal: the program saw none"

# GPUCAP_ARENAS=auto, the default: a thread that finds the pool's lock held moves to another
# arena over a VMM-backed pool (the other thread is in the driver, growing the pool, for 400 ms);
# over regions, and with GPUCAP_ARENAS=1, it waits, and the context keeps one pool. A program
# with one thread never contends, so it has one pool (the pool.sh and report.sh reports).
for pool in vmm regions; do
  for arenas in auto 1; do
    latency=cuMemCreate:400ms
    [ $pool = regions ] && latency=cuMemAlloc_v2:400ms
    GPUCAP_ARENAS=$arenas GPUCAP_POOL=$pool GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off \
      GPUCAP_REPORT_JSON="$WORK/contend-$pool-$arenas.json" FAKECUDA_LATENCY=$latency \
      FAKECUDA_STATS="$WORK/contend-$pool-$arenas-stats.json" \
      tap_program "a thread meets another growing the pool ($pool, GPUCAP_ARENAS=$arenas)" \
      with_shim "$TESTBIN/arenatest" contend $((3 << 20))
    peak_within "$WORK/contend-$pool-$arenas-stats.json" $((64 << 20)) "  "
    rows=$(grep -o '"arena": [0-9]*' "$WORK/contend-$pool-$arenas.json" | sort -u | tr -d '\n')
    if [ $pool = vmm ] && [ $arenas = auto ] && [ "$(nproc)" -gt 1 ]; then
      is "$rows" '"arena": 0"arena": 1' "  it moved to a second arena: two pools in the report"
    else
      is "$rows" '"arena": 0' "  it waited: one pool in the report"
    fi
  done
done

# A preallocating pool reserves the whole cap at once: a second arena could not, so a context
# whose pool preallocates has one. (Eight churning threads may want more than the cap at once:
# some refusals are the program's due.)
stats="$WORK/prealloc.json"
GPUCAP_ALLOW_GROWTH=false GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off \
  GPUCAP_REPORT_JSON="$WORK/prealloc-report.json" FAKECUDA_STATS="$stats" \
  tap_program "8 threads, preallocated: one arena" with_shim "$TESTBIN/arenatest" churn 8 2000
is "$(json_obj_num "$stats" calls cuMemAddressReserve)" 1 "  the driver reserved one range"
is "$(grep -c '"arena": 0' "$WORK/prealloc-report.json")" 1 "  the report has one pool"
refused=$(printf '%s\n' "$out" | sed -n 's/.* \([0-9]*\) refused at the cap.*/\1/p')
is "$(grep -o '"num_ooms": [0-9]*' "$WORK/prealloc-report.json" | awk '{ print $2 }')" \
  "$refused" "  the report's refusals are those the program saw ($refused)"
done_testing
