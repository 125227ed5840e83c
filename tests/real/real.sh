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

gpucap_bug="gpucap bug (reported)"
row malloc
row pitch
row async
row managed capfact='managed_reduces_free=0|1' \
  capfact='managed_over_total=cudaSuccess|cudaErrorMemoryAllocation'
row host
row arrays
row meminfo
row meminfo pool=regions known="malloc_what_is_free:gpucap:$gpucap_bug: free memory that gpucap reports is not one allocatable piece when pool regions are partly used"
row ptrattr
row ipc procs=2 # legacy IPC of pooled blocks: the VMM-backed pool's (its units' descriptors)
row ipc procs=2 pool=regions # ... and the region pool's (the region's driver handle)
row reset teardown="cudaDeviceReset frees what the program held"
row devices devices=2 cap=0:64MiB,1:32MiB
row threads
row fork procs=2
row oom
row kernel
row graphs
row mixed
done_testing
