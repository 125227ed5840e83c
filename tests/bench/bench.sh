#!/bin/sh
# Replay benchmark driver (`make bench`): generates the bundled traces, replays each through
# core/ in several configurations with build/gpucap-replay and prints markdown tables; then
# replays each once through the fake driver (build/fakecuda), bare and under gpucap with the
# pool off, on regions and on VMM (the default over the fake), for the driver calls and the
# modelled driver time each costs; and the VMM-backed pool (mapped mode) at its tight cap.
# Needs only a POSIX shell, sed, awk, the two tools `make bench` builds, the shim and the fake
# driver. Environment: BUILD (default build), RUNS (timed repetitions, default 11), SRUNS (those
# of the 1/2/8-thread scaling tables, default 5), ARENAS_MAX (the most arenas of the auto model
# over VMM; default the shim's rule, the online CPUs up to 8), TRACES (default: the five
# synthetic kinds and the two traces recorded from real frameworks,
# tests/bench/traces/*.csv.gz), LATENCY (FAKECUDA_LATENCY for the driver replays; default the
# fake's suggested A100 figures, tests/fakecuda/README.md). With valgrind installed, the speed
# table also gives the instructions of one warm pass per pair (callgrind; the steady figure).
set -eu
# gpucap's own cost over a fixed fake: the driver's own memory (a 401 MiB context on small fake
# devices) left out.
export FAKECUDA_DRIVER_MEMORY=off

BUILD=${BUILD:-build}
RUNS=${RUNS:-11}
SRUNS=${SRUNS:-5}
ARENAS_MAX=${ARENAS_MAX:-}
TRACES=${TRACES:-"transformer cnn llm adversarial random torch-gpt cupy-pipe"}
RECORDED=$(dirname "$0")/traces
REPLAY="$BUILD/gpucap-replay"
GEN="$BUILD/gpucap-tracegen"
CAP=1.10
LATENCY=${LATENCY:-cuMemCreate:200us,cuMemMap:2us,cuMemSetAccess:36us,cuMemUnmap:26us,cuMemAddressReserve:19us,cuMemAlloc_v2:100us,cuMemFree_v2:50us}
VCAP=1.02           # the VMM-backed pool's target: this x peak live bytes, plus one unit
UNIT=$((2 << 20))   # the allocation granularity of current GPUs (and of the fake driver)

for tool in "$REPLAY" "$GEN" "$BUILD/libgpucap.so" "$BUILD/fakecuda/libcuda.so.1"; do
  if [ ! -x "$tool" ]; then
    echo "gpucap: error: $tool is missing; run 'make bench'" >&2
    exit 1
  fi
done
mkdir -p "$BUILD/traces"
: > "$BUILD/bench-results.jsonl"
tmp="$BUILD/bench.tmp"
rm -rf "$tmp"
mkdir -p "$tmp"

# ir TRACE: instructions per pair of one warm pass at the speed table's cap: callgrind collects
# only inside the replay's count_warm_pass (the pool's calls and the replay loop around them,
# about 56 instructions per pair, the same for every build of the pool). "-" without valgrind.
ir() {
  command -v valgrind >/dev/null 2>&1 || { echo -; return; }
  n=$(valgrind --tool=callgrind --toggle-collect='count_warm_pass*' --callgrind-out-file=/dev/null \
    "$REPLAY" "$1" --count --cap-factor $CAP 2>&1 >"$tmp/count.json" |
    sed -n 's/.*Collected : *//p' | tr -d ',')
  awk -v n="${n:-}" -v p="$(get "$(cat "$tmp/count.json")" pairs)" \
    'BEGIN { if (n == "" || p + 0 == 0) print "-"; else printf "%.0f\n", n / p }'
}

# get JSON KEY: the value of one field of a one-line JSON object.
get() {
  printf '%s\n' "$1" | sed -n "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p"
}

# human BYTES: GiB/MiB/KiB.
human() {
  awk -v b="$1" 'BEGIN {
    if (b >= 1073741824) printf "%.2f GiB", b / 1073741824;
    else if (b >= 1048576) printf "%.1f MiB", b / 1048576;
    else printf "%.1f KiB", b / 1024 }'
}

