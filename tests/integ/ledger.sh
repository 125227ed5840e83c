#!/usr/bin/env bash
# Where the memory went (docs/report.md, "By library"): the per-library ledger names the
# program and the libraries that allocated, with bytes that add up; refusals get a verdict
# that tells a full cap, a fragmented pool and other contexts' pools apart; their output stays bounded with threads and
# --quiet silences it; the right size, used as the cap, lets the run finish, and clearly less
# does not.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

MiB=$((1 << 20))

# usage FILE EXPR: a Python expression over u, the first device of the JSON report's "usage".
usage() {
  python3 -c "import json,sys; u=json.load(open(sys.argv[1]))['usage'][0]; print($2)" "$1"
}

# The right size: four 100 MiB blocks; the report's figure as the cap lets them all fit.
out=$(GPUCAP_REPORT_JSON="$WORK/rs.json" with_shim "$TESTBIN/captest" 0 $((100 * MiB)) 4 \
  2>"$WORK/err")
is "$(printf '%s\n' "$out" | sed -n 's/^allocs=\([0-9]*\) last_rc=\([0-9]*\).*/\1:\2/p')" 4:0 \
  "uncapped: four 100 MiB blocks"
size=$(usage "$WORK/rs.json" "u['right_size_bytes']")
reserved=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['devices'][0]['peak_pool_bytes'])" \
  "$WORK/rs.json")
is "$size" $(((reserved + 2 * MiB - 1) / (2 * MiB) * (2 * MiB))) \
  "the right size is what the pool reserved at its peak, rounded up to 2 MiB"
is "$([ "$size" -ge $((400 * MiB)) ] && echo yes)" yes "  at least the peak held"
like "$(cat "$WORK/err")" "device 0 right-size: $((size / MiB)).0 MiB" "  the table names it"
is "$(usage "$WORK/rs.json" "sum(l['peak_held_bytes'] for l in u['libraries'])")" \
  $((400 * MiB)) "  held by the program itself (captest)"
is "$(usage "$WORK/rs.json" "[l['name'] for l in u['libraries'] if l['program']]")" "['captest']" \
  "  which the ledger names"
out=$(GPUCAP_MEMORY_LIMIT=$size with_shim "$TESTBIN/captest" 0 $((100 * MiB)) 4 2>/dev/null)
is "$(printf '%s\n' "$out" | sed -n 's/^allocs=\([0-9]*\) last_rc=\([0-9]*\).*/\1:\2/p')" 4:0 \
  "capped at the right size, the run finishes"
out=$(GPUCAP_MEMORY_LIMIT=$((400 * MiB - 64 * MiB)) with_shim "$TESTBIN/captest" 0 \
  $((100 * MiB)) 4 2>/dev/null)
is "$(printf '%s\n' "$out" | sed -n 's/^allocs=[0-3] last_rc=\([0-9]*\).*/\1/p')" 2 \
  "capped below the peak held, a block is refused"

# Verdicts: a full cap and a fragmented pool are told apart.
GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT_JSON="$WORK/full.json" \
  with_shim "$TESTBIN/oomtest" full 4 >/dev/null 2>"$WORK/err"
is "$(usage "$WORK/full.json" "u['refusals']")" \
  "{'cap_full': 2, 'fragmentation': 0, 'device_full': 0, 'other_pools': 0, 'capture': 0, 'spill_full': 0}" \
  "a full cap (filled, then one more): verdict cap_full, twice"
is "$(grep -A 1 '^  verdict ' "$WORK/err")" '  verdict    cap_full: the cap is full of live allocations
  evidence   cap 64.0 MiB, pool 64.0 MiB, in use 64.0 MiB; free under cap 0 B' \
  "  it says so, with its evidence"
like "$(cat "$WORK/err")" '  helps      raise the cap \(--limit, GPUCAP_MEMORY_LIMIT\) or free memory' \
  "  and the action"
like "$(cat "$WORK/err")" '  in use by  oomtest \(program\) 64.0 MiB' \
  "  and the report says who holds the memory"
is "$(usage "$WORK/full.json" "u['right_size_bytes']")" None "  and the right size is not known"
GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_ALLOW_GROWTH=false GPUCAP_REPORT_JSON="$WORK/frag.json" \
  GPUCAP_TRACE="$WORK/frag.csv" with_shim "$TESTBIN/oomtest" frag 1 >/dev/null 2>"$WORK/err"
is "$(usage "$WORK/frag.json" "u['refusals']['fragmentation']")" 1 \
  "a fragmented pool: verdict fragmentation"
like "$(cat "$WORK/err")" 'out of memory: 2.0 MiB \(2097152 bytes\) refused: fragmentation; allocate the large' \
  "  naming the verdict and the action"
is "$(awk -F, '$8 == "refused" { print $5 ":" $10 }' "$WORK/frag.csv" | tr '\n' ' ')" \
  "1048576:cap_full 2097152:fragmentation " "  the trace's refusal rows carry their verdicts"
"$BUILD/gpucap" plot "$WORK/frag.csv" -o "$WORK/frag.svg" 2>/dev/null
like "$(cat "$WORK/frag.svg")" '\+2\.0 MiB fragmentation</text>' \
  "  and gpucap plot marks the refusal with it"

# Another context's pool holds the memory: the primary context's one region (growth off) holds
# the whole 64 MiB cap with a 1 MiB block live in it, so it cannot be given back when a second
# context asks for 8 MiB.
GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_POOL=regions GPUCAP_ALLOW_GROWTH=false \
  GPUCAP_REPORT_JSON="$WORK/others.json" GPUCAP_TRACE="$WORK/others.csv" \
  with_shim "$TESTBIN/oomtest" others 8 >"$WORK/out" 2>"$WORK/err"
