#!/usr/bin/env bash
# The one command for a machine lent with an NVIDIA GPU (docs/compatibility.md, "Real GPUs"):
#
#   bash tests/gpu/session.sh          (from the repository's root; OUT=DIR for the results)
#
# builds gpucap there (gcc and make; the programs of tests/real too when nvcc is found, in
# CUDA_HOME, /usr/local/cuda or on PATH; make -k, so a program that does not build with that
# toolkit is only missing, its row skipped), then runs
# `make gpu-bench` and `make gpu-check` within a time budget (SESSION_SECONDS, default 480: the
# check starts no new group after its deadline, so its report is always written), and leaves in
# OUT (default build/gpu-session): gpu-check/ (report.md, report.json, every run's output and
# the watcher's figures), gpu-bench/ (bench.md, bench.json), the build's log, nvidia-smi's view
# of the machine, and session.md, the summary it also prints. A Python with torch (and cupy)
# there, if any, runs the framework rows and the training step: GPU_CHECK_PYTHON, or python3.
# GPU_CHECK_DRIVER=fake runs the same over the fake driver: the session's own dry run.
set -u
cd "$(dirname "$0")/../.."
started=$(date +%s)
budget=${SESSION_SECONDS:-480}
OUT=${OUT:-build/gpu-session}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
log="$OUT/session.log"
: > "$log"
driver=${GPU_CHECK_DRIVER:-real}
jobs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 4)

say() { echo "session: $*" | tee -a "$log"; }
left() { echo $((started + budget - $(date +%s))); }

say "$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(uname -srm)), $jobs cores, driver: $driver"
if [ "$driver" = real ]; then
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 && nvidia-smi -q > "$OUT/nvidia-smi-q.txt" 2>&1
  say "nvidia-smi: $(grep -m 1 -i 'Driver Version' "$OUT/nvidia-smi.txt" | tr -s ' ' || echo 'not found')"
fi

# The toolkit, where one is installed.
if [ -z "${CUDA_HOME:-}" ]; then
  for c in /usr/local/cuda /usr/local/cuda-13.0 /usr/local/cuda-12; do
    if [ -x "$c/bin/nvcc" ]; then
      export CUDA_HOME=$c
      break
    fi
  done
fi
nvcc_at=$(command -v nvcc 2>/dev/null || true)
[ -n "${CUDA_HOME:-}" ] && nvcc_at="$CUDA_HOME/bin/nvcc"
say "toolkit: ${nvcc_at:-none (the rows of tests/real are skipped)}"

# A Python with the frameworks, if the machine has one.
if [ -z "${GPU_CHECK_PYTHON:-}" ]; then
  for p in "${FRAMEWORKS_VENV:-/nonexistent}/bin/python" python3; do
    if command -v "$p" > /dev/null 2>&1 && "$p" -c 'import torch' > /dev/null 2>&1; then
      export GPU_CHECK_PYTHON=$p
      break
    fi
  done
fi
say "python with torch: ${GPU_CHECK_PYTHON:-none (framework rows and the training step skipped)}"

# ---- Build ----
t=$(date +%s)
if timeout 240 make -k -j"$jobs" all >> "$OUT/build.log" 2>&1; then
  say "built in $(($(date +%s) - t)) s"
else
  missing=""
  for f in build/libgpucap.so build/gpucap build/tests/gpu/gpuwatch build/tests/gpu/gpuhold \
    build/tests/hookbench build/tests/reliability/invariant build/tests/reliability/capholes; do
    [ -e "$f" ] || missing="$missing $f"
  done
  if [ -n "$missing" ]; then
    say "the build failed:$missing missing; $(grep -m 3 -i 'error' "$OUT/build.log" | tr '\n' ' ')"
    exit 1
  fi
  say "built in $(($(date +%s) - t)) s, but not everything: $(grep -c 'Error [0-9]' "$OUT/build.log")" \
    "targets failed (build.log: $(grep -m 1 ' error' "$OUT/build.log")); their checks are skipped"
fi

# ---- Bench, then check (the check writes its report by its deadline) ----
t=$(date +%s)
timeout "$(($(left) > 200 ? 120 : 60))" make --no-print-directory gpu-bench \
  GPU_CHECK_DRIVER="$driver" GPU_BENCH_OUT="$OUT/gpu-bench" > "$OUT/gpu-bench.log" 2>&1
say "gpu-bench: status $? in $(($(date +%s) - t)) s"
t=$(date +%s)
deadline=$((started + budget - 60))
GPU_CHECK_DEADLINE=$deadline GPU_CHECK_TIMEOUT=${GPU_CHECK_TIMEOUT:-60} \
  GPU_CHECK_HOLD_MS=${GPU_CHECK_HOLD_MS:-200} \
  timeout "$(($(left) > 60 ? $(left) : 60))" make --no-print-directory gpu-check \
  GPU_CHECK_DRIVER="$driver" GPU_CHECK_OUT="$OUT/gpu-check" > "$OUT/gpu-check.tap" 2>&1
status=$?
say "gpu-check: status $status in $(($(date +%s) - t)) s"

# ---- Summary ----
{
  echo "# gpucap GPU session, $(date -u +%Y-%m-%d)"
  echo
  sed 's/^session: /- /' "$log"
  echo
  if [ -f "$OUT/gpu-check/report.md" ]; then
    sed -n '3,/^## /p' "$OUT/gpu-check/report.md" | grep -v '^## '
    if grep -q '^## Failed' "$OUT/gpu-check/report.md"; then
      sed -n '/^## Failed/,/^## Every/p' "$OUT/gpu-check/report.md" | grep -v '^## Every'
    fi
  else
    echo "No gpu-check report: the tail of its output:"
    tail -n 20 "$OUT/gpu-check.tap"
  fi
  echo
  [ -f "$OUT/gpu-bench/bench.md" ] && cat "$OUT/gpu-bench/bench.md"
} > "$OUT/session.md"
cat "$OUT/session.md"
say "done in $(($(date +%s) - started)) s; results in $OUT"
exit "$status"
