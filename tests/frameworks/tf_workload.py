"""TensorFlow: one of its GPU memory strategies, judged from inside. The settings come from the
row (tests/frameworks/tensorflow.sh):

  TF_GROWTH=api        tf.config.experimental.set_memory_growth on every GPU
  TF_LOGICAL=MiB[,MiB] logical devices with these memory limits on GPU 0
  TF_FRACTION=F        ConfigProto per_process_gpu_memory_fraction (a TF1 session made first:
                       the process's GPU allocators take the first session's options)
  TF_WORKLOAD          fill (default): a matmul, then 64 MiB tensors on each logical device
                       until TensorFlow's own ResourceExhaustedError, then going on;
                       keras: a small model.fit whose batch does not fit, caught, halved
                       (EXPECT_HALVINGS times) until it fits;
                       meminfo: tf.config.experimental.get_memory_info against allocations
  EXPECT_LIMIT_MIB     each logical device's memory limit, MiB (comma-separated)
  EXPECT_FILL          how many 64 MiB tensors fit on each logical device before the error
  EXPECT_UPFRONT       1: the allocator takes its whole limit from the driver at its first use
                       (the fake's own count of what the process holds, fakecudaDeviceUsage);
                       0: it grows; -: not checked (managed memory, which the fake keeps in
                       host memory)
  EXPECT_WITHIN        limit (default): TensorFlow's peak stays within each device's limit;
                       total: within the memory the device shows (an allocator that does not
                       keep to its limit)
  EXPECT_STATS         0: get_memory_info must refuse (an allocator without statistics)
  EXPECT_MATMUL        ok, or the exception class a matmul raises
TF_FORCE_GPU_ALLOW_GROWTH, TF_GPU_ALLOCATOR and TF_DEVICE_MIN_SYS_MEMORY_IN_MB are TensorFlow's
own variables, set by the row."""
import ctypes
import gc
import os
import re
import tempfile

import check

MiB = 1 << 20
CHUNK = 64 * MiB
env = os.environ.get
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"  # TensorFlow states each device's limit at INFO level

import tensorflow as tf  # noqa: E402

fake = ctypes.CDLL("libcuda.so.1")  # the fake driver: its test hooks


def driver_held(dev):
    """Device memory the process holds at the driver, by the fake's count."""
    used, ctxs = ctypes.c_size_t(), ctypes.c_int()
    fake.fakecudaDeviceUsage(dev, ctypes.byref(used), ctypes.byref(ctxs))
    return used.value


def ints(name, default=""):
    return [int(v) for v in env(name, default).split(",") if v]


totals = ints("EXPECT_TOTAL")
gpus = tf.config.list_physical_devices("GPU")
check.ok(len(gpus) == len(totals), f"{len(gpus)} GPUs")
if env("TF_GROWTH") == "api":
    for g in gpus:
        tf.config.experimental.set_memory_growth(g, True)
if env("TF_LOGICAL"):
    tf.config.set_logical_device_configuration(
        gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=m)
                  for m in ints("TF_LOGICAL")])
if env("TF_FRACTION"):
    config = tf.compat.v1.ConfigProto()
    config.gpu_options.per_process_gpu_memory_fraction = float(env("TF_FRACTION"))
    tf.compat.v1.Session(config=config).close()

# The memory limit of each logical device, as TensorFlow states it when it creates the device
# ("Created device /job:localhost/replica:0/task:0/device:GPU:0 with 799 MB memory: -> device:
# 0, ...", MB being MiB): the line is read from TensorFlow's log while the devices are made.
with tempfile.TemporaryFile() as log:
    saved = os.dup(2)
    os.dup2(log.fileno(), 2)
    try:
        logical = tf.config.list_logical_devices("GPU")
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    log.seek(0)
    text = log.read().decode(errors="replace")
created = re.findall(r"Created device \S*device:GPU:(\d+) with (\d+) MB memory:\s*-> device: (\d+)",
                     text)
limits = [int(mb) * MiB for _, mb, _ in sorted(created, key=lambda c: int(c[0]))]
physical = [int(dev) for _, _, dev in sorted(created, key=lambda c: int(c[0]))]
names = [f"/GPU:{i}" for i in range(len(logical))]
check.ok(len(limits) == len(logical) and limits == [m * MiB for m in ints("EXPECT_LIMIT_MIB")],
         f"memory limits {[x // MiB for x in limits]} MiB")

# The first operation on each device: the allocator takes its memory (or grows).
for name in names:
    with tf.device(name):
        tf.zeros((256,)).numpy()
for dev in sorted(set(physical)):
    held = driver_held(dev)
    wanted = sum(lim for lim, p in zip(limits, physical) if p == dev)
    if env("EXPECT_UPFRONT") == "-":
        continue  # managed memory: host memory to the fake driver, in no device's count
    if env("EXPECT_UPFRONT") == "1":
        check.ok(held >= wanted, f"GPU {dev}: the driver holds {held // MiB} MiB, the whole limit, "
                 "after the first operation")
    else:
        check.ok(held < min(wanted or totals[dev], totals[dev]) // 2,
                 f"GPU {dev}: the driver holds {held // MiB} MiB after the first operation: "
                 "it grows")

