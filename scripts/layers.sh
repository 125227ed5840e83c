#!/usr/bin/env bash
# Checks the shim's include graph (docs/design.md, "Layers and data flow"). The shim's folders are
# its layers, top to bottom:
#     entry       the ways in: the CUDA and NVML hooks, dlsym/dlopen/cuGetProcAddress routing,
#                 the exec family, the start and the end of the process
#     context     one object per CUDA context: its lock, its allocation path, capture
#     pool        what serves a context: its BFC pool, the driver's stream-ordered pools, the
#                 pass-through records, pending frees
#     accounting  the cap and what is charged against it: shared budgets, the per-library
#                 ledger, the driver's own memory, spill, refusals, the trace, the run's facts
#     base        the driver's entry points, settings, log, checks, fork and exit helpers
# A file's layer is its folder. Reads every `#include "shim/..."` in DIR/*/* (DIR defaults to
# shim/ beside this script) and fails, naming each offence, on
#   - a file that is in no layer's folder,
#   - an include that goes back up a layer (a file may include its own layer or those below), or
#   - a cycle between modules (a module is a folder and a file's name up to its first '_' or '.':
#     context/ctx.c, context/ctx_alloc.c and context/ctx_impl.h are one module).
# Prints nothing and exits 0 when the graph is clean; exits 1 otherwise.
set -euo pipefail
dir=${1:-$(cd "$(dirname "$0")/../shim" && pwd)}
layers="entry context pool accounting base"

# module PATH: "folder/name" of a path under the shim (folder/file or shim/folder/file).
module() {
  local p=${1#shim/} b
  b=${p##*/}
  b=${b%%.*}
  printf '%s/%s\n' "${p%%/*}" "${b%%_*}"
}

stray=$(cd "$dir" && find . -type f ! -name '*.mk' | sed 's#^\./##' | while read -r f; do
  case " $layers " in *" ${f%%/*} "*) [ "${f#*/}" != "$f" ] && continue ;; esac
  printf '%s\n' "$f"
done)

edges=$(cd "$dir" && for f in */*; do
  [ -f "$f" ] || continue
  from=$(module "$f")
  sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\(shim\/[A-Za-z0-9_./]*\)".*/\1/p' "$f" |
    while read -r to; do
      printf '%s %s %s %s\n' "$from" "$(module "$to")" "$f" "$to"
    done
done | sort -u)

printf '%s\n' "$edges" | awk -v layers="$layers" -v stray="$stray" '
  function layer(m) { return substr(m, 1, index(m, "/") - 1) }
  function rank(m) { return (layer(m) in r) ? r[layer(m)] : 0 }
  BEGIN {
    n = split(layers, a, " "); for (i = 1; i <= n; i++) r[a[i]] = n + 1 - i
    n = split(stray, a, "\n")
    for (i = 1; i <= n; i++) { printf "not in a layer: %s (layers: %s)\n", a[i], layers; bad = 1 }
  }
  NF == 4 {
    if ($1 != $2) {
      if (!(($1, $2) in seen)) { seen[$1, $2] = 1; adj[$1] = adj[$1] " " $2 }
      nodes[$1] = 1; nodes[$2] = 1
    }
    if (rank($2) == 0) {
      printf "not in a layer: %s, included by %s\n", $4, $3
      bad = 1
    } else if (rank($2) > rank($1)) {
      printf "up a layer: %s (%s) includes %s (%s)\n", $3, layer($1), $4, layer($2)
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
