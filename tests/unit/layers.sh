#!/usr/bin/env bash
# The shim's include graph has no cycle and no include back up a layer (scripts/layers.sh,
# docs/design.md "Layers and data flow"); and the checker itself catches both, on a small tree
# made to break each rule.
. "$TOP/tests/tap.sh"

out=$("$TOP/scripts/layers.sh" "$TOP/shim" 2>&1)
rc=$?
is "$rc:$out" "0:" "shim/: no cycle between modules, no include up a layer"

bad=$(mktemp -d)
trap 'rm -rf "$bad"' EXIT
printf '#include "shim/ctx.h"\n' >"$bad/pool.c"        # the pool calling up into its context
printf '#include "shim/pool.h"\n' >"$bad/ctx_alloc.c"  # ... which calls the pool: a cycle too
printf '#include "shim/b.h"\n' >"$bad/a.c"
printf '#include "shim/a.h"\n' >"$bad/b.h"
out=$("$TOP/scripts/layers.sh" "$bad" 2>&1)
rc=$?
is "$rc" 1 "a broken tree fails the check"
like "$out" 'up a layer: pool\.c \(pool\) includes shim/ctx\.h \(context\)' "an include up a layer is named"
like "$out" 'cycle: (pool -> ctx -> pool|ctx -> pool -> ctx)' "a cycle through two layers is named"
like "$out" 'cycle: (a -> b -> a|b -> a -> b)' "a cycle within a layer is named"
done_testing