def matmul():
    """A matmul (cuBLAS); the class of the exception it raises, or None."""
    try:
        with tf.device(names[0]):
            a = tf.random.normal((256, 256))
            check.ok(tf.matmul(a, a).numpy().shape == (256, 256), "a matmul")
    except Exception as e:  # the class is checked by the caller
        return type(e).__name__
    return None


raised = matmul()
check.ok((raised or "ok") == env("EXPECT_MATMUL", "ok"), f"the matmul: {raised or 'ok'}")


def fill(name):
    """64 MiB tensors on the device until TensorFlow refuses one; how many fitted."""
    kept = []
    try:
        with tf.device(name):
            while len(kept) < 1000:
                kept.append(tf.zeros((CHUNK // 4,), tf.float32))
    except tf.errors.ResourceExhaustedError:
        return len(kept)
    return -1


def fill_workload():
    fits = [fill(name) for name in names]
    check.ok(fits == ints("EXPECT_FILL"), f"64 MiB tensors until ResourceExhaustedError: {fits}")
    for name, lim, n, dev in zip(names, limits, fits, physical):
        if env("EXPECT_STATS") == "0":
            try:
                tf.config.experimental.get_memory_info(name.replace("/", ""))
                raised = None
            except ValueError as e:
                raised = str(e)
            check.ok(raised is not None, f"{name}: the allocator keeps no statistics ({raised})")
            continue
        info = tf.config.experimental.get_memory_info(name.replace("/", ""))
        if env("EXPECT_WITHIN", "limit") == "total":
            lim = totals[dev]  # the allocator does not keep to its limit
        check.ok(n * CHUNK <= info["peak"] <= lim,
                 f"{name}: get_memory_info peak {info['peak'] // MiB} MiB within "
                 f"{lim // MiB} MiB")
    with tf.device(names[0]):
        z = tf.ones((1 << 20,))
        check.ok(z.shape[0] == 1 << 20, "an allocation after the error works")


def meminfo_workload():
    name = names[0].replace("/", "")
    base = tf.config.experimental.get_memory_info(name)["current"]
    with tf.device(names[0]):
        kept = [tf.zeros((CHUNK // 4,), tf.float32) for _ in range(4)]
    info = tf.config.experimental.get_memory_info(name)
    check.ok(info["current"] - base == 4 * CHUNK, "four 64 MiB tensors: current grows by 256 MiB")
    held = driver_held(physical[0])
    check.ok(info["current"] <= held <= totals[physical[0]],
             f"TensorFlow's {info['current'] // MiB} MiB in use <= the {held // MiB} MiB the "
             f"driver holds <= the {totals[physical[0]] // MiB} MiB the device shows")
    del kept
    info = tf.config.experimental.get_memory_info(name)
    check.ok(info["current"] == base and info["peak"] >= base + 4 * CHUNK,
             "freed: current is back, the peak remembers")
    tf.config.experimental.reset_memory_stats(name)
    check.ok(tf.config.experimental.get_memory_info(name)["peak"] == base,
             "reset_memory_stats: the peak is the current figure")
    n = fill(names[0])
    info = tf.config.experimental.get_memory_info(name)
    check.ok(n == ints("EXPECT_FILL")[0] and info["peak"] <= limits[0] <= totals[physical[0]],
             f"{n} tensors until the error; the peak {info['peak'] // MiB} MiB <= the limit "
             f"{limits[0] // MiB} MiB <= the device shown")


def keras_workload():
    """A batch that does not fit raises ResourceExhaustedError; caught, halved until it fits.
    A training step holds more than 128 KiB on the device per sample (the 16384-wide hidden
    layer's output, its gradient and their temporaries) and less than 256 KiB, so a first batch
    of one sample per 128 KiB of the limit does not fit and its half does. Without XLA
    (jit_compile=False): TensorFlow's own kernels, no recompilation for each batch size."""
    import numpy as np
    import keras
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(16384, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer="sgd", jit_compile=False,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    batch = limits[0] // (128 << 10)
    x = np.zeros((batch, 256), np.float32)
    y = np.zeros((batch,), np.int64)
    errors = 0
    history = None
    while batch >= 1 and history is None:
        try:
            history = model.fit(x[:batch], y[:batch], batch_size=batch, epochs=1, verbose=0)
        except tf.errors.ResourceExhaustedError:
            errors += 1
            batch //= 2
    check.ok(errors == int(env("EXPECT_HALVINGS")) and history is not None
             and len(history.history["loss"]) == 1,
             f"ResourceExhaustedError {errors} times, caught, then an epoch with batch {batch}")


{"fill": fill_workload, "meminfo": meminfo_workload, "keras": keras_workload}[
    env("TF_WORKLOAD", "fill")]()
# Every tensor is gone (the workloads keep theirs local): their frees, stream-ordered ones
# included, are queued now, and complete before the program ends.
gc.collect()
tf.test.experimental.sync_devices()
check.done()
