/* TAP test of the fake NVML's memory and process views with the fake CUDA driver in the same
 * process: the driver's fakecudaDeviceUsage hook, nvmlDeviceGetMemoryInfo (v1, v2) agreeing with
 * cuMemGetInfo_v2 after every allocation and free, the compute process list (v1, v2, v3 layouts,
 * its size protocol) following contexts and memory, the graphics and MPS lists, a full device
 * (no underflow), the CUDA driver version asked of the loaded driver, and threads allocating
 * while others query NVML. Two devices of 1 and 2 GiB.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/nvml/nvmldefs.h"
#include "tests/tap.h"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define CK(call) TAP_EQ((call), CUDA_SUCCESS, "%s", #call)
#define NV(call) TAP_EQ((call), NVML_SUCCESS, "%s", #call)

static nvmlDevice_t dev[2];
static CUcontext primary;

static void hook(void) {
  size_t used = 7;
  int ctxs = 7;
  TAP_EQ(fakecudaDeviceUsage(0, &used, &ctxs), CUDA_ERROR_NOT_INITIALIZED,
         "fakecudaDeviceUsage before cuInit: NOT_INITIALIZED");
  tap_ok(used == 7 && ctxs == 7, "... and nothing written");
  CK(cuInit(0));
  CK(fakecudaDeviceUsage(1, &used, &ctxs));
  tap_ok(used == 0 && ctxs == 0, "after cuInit: device 1 holds nothing, no context");
  TAP_EQ(fakecudaDeviceUsage(2, &used, &ctxs), CUDA_ERROR_INVALID_DEVICE, "device 2");
  TAP_EQ(fakecudaDeviceUsage(-1, &used, &ctxs), CUDA_ERROR_INVALID_DEVICE, "device -1");
  TAP_EQ(fakecudaDeviceUsage(0, NULL, &ctxs), CUDA_ERROR_INVALID_VALUE, "used NULL");
  TAP_EQ(fakecudaDeviceUsage(0, &used, NULL), CUDA_ERROR_INVALID_VALUE, "contexts NULL");
  TAP_EQ(fakecudaCalls("fakecudaDeviceUsage"), 0, "the hook is not counted as a driver call");
}

/* NVML's view of device d must be the driver's: used = total - free of cuMemGetInfo_v2 (with d
 * current), in v1 and v2, used + free = total. Returns NVML's used. */
static unsigned long long agree(int d, const char *when) {
  size_t cfree = 0, ctotal = 0;
  cuMemGetInfo_v2(&cfree, &ctotal);
  nvmlMemory_t m;
  nvmlMemory_v2_t m2;
  memset(&m2, 0, sizeof m2);
  m2.version = nvmlMemory_v2;
  nvmlReturn_t r1 = nvmlDeviceGetMemoryInfo(dev[d], &m);
  nvmlReturn_t r2 = nvmlDeviceGetMemoryInfo_v2(dev[d], &m2);
  int ok = r1 == NVML_SUCCESS && r2 == NVML_SUCCESS && m.total == ctotal &&
           m.used == ctotal - cfree && m.free == cfree && m.used + m.free == m.total &&
           m2.total == m.total && m2.used == m.used && m2.free == m.free && m2.reserved == 0;
  if (!tap_ok(ok, "%s: NVML (v1, v2) and cuMemGetInfo agree: used %llu of %llu", when, m.used,
              m.total)) {
    tap_diag("  cuda free %zu total %zu; v1 %llu/%llu/%llu; v2 %llu/%llu/%llu", cfree, ctotal,
             m.total, m.used, m.free, m2.total, m2.used, m2.free);
  }
  return m.used;
}

/* The compute processes of device d through v3: their number, and the one entry if any. */
static unsigned compute(int d, nvmlProcessInfo_t *first) {
  nvmlProcessInfo_t p[4];
  unsigned n = 4;
  if (nvmlDeviceGetComputeRunningProcesses_v3(dev[d], &n, p) != NVML_SUCCESS) {
    return 99;
  }
  if (n > 0 && first != NULL) {
    *first = p[0];
  }
  return n;
}

/* The graphics (i 0..2) and MPS (3..5) process lists of device 0, versions 1..3. */
static nvmlReturn_t other_list(int i, unsigned *n, void *buf) {
  switch (i) {
  case 0:
    return nvmlDeviceGetGraphicsRunningProcesses(dev[0], n, buf);
  case 1:
    return nvmlDeviceGetGraphicsRunningProcesses_v2(dev[0], n, buf);
  case 2:
    return nvmlDeviceGetGraphicsRunningProcesses_v3(dev[0], n, buf);
  case 3:
    return nvmlDeviceGetMPSComputeRunningProcesses(dev[0], n, buf);
  case 4:
    return nvmlDeviceGetMPSComputeRunningProcesses_v2(dev[0], n, buf);
  default:
    return nvmlDeviceGetMPSComputeRunningProcesses_v3(dev[0], n, buf);
  }
}

