#!/usr/bin/env bash
# PyTorch, CuPy, numba-cuda and cuda-python from PyPI over the fake driver (tests/frameworks/
# rows.sh says how a row is judged), each workload without gpucap (a 4 GiB fake device) and
# under gpucap (a cap of 256 MiB, 1 GiB for PyTorch): the framework must see the device or the
# cap as its total, raise its own out-of-memory error for an over-size request and go on (the
# workloads check that themselves, tests/frameworks/*_workload.py). The frameworks are installed
# by `make frameworks` (make test runs it); without them every row is skipped, and says why.
. "$TOP/tests/integ/lib.sh"
. "$TOP/tests/frameworks/rows.sh"

rows_venv "${FRAMEWORKS_VENV:-}" torch-caching torch-no-caching torch-async torch-expandable \
  cupy-pool cupy-async cupy-none cupy-managed numba cuda-python

row torch-caching $((1 << 30)) torch_workload.py EXPECT_OOM=OutOfMemoryError LIBRARY=libc10_cuda
# Without its cache PyTorch raises the runtime's error as torch.AcceleratorError: its own rule.
row torch-no-caching $((1 << 30)) torch_workload.py EXPECT_OOM=AcceleratorError \
  PYTORCH_NO_CUDA_MEMORY_CACHING=1
# PyTorch's stream-ordered allocator (cudaMallocAsync, the driver's memory pools).
row torch-async $((1 << 30)) torch_workload.py EXPECT_OOM=OutOfMemoryError \
  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
# Expandable segments: VMM memory (cuMemCreate with a file-descriptor handle type, cuMemMap)
# that grows and shrinks; PyTorch asks NVML for fabric support first.
row torch-expandable $((1 << 30)) torch_workload.py EXPECT_OOM=OutOfMemoryError \
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True DRIVER_CALL=cuMemCreate
case "${SAN_PRELOAD:-}" in
*libasan*)
  # NVRTC loads its builtins with RTLD_DEEPBIND, which AddressSanitizer refuses.
  for r in cupy-pool cupy-async cupy-none cupy-managed; do
    skip "framework row $r" "CuPy compiles with NVRTC, which cannot load under ASan"
  done
  ;;
*)
  row cupy-pool $((256 << 20)) cupy_workload.py CUPY_MODE=pool \
    LIBRARY=cupy_backends.cuda.api.runtime
  row cupy-async $((256 << 20)) cupy_workload.py CUPY_MODE=async
  row cupy-none $((256 << 20)) cupy_workload.py CUPY_MODE=none
  # Managed memory is charged to the cap (docs/compatibility.md): refused beyond it under
  # gpucap, oversubscribed without (the driver pages it).
  row cupy-managed $((256 << 20)) cupy_workload.py CUPY_MODE=managed \
    "EXPECT_OOM=None|OutOfMemoryError" DRIVER_CALL=cuMemAllocManaged
  ;;
esac
row numba $((256 << 20)) numba_workload.py FAKECUDA_BACKING=1
row cuda-python $((256 << 20)) cudapy_workload.py
rows_run
done_testing
