#!/usr/bin/env bash
# Programs that reach the driver without cuGetProcAddress: linked with -lcuda, and through
# another preloaded interposer that uses dlsym(RTLD_NEXT, ...), in both preload orders.
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

stats="$WORK/linked.json"
GPUCAP_POOL=regions GPUCAP_MEMORY_LIMIT=64MiB FAKECUDA_STATS="$stats" tap_program \
  "program linked with -lcuda" with_shim "$TESTBIN/linked"
is "$(json_obj_num "$stats" calls cuMemAlloc_v2)" 2 \
  "pooled: the driver saw the no-context call and one region for three allocations"
GPUCAP_POOL=off GPUCAP_MEMORY_LIMIT=64MiB FAKECUDA_STATS="$stats" tap_program \
  "program linked with -lcuda, GPUCAP_POOL=off" with_shim "$TESTBIN/linked"
is "$(json_obj_num "$stats" calls cuMemAlloc_v2)" 3 \
  "pass-through: the driver saw the no-context call and the 2 allocations under the cap"

san=${SAN_PRELOAD:+$SAN_PRELOAD }
next="$BUILD/tests/libnext.so"
LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$san$next $SHIM" tap_program \
  "RTLD_NEXT from an interposer preloaded before gpucap" "$TESTBIN/nexttest" libgpucap.so
LD_LIBRARY_PATH="$FAKE_DIR" LD_PRELOAD="$san$SHIM $next" tap_program \
  "RTLD_NEXT from an interposer preloaded after gpucap" "$TESTBIN/nexttest" libcuda.so.1

done_testing