static void memory_and_processes(void) {
  unsigned n = 0;
  NV(nvmlInit_v2());
  NV(nvmlDeviceGetCount_v2(&n));
  TAP_EQ(n, 2, "the driver's two devices");
  NV(nvmlDeviceGetHandleByIndex_v2(0, &dev[0]));
  NV(nvmlDeviceGetHandleByIndex_v2(1, &dev[1]));
  TAP_EQ(compute(0, NULL), 0, "no context yet: no compute process");

  CUdevice d0;
  CK(cuDeviceGet(&d0, 0));
  CK(cuDevicePrimaryCtxRetain(&primary, d0));
  CK(cuCtxSetCurrent(primary));
  nvmlProcessInfo_t p;
  TAP_EQ(compute(0, &p), 1, "a retained primary context: this process is listed on device 0");
  tap_ok(p.pid == (unsigned)getpid() && p.usedGpuMemory == 0, "pid %u, 0 bytes used", p.pid);
  TAP_EQ(compute(1, NULL), 0, "... and not on device 1");
  agree(0, "with a context, no memory");

  CUdeviceptr a = 0, b = 0, c = 0;
  CK(cuMemAlloc_v2(&a, 100 * MiB));
  TAP_EQ(agree(0, "after 100 MiB"), 100 * MiB, "NVML used: 100 MiB");
  CK(cuMemAlloc_v2(&b, 1));
  TAP_EQ(agree(0, "after 1 byte more"), 100 * MiB + 512, "the byte costs 512 (the fake's unit)");
  TAP_EQ(compute(0, &p), 1, "still one process");
  TAP_EQ(p.usedGpuMemory, 100 * MiB + 512, "its usedGpuMemory is what it holds");
  tap_ok(p.gpuInstanceId == 0xFFFFFFFFu && p.computeInstanceId == 0xFFFFFFFFu,
         "GPU and compute instance ids 0xFFFFFFFF (MIG off)");

  /* The layouts: v1 entries are 16 bytes, v2 and v3 24; nothing past the one entry written. */
  unsigned char buf[64];
  memset(buf, 0xaa, sizeof buf);
  n = 2;
  NV(nvmlDeviceGetComputeRunningProcesses(dev[0], &n, (nvmlProcessInfo_v1_t *)(void *)buf));
  nvmlProcessInfo_v1_t v1;
  memcpy(&v1, buf, sizeof v1);
  tap_ok(n == 1 && v1.pid == (unsigned)getpid() && v1.usedGpuMemory == 100 * MiB + 512 &&
             buf[16] == 0xaa,
         "v1: one 16-byte entry");
  memset(buf, 0xaa, sizeof buf);
  n = 2;
  NV(nvmlDeviceGetComputeRunningProcesses_v2(dev[0], &n, (nvmlProcessInfo_v2_t *)(void *)buf));
  nvmlProcessInfo_v2_t v2;
  memcpy(&v2, buf, sizeof v2);
  tap_ok(n == 1 && v2.pid == (unsigned)getpid() && v2.computeInstanceId == 0xFFFFFFFFu &&
             buf[24] == 0xaa,
         "v2: one 24-byte entry");

  /* The size protocol. */
  n = 0;
  TAP_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev[0], &n, NULL), NVML_ERROR_INSUFFICIENT_SIZE,
         "*infoCount 0 and NULL infos with a process running: INSUFFICIENT_SIZE");
  TAP_EQ(n, 1, "... and the count needed: 1");
  n = 0;
  memset(buf, 0xaa, sizeof buf);
  TAP_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev[0], &n, (nvmlProcessInfo_t *)(void *)buf),
         NVML_ERROR_INSUFFICIENT_SIZE, "*infoCount 0 with an array: INSUFFICIENT_SIZE");
  tap_ok(n == 1 && buf[0] == 0xaa, "... count 1, nothing written");
  n = 1;
  TAP_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev[0], &n, NULL), NVML_ERROR_INVALID_ARGUMENT,
         "*infoCount 1 and NULL infos: INVALID_ARGUMENT");
  TAP_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev[0], NULL, &p), NVML_ERROR_INVALID_ARGUMENT,
         "NULL infoCount: INVALID_ARGUMENT");
  n = 1;
  TAP_EQ(nvmlDeviceGetComputeRunningProcesses(NULL, &n, &v1), NVML_ERROR_INVALID_ARGUMENT,
         "v1 of NULL: INVALID_ARGUMENT");

  /* Graphics and MPS: none, in every version. */
  for (int i = 0; i < 6; i++) {
    n = 4;
    memset(buf, 0xaa, sizeof buf);
    NV(other_list(i, &n, buf));
    tap_ok(n == 0 && buf[0] == 0xaa, "%s processes (v%d): none", i < 3 ? "graphics" : "MPS",
           i % 3 + 1);
  }
  TAP_EQ(nvmlDeviceGetGraphicsRunningProcesses_v3(dev[0], NULL, &p), NVML_ERROR_INVALID_ARGUMENT,
         "graphics: NULL infoCount");
  n = 1;
  TAP_EQ(nvmlDeviceGetMPSComputeRunningProcesses_v3(NULL, &n, &p), NVML_ERROR_INVALID_ARGUMENT,
         "MPS of NULL");

  /* A full device: used = total, free 0, never an underflow. */
  size_t cfree = 0, ctotal = 0;
  CK(cuMemGetInfo_v2(&cfree, &ctotal));
  CK(cuMemAlloc_v2(&c, cfree));
  TAP_EQ(agree(0, "full"), GiB, "full device: used = total = 1 GiB");
  nvmlMemory_t m;
  NV(nvmlDeviceGetMemoryInfo(dev[0], &m));
  TAP_EQ(m.free, 0, "free 0");
  CK(cuMemFree_v2(c));
  CK(cuMemFree_v2(a));
  CK(cuMemFree_v2(b));
  TAP_EQ(agree(0, "all freed"), 0, "all freed: used 0");
  TAP_EQ(compute(0, NULL), 1, "the context keeps the process listed");
  CK(cuDevicePrimaryCtxRelease_v2(d0));
  TAP_EQ(compute(0, NULL), 0, "primary context released: no compute process");

  /* A created context on device 1. */
  CUdevice d1;
  CUcontext ctx;
  CK(cuDeviceGet(&d1, 1));
  CK(cuCtxCreate_v2(&ctx, 0, d1));
  TAP_EQ(compute(1, NULL), 1, "a created context on device 1: listed there");
  TAP_EQ(compute(0, NULL), 0, "... not on device 0");
  CK(cuMemAlloc_v2(&a, 3 * MiB));
  TAP_EQ(agree(1, "3 MiB on device 1"), 3 * MiB, "device 1: used 3 MiB");
  NV(nvmlDeviceGetMemoryInfo(dev[0], &m));
  TAP_EQ(m.used, 0, "device 0: used 0");
  CK(cuCtxDestroy_v2(ctx));
  TAP_EQ(compute(1, NULL), 0, "context destroyed: no compute process");
  NV(nvmlDeviceGetMemoryInfo(dev[1], &m));
  tap_ok(m.used == 0 && m.free == 2 * GiB, "its memory went with it: used 0, free 2 GiB");
}

