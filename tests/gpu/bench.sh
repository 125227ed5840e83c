#!/usr/bin/env bash
# make gpu-bench: what gpucap costs on the driver at hand (tests/gpu/kit.sh: GPU_CHECK_DRIVER),
# every figure measured in the same run as its baseline, never against a number from elsewhere
# (docs/benchmarks.md, "On a GPU"):
#   - the driver's own cuMemAlloc_v2 + cuMemFree_v2 pair against gpucap's pooled pair and its
#     pass-through pair (GPUCAP_POOL=off) through the hooks, at 4 KiB, 2 MiB and 64 MiB, and
#     cuMemGetInfo_v2 (build/tests/hookbench, bare and under gpucap);
#   - cudaMalloc + cudaFree through NVIDIA's shared runtime, when libcudart.so is found;
#   - virtual memory management, each step timed: create, reserve, map, set access, unmap,
#     free the range, release (hookbench vmm), bare and under gpucap (which hooks create, map,
#     unmap and release);
#   - a spilled pair, when this gpucap has a spill setting (GPUCAP_SPILL or
#     GPUCAP_OVERSUBSCRIBE in `gpucap env`); else one line says it has none;
#   - one PyTorch training step (tests/gpu/torch_step.py), with PyTorch's caching allocator and
#     without it, bare and under gpucap, when torch imports in GPU_CHECK_PYTHON (or the
#     frameworks' environment, or python3).
# Prints Markdown; writes it and the figures (JSON) to $GPU_BENCH_OUT (default
# $BUILD/gpu-bench). GPU_BENCH_RUNS: rounds per figure, the median kept (default 5);
# GPU_BENCH_N: calls per round for 4 KiB and 2 MiB (default 2000; 64 MiB and VMM: a tenth).
. "$TOP/tests/gpu/kit.sh"

KIT_OUT=${GPU_BENCH_OUT:-$BUILD/gpu-bench}
RUNS=${GPU_BENCH_RUNS:-5}
N=${GPU_BENCH_N:-2000}
BENCH="$BUILD/tests/hookbench"
rm -rf "$KIT_OUT"
mkdir -p "$KIT_OUT"
if ! kit_driver "$KIT_OUT"; then
  echo "gpu-bench: error: no usable $KIT_DRIVER driver" >&2
  exit 1
fi
results="$KIT_OUT/results.jsonl"
: > "$results"

# hb bare|capped WHAT N [BYTES] [VAR=VALUE...]: hookbench's median ns per call ("" if it failed);
# its JSON line is kept in $results with the configuration.
hb() {
  local how=$1 what=$2 n=$3 bytes=${4:-4096} pre=${SAN_PRELOAD:-} line
  shift 4
  [ "$how" = capped ] && pre="${pre:+$pre }$KIT_SHIM"
  line=$(env LD_PRELOAD="$pre" RUNS="$RUNS" GPUCAP_REPORT=off "$@" "$BENCH" "$what" "$n" \
    "$bytes" 2> "$KIT_OUT/hookbench.err")
  [ -n "$line" ] || return 0
  printf '{"config": %s, %s\n' "$(jstr "$how${*:+ $*} $what $bytes")" "${line#\{}" >> "$results"
  printf '%s\n' "$line" | sed -n 's/.*"ns":\([0-9.]*\).*/\1/p'
}

ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f\n", a / b }'
}

cell() { echo "${1:--}"; }

# human BYTES: 4 KiB, 2 MiB, 64 MiB.
human() {
  if [ "$1" -lt $((1 << 20)) ]; then echo "$(($1 >> 10)) KiB"; else echo "$(($1 >> 20)) MiB"; fi
}

