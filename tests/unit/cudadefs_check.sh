#!/usr/bin/env bash
# Checks gpucap's own CUDA declarations (shim/base/cudadefs.h, and tests/fakecuda/fakedefs.h when
# present) against the toolkit's real headers: every function's type equals its
# <cudaTypedefs.h> PFN type (compared as C++ type names, so enum and struct tags must match
# too), every enumerator and valued macro has the real value, every struct the real size and
# field offsets.
# The legacy (v1) PFN typedefs are only visible with __CUDA_API_VERSION_INTERNAL defined.
# Skips with a message when no toolkit or no C++ compiler is installed.
. "$TOP/tests/tap.sh"

cuda=${CUDA_HOME:-}
if [ -z "$cuda" ] && command -v nvcc >/dev/null; then
  cuda=$(dirname "$(dirname "$(command -v nvcc)")")
fi
cxx=${CXX:-c++}
if [ -z "$cuda" ] || [ ! -f "$cuda/include/cudaTypedefs.h" ]; then
  skip "declarations match <cuda.h>" "no CUDA toolkit found (set CUDA_HOME or put nvcc on PATH)"
  done_testing
fi
if ! command -v "$cxx" >/dev/null; then
  skip "declarations match <cuda.h>" "no C++ compiler ($cxx) to compare types with"
  done_testing
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/gpucap-decl.XXXXXX")
trap 'rm -rf "$work"' EXIT

headers="$TOP/shim/base/cudadefs.h"
[ -f "$TOP/tests/fakecuda/fakedefs.h" ] && headers="$headers $TOP/tests/fakecuda/fakedefs.h"

# Functions: exported symbol -> PFN typedef, through the table generated from cudaTypedefs.h.
sed -n 's/^CUresult CUDAAPI \([A-Za-z0-9_]*\)(.*/\1/p' $headers | sort -u > "$work/functions"
awk -F'"' '/^GPA_ENTRY/ {
  split($3, a, ","); ver = a[2]; pt = a[3]; gsub(/ /, "", ver); gsub(/ /, "", pt);
  suffix = pt == "GPA_PT_PTDS" ? "_ptds" : pt == "GPA_PT_PTSZ" ? "_ptsz" : "";
  print $4, "PFN_" $2 "_v" ver suffix }' "$TOP/tests/fakecuda/gpa_table.inc" | sort -u \
  > "$work/pfn"
missing=$(join -v1 "$work/functions" "$work/pfn")
is "$missing" "" "every declared function has a PFN typedef in <cudaTypedefs.h>"

# Enumerators, valued macros (CUDA_ARRAY3D_*, CU_STREAM_LEGACY, ...) and structs (top-level
# fields only).
{ sed -n 's/^ *\(CU[A-Z0-9_]*\) = .*/\1/p' $headers
  sed -n 's/^#define \(CU[A-Z0-9_]*\) [^ ].*/\1/p' $headers; } | sort -u > "$work/constants"
awk '
  /^typedef struct [A-Za-z0-9_]* \{/ { name = ""; depth = 1; n = 0; tag = $3; next }
  depth > 0 {
    if ($0 ~ /\{/) depth++;
    if ($0 ~ /^\}/ && depth == 1) { sub(/^\} */, ""); sub(/;.*/, ""); print $0, f; depth = 0; f = ""; next }
    if ($0 ~ /\}/) { depth--; if (depth == 1) { x = $0; sub(/.*\} */, "", x); sub(/;.*/, "", x); f = f " " x }; next }
    if (depth == 1) { x = $0; sub(/;.*/, "", x); sub(/\[.*/, "", x); n = split(x, w, /[ *]+/); f = f " " w[n] }
  }' $headers > "$work/structs"

gen() { # gen HEADER-INCLUDE MODE: a C++ program printing every fact
  echo "#include <cstdio>"
  echo "#include <cstddef>"
  echo "#include <typeinfo>"
  echo "$1"
  echo "int main() {"
  while read -r fn pfn; do
    if [ "$2" = real ]; then
      echo "  std::printf(\"fn %s %s\\n\", \"$fn\", typeid($pfn).name());"
    else
      echo "  std::printf(\"fn %s %s\\n\", \"$fn\", typeid(&$fn).name());"
    fi
  done < <(join "$work/functions" "$work/pfn")
  while read -r c; do
    echo "  std::printf(\"const %s %lld\\n\", \"$c\", (long long)$c);"
  done < "$work/constants"
  while read -r s fields; do
    echo "  std::printf(\"struct %s %zu\\n\", \"$s\", sizeof($s));"
    for f in $fields; do
      echo "  std::printf(\"field %s.%s %zu\\n\", \"$s\", \"$f\", offsetof($s, $f));"
    done
  done < "$work/structs"
  echo "  return 0;"
  echo "}"
}
gen "#include <cudaTypedefs.h>" real > "$work/real.cc"
inc=""
for h in $headers; do inc="$inc#include \"$h\"
"; done
gen "$inc" ours > "$work/ours.cc"

"$cxx" -D__CUDA_API_VERSION_INTERNAL -I"$cuda/include" "$work/real.cc" -o "$work/real" 2>"$work/real.err"
ok $? "the facts compile against the real headers"
"$cxx" -I"$TOP" "$work/ours.cc" -o "$work/ours" 2>"$work/ours.err"
ok $? "the facts compile against gpucap's headers"
sed 's/^/# /' "$work/real.err" "$work/ours.err" | head -20
"$work/real" > "$work/real.out" 2>/dev/null
"$work/ours" > "$work/ours.out" 2>/dev/null
for kind in fn const struct field; do
  n=$(grep -c "^$kind " "$work/ours.out")
  d=$(diff <(grep "^$kind " "$work/real.out") <(grep "^$kind " "$work/ours.out"))
  is "$d" "" "$n ${kind} facts equal the toolkit's"
done
done_testing