# row FILE CELL...: appends one markdown table row.
row() {
  out=$1
  shift
  printf '|' >> "$out"
  for cell in "$@"; do
    printf ' %s |' "$cell" >> "$out"
  done
  printf '\n' >> "$out"
}

# over_fake SHIM POOL OUT TRACE [N]: one --driver replay of TRACE (the first N events) over the
# fake driver with the modelled latencies charged, not slept; SHIM yes: under gpucap with
# GPUCAP_POOL=POOL; the fake's report goes to OUT. Prints the replay's JSON line.
over_fake() {
  pre=
  [ "$1" = yes ] && pre="$BUILD/libgpucap.so"
  env -u GPUCAP_MEMORY_LIMIT -u GPUCAP_MEMORY_FRACTION GPUCAP_POOL="$2" GPUCAP_REPORT=off \
    FAKECUDA_LATENCY="$LATENCY" FAKECUDA_LATENCY_SLEEP=0 FAKECUDA_STATS="$3" \
    LD_LIBRARY_PATH="$BUILD/fakecuda" LD_PRELOAD="$pre" "$REPLAY" "$4" --driver ${5:-}
}

# calls FILE [REGEX]: the calls in a fake report of the entry points matching REGEX (default
# all); ns FILE: its modelled driver time.
calls() {
  sed -n '/^"calls": {/,/^}/p' "$1" | grep -E "^  \"(${2:-cu.*})\":" |
    awk -F': ' '{ s += $2 } END { print s + 0 }'
}
MEMCALLS='cuMem[A-Za-z_0-9]*|cu(Ctx|Stream)Synchronize'

# cost J FILE SETUP: "M (A)" for a replay's report less its setup's: the calls that allocate,
# free, map, query memory or synchronise (M) and all calls (A); then the modelled time in ms.
cost() {
  m=$(($(calls "$2" "$MEMCALLS") - $(calls "$3" "$MEMCALLS")))
  a=$(($(calls "$2") - $(calls "$3")))
  printf '%s (%s)\n%s\n' "$m" "$a" \
    "$(awk -v a="$(ns "$2")" -v b="$(ns "$3")" 'BEGIN { printf "%.1f", (a - b) / 1e6 }')"
}
ns() { sed -n 's/^"driver_time_ns": \([0-9]*\),*$/\1/p' "$1"; }

