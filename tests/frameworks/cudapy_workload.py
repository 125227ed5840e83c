"""cuda-python: raw driver calls through cuda.bindings.driver (primary context, memory info,
an allocation and its free, an over-size allocation refused with CUDA_ERROR_OUT_OF_MEMORY)."""
from cuda.bindings import driver as cu

import check


def call(r):
    err, rest = (r[0], r[1:]) if isinstance(r, tuple) else (r, ())
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(err.name)
    return rest[0] if len(rest) == 1 else rest


call(cu.cuInit(0))
dev = call(cu.cuDeviceGet(0))
ctx = call(cu.cuDevicePrimaryCtxRetain(dev))
call(cu.cuCtxSetCurrent(ctx))
free, total = call(cu.cuMemGetInfo())
check.ok(total == check.expected_total(), f"cuMemGetInfo total {total}")
p = call(cu.cuMemAlloc(1 << 20))
call(cu.cuMemFree(p))
check.ok(True, "cuMemAlloc and cuMemFree of 1 MiB")
err, _ = cu.cuMemAlloc(total + (1 << 20))
check.ok(err == cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY, f"more than the device: {err.name}")
call(cu.cuDevicePrimaryCtxRelease(dev))
check.done()
