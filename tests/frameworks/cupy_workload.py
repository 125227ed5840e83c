"""CuPy: element-wise kernels (compiled by NVRTC at run time), the device's memory as CuPy
sees it, and an over-size allocation that must raise CuPy's own error (EXPECT_OOM names it;
"None": the allocation succeeds; "-": the mode's usual error). CUPY_MODE selects the
allocator: pool (CuPy's default memory pool), async (CuPy's stream-ordered pool,
cudaMallocAsync), none (every array a cudaMalloc) or managed (a memory pool over
cudaMallocManaged: every array is managed memory). mixed: the default pool and the
stream-ordered pool taking turns (mixed_pools below) instead of the over-size allocation."""
import os

import cupy as cp

import check

mode = os.environ.get("CUPY_MODE", "pool")
pool = cp.get_default_memory_pool()
if mode == "none":
    cp.cuda.set_allocator(None)
elif mode == "async":
    cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
elif mode == "managed":
    pool = cp.cuda.MemoryPool(cp.cuda.malloc_managed)
    cp.cuda.set_allocator(pool.malloc)
free, total = cp.cuda.Device(0).mem_info
check.ok(total == check.expected_total(), f"mem_info total {total}")
a = cp.arange(1 << 16, dtype=cp.float32)
b = a * 2 + 1
s = cp.sum(b)
cp.cuda.Device(0).synchronize()
check.ok(b.shape == (1 << 16,), "element-wise kernels and a reduction")
if mode == "managed":
    kind = cp.cuda.runtime.pointerGetAttributes(b.data.ptr).type
    check.ok(kind == cp.cuda.runtime.memoryTypeManaged, f"arrays are managed memory ({kind})")


def mixed_pools():
    """CuPy's two pools in turn, each taking 70 % of the memory the program sees after the other
    freed it: the default pool's blocks freed with free_all_blocks (cudaFree), then 30 % with
    the stream-ordered pool, which must be served; then 70 % stream-ordered, freed (the driver's
    pool keeps it: MemoryAsyncPool sets the release threshold to the maximum), then 70 % from
    the default pool. EXPECT_OOM names the error of that last step ("None": served)."""
    big = free // 10 * 7
    x = cp.empty(big, dtype=cp.uint8)
    x = None
    pool.free_all_blocks()
    apool = cp.cuda.MemoryAsyncPool()
    with cp.cuda.using_allocator(apool.malloc):
        y = cp.empty(free // 10 * 3, dtype=cp.uint8)
        cp.cuda.Device(0).synchronize()
        check.ok(y.size == free // 10 * 3, "30 % stream-ordered after the default pool's 70 % was freed")
        y = None
        y = cp.empty(big, dtype=cp.uint8)
        y.fill(1)
        y = None
        cp.cuda.Device(0).synchronize()
    raised = None
    try:
        x = cp.empty(big, dtype=cp.uint8)
        x.fill(2)
        cp.cuda.Device(0).synchronize()
    except Exception as e:
        raised = type(e).__name__
    want = os.environ.get("EXPECT_OOM", "None")
    check.ok(str(raised) == want, f"70 % from the default pool after the stream-ordered pool kept 70 %: {raised}")
    x = None
    pool.free_all_blocks()
    apool.free_all_blocks()


if mode == "mixed":
    mixed_pools()
    check.done()

expect = os.environ.get("EXPECT_OOM", "-")
if expect == "-":
    expect = "CUDARuntimeError" if mode == "none" else "OutOfMemoryError"
elif expect == "None":
    expect = None
raised = None
try:
    x = cp.empty(total // 4 * 3, dtype=cp.uint8)
    y = cp.empty(total // 4 * 3, dtype=cp.uint8)
    if mode == "managed":
        # Kernels touch both: the driver pages managed memory in (and, past the device, out).
        x.fill(1)
        y.fill(2)
        cp.cuda.Device(0).synchronize()
except Exception as e:
    raised = type(e).__name__
check.ok(raised == expect, f"two 3/4-device arrays: {raised}")
x = y = None
pool.free_all_blocks()
z = cp.ones(1 << 20)
cp.cuda.Device(0).synchronize()
check.ok(z.size == 1 << 20, "an allocation after the out-of-memory error works")
check.done()
