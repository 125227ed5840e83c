#!/usr/bin/env bash
# The pool seen from outside: thousands of allocations for a handful of driver calls, no
# premature reuse of memory the device may still touch, the driver's pitch, preallocation,
# driver error codes for bad frees, pass-through with GPUCAP_POOL=off, and the RMM trace.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

tap_program "10000 mixed allocations" with_shim "$TESTBIN/pooltest" many 10000
out=$(GPUCAP_POOL=off with_shim "$TESTBIN/pooltest" many 2000 2>&1)
like "$out" 'driver_allocs=([0-9]{3,})' "GPUCAP_POOL=off: every allocation is a driver call"

stats="$WORK/reuse.json"
FAKECUDA_STATS="$stats" tap_program "reuse waits for the device" with_shim "$TESTBIN/pooltest" reuse
is "$(json_num "$stats" hazards)" 0 "the driver's record: 0 hazards"

pooled=$(with_shim "$TESTBIN/pooltest" pitch | grep '^pitch')
driver=$(GPUCAP_POOL=off with_shim "$TESTBIN/pooltest" pitch | grep '^pitch')
is "$pooled" "$driver" "pooled pitches and error codes equal the driver's own"
like "$pooled" 'pitch 100 4 -> 0 512' "  (100-byte rows get a 512-byte pitch)"

tap_program "bad frees and arguments" with_shim "$TESTBIN/pooltest" errors

stats="$WORK/prealloc.json"
GPUCAP_POOL=regions GPUCAP_ALLOW_GROWTH=false GPUCAP_MEMORY_LIMIT=1GiB FAKECUDA_STATS="$stats" \
  with_shim "$TESTBIN/pooltest" many 1000 >/dev/null 2>&1
is "$(json_obj_num "$stats" calls cuMemAlloc_v2)" 1 "preallocation: one driver allocation ..."
is "$(json_num "$stats" peak_bytes)" $((1 << 30)) "... of the whole 1 GiB cap"
GPUCAP_POOL=vmm GPUCAP_ALLOW_GROWTH=false GPUCAP_MEMORY_LIMIT=1GiB FAKECUDA_STATS="$stats" \
  with_shim "$TESTBIN/pooltest" many 1000 >/dev/null 2>&1
is "$(json_obj_num "$stats" calls cuMemCreate)" 512 "VMM preallocation: 512 units of 2 MiB ..."
is "$(json_num "$stats" peak_bytes)" $((1 << 30)) "... the whole 1 GiB cap"

trace="$WORK/trace.csv"
GPUCAP_TRACE="$trace" with_shim "$TESTBIN/pooltest" many 3000 >/dev/null 2>&1
is "$(head -n 1 "$trace")" "Thread,Time,Action,Pointer,Size,Stream,Device,Event,Held,Verdict,Library,Spilled" \
  "trace: RMM's CSV header, then gpucap's columns"
is "$(grep -c ',allocate,' "$trace")" "$(grep -c ',free,' "$trace")" \
  "trace: one free for every allocation"
like "$(sed -n 2p "$trace")" '^[0-9]+,[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6},allocate failure,0x[0-9a-f]+,[0-9]+,0x0,0,reserve,[0-9]+,,,0$' \
  "trace: the pool's first region, a row RMM's readers skip as a failure (no library)"
like "$(grep -m 1 ',alloc,' "$trace")" '^[0-9]+,[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6},allocate,0x[0-9a-f]+,[0-9]+,0x0,0,alloc,[0-9]+,,pooltest,0$' \
  "trace: rows in RMM's format, then the library that asked (the program)"