name=$(json_str "$KIT_OUT/machine.json" name)
{
  echo "## gpu-bench: $name ($KIT_DRIVER driver $(json_str "$KIT_OUT/machine.json" driver_version), CUDA $(json_num "$KIT_OUT/machine.json" cuda_driver_version))"
  echo
  echo "Median of $RUNS rounds; ns per call; every ratio from the same run."
  echo
  echo "### Allocation pairs (cuMemAlloc_v2 + cuMemFree_v2)"
  echo
  echo "| size | the driver's own pair | gpucap's pooled pair | driver / pooled | gpucap pass-through (GPUCAP_POOL=off) | pass-through / driver |"
  echo "| --- | ---: | ---: | ---: | ---: | ---: |"
} > "$KIT_OUT/bench.md"
for size in 4096 $((2 << 20)) $((64 << 20)); do
  n=$N
  [ "$size" -lt $((64 << 20)) ] || n=$((N / 10))
  bare=$(hb bare pair "$n" "$size")
  pooled=$(hb capped pair "$n" "$size")
  passthru=$(hb capped pair "$n" "$size" GPUCAP_POOL=off)
  echo "| $(human "$size") | $(cell "$bare") | $(cell "$pooled") | $(ratio "$bare" "$pooled") | $(cell "$passthru") | $(ratio "$passthru" "$bare") |" >> "$KIT_OUT/bench.md"
done
{
  echo
  echo "### Other calls"
  echo
  echo "| call | bare | under gpucap | gpucap / bare |"
  echo "| --- | ---: | ---: | ---: |"
} >> "$KIT_OUT/bench.md"
bare=$(hb bare info "$N" 0)
capped=$(hb capped info "$N" 0)
echo "| cuMemGetInfo_v2 | $(cell "$bare") | $(cell "$capped") | $(ratio "$capped" "$bare") |" >> "$KIT_OUT/bench.md"
# NVIDIA's shared runtime: the toolkit's, or one on the loader's path.
rtdir=""
for c in "${CUDA_HOME:-}" /usr/local/cuda; do
  [ -n "$c" ] && [ -e "$c/lib64/libcudart.so" ] && rtdir="$c/lib64" && break
done
bare=$(LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$rtdir" hb bare cudart "$N" 4096)
capped=$(LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$rtdir" hb capped cudart "$N" 4096)
if [ -n "$bare" ]; then
  echo "| cudaMalloc + cudaFree, 4 KiB (shared runtime; gpucap: pooled) | $bare | $(cell "$capped") | $(ratio "$capped" "$bare") |" >> "$KIT_OUT/bench.md"
else
  echo "| cudaMalloc + cudaFree | no libcudart.so found | | |" >> "$KIT_OUT/bench.md"
fi

# ---- VMM ----
{
  echo
  echo "### Virtual memory management (ns per call of each step)"
  echo
  echo "| size | | create | reserve | map | set access | unmap | free range | release |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
} >> "$KIT_OUT/bench.md"
for size in $((2 << 20)) $((64 << 20)); do
  for how in bare capped; do
    before=$(wc -l < "$results")
    hb "$how" vmm $((N / 10)) "$size" > /dev/null
    line=""
    [ "$(wc -l < "$results")" = "$before" ] || line=$(tail -n 1 "$results")
    case $line in
    *'"what":"vmm"'*)
      row="| $(human "$size") | $how"
      for step in create reserve map access unmap unreserve release; do
        row="$row | $(printf '%s\n' "$line" | sed -n "s/.*\"${step}_ns\":\([0-9.]*\).*/\1/p")"
      done
      echo "$row |" >> "$KIT_OUT/bench.md" ;;
    *) echo "| $(human "$size") | $how | failed: $(head -n 1 "$KIT_OUT/hookbench.err") | | | | | | |" >> "$KIT_OUT/bench.md" ;;
    esac
  done
done

# ---- A spilled pair ----
echo >> "$KIT_OUT/bench.md"
spill=$("$BUILD/gpucap" env 2>/dev/null | grep -cE '^GPUCAP_(SPILL|OVERSUBSCRIBE)\b')
if [ "$spill" -lt 2 ]; then
  echo "Spilled pair: skipped: this gpucap has no spill setting (\`gpucap env\` lists not both GPUCAP_SPILL and GPUCAP_OVERSUBSCRIBE)." >> "$KIT_OUT/bench.md"
