# The table of real programs (docs/compatibility.md, "Programs and frameworks"), sourced by
# tests/real/real.sh and libs.sh, which run it over the fake driver with tests/real/lib.sh's
# row, and by tests/gpu/check.sh, which runs the same rows on the driver at hand with its own.
# One line per row: row FAMILY [OPTION...] (lib.sh says what each option means).

gpucap_bug="gpucap bug (reported)"

# Row 1: one program per allocation family.
program_rows() {
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
}

# Row 2: the CUDA libraries (cuBLAS, cuFFT, cuRAND, cuDNN, NCCL).
library_rows() {
  row cublas cap=256MiB mem=1GiB leaks="cuBLAS keeps an allocation after a failed cublasCreate"
  row cufft cap=256MiB mem=1GiB
  row curand cap=256MiB mem=1GiB
  row cudnn cap=256MiB mem=1GiB
  # NCCL holds about 400 MiB for one rank (its buffers are VMM allocations of 2 MiB granularity).
  row nccl cap=512MiB mem=1GiB
}