is "$(cat "$WORK/out")" "held_rc=0 other_rc=2" "a second context refused while the first's pool holds the cap"
is "$(usage "$WORK/others.json" "u['refusals']")" \
  "{'cap_full': 0, 'fragmentation': 0, 'device_full': 0, 'other_pools': 1, 'capture': 0, 'spill_full': 0}" \
  "  verdict other_pools"
like "$(cat "$WORK/err")" "  evidence   63.0 MiB idle in other contexts' pools on device 0" \
  "  naming the idle bytes"
like "$(cat "$WORK/err")" "  helps      free those blocks, or use one context per device" "  and the action"
is "$(awk -F, '$8 == "refused" { print $5 ":" $10 }' "$WORK/others.csv")" "8388608:other_pools" \
  "  the trace's refusal row carries it"
# The three kinds of refusal above are told apart: the verdicts each run's JSON counts.
is "$(for f in full frag others; do
  usage "$WORK/$f.json" "[k for k, v in u['refusals'].items() if v]"
done | tr '\n' ' ')" "['cap_full'] ['cap_full', 'fragmentation'] ['other_pools'] " \
  "full cap, fragmented pool (after its first refusal filled the cap), other pools: distinct"

# A block freed by another thread while its allocation is still returning (the freer tries
# every address the allocator was ever given): the block must be counted before its pool's lock
# is dropped. Counted after (the code before commit a619a8f), the free's subtraction wrapped the
# library's count below zero and the freer's next allocation recorded that as the peak (2^64
# less 960 KiB, in 5 of 5 runs); the trace's writes, done by whichever thread finds a quarter
# of its ring waiting, widen the window as a busy program's would.
GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off GPUCAP_REPORT_JSON="$WORK/race.json" \
  GPUCAP_TRACE="$WORK/race.csv" with_shim "$TESTBIN/oomtest" race 5000 >"$WORK/out" 2>&1
is "$(cat "$WORK/out")" "allocated=5000 freed=5000" "a block freed while it is being allocated, 5000 times"
peaks="[l['peak_held_bytes'] for l in u['libraries']] + [u['peak_held_bytes']]"
is "$(usage "$WORK/race.json" "'ok' if max($peaks) <= 5308416 and u['held_bytes'] == 0 else ($peaks, u['held_bytes'])")" \
  ok "  peaks of at most 5 blocks and one small one (the allocator waits at 4 live), none left"

# Eight threads refused 20000 times each, with a success before each refusal (which restarted
# the old per-pool burst, so every refusal printed a whole report): one report, 32 summaries,
# one line for the rest.
GPUCAP_MEMORY_LIMIT=64MiB with_shim "$TESTBIN/oomtest" threads 8 20000 >"$WORK/out" 2>"$WORK/err"
is "$(cat "$WORK/out")" "refusals=160000" "8 threads: 160000 refusals"
is "$(grep -c '^gpucap: out of memory on device 0 (pid [0-9]*): ' "$WORK/err")" 1 "  one report"
is "$(grep -c 'out of memory: [0-9.]* [KMGT]*i*B ([0-9]* bytes) refused: ' "$WORK/err")" 32 \
  "  32 one-line summaries"
is "$(grep -c 'further refusals are not printed' "$WORK/err")" 1 "  then one line for the rest"
is "$([ "$(wc -l <"$WORK/err")" -lt 200 ] && echo bounded)" bounded "  the output stays bounded"
like "$(cat "$WORK/err")" 'refusals: 160000 \(cap_full 160000\)' "  the exit report counts them all"
GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off with_shim "$TESTBIN/oomtest" threads 8 100 \
  >/dev/null 2>"$WORK/err"
is "$(cat "$WORK/err")" "" "GPUCAP_REPORT=off (--quiet): nothing printed"

# cuBLAS over the fake (a program built by nvcc with the shared runtime): its workspace is
# libcublas's, the program's own blocks the program's, and the lines add up to the total.
if [ -x "$BUILD/real/cublas_shared" ]; then
  (cd "$WORK" && FAKECUDA_MEMORY=1GiB GPUCAP_MEMORY_LIMIT=256MiB GPUCAP_TRACE="$WORK/cublas.csv" \
    GPUCAP_REPORT_JSON="$WORK/cublas.json" with_shim "$BUILD/real/cublas_shared" >/dev/null 2>&1)
  names=$(usage "$WORK/cublas.json" "sorted(l['name'] for l in u['libraries'])")
  is "$names" "['cublas_shared', 'libcublas']" "cuBLAS: the ledger names libcublas and the program"
  is "$(usage "$WORK/cublas.json" "sum(l['held_bytes'] for l in u['libraries']) == u['held_bytes']")" \
    True "  the libraries' held bytes add up to the total"
  is "$(usage "$WORK/cublas.json" "max(l['peak_held_bytes'] for l in u['libraries']) <= u['peak_held_bytes'] <= sum(l['peak_held_bytes'] for l in u['libraries'])")" \
    True "  and their peaks bound the total's"
  is "$(usage "$WORK/cublas.json" "[l['peak_held_bytes'] > 0 for l in u['libraries'] if l['name'] == 'libcublas']")" \
    "[True]" "  libcublas held device memory"
  # The trace's Library column names the same two for the blocks, nothing for the regions.
  is "$(awk -F, 'NR > 1 { print $8 "," $11 }' "$WORK/cublas.csv" | sort -u | tr '\n' ' ')" \
    "alloc,cublas_shared alloc,libcublas cap, free,cublas_shared free,libcublas refused,cublas_shared refused,libcublas reserve, " \
    "  the trace names them row by row"
else
  skip "cuBLAS row: not built (no nvcc when the tests were built)"
fi
done_testing
