#!/usr/bin/env bash
# libgpucap.so must load on glibc 2.28 (RHEL/Rocky 8, the oldest distribution the CUDA 13
# toolkit supports), whichever glibc built it: a preloaded library the loader cannot load is
# "ignored" and the program runs uncapped. Reads the GLIBC_ versions the library's imported
# symbols need (readelf -V, the version-needs section) and checks the highest (shim/base/glibc.c
# binds the symbols that moved in glibc 2.33 and 2.34 to their old versions).
. "$TOP/tests/tap.sh"

MAX=2.28
lib="$BUILD/libgpucap.so"
if ! command -v readelf >/dev/null; then
  skip "GLIBC_ versions of libgpucap.so" "readelf (binutils) is not installed"
  done_testing
fi
needed=$(readelf -V --wide "$lib" | sed -n 's/.*Name: GLIBC_\([0-9.]*\) .*/\1/p' | sort -V -u)
highest=$(printf '%s\n' "$needed" | tail -n 1)
[ -n "$highest" ]
ok $? "libgpucap.so names the GLIBC_ versions it needs ($(echo $needed))"
[ "$(printf '%s\n%s\n' "$highest" "$MAX" | sort -V | tail -n 1)" = "$MAX" ]
ok $? "the highest is GLIBC_$highest, at most GLIBC_$MAX"
for f in libc.so.6 libdl.so.2 libpthread.so.0; do
  readelf -d "$lib" | grep -q "(NEEDED).*\[$f\]"
  ok $? "libgpucap.so needs $f by name (glibc before 2.34 defines dl* and pthread_* there)"
done
done_testing
