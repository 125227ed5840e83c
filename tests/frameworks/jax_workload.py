"""JAX with its CUDA plugin: one of its allocator settings (XLA_PYTHON_CLIENT_PREALLOCATE,
XLA_PYTHON_CLIENT_MEM_FRACTION, XLA_PYTHON_CLIENT_ALLOCATOR, set by the row in
tests/frameworks/jax.sh), judged from inside: the device JAX finds, the limit its allocator
takes from what cuMemGetInfo reports (the device, or gpucap's cap), whether it took that memory
up front (the fake driver's own count of what the process holds, fakecudaDeviceUsage), a jitted
training step, and 64 MiB arrays until JAX's own out-of-memory error, caught, then going on.

  EXPECT_LIMIT_MIB  memory_stats()["bytes_limit"] in MiB; "-": the allocator keeps no statistics
                    (the platform allocator: every buffer a driver allocation)
  EXPECT_UPFRONT    1: the driver holds the whole limit after the first computation; 0: it grows
  EXPECT_FILL       how many 64 MiB arrays fit before the error"""
import ctypes
import os

import check

MiB = 1 << 20
CHUNK = 64 * MiB
env = os.environ.get

# JAX loads its CUDA plugin only where a GPU device node exists (/dev/nvidia0, /dev/nvidiactl or
# /dev/dxg): the fake driver has none, so the workload names a file that always exists in their
# place. Everything after that is the plugin's real start-up over the fake driver (CUPTI's
# version check included).
from jax._src import hardware_utils  # noqa: E402

hardware_utils._NVIDIA_GPU_DEVICES.append(os.devnull)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

fake = ctypes.CDLL("libcuda.so.1")  # the fake driver: its test hooks


def driver_held(dev):
    """Device memory the process holds at the driver, by the fake's count."""
    used, ctxs = ctypes.c_size_t(), ctypes.c_int()
    fake.fakecudaDeviceUsage(dev, ctypes.byref(used), ctypes.byref(ctxs))
    return used.value


total = int(env("EXPECT_TOTAL"))
devices = jax.devices()
check.ok(len(devices) == 1 and devices[0].platform == "gpu", f"devices {devices}")
dev = devices[0]
jnp.zeros((256,)).block_until_ready()
stats = dev.memory_stats()
if env("EXPECT_LIMIT_MIB") == "-":
    check.ok(not stats or "bytes_limit" not in stats, "the allocator keeps no byte limit")
    limit = total
else:
    limit = stats["bytes_limit"]
    check.ok(limit == int(env("EXPECT_LIMIT_MIB")) * MiB, f"bytes_limit {limit / MiB:.1f} MiB")
held = driver_held(0)
if env("EXPECT_UPFRONT") == "1":
    check.ok(held >= limit, f"the driver holds {held // MiB} MiB after the first computation: "
             "the allocator took its whole limit")
else:
    check.ok(held < limit // 2, f"the driver holds {held // MiB} MiB after the first "
             "computation: the allocator grows")


# A jitted training step: a two-layer network, its loss gradient and an SGD update.
def loss(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


@jax.jit
def step(params, x, y):
    grads = jax.grad(loss)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)


key = jax.random.PRNGKey(0)
params = {"w1": jax.random.normal(key, (64, 128)), "b1": jnp.zeros(128),
          "w2": jax.random.normal(key, (128, 10))}
x, y = jnp.ones((32, 64)), jnp.zeros((32, 10))
for _ in range(5):
    params = step(params, x, y)
jax.block_until_ready(params)
check.ok(params["w1"].shape == (64, 128), "five jitted training steps")

kept = []
error = None
try:
    while len(kept) < 1000:
        kept.append(jnp.zeros((CHUNK // 4,), jnp.float32).block_until_ready())
except Exception as e:  # JAX's runtime error; its kind is checked below
    error = e
check.ok(error is not None and "RESOURCE_EXHAUSTED" in str(error),
         f"64 MiB arrays until {type(error).__name__} RESOURCE_EXHAUSTED: {len(kept)}")
check.ok(len(kept) == int(env("EXPECT_FILL")), f"{len(kept)} arrays fitted")
if stats:
    peak = dev.memory_stats()["peak_bytes_in_use"]
    check.ok(len(kept) * CHUNK <= peak <= limit, f"peak_bytes_in_use {peak // MiB} MiB within "
             "the limit")
kept = None
z = jnp.ones((1 << 20,)).block_until_ready()
check.ok(z.shape == (1 << 20,), "an allocation after the error works")
check.done()
