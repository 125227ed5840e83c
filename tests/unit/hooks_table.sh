#!/usr/bin/env bash
# shim/base/hooks.def must list, for every base name it hooks, exactly the ABI variants that
# <cudaTypedefs.h> defines (tests/fakecuda/gpa_table.inc is generated from it): the routing
# rule picks among them, so a missing variant would route a query to the wrong ABI.
. "$TOP/tests/tap.sh"

ours=$(sed -n 's/^\(HOOK\|PASS\)(\([^,]*\), *\([0-9]*\), *\([A-Z_]*\), *\([A-Za-z0-9_]*\)).*/\2 \3 \4 \5/p' \
  "$TOP/shim/base/hooks.def" | sort)
bases=$(printf '%s\n' "$ours" | awk '{print $1}' | sort -u)
want=$(for b in $bases; do
  sed -n "s/^GPA_ENTRY(\"$b\", *\([0-9]*\), *\([A-Z_]*\), *\"\([A-Za-z0-9_]*\)\").*/$b \1 \2 \3/p" \
    "$TOP/tests/fakecuda/gpa_table.inc"
done | sort)
is "$ours" "$want" "hooks.def lists every ABI variant of the $(echo $bases | wc -w) hooked names"
done_testing
