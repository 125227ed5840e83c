#!/usr/bin/env bash
# Checks the shim's include graph (docs/design.md, "Layers and data flow"): reads every
# `#include "shim/x.h"` in DIR/*.c and DIR/*.h (DIR defaults to shim/ beside this script) and
# fails, naming each offence, on
#   - a cycle between modules (a module is a file's name up to its first '_' or '.':
#     ctx.c, ctx_alloc.c and ctx_impl.h are one module), or
#   - an include that goes back up a layer. Layers, top to bottom:
#       4 entry    the CUDA hooks (every file that includes shim/hook.h) and the other ways in:
#                  dlsym, deepbind, exec, finish (the exit path)
#       3 context  ctx
#       2 pool     pool passthru pending oom ordered
#       1 base     everything else (cap, charges, exit, fork, log, real, settings, trace, ...)
#     A file may include headers of its own layer or below, never above.
# Prints nothing and exits 0 when the graph is clean; exits 1 otherwise.
set -euo pipefail
dir=${1:-$(cd "$(dirname "$0")/../shim" && pwd)}
entry_extra="dlsym deepbind exec finish hook nvml"
context="ctx"
pool="pool passthru pending oom ordered"

module() { local b=${1##*/}; b=${b%%.*}; printf '%s\n' "${b%%_*}"; }

edges=$(for f in "$dir"/*.c "$dir"/*.h; do
  [ -e "$f" ] || continue
  from=$(module "$f")
  sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"shim\/\([A-Za-z0-9_]*\)\.h".*/\1/p' "$f" |
    while read -r to; do
      to=$(module "$to")
      [ "$to" = "$from" ] || printf '%s %s %s\n' "$from" "$to" "${f##*/}"
    done
done | sort -u)

entry=$(for f in "$dir"/*.c; do
  if grep -q '^[[:space:]]*#[[:space:]]*include[[:space:]]*"shim/hook\.h"' "$f"; then
    module "$f"
  fi
done | sort -u | tr '\n' ' ')

printf '%s\n' "$edges" | awk -v entry="$entry $entry_extra" -v context="$context" -v pool="$pool" '
  function rank(m) { return (m in r) ? r[m] : 1 }
  BEGIN {
    n = split(entry, a, " "); for (i = 1; i <= n; i++) r[a[i]] = 4
    n = split(context, a, " "); for (i = 1; i <= n; i++) r[a[i]] = 3
    n = split(pool, a, " "); for (i = 1; i <= n; i++) r[a[i]] = 2
    name[1] = "base"; name[2] = "pool"; name[3] = "context"; name[4] = "entry"
  }
  NF == 3 {
    if (!(($1, $2) in seen)) { seen[$1, $2] = 1; adj[$1] = adj[$1] " " $2 }
    nodes[$1] = 1; nodes[$2] = 1
    if (rank($2) > rank($1)) {
      printf "up a layer: %s (%s) includes shim/%s.h (%s)\n", $3, name[rank($1)], $2, name[rank($2)]
      bad = 1
    }
  }
  function dfs(u,    k, m, v, vs, path, i) {
    state[u] = 1; stack[++depth] = u
    m = split(adj[u], vs, " ")
    for (k = 1; k <= m; k++) {
      v = vs[k]
      if (state[v] == 1) {
        path = v
        for (i = depth; i >= 1 && stack[i] != v; i--) path = stack[i] " -> " path
        printf "cycle: %s -> %s\n", v, path
        bad = 1
      } else if (state[v] == 0) {
        dfs(v)
      }
    }
    depth--; state[u] = 2
  }
  END {
    for (u in nodes) if (state[u] == 0) dfs(u)
    exit bad
  }'
