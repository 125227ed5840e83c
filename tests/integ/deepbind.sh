#!/usr/bin/env bash
# RTLD_DEEPBIND puts a library's own scope (itself, then its dependencies: libc's dlsym, the
# driver) before the preloaded gpucap, so such a library reached the driver uncapped. A program
# loads one (tests/integ/deeplib.c) in both shapes a library reaches the driver: linked with
# -lcuda, and dlopen + dlsym + cuGetProcAddress_v2 as the runtime does; opened by the program
# and by a library whose RUNPATH alone finds it. Each asks for 16 x 64 MiB under a 64 MiB cap:
# the fake driver's peak must stay at the cap, and the dlopen must find exactly what it finds
# without gpucap (an interposed dlopen must keep the caller's search path).
. "$TOP/tests/integ/lib.sh"
# Figures of allocations alone: the driver's own memory is tests/integ/overhead.sh's subject.
export FAKECUDA_DRIVER_MEMORY=off

MiB=$((1 << 20))
if [ -n "${SAN_PRELOAD:-}" ]; then
  # ASan and TSan refuse RTLD_DEEPBIND outright ("incompatible with sanitizer runtime").
  skip "RTLD_DEEPBIND libraries" "the sanitizer runtimes refuse RTLD_DEEPBIND"
  done_testing
fi
field() {
  printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}
export GPUCAP_MEMORY_LIMIT=64MiB GPUCAP_REPORT=off

cases=0
# case_ NAME LIBRARY [via-loader]
case_() {
  local name=$1 lib=$2 how=${3:-}
  cases=$((cases + 1))
  stats="$WORK/stats-$cases.json"
  out=$(FAKECUDA_STATS="$stats" with_shim "$TESTBIN/deeptest" "$lib" $((64 * MiB)) 16 $how \
    2>"$WORK/err")
  is "$(field "$out" loaded)" 1 "$name: the deep-bound library is loaded"
  is "$(field "$out" got)" 1 "$name: one 64 MiB block under the cap, not 16"
  peak=$(json_num "$stats" peak_bytes)
  [ -n "$peak" ] && [ "$peak" -le $((64 * MiB)) ]
  ok $? "$name: the driver never held more than the cap (peak ${peak:-?})"
  is "$(grep -c '^gpucap: error\|bypass' "$WORK/err")" 0 "$name: no error, no warning of a bypass"
}
case_ "-lcuda, bare name found through the program's RUNPATH" libdeeplinked.so
case_ "dlopen + dlsym, full path" "$TESTBIN/deep2/libdeepdlsym.so"
case_ "dlopen + dlsym, bare name found through the loader's RUNPATH" libdeepdlsym.so via-loader
case_ "-lcuda, full path, opened by the loader" "$TESTBIN/deep1/libdeeplinked.so" via-loader

case_ "-lcuda, \$ORIGIN/deep1/libdeeplinked.so" '$ORIGIN/deep1/libdeeplinked.so'

# A request gpucap cannot reproduce for its caller ($LIB: glibc's own value) goes to glibc
# untouched; a program that uses CUDA is warned that the library may bypass the cap, one that
# does not hears nothing.
for how in after-cuda direct; do
  want=$(without_shim "$TESTBIN/deeptest" '$LIB/libdeepnone.so' 0 1 $how 2>/dev/null |
    sed 's/ error=.*//')
  got=$(with_shim "$TESTBIN/deeptest" '$LIB/libdeepnone.so' 0 1 $how 2>"$WORK/err" |
    sed 's/ error=.*//')
  is "$got" "$want" "\$LIB/libdeepnone.so, $how: glibc's own answer ($want)"
done
with_shim "$TESTBIN/deeptest" '$LIB/libdeepnone.so' 0 1 after-cuda >/dev/null 2>"$WORK/err"
like "$(cat "$WORK/err")" '^gpucap: warning: .*RTLD_DEEPBIND.*may bypass the cap' \
  "  a program using CUDA is warned that such a library may bypass the cap"
with_shim "$TESTBIN/deeptest" '$LIB/libdeepnone.so' 0 1 direct >/dev/null 2>"$WORK/err"
is "$(cat "$WORK/err")" "" "  a program not using CUDA hears nothing"

# The search path stays the caller's: the loader's RUNPATH does not find the linked shape, the
# program's does not find the dlsym shape, with or without gpucap.
for how in "libdeeplinked.so via-loader" "libdeepdlsym.so direct"; do
  set -- $how
  want=$(without_shim "$TESTBIN/deeptest" "$1" 0 1 "$2" 2>/dev/null | sed 's/ error=.*//')
  got=$(with_shim "$TESTBIN/deeptest" "$1" 0 1 "$2" 2>/dev/null | sed 's/ error=.*//')
  is "$got" "$want" "dlopen($1, $2): the same answer as without gpucap ($want)"
  is "$want" "loaded=0" "  (not found: only another object's RUNPATH has it)"
done
done_testing
