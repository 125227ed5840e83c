#!/usr/bin/env bash
# README's PyTorch recipe: the out-of-memory handler it gives (its Python block, taken from
# README.md as written) catches what PyTorch raises under gpucap's cap with its caching
# allocator (torch.OutOfMemoryError) and without it, PYTORCH_NO_CUDA_MEMORY_CACHING=1
# (torch.AcceleratorError, CUDA error 2), and README names both. Skipped, saying why, without
# the frameworks (make frameworks).
. "$TOP/tests/integ/lib.sh"

venv=${FRAMEWORKS_VENV:-}
if [ -z "$venv" ] || [ ! -f "$venv/.complete" ]; then
  skip "README's PyTorch handler" "frameworks not installed: run 'make frameworks'"
  done_testing
fi
export PYTHONDONTWRITEBYTECODE=1 ASAN_OPTIONS=detect_leaks=0:abort_on_error=0
if [ -n "${SAN_PRELOAD:-}" ]; then # as tests/frameworks/frameworks.sh says
  SAN_PRELOAD="$SAN_PRELOAD $(${CC:-cc} -print-file-name=libstdc++.so.6)"
fi

# The README's block that handles PyTorch's out-of-memory errors.
sed -n '/^\*\*PyTorch\*\*/,/^\*\*TensorFlow\*\*/p' "$TOP/README.md" |
  sed -n '/^```python$/,/^```$/p' | sed '1d;$d' >"$WORK/handler.py"
like "$(cat "$WORK/handler.py")" 'except OOM as e:' "README's PyTorch recipe has a handler"
like "$(sed -n '/^\*\*PyTorch\*\*/,/^\*\*TensorFlow\*\*/p' "$TOP/README.md" | tr '\n' ' ')" \
  'torch.AcceleratorError.*torch.OutOfMemoryError|torch.OutOfMemoryError.*torch.AcceleratorError' \
  "  and names both exceptions"

unset PYTORCH_NO_CUDA_MEMORY_CACHING
for mode in caching no-caching; do
  want=OutOfMemoryError
  [ $mode = no-caching ] && want=AcceleratorError
  out=$(cd "$WORK" && if [ $mode = no-caching ]; then export PYTORCH_NO_CUDA_MEMORY_CACHING=1; fi
    FAKECUDA_MEMORY=4GiB GPUCAP_MEMORY_LIMIT=1GiB GPUCAP_REPORT=off \
      with_shim "$venv/bin/python" handler.py 2>&1)
  is "$(tail -n 1 <<<"$out")" "out of memory: $want" \
    "PyTorch $mode under a 1 GiB cap: the handler catches its $want"
done
done_testing
