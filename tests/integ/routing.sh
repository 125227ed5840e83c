#!/usr/bin/env bash
# Routing, proven from outside the shim: every route a CUDA program takes into the driver
# (cudart's cuGetProcAddress_v2 queries, cudart's dlsym fallback) ends in gpucap for hooked
# names at the right ABI and in the driver, untouched, for the rest; the fake driver's own
# record says who asked it.
. "$TOP/tests/integ/lib.sh"

nm -D --defined-only "$SHIM" | awk '{print $3}' | sed 's/@.*//' > "$WORK/hooked"

stats="$WORK/stats.json"
# The region pool, whose one region is one cuMemAlloc_v2 the driver counts.
GPUCAP_POOL=regions FAKECUDA_STATS="$stats" tap_program "cudart-mimic over cuGetProcAddress_v2" \
  with_shim "$TESTBIN/mimic" "$REQUESTS" "$WORK/hooked"
queries=$(json_num "$stats" proc_address_queries)
from_shim=$(json_obj_num "$stats" proc_address_callers libgpucap.so)
like "$queries" '^4[0-9][0-9]$' "the driver saw cudart's ~440 queries ($queries)"
is "$from_shim" "$queries" "every query reached the driver through gpucap's wrapper"
is "$(json_obj_num "$stats" calls cuMemAlloc_v2)" 1 "the driver saw the one cuMemAlloc_v2"

tap_program "cudart-mimic over the dlsym fallback" \
  with_shim "$TESTBIN/mimic" "$REQUESTS" "$WORK/hooked" --fallback

out=$(FAKECUDA_STUB=1 with_shim "$TESTBIN/mimic" "$REQUESTS" "$WORK/hooked" 2>&1 | head -5)
like "$out" 'probe .* refused \(rc 34\)' "a stub driver's probe answer (34) sends the mimic to dlsym"

done_testing