if [ -x "$BUILD/gpucap-replay" ]; then
  like "$("$BUILD/gpucap-replay" "$trace" --runs 1 2>&1)" '"completed": *true' \
    "trace: gpucap-replay replays it"
  # --scaling's arenas (pools with a lock each under one cap): their figures are printed, and
  # with no cap borrowing never comes into it and nothing is refused. Over regions, one arena
  # per thread (an explicit GPUCAP_ARENAS=N).
  out=$("$BUILD/gpucap-replay" "$trace" --runs 1 --scaling 2>&1)
  num='[0-9]+\.[0-9]+'
  keys=
  for n in 1 2 8; do
    keys="$keys\"arenas_ns_$n\":$num,\"arenas_scaling_$n\":$num,\"arenas_failed_$n\":0,"
    keys="$keys\"arenas_open_$n\":$n,.*"
  done
  like "$out" "\"arenas\":\"dealt\",.*$keys\"arenas_vs_lock_1\":$num," \
    "trace: gpucap-replay --scaling replays it from arenas in 1, 2 and 8 threads, one each"
  like "$out" '"lock_failed":0,"arenas_failed":0,"interleaved_failed_pool":0,"interleaved_failed_arenas":0}' \
    "  with no cap, neither refuses anything, threaded or interleaved"
  like "$("$BUILD/gpucap-replay" "$trace" --runs 1 --scaling --cap-factor 1.10 2>&1)" \
    '"lock_failed_2":[0-9]+,.*"arenas_failed_2":[0-9]+,.*"arenas_failed":[0-9]+,"interleaved_failed_pool":[0-9]+,"interleaved_failed_arenas":[0-9]+}$' \
    "  at a cap of 1.10 x peak live, their refusals are counted per thread count, and interleaved"
  # Over VMM, as GPUCAP_ARENAS=auto opens them: one thread never meets contention and keeps
  # one pool; no more than the most are ever open.
  vmm="--runs 1 --scaling --cap-factor 1.10 --vmm 2097152"
  out=$("$BUILD/gpucap-replay" "$trace" $vmm --arenas-max 3 2>&1)
  like "$out" '"arenas":"auto","arenas_max":3,.*"arenas_open_1":1,' \
    "  --vmm: auto's arenas; one thread keeps one pool"
  like "$out" '"arenas_open_2":[12],.*"arenas_open_8":[123],' "  at most --arenas-max open"
  like "$("$BUILD/gpucap-replay" "$trace" $vmm --arenas-max 1 2>&1)" \
    '"arenas_open_8":1,' "  --arenas-max 1: one pool whatever the threads"
  like "$("$BUILD/gpucap-replay" "$trace" $vmm 2>&1)" \
    "\"arenas_max\":$(($(getconf _NPROCESSORS_ONLN) > 8 ? 8 : $(getconf _NPROCESSORS_ONLN))),"\
    "  by default at most the online CPUs, up to 8"
  "$BUILD/gpucap-replay" "$trace" $vmm --arenas-max 0 >/dev/null 2>&1
  is $? 2 "  --arenas-max 0 is a usage error"
else
  skip "trace: gpucap-replay replays it" "gpucap-replay not built"
fi
ln -s "$WORK/no-such-dir/trace.csv" "$WORK/nowhere"
GPUCAP_TRACE="$WORK/nowhere" with_shim "$TESTBIN/pooltest" many 10 >/dev/null 2>"$WORK/err"
ok $? "trace: a link to a file that cannot be created does not fail the run"
like "$(cat "$WORK/err")" "GPUCAP_TRACE: cannot create '$WORK/nowhere'" "  one warning names it"

# Idle memory goes back (GPUCAP_RELEASE_AFTER, VMM-backed pool), judged by the fake's own count
# of what the process holds; the program polls (cuMemGetInfo) with a generous limit, so the
# check does not depend on timing. GPUCAP_RELEASE_AFTER=0 never releases (a control: the poll
# then runs out and the check fails), and a loop that reuses its memory keeps it.
GPUCAP_RELEASE_AFTER=20 tap_program "idle memory goes back after GPUCAP_RELEASE_AFTER" \
  with_shim "$TESTBIN/pooltest" idle
out=$(GPUCAP_RELEASE_AFTER=0 with_shim "$TESTBIN/pooltest" idle 25 2>/dev/null)
kept=$(printf '%s\n' "$out" | sed -n 's/.*idle_held=\([0-9]*\).*/\1/p')
[ "${kept:-0}" -gt $((48 << 20)) ]
ok $? "GPUCAP_RELEASE_AFTER=0: nothing goes back on idleness (the driver holds ${kept:-?} bytes)"
GPUCAP_RELEASE_AFTER=1 tap_program "a steady loop keeps its memory (hysteresis)" \
  with_shim "$TESTBIN/pooltest" steady 300

done_testing
