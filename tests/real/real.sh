#!/usr/bin/env bash
# Row 1 of the table of real programs (docs/compatibility.md, "Programs and frameworks"):
# programs built by nvcc against NVIDIA's runtime, static and shared, one row per allocation
# family, each run over the fake driver without and with gpucap (tests/real/lib.sh says what
# every row checks). Skipped, saying why, when the programs could not be built (no nvcc).
. "$TOP/tests/real/lib.sh"

if [ ! -x "$REAL/malloc_static" ]; then
  echo "1..0 # SKIP not built: no nvcc when the tests were built (set NVCC or CUDA_HOME, or put nvcc on PATH)"
  exit 0
fi

. "$TOP/tests/real/rows.sh"
program_rows
done_testing
