#!/usr/bin/env bash
# Records the real-workload traces of `make bench` (RMM CSV, GPUCAP_TRACE): a small GPT-style
# model trained for 200 steps with PyTorch's cache off, and a CuPy array pipeline with CuPy's
# pool off, both over the fake driver under gpucap, so that every tensor is one allocation.
# Needs the frameworks of `make frameworks` and a built tree; writes the .csv.gz beside itself.
set -eu
top=$(cd "$(dirname "$0")/../../.." && pwd)
build=${BUILD:-$top/build}
venv=${FRAMEWORKS_VENV:?set FRAMEWORKS_VENV (make -s frameworks; see tests/frameworks)}
here=$top/tests/bench/traces
record() { # record NAME SCRIPT VAR=VALUE...
  name=$1 script=$2
  shift 2
  env "$@" GPUCAP_TRACE="$build/$name.csv" GPUCAP_REPORT=off \
    LD_PRELOAD="$build/libgpucap.so" LD_LIBRARY_PATH="$build/fakecuda" \
    "$venv/bin/python" "$here/$script" >/dev/null
  gzip -9 -c "$build/$name.csv" > "$here/$name.csv.gz"
  echo "$name: $(wc -l < "$build/$name.csv") lines"
}
record torch-gpt torch_gpt.py STEPS=200 PYTORCH_NO_CUDA_MEMORY_CACHING=1
record cupy-pipe cupy_pipe.py STEPS=3000
