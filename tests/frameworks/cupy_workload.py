"""CuPy: element-wise kernels (compiled by NVRTC at run time), the device's memory as CuPy
sees it, and an over-size allocation that must raise CuPy's own error. CUPY_MODE selects the
allocator: pool (CuPy's default memory pool), async (CuPy's stream-ordered pool,
cudaMallocAsync) or none (every array a cudaMalloc)."""
import os

import cupy as cp

import check

mode = os.environ.get("CUPY_MODE", "pool")
if mode == "none":
    cp.cuda.set_allocator(None)
elif mode == "async":
    cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
free, total = cp.cuda.Device(0).mem_info
check.ok(total == check.expected_total(), f"mem_info total {total}")
a = cp.arange(1 << 16, dtype=cp.float32)
b = a * 2 + 1
s = cp.sum(b)
cp.cuda.Device(0).synchronize()
check.ok(b.shape == (1 << 16,), "element-wise kernels and a reduction")
expect = "CUDARuntimeError" if mode == "none" else "OutOfMemoryError"
raised = None
try:
    x = cp.empty(total // 4 * 3, dtype=cp.uint8)
    y = cp.empty(total // 4 * 3, dtype=cp.uint8)
except Exception as e:
    raised = type(e).__name__
check.ok(raised == expect, f"two 3/4-device arrays: {raised}")
x = y = None
cp.get_default_memory_pool().free_all_blocks()
z = cp.ones(1 << 20)
cp.cuda.Device(0).synchronize()
check.ok(z.size == 1 << 20, "an allocation after the out-of-memory error works")
check.done()
