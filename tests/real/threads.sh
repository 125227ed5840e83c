#!/usr/bin/env bash
# The threads row of the table of real programs (tests/real/real.sh) on its own, for the
# ThreadSanitizer pass of `make test` (THREAD_TESTS): several host threads of a program built
# by nvcc allocating, copying and freeing through gpucap at once. Skipped, saying why, when the
# programs could not be built (no nvcc).
. "$TOP/tests/real/lib.sh"

if [ ! -x "$REAL/threads_static" ]; then
  echo "1..0 # SKIP not built: no nvcc when the tests were built (set NVCC or CUDA_HOME, or put nvcc on PATH)"
  exit 0
fi
row threads
done_testing
