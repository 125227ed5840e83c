"""numba-cuda: device arrays, a host-device round trip (FAKECUDA_BACKING=1 makes device bytes
real), a JIT-compiled kernel launch, and an over-size allocation that must raise numba's
CudaAPIError for CUDA_ERROR_OUT_OF_MEMORY."""
import warnings

import numpy as np
from numba import cuda

import check

warnings.filterwarnings("ignore")
check.ok(len(cuda.gpus) == 1, "one device")
free, total = cuda.current_context().get_memory_info()
check.ok(total == check.expected_total(), f"memory info total {total}")
h = np.arange(1024, dtype=np.float32)
d = cuda.to_device(h)
check.ok(bool((d.copy_to_host() == h).all()), "host -> device -> host round trip")


@cuda.jit
def inc(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1


inc[4, 256](d)
cuda.synchronize()
check.ok(True, "a JIT-compiled kernel launched")
raised = None
try:
    a = cuda.device_array(total // 4 * 3, dtype=np.uint8)
    b = cuda.device_array(total // 4 * 3, dtype=np.uint8)
except Exception as e:
    raised = f"{type(e).__name__} {e}"
check.ok(raised is not None and "CUDA_ERROR_OUT_OF_MEMORY" in raised,
         f"two 3/4-device arrays: {raised and raised[:60]}")
check.done()
