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

row cublas cap=256MiB mem=1GiB leaks="cuBLAS keeps an allocation after a failed cublasCreate"
row cufft cap=256MiB mem=1GiB
row curand cap=256MiB mem=1GiB
row cudnn cap=256MiB mem=1GiB
# NCCL holds about 400 MiB for one rank (its buffers are VMM allocations of 2 MiB granularity).
row nccl cap=512MiB mem=1GiB
done_testing