static void cuda_version(void) {
  unsigned long long before = fakecudaCalls("cuDriverGetVersion");
  int v = 0;
  NV(nvmlSystemGetCudaDriverVersion_v2(&v));
  TAP_EQ(v, 13000, "CUDA driver version 13000");
  TAP_EQ(fakecudaCalls("cuDriverGetVersion"), before + 1, "... asked of the loaded fake driver");
}

/* ---- Threads: some allocate and free through the driver while others query NVML. ---- */

#define THREADS 4
#define ROUNDS 300

static int bad_views;

static void *allocator(void *arg) {
  (void)arg;
  cuCtxSetCurrent(primary);
  for (int i = 0; i < ROUNDS; i++) {
    CUdeviceptr p;
    if (cuMemAlloc_v2(&p, (size_t)(i % 7 + 1) * MiB) == CUDA_SUCCESS) {
      cuMemFree_v2(p);
    }
  }
  return NULL;
}

static void *watcher(void *arg) {
  (void)arg;
  for (int i = 0; i < ROUNDS; i++) {
    nvmlMemory_t m;
    nvmlProcessInfo_t p[2];
    unsigned n = 2;
    if (nvmlDeviceGetMemoryInfo(dev[0], &m) != NVML_SUCCESS || m.used + m.free != m.total ||
        m.used > m.total ||
        nvmlDeviceGetComputeRunningProcesses_v3(dev[0], &n, p) != NVML_SUCCESS || n != 1) {
      __atomic_add_fetch(&bad_views, 1, __ATOMIC_RELAXED);
    }
  }
  return NULL;
}

static void threads(void) {
  CUdevice d0;
  cuDeviceGet(&d0, 0);
  CK(cuDevicePrimaryCtxRetain(&primary, d0));
  pthread_t t[2 * THREADS];
  for (int i = 0; i < 2 * THREADS; i++) {
    pthread_create(&t[i], NULL, i % 2 ? watcher : allocator, NULL);
  }
  for (int i = 0; i < 2 * THREADS; i++) {
    pthread_join(t[i], NULL);
  }
  TAP_EQ(bad_views, 0, "%d threads allocating, %d querying NVML: every view consistent", THREADS,
         THREADS);
  CK(cuCtxSetCurrent(primary));
  TAP_EQ(agree(0, "after the threads"), 0, "nothing left in use");
  CK(cuDevicePrimaryCtxRelease_v2(d0));
}

int main(void) {
  setenv("FAKECUDA_DRIVER_MEMORY", "off", 1); /* exact figures: test_driver.sh has the driver's */
  setenv("FAKECUDA_DEVICES", "2", 1);
  setenv("FAKECUDA_MEMORY", "0:1GiB,1:2GiB", 1);
  hook();
  memory_and_processes();
  cuda_version();
  threads();
  NV(nvmlShutdown());
  return tap_done();
}
