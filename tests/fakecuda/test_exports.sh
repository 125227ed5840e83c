#!/bin/sh
# TAP test: the fake driver exports exactly the stub libcuda.so's symbols (exports.txt) plus its
# own fakecuda* hooks, is a -Bsymbolic libcuda.so.1, and its committed tables are well formed
# and (when a CUDA toolkit is installed) what regen.sh produces from it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
. "$top/tests/tap.sh"
build=${BUILD:-$top/build}
lib=$build/fakecuda/libcuda.so.1
LC_ALL=C
export LC_ALL
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

[ -f "$lib" ]
ok $? "$lib exists"

nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sort >"$tmp/all"
grep -v '^fakecuda' "$tmp/all" >"$tmp/cu"
cmp -s "$tmp/cu" "$here/exports.txt"
ok $? "exported CUDA names equal exports.txt"
diff "$tmp/cu" "$here/exports.txt" | head -5 | sed 's/^/# /'
hooks="fakecudaCalls fakecudaClaim fakecudaDeviceUsage fakecudaEnqueueWork fakecudaHazards"
hooks="$hooks fakecudaManagedUsage"
is "$(grep '^fakecuda' "$tmp/all" | tr '\n' ' ')" "$hooks fakecudaPeakBytes fakecudaPendingWork " \
  "the only other exports are the fakecuda test hooks"
is "$(nm -D --defined-only "$lib" | awk 'NF >= 3 && $2 != "T"' | wc -l | tr -d ' ')" 0 \
  "every export is a function (type T, as in the stub)"
is "$(nm -D --undefined-only "$lib" | awk '$NF ~ /^cu/' | wc -l | tr -d ' ')" 0 \
  "no undefined cu* references"
is "$(wc -l <"$here/exports.txt" | tr -d ' ')" 637 "exports.txt lists 637 names"
sort -c -u "$here/exports.txt" 2>/dev/null
ok $? "exports.txt is sorted (C locale) and unique"

readelf -d "$lib" >"$tmp/dyn"
grep -q 'Library soname: \[libcuda.so.1\]' "$tmp/dyn"
ok $? "soname libcuda.so.1"
grep -q 'SYMBOLIC' "$tmp/dyn"
ok $? "linked -Bsymbolic"
[ "$(readlink "$build/fakecuda/libcuda.so")" = libcuda.so.1 ]
ok $? "libcuda.so -> libcuda.so.1"

grep -v '^ \*\|^/\*' "$here/gpa_table.inc" >"$tmp/entries"
entry='^GPA_ENTRY\("cu[A-Za-z0-9_]+", [0-9]+, GPA_PT_(NONE|PTDS|PTSZ), "cu[A-Za-z0-9_]+"\)$'
bad=$(grep -Evc "$entry" "$tmp/entries")
is "$bad" 0 "every gpa_table.inc line is GPA_ENTRY(\"name\", version, GPA_PT_*, \"symbol\")"
is "$(wc -l <"$tmp/entries" | tr -d ' ')" 637 "gpa_table.inc has 637 entries"
awk -F'"' '{ print $4 }' "$tmp/entries" | sort -u >"$tmp/tablesyms"
cmp -s "$tmp/tablesyms" "$here/exports.txt"
ok $? "the table's symbols are exactly the exports (one entry per symbol)"
is "$(awk -F'"' '$4 ~ /_pt(ds|sz)$/ && $0 ~ /GPA_PT_NONE/' "$tmp/entries" | wc -l | tr -d ' ')" 0 \
  "per-thread symbols carry a per-thread kind"

sh -n "$here/regen.sh"
ok $? "regen.sh parses as POSIX sh"
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ -r "$cuda/include/cudaTypedefs.h" ] && [ -r "$cuda/lib64/stubs/libcuda.so" ]; then
  CUDA_HOME=$cuda "$here/regen.sh" "$tmp" 2>/dev/null
  ok $? "regen.sh runs against $cuda"
  cmp -s "$tmp/exports.txt" "$here/exports.txt"
  ok $? "regen.sh reproduces exports.txt"
  cmp -s "$tmp/gpa_table.inc" "$here/gpa_table.inc"
  ok $? "regen.sh reproduces gpa_table.inc"
else
  skip "regen.sh runs" "no CUDA toolkit at $cuda"
  skip "regen.sh reproduces exports.txt" "no CUDA toolkit"
  skip "regen.sh reproduces gpa_table.inc" "no CUDA toolkit"
fi
done_testing