else
  # A 4 MiB block under a 2 MiB cap: it can only be served by spilling.
  spilled=$(hb capped pair $((N / 10)) $((4 << 20)) GPUCAP_OVERSUBSCRIBE=64MiB GPUCAP_SPILL=on \
    GPUCAP_MEMORY_LIMIT=2MiB)
  bare=$(hb bare pair $((N / 10)) $((4 << 20)))
  if [ -n "$spilled" ]; then
    echo "Spilled pair: $spilled ns (GPUCAP_OVERSUBSCRIBE=64MiB GPUCAP_SPILL=on, a 4 MiB block under a 2 MiB cap); the driver's own 4 MiB pair: $(cell "$bare") ns ($(ratio "$spilled" "$bare") x)." >> "$KIT_OUT/bench.md"
  else
    echo "Spilled pair: a 4 MiB pair under a 2 MiB cap with a spill budget failed: $(head -n 1 "$KIT_OUT/hookbench.err")" >> "$KIT_OUT/bench.md"
  fi
fi

# ---- One PyTorch training step ----
kit_python
py=$KIT_PY
echo >> "$KIT_OUT/bench.md"
if [ -n "${SAN_PRELOAD:-}" ] || [ -z "$py" ] || ! "$py" -c "import torch" > /dev/null 2>&1; then
  echo "PyTorch training step: skipped: no Python with torch (GPU_CHECK_PYTHON, FRAMEWORKS_VENV)." >> "$KIT_OUT/bench.md"
else
  {
    echo "### One PyTorch training step (tests/gpu/torch_step.py; ms per step)"
    echo
    echo "| PyTorch's allocator | bare | under gpucap | gpucap / bare |"
    echo "| --- | ---: | ---: | ---: |"
  } >> "$KIT_OUT/bench.md"
  for alloc in caching none; do
    vars=()
    [ $alloc = none ] && vars=(PYTORCH_NO_CUDA_MEMORY_CACHING=1)
    ms=()
    for how in bare capped; do
      pre=${SAN_PRELOAD:-}
      [ "$how" = capped ] && pre="${pre:+$pre }$KIT_SHIM"
      line=$(env LD_PRELOAD="$pre" GPUCAP_REPORT=off "${vars[@]}" "$py" \
        "$TOP/tests/gpu/torch_step.py" 2> "$KIT_OUT/torch.err" | tail -n 1)
      case $line in
      '{'*) printf '{"config": %s, %s\n' "$(jstr "$how torch $alloc")" "${line#\{}" >> "$results" ;;
      *) line="" ;;
      esac
      ms+=("$(printf '%s\n' "$line" | sed -n 's/.*"ms_per_step": \([0-9.]*\).*/\1/p')")
    done
    echo "| $alloc | $(cell "${ms[0]}") | $(cell "${ms[1]}") | $(ratio "${ms[1]}" "${ms[0]}") |" >> "$KIT_OUT/bench.md"
  done
fi
[ "$KIT_DRIVER" = real ] ||
  printf '\nOver the fake driver: the times are the fake'"'"'s, not a GPU'"'"'s (the kit'"'"'s dry run).\n' >> "$KIT_OUT/bench.md"

{
  echo "{"
  echo "  \"kit\": \"gpu-bench\","
  echo "  \"driver_mode\": \"$KIT_DRIVER\","
  echo "  \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
  echo "  \"runs\": $RUNS,"
  echo "  \"machine\": $(sed '1!s/^/  /' "$KIT_OUT/machine.json"),"
  echo "  \"results\": ["
  sed 's/^/    /; $!s/$/,/' "$results"
  echo "  ]"
  echo "}"
} > "$KIT_OUT/bench.json"
cat "$KIT_OUT/bench.md"