max() { awk -v a="$1" -v b="$2" 'BEGIN { print (b > a) ? b : a }'; }
min() { awk -v a="$1" -v b="$2" 'BEGIN { print (b < a) ? b : a }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
# lowest NAME X: keeps in $NAME the lowest X given and in ${NAME}_at the trace ($k) it came from.
lowest() {
  low=
  eval "low=\$$1"
  if awk -v x="$2" -v y="$low" 'BEGIN { exit !(x < y) }'; then
    eval "$1=\$2; ${1}_at=\$k"
  fi
}
# arenas_row FILE TRACE JSON [CELL...]: a row of an arenas table from a --scaling line: its
# times and ratios, the CELLs, then its refusals at 2 and 8 threads (the lock's/the arenas').
arenas_row() {
  file=$1
  name=$2
  j=$3
  shift 3
  row "$file" "$name" "$(get "$j" arenas_ns_1)" "$(get "$j" arenas_ns_2)" \
    "$(get "$j" arenas_ns_8)" "$(get "$j" arenas_vs_lock_1)" "$(get "$j" arenas_scaling_2)" \
    "$(get "$j" arenas_scaling_8)" "$(get "$j" lock_scaling_2)" "$(get "$j" lock_scaling_8)" "$@" \
    "$(get "$j" lock_failed_2)/$(get "$j" arenas_failed_2)" \
    "$(get "$j" lock_failed_8)/$(get "$j" arenas_failed_8)"
}
verdict() { if [ "$1" = yes ]; then echo met; else echo MISSED; fi; }
# atleast X MIN: "met" iff X >= MIN, else "MISSED".
atleast() { verdict "$(awk -v x="$1" -v m="$2" 'BEGIN { print (x >= m) ? "yes" : "no" }')"; }

for k in $TRACES; do
  f="$BUILD/traces/$k.csv"
  if [ -f "$RECORDED/$k.csv.gz" ]; then
    if [ ! -s "$f" ] || [ "$RECORDED/$k.csv.gz" -nt "$f" ]; then
      gzip -dc "$RECORDED/$k.csv.gz" > "$f"
    fi
  elif [ ! -s "$f" ] || [ "$GEN" -nt "$f" ]; then
    "$GEN" "$k" -o "$f"
  fi
done

echo "gpucap replay benchmark: $(uname -m), $(getconf _NPROCESSORS_ONLN) cores," \
  "runs=$RUNS (medians), cap factor $CAP" >&2

row "$tmp/speed" trace pairs "max live blocks" "warm ns/pair" "warm, best run" \
  "instructions/pair (warm)" "cold ns/pair" cold/warm "warm, uncontended mutex" \
  "no-pool baseline ns" warm/baseline "host metadata"
row "$tmp/speed" --- ---: ---: ---: ---: ---: ---: ---: ---: ---: ---: ---:
row "$tmp/memory" trace "peak live" "completes @$CAP growth" "completes @$CAP prealloc" \
  "min cap growth (first)" "min cap prealloc (first)" \
  "peak pool / peak live @$CAP growth" "driver allocs (growth)"
row "$tmp/memory" --- ---: :-: :-: ---: ---: ---: ---:
row "$tmp/threads" trace "1 thread ns/pair" "2 threads, mutex: ns/pair" "scaling (mutex)" \
  "2 threads, spin: ns/pair" "scaling (spin)"
row "$tmp/threads" --- ---: ---: ---: ---: ---:
row "$tmp/scaling" trace "lock 1t ns" "lock 2t ns" "lock 8t ns" "lock 2t/1t" "lock 8t/1t" \
  "failed 1t/2t/8t"
row "$tmp/scaling" --- ---: ---: ---: ---: ---: :-:
row "$tmp/arenas" trace "arenas 1t ns" "arenas 2t ns" "arenas 8t ns" "arenas/lock 1t" \
  "arenas 2t/1t" "arenas 8t/1t" "lock 2t/1t" "lock 8t/1t" "open 2t/8t" \
  "interleaved failed: pool/arenas" "failed 2t: lock/arenas" "failed 8t: lock/arenas"
row "$tmp/arenas" --- ---: ---: ---: ---: ---: ---: ---: ---: :-: :-: :-: :-:
row "$tmp/dealt" trace "arenas 1t ns" "arenas 2t ns" "arenas 8t ns" "arenas/lock 1t" \
  "arenas 2t/1t" "arenas 8t/1t" "lock 2t/1t" "lock 8t/1t" \
  "failed 2t: lock/arenas" "failed 8t: lock/arenas"
row "$tmp/dealt" --- ---: ---: ---: ---: ---: ---: ---: ---: :-: :-:
row "$tmp/deferred" trace "on demand: warm ns/pair" "retires per pass" "completes @$CAP" \
  "min cap" "ratio 0.25: warm ns/pair" "retires per pass" "completes @$CAP" "min cap"
row "$tmp/deferred" --- ---: ---: :-: ---: ---: ---: :-: ---:
row "$tmp/driver" trace pairs "calls: bare driver" "calls: pool off" "calls: pool regions" \
  "calls: pool on (vmm)" "driver ms: bare" "driver ms: pool off" "driver ms: pool regions" \
  "driver ms: pool on (vmm)" "completed (bare/off/regions/vmm)"
row "$tmp/driver" --- ---: ---: ---: ---: ---: ---: ---: ---: ---: :-:

# What setting up device 0 costs each configuration, subtracted from every replay's figures.
first=$(echo $TRACES | cut -d' ' -f1)
for cfg in "no bare" "yes off" "yes regions" "yes on"; do
  set -- $cfg
  over_fake "$1" "$2" "$tmp/setup-$1-$2.json" "$BUILD/traces/$first.csv" 0 >/dev/null
done
row "$tmp/vmm" trace "completes @$VCAP+unit growth: vmm (regions)" \
  "completes @$VCAP+unit prealloc: vmm (regions)" "min cap vmm growth" \
  "warm ns/pair vmm @$CAP" "warm ns/pair regions @$CAP" "vmm/regions" \
  "map / unmap calls @$VCAP growth"
row "$tmp/vmm" --- :-: :-: ---: ---: ---: ---: ---:

worst_warm=0
worst_cold=0
all_complete=yes
worst_scaling=9
vmm_complete=yes
worst_vmm_ratio=0
worst_one_arenas=9
worst_two_arenas=9
worst_eight_arenas=9
worst_two_arenas_regions=9
worst_one_arenas_at=-
worst_two_arenas_at=-
worst_eight_arenas_at=-
worst_two_arenas_regions_at=-
worst_refusals=0      # the most a trace's arenas refused beyond the lock at 2 or 8 threads
worst_refusals_at=-
worst_interleaved=0   # the most a trace's two interleaved copies refused over arenas beyond one pool
worst_interleaved_at=-
refused_ip=0          # their refusals over all traces: one pool, arenas
refused_ia=0
refused_a2=0          # refusals over all traces: the arenas' at 2 and 8 threads, the lock's
refused_a8=0
refused_l2=0
refused_l8=0
arenas_max=-
for k in $TRACES; do
  f="$BUILD/traces/$k.csv"
  echo "  $k ..." >&2
  g=$("$REPLAY" "$f" --runs "$RUNS" --cap-factor $CAP --threads 2 --find-min-cap)
  p=$("$REPLAY" "$f" --runs 1 --cap-factor $CAP --preallocate --find-min-cap)
  s=$("$REPLAY" "$f" --runs "$RUNS" --cap-factor $CAP --threads 2 --lock spin)
  d=$("$REPLAY" "$f" --runs 3 --cap-factor $CAP --deferred --find-min-cap)
  q=$("$REPLAY" "$f" --runs 3 --cap-factor $CAP --deferred --retire-ratio 0.25 --find-min-cap)
  printf '%s\n%s\n%s\n%s\n%s\n' "$g" "$p" "$s" "$d" "$q" >> "$BUILD/bench-results.jsonl"
  # 1, 2 and 8 threads, each replaying its own copy under one cap: on one pool behind its one
  # lock, and from arenas. Over regions (sc), one arena per thread as an explicit
  # GPUCAP_ARENAS=N deals them out; over VMM (sv), as GPUCAP_ARENAS=auto, the default, opens
  # them (one, then more as threads meet contention; auto opens none over regions).
  sc=$("$REPLAY" "$f" --runs "$SRUNS" --cap-factor $CAP --scaling)
  sv=$("$REPLAY" "$f" --runs "$SRUNS" --cap-factor $CAP --vmm $UNIT --scaling \
    ${ARENAS_MAX:+--arenas-max "$ARENAS_MAX"})
  arenas_max=$(get "$sv" arenas_max)
  printf '%s\n%s\n' "$sc" "$sv" >> "$BUILD/bench-results.jsonl"
  row "$tmp/scaling" "$k" "$(get "$sc" lock_ns_1)" "$(get "$sc" lock_ns_2)" \
    "$(get "$sc" lock_ns_8)" "$(get "$sc" lock_scaling_2)" "$(get "$sc" lock_scaling_8)" \
    "$(get "$sc" lock_failed_1)/$(get "$sc" lock_failed_2)/$(get "$sc" lock_failed_8)"
  arenas_row "$tmp/arenas" "$k" "$sv" "$(get "$sv" arenas_open_2)/$(get "$sv" arenas_open_8)" \
    "$(get "$sv" interleaved_failed_pool)/$(get "$sv" interleaved_failed_arenas)"
  arenas_row "$tmp/dealt" "$k" "$sc"
  lowest worst_one_arenas "$(get "$sv" arenas_vs_lock_1)"
  lowest worst_two_arenas "$(get "$sv" arenas_scaling_2)"
  lowest worst_eight_arenas \
    "$(ratio "$(get "$sv" arenas_scaling_8)" "$(get "$sv" arenas_scaling_2)")"
  lowest worst_two_arenas_regions "$(get "$sc" arenas_scaling_2)"
  a2=$(get "$sv" arenas_failed_2)
  a8=$(get "$sv" arenas_failed_8)
  l2=$(get "$sv" lock_failed_2)
  l8=$(get "$sv" lock_failed_8)
  refused_a2=$((refused_a2 + a2))
  refused_a8=$((refused_a8 + a8))
  refused_l2=$((refused_l2 + l2))
  refused_l8=$((refused_l8 + l8))
  over=$((a2 - l2 > a8 - l8 ? a2 - l2 : a8 - l8))
  ip=$(get "$sv" interleaved_failed_pool)
  ia=$(get "$sv" interleaved_failed_arenas)
  refused_ip=$((refused_ip + ip))
  refused_ia=$((refused_ia + ia))
  if [ $((ia - ip)) -gt "$worst_interleaved" ]; then
    worst_interleaved=$((ia - ip))
    worst_interleaved_at=$k
  fi
  if [ "$over" -gt "$worst_refusals" ]; then
    worst_refusals=$over
    worst_refusals_at=$k
  fi
  # The VMM-backed pool (mapped mode) at the tight cap, and the region pool there as baseline;
  # speed compared at the common cap.
  vg=$("$REPLAY" "$f" --runs 1 --cap-factor $VCAP --vmm $UNIT --find-min-cap)
  vp=$("$REPLAY" "$f" --runs 1 --cap-factor $VCAP --vmm $UNIT --preallocate)
  rg=$("$REPLAY" "$f" --runs 1 --cap-factor $VCAP)
  rp=$("$REPLAY" "$f" --runs 1 --cap-factor $VCAP --preallocate)
  vs=$("$REPLAY" "$f" --runs "$RUNS" --cap-factor $CAP --vmm $UNIT)
  printf '%s\n%s\n%s\n%s\n%s\n' "$vg" "$vp" "$rg" "$rp" "$vs" >> "$BUILD/bench-results.jsonl"
  vratio=$(ratio "$(get "$vs" ns_per_pair_warm)" "$(get "$g" ns_per_pair_warm)")
  row "$tmp/vmm" "$k" "$(get "$vg" completed) ($(get "$rg" completed))" \
    "$(get "$vp" completed) ($(get "$rp" completed))" "$(get "$vg" min_cap_factor)" \
    "$(get "$vs" ns_per_pair_warm)" "$(get "$g" ns_per_pair_warm)" "$vratio" \
    "$(get "$vg" map_calls) / $(get "$vg" unmap_calls)"
  worst_vmm_ratio=$(max "$worst_vmm_ratio" "$vratio")
  if [ "$(get "$vg" completed)" != true ] || [ "$(get "$vp" completed)" != true ]; then
    vmm_complete=no
  fi

  warm=$(get "$g" ns_per_pair_warm)
  cold=$(get "$g" cold_over_warm)
  row "$tmp/speed" "$k" "$(get "$g" pairs)" "$(get "$g" max_live_blocks)" "$warm" \
    "$(get "$g" ns_per_pair_warm_min)" "$(ir "$f")" "$(get "$g" ns_per_pair_cold)" "$cold" \
    "$(get "$g" ns_per_pair_warm_locked)" \
    "$(get "$g" baseline_ns_per_pair)" "$(get "$g" ratio_vs_baseline)" \
    "$(human "$(get "$g" host_metadata_bytes)")"
  row "$tmp/memory" "$k" "$(human "$(get "$g" peak_live_bytes)")" "$(get "$g" completed)" \
    "$(get "$p" completed)" "$(get "$g" min_cap_factor) ($(get "$g" first_cap_factor))" \
    "$(get "$p" min_cap_factor) ($(get "$p" first_cap_factor))" \
    "$(get "$g" pool_over_live)" "$(get "$g" driver_alloc_calls)"
  row "$tmp/threads" "$k" "$warm" "$(get "$g" threads_ns_per_pair)" \
    "$(get "$g" thread_scaling)" "$(get "$s" threads_ns_per_pair)" "$(get "$s" thread_scaling)"
  row "$tmp/deferred" "$k" "$(get "$d" ns_per_pair_warm)" "$(get "$d" retires)" \
    "$(get "$d" completed)" "$(get "$d" min_cap_factor)" "$(get "$q" ns_per_pair_warm)" \
    "$(get "$q" retires)" "$(get "$q" completed)" "$(get "$q" min_cap_factor)"

  set --
  for cfg in "no bare" "yes off" "yes regions" "yes on"; do
    c1=${cfg% *}
    c2=${cfg#* }
    j=$(over_fake "$c1" "$c2" "$tmp/fake.json" "$f")
    printf '%s\n' "$j" >> "$BUILD/bench-results.jsonl"
    c=$(cost "$j" "$tmp/fake.json" "$tmp/setup-$c1-$c2.json")
    set -- "$@" "$(echo "$c" | sed -n 1p)" "$(echo "$c" | sed -n 2p)" "$(get "$j" completed)"
  done
  row "$tmp/driver" "$k" "$(get "$g" pairs)" "$1" "$4" "$7" "${10}" "$2" "$5" "$8" "${11}" \
    "$3/$6/$9/${12}"

  worst_warm=$(max "$worst_warm" "$warm")
  worst_cold=$(max "$worst_cold" "$cold")
  worst_scaling=$(min "$worst_scaling" "$(get "$g" thread_scaling)")
  worst_scaling=$(min "$worst_scaling" "$(get "$s" thread_scaling)")
  if [ "$(get "$g" completed)" != true ] || [ "$(get "$p" completed)" != true ]; then
    all_complete=no
  fi
done

ok_warm=$(awk -v w="$worst_warm" 'BEGIN { print (w <= 60) ? "yes" : "no" }')
ok_cold=$(awk -v r="$worst_cold" 'BEGIN { print (r <= 2) ? "yes" : "no" }')
ok_threads=$(awk -v s="$worst_scaling" 'BEGIN { print (s >= 0.8) ? "yes" : "no" }')

echo "### Speed (single thread, no lock unless stated; medians of $RUNS runs)"
echo
cat "$tmp/speed"
echo
echo "### Memory under a cap of $CAP x peak live bytes"
echo
echo "min cap: smallest factor F such that every factor from F to 2.00 (step 0.01) completes;"
echo "(first): the smallest factor that completes at all (completion is not monotone in F)."
echo
cat "$tmp/memory"
echo
echo "### Two threads sharing one pool behind one lock (aggregate throughput vs one thread)"
echo
cat "$tmp/threads"
echo
echo "### 1, 2 and 8 threads on one pool behind its one lock"
echo
echo "Each thread replays its own copy of the trace on one shared pool (limit: $CAP x peak live x"
echo "threads; region pool); ns: aggregate wall time per pair (medians of $SRUNS runs); ratios:"
echo "aggregate throughput, taken per run. failed: allocations refused over all runs (the lock's"
echo "come from 8 threads interleaving at the tight cap)."
echo
cat "$tmp/scaling"
echo
echo "### 1, 2 and 8 threads under one cap: arenas as GPUCAP_ARENAS=auto opens them (VMM)"
echo
echo "The same threads and cap from arenas, each a pool behind its own mutex, their growth charged"
echo "to the one cap, over the pools' mapped mode (--vmm, the shim's backing where the device has"
echo "VMM, and the only one over which auto opens arenas). As auto: one arena at first, every"
echo "thread on it; a thread that finds its arena's lock taken (one trylock) moves to the next"
echo "arena of a round robin modulo the most arenas, opening it if need be, and stays until it"
echo "meets contention again. The most: $arenas_max (the shim's: the online CPUs, 1 to 8;"
echo "ARENAS_MAX=N sets another). Before a refusal the other arenas' wholly free memory is given"
echo "back, then another arena lends the block (from a free chunk, or growing). arenas/lock 1t: the"
echo "arenas' throughput over the one lock's, one thread; lock 2t/1t, 8t/1t: the lock's scaling in"
echo "the same run; open: the arenas open at the end (median); interleaved failed: two copies of"
echo "the trace in one thread, event by event, in step and a half, a third and a quarter of the"
echo "trace apart, at $CAP x their peak live together, from one pool and from two arenas (what"
echo "splitting the memory costs, with no timing: threads' peaks meet only when they run at once);"
echo "failed: refusals over all runs. A refused allocation does no pool work: times with many"
echo "refusals are not comparable."
echo
cat "$tmp/arenas"
echo
echo "### 1, 2 and 8 threads under one cap: arenas dealt out, one per thread (regions)"
echo
echo "What an explicit GPUCAP_ARENAS=N (N = the threads) gives over the region pool: thread k on"
echo "arena k mod N from the start (auto keeps one pool over regions: the lock's table). A"
echo "region's growth doubles, so one arena may come to hold most of the cap and the others borrow"
echo "from it under its lock. Not judged."
echo
cat "$tmp/dealt"
echo
echo "### Deferred frees, growth, cap $CAP: retire on -EAGAIN only (on demand), or also after"
echo "### a free once deferred >= 0.25 x free bytes (ratio 0.25); each retire is a device sync"
echo
cat "$tmp/deferred"
echo
echo "### Driver cost per replay over the fake driver (no cap, device setup subtracted)"
echo
echo "calls: memory and synchronisation calls (cuMem*, cuCtxSynchronize, cuStreamSynchronize),"
echo "all calls in parentheses; driver ms: the modelled time in the driver, charged and not slept:"
echo
echo "LATENCY=$LATENCY"
echo
cat "$tmp/driver"
echo "### The VMM-backed pool (mapped mode, 2 MiB units) at $VCAP x peak live bytes + one unit"
echo
echo "map / unmap calls: units mapped and unmapped over a cold and a warm pass (one driver call"
echo "each); the region pool's row at the same cap in parentheses."
echo
cat "$tmp/vmm"
echo
echo "### Targets"
echo
echo "- warm <= 60 ns per pair on every trace: $(verdict "$ok_warm") (worst $worst_warm ns)"
echo "- cold <= 2x warm: $(verdict "$ok_cold") (worst $worst_cold)"
echo "- every trace completes at $CAP x peak live, growing and preallocated:" \
  "$(verdict "$all_complete")"
echo "- two threads keep >= 0.8x one-thread throughput: $(verdict "$ok_threads")" \
  "(worst $worst_scaling)"
echo "- arenas (auto, VMM), 1 thread no more than 5% slower than the lock:" \
  "$(atleast "$worst_one_arenas" 0.95) (worst $worst_one_arenas x, $worst_one_arenas_at)"
echo "- arenas (auto, VMM), 2 threads >= 1.6x one thread's throughput:" \
  "$(atleast "$worst_two_arenas" 1.6) (worst $worst_two_arenas, $worst_two_arenas_at;" \
  "dealt out over regions, not judged: $worst_two_arenas_regions, $worst_two_arenas_regions_at)"
echo "- arenas (auto, VMM), no loss at 8 threads (>= 0.95x the 2-thread throughput):" \
  "$(atleast "$worst_eight_arenas" 0.95) (worst $worst_eight_arenas, $worst_eight_arenas_at)"
worst=
if [ "$worst_refusals" -gt 0 ]; then
  worst="; worst $worst_refusals_at, $worst_refusals more"
fi
echo "- arenas (auto, VMM) refuse no more than the one lock at 2 and 8 threads, $CAP x peak live" \
  "x threads, on every trace: $(atleast 0 "$worst_refusals") (arenas $refused_a2 at 2 threads," \
  "$refused_a8 at 8; the lock $refused_l2, $refused_l8$worst)"
ok_vmm_speed=$(awk -v r="$worst_vmm_ratio" 'BEGIN { print (r <= 1.10) ? "yes" : "no" }')
worst=
if [ "$worst_interleaved" -gt 0 ]; then
  worst="; worst $worst_interleaved_at, $worst_interleaved more"
fi
echo "- arenas refuse no more than one pool, two copies interleaved in one thread at $CAP x" \
  "their peak live (no timing): $(atleast 0 "$worst_interleaved") (arenas $refused_ia, one" \
  "pool $refused_ip$worst)"
echo "- VMM-backed pool: every trace completes at $VCAP x peak live + one unit, growing and" \
  "preallocated: $(verdict "$vmm_complete")"
echo "- VMM-backed pool: warm ns per pair within 10% of the region pool: $(verdict "$ok_vmm_speed")" \
  "(worst $worst_vmm_ratio x)"
echo
echo "Raw JSON lines: $BUILD/bench-results.jsonl"
rm -rf "$tmp"
if [ -x "$BUILD/tests/hookbench" ]; then
  echo
  BUILD="$BUILD" RUNS="$RUNS" sh "$(dirname "$0")/hooks.sh"
fi
