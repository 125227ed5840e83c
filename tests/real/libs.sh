#!/usr/bin/env bash
# Row 2 of the table of real programs (docs/compatibility.md, "Programs and frameworks"): CUDA
# libraries (cuBLAS, cuFFT, cuRAND, cuDNN, NCCL) used by programs built by nvcc, static and
# shared runtime, each run over the fake driver without and with gpucap (tests/real/lib.sh says
# what every row checks). Skipped, saying why, when nvcc or a library's header was missing at
# build time.
. "$TOP/tests/real/lib.sh"
# Under ASan: host memory the closed libraries leak themselves is not this test's to judge.
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$TOP/tests/real/lsan.supp"

if [ ! -x "$REAL/malloc_static" ]; then
  echo "1..0 # SKIP not built: no nvcc when the tests were built (set NVCC or CUDA_HOME, or put nvcc on PATH)"
  exit 0
fi

. "$TOP/tests/real/rows.sh"
library_rows
done_testing
