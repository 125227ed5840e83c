#!/usr/bin/env bash
# The shim's include graph has no cycle and no include back up a layer, and every file is in a
# layer's folder (scripts/layers.sh, docs/design.md "Layers and data flow"); and the checker
# itself catches each offence, on a small tree made to break each rule.
. "$TOP/tests/tap.sh"

out=$("$TOP/scripts/layers.sh" "$TOP/shim" 2>&1)
rc=$?
is "$rc:$out" "0:" "shim/: every file in a layer, no cycle between modules, no include up a layer"

bad=$(mktemp -d)
trap 'rm -rf "$bad"' EXIT
mkdir -p "$bad/pool" "$bad/context" "$bad/base"
printf '#include "shim/context/ctx.h"\n' >"$bad/pool/pool.c"       # the pool calling up into its context
printf '#include "shim/pool/pool.h"\n' >"$bad/context/ctx_alloc.c" # ... which calls the pool: a cycle too
printf '#include "shim/base/b.h"\n' >"$bad/base/a.c"
printf '#include "shim/base/a.h"\n' >"$bad/base/b.h"
printf '#include "shim/base/a.h"\n' >"$bad/loose.c"                # a file in no layer
printf '#include "shim/misc/x.h"\n' >"$bad/base/c.c"               # a header in no layer
out=$("$TOP/scripts/layers.sh" "$bad" 2>&1)
rc=$?
is "$rc" 1 "a broken tree fails the check"
like "$out" 'up a layer: pool/pool\.c \(pool\) includes shim/context/ctx\.h \(context\)' \
  "an include up a layer is named"
like "$out" 'cycle: (pool/pool -> context/ctx -> pool/pool|context/ctx -> pool/pool -> context/ctx)' \
  "a cycle through two layers is named"
like "$out" 'cycle: (base/a -> base/b -> base/a|base/b -> base/a -> base/b)' "a cycle within a layer is named"
like "$out" 'not in a layer: loose\.c' "a file outside the layers' folders is named"
like "$out" 'not in a layer: shim/misc/x\.h, included by base/c\.c' "an include outside the layers is named"
done_testing
