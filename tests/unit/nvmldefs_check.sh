#!/usr/bin/env bash
# Checks the fake NVML's own declarations (tests/fakecuda/nvml/nvmldefs.h) against NVIDIA's
# nvml.h: every function's type (as a C++ type name, so enum and struct tags must match too),
# every typedef, every enumerator and valued macro (the struct version macros included), every
# struct and union's size and alignment and each field's offset and size.
#
# nvml.h is not part of the repository: `make nvml-header` fetches it from PyPI (the
# nvidia-nvml-dev wheel) into build/nvml/include, or set NVML_H (see find-header.sh for where
# else it looks). Skips with a message when there is none, or no C++ compiler.
. "$TOP/tests/tap.sh"

header=$("$TOP/tests/fakecuda/nvml/find-header.sh")
if [ -z "$header" ]; then
  skip "declarations match <nvml.h>" "no nvml.h found (run 'make nvml-header' or set NVML_H)"
  done_testing
fi
cxx=${CXX:-c++}
if ! command -v "$cxx" >/dev/null; then
  skip "declarations match <nvml.h>" "no C++ compiler ($cxx) to compare types with"
  done_testing
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/gpucap-nvml.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The facts, one macro call a line, read off nvmldefs.h (one declaration and one field a line).
awk '
  /^(nvmlReturn_t|const char) \**nvml[A-Za-z0-9_]*\(/ {
    f = $0; sub(/\(.*/, "", f); sub(/.*[ *]/, "", f); print "FACT_FN(" f ")"; next
  }
  /^#define (NVML_|nvml)[A-Za-z0-9_]+ / && $3 !~ /^"/ { print "FACT_CONST(" $2 ")"; next }
  /^typedef [^{]*;$/ {
    t = $NF; sub(/;/, "", t); sub(/^\**/, "", t); print "FACT_TYPE(" t ")"; next
  }
  /^typedef (struct|union|enum)[^;]*\{$/ { block = $2; nf = 0; next }
  block != "" && /^\}/ {
    s = $0; sub(/^\} */, "", s); sub(/;.*/, "", s); n = split(s, names, /, */)
    for (i = 1; i <= n; i++) {
      print "FACT_TYPE(" names[i] ")"
      if (block == "enum") continue
      print "FACT_STRUCT(" names[i] ")"
      for (j = 1; j <= nf; j++) print "FACT_FIELD(" names[i] ", " fields[j] ")"
    }
    block = ""; next
  }
  block == "enum" { e = $1; sub(/,$/, "", e); print "FACT_CONST(" e ")"; next }
  block != "" {
    x = $0; sub(/;.*/, "", x); sub(/\[.*/, "", x); k = split(x, w, /[ *]+/); fields[++nf] = w[k]
  }
' "$TOP/tests/fakecuda/nvml/nvmldefs.h" >"$work/facts.inc"

cat >"$work/facts.cc" <<'EOF'
#include <cstddef>
#include <cstdio>
#include <typeinfo>
#ifdef REAL
#define NVML_NO_UNVERSIONED_FUNC_DEFS /* declare the legacy names, rename nothing */
#include <nvml.h>
#else
#include "tests/fakecuda/nvml/nvmldefs.h"
#endif
#define FACT_FN(f) std::printf("fn %s %s\n", #f, typeid(&f).name());
#define FACT_TYPE(t) std::printf("type %s %s %zu\n", #t, typeid(t).name(), sizeof(t));
#define FACT_CONST(c) std::printf("const %s %lld\n", #c, (long long)(c));
#define FACT_STRUCT(s) std::printf("struct %s %zu %zu\n", #s, sizeof(s), alignof(s));
#define FACT_FIELD(s, f)                                                                           \
  std::printf("field %s.%s %zu %zu\n", #s, #f, offsetof(s, f), sizeof(((s *)0)->f));
int main() {
#include "facts.inc"
  return 0;
}
EOF
"$cxx" -DREAL -Wno-deprecated-declarations -I"$(dirname "$header")" -I"$work" "$work/facts.cc" \
  -o "$work/real" 2>"$work/real.err"
ok $? "the facts compile against $header"
"$cxx" -I"$TOP" -I"$work" "$work/facts.cc" -o "$work/ours" 2>"$work/ours.err"
ok $? "the facts compile against nvmldefs.h"
sed 's/^/# /' "$work/real.err" "$work/ours.err" | head -20
"$work/real" >"$work/real.out" 2>/dev/null
"$work/ours" >"$work/ours.out" 2>/dev/null
for kind in fn type const struct field; do
  n=$(grep -c "^$kind " "$work/ours.out")
  d=$(diff <(grep "^$kind " "$work/real.out") <(grep "^$kind " "$work/ours.out"))
  is "$d" "" "$n $kind facts equal nvml.h's"
  [ "$n" -gt 0 ]
  ok $? "there are $kind facts to compare"
done
done_testing
