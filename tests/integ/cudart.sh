#!/usr/bin/env bash
# A program built against NVIDIA's real libcudart, shared and static (nvcc's default), over the
# fake driver: the runtime's start-up (its 440 entry-point queries, the private export tables,
# the integrity handshake, the primary context) must complete, every query must reach the
# driver through gpucap's wrapper (the driver's own record), and cudaMalloc must be served by
# gpucap's pool under the cap (one driver allocation of a pool region, the cap seen by
# cudaMemGetInfo). Skipped without a toolkit.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

cuda=${CUDA_HOME:-}
if [ -z "$cuda" ] && command -v nvcc >/dev/null; then
  cuda=$(dirname "$(dirname "$(command -v nvcc)")")
fi
if [ -z "$cuda" ] || [ ! -f "$cuda/include/cuda_runtime_api.h" ]; then
  skip "real libcudart" "no CUDA toolkit found (set CUDA_HOME or put nvcc on PATH)"
  done_testing
fi
lib="$cuda/lib64"
[ -d "$lib" ] || lib="$cuda/lib"

cc -I"$cuda/include" "$TOP/tests/integ/cudart_prog.c" -o "$WORK/shared" -L"$lib" -lcudart \
  -Wl,-rpath,"$lib" 2>"$WORK/cc.err"
ok $? "built against libcudart.so"
cc -I"$cuda/include" "$TOP/tests/integ/cudart_prog.c" -o "$WORK/static" \
  "$lib/libcudart_static.a" -ldl -lpthread -lrt 2>>"$WORK/cc.err"
ok $? "built against libcudart_static.a"

for kind in shared static; do
  stats="$WORK/$kind.json"
  out=$(FAKECUDA_STATS="$stats" without_shim "$WORK/$kind" 2>"$WORK/err")
  ok $? "$kind runtime, no gpucap: the program runs to its end"
  like "$out" 'version_rc=0 count_rc=0 count=1 malloc_rc=0 info_rc=0 total=17179869184 free_rc=0' \
    "$kind runtime, no gpucap: every call succeeds ($out)"
  is "$(json_obj_num "$stats" calls cuMemAlloc_v2)" "1" \
    "$kind runtime, no gpucap: cudaMalloc is one cuMemAlloc_v2"

  out=$(FAKECUDA_STATS="$stats" GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off \
    with_shim "$WORK/$kind" 2>"$WORK/err")
  ok $? "$kind runtime under gpucap: the program runs to its end"
  like "$out" 'runtime=13' "$kind runtime under gpucap: version $out"
  like "$out" 'version_rc=0 count_rc=0 count=1 malloc_rc=0 info_rc=0 total=67108864 free_rc=0' \
    "$kind runtime under gpucap: every call succeeds and cudaMemGetInfo reports the 64 MiB cap"
  queries=$(json_num "$stats" proc_address_queries)
  like "${queries:-0}" '^4[0-9][0-9]$' "$kind runtime: the driver saw ${queries:-0} queries"
  is "$(json_obj_num "$stats" proc_address_callers libgpucap.so)" "$queries" \
    "$kind runtime: every query came through gpucap's wrapper"
  peak=$(grep -o '"peak_bytes": [0-9]*' "$stats" | head -n 1 | sed 's/.*: //')
  is "$peak" "2097152" "$kind runtime under gpucap: the driver held one 2 MiB pool region at most"

  # At exit the runtime's teardown releases its primary context: the report shows that pool as
  # it stood at exit (not as a context the program destroyed), nothing freed waits for the
  # device any more, and what the program kept is in use and held by it in the ledger.
  json="$WORK/$kind-exit.json"
  out=$(GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT_JSON="$json" GPUCAP_REPORT=off \
    with_shim "$WORK/$kind" exit 2>"$WORK/err")
  is "$out" "exit_rc=0" "$kind runtime, at exit: the program ran"
  is "$(python3 -c "import json,sys
d = json.load(open(sys.argv[1]))
p, u = d['devices'][0], d['usage'][0]
print(p['context_destroyed'], p['deferred_bytes'], p['num_deferred'], p['bytes_in_use'],
      u['held_bytes'])" "$json")" "False 0 0 4194304 4194304" \
    "$kind runtime, at exit: not destroyed before exit, nothing deferred, 4 MiB in use and held"
done

done_testing
