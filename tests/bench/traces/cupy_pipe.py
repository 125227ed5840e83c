"""A CuPy array pipeline of changing sizes (random, element-wise, matrix product, sort, scan)
run for STEPS steps with CuPy's pool off: the CuPy workload whose trace `make bench` replays."""
import os

import cupy as cp

cp.cuda.set_allocator(None)
cp.random.seed(0)
for step in range(int(os.environ.get("STEPS", "10"))):
    n = 1 << (14 + step % 6)
    a = cp.random.random(n, dtype=cp.float32)
    b = cp.sqrt(a * a + 1.0)
    m = a.reshape(-1, 128) @ b.reshape(128, -1)[:, :128]
    s = cp.sort(b)
    c = cp.cumsum(s)
    del a, m, s, c
cp.cuda.Device(0).synchronize()
