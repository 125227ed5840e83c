#!/usr/bin/env bash
# A program built against NVIDIA's real libcudart, shared and static (nvcc's default). Over the
# fake driver its initialisation stops at the private export tables, but its whole
# driver-resolution phase runs first: every cuGetProcAddress_v2 query must reach the driver
# through gpucap's wrapper, as the driver's own record shows. Skipped without a toolkit.
. "$TOP/tests/integ/lib.sh"

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
  out=$(FAKECUDA_STATS="$stats" with_shim "$WORK/$kind" 2>"$WORK/err")
  ok $? "$kind runtime: the program runs to its end"
  like "$out" 'runtime=13' "$kind runtime: version $out"
  queries=$(json_num "$stats" proc_address_queries)
  like "${queries:-0}" '^4[0-9][0-9]$' "$kind runtime: the driver saw ${queries:-0} queries"
  is "$(json_obj_num "$stats" proc_address_callers libgpucap.so)" "$queries" \
    "$kind runtime: every query came through gpucap's wrapper"
  is "$(json_obj_num "$stats" calls cuMemAlloc_v2)" "" \
    "$kind runtime: no memory call reached the fake (init stops at the export tables)"
done

done_testing
