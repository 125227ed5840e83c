/* fidelity: every path beyond cuMemAlloc that a real program takes, under a 64 MiB cap, over
 * the fake driver (linked with -lcuda and the fake's test hooks). Prints TAP.
 * usage: fidelity async|managed|vmm|pointers|contexts|devices|fork (IPC: tests/integ/ipc.sh)
 * Run with GPUCAP_MEMORY_LIMIT=64MiB (devices: FAKECUDA_DEVICES=2 and a per-device limit). */
#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/tap.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1ull << 20)

static CUcontext ctx;

static void setup(int ordinal) {
  CUdevice dev;
  TAP_EQ(cuInit(0) || cuDeviceGet(&dev, ordinal) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
             cuCtxSetCurrent(ctx),
         0, "context on device %d", ordinal);
}

static size_t free_now(void) {
  size_t f = 0, t = 0;
  cuMemGetInfo_v2(&f, &t);
  return f;
}

static void async(void) {
  CUstream s;
  CUdeviceptr a = 0, b = 0, c = 0;
  TAP_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), 0, "stream");
  TAP_EQ(cuMemAllocAsync(&a, 40 * MiB, s), CUDA_SUCCESS, "cuMemAllocAsync 40 MiB");
  TAP_EQ(free_now(), 24 * MiB, "get-info sees the stream-ordered allocation");
  TAP_EQ(cuMemAllocAsync_ptsz(&b, 32 * MiB, s), CUDA_ERROR_OUT_OF_MEMORY,
         "cuMemAllocAsync_ptsz past the cap: CUDA_ERROR_OUT_OF_MEMORY");
  TAP_EQ(cuMemFreeAsync(a, s), CUDA_SUCCESS, "cuMemFreeAsync");
  TAP_EQ(cuMemAllocAsync_ptsz(&b, 32 * MiB, s), CUDA_SUCCESS, "the freed bytes count again");
  TAP_EQ(cuMemFreeAsync_ptsz(b, s), CUDA_SUCCESS, "cuMemFreeAsync_ptsz");
  TAP_EQ(cuMemAlloc_v2(&c, 1 * MiB), CUDA_SUCCESS, "a pooled block ...");
  TAP_EQ(fakecudaEnqueueWork(s, c, 1 * MiB), CUDA_SUCCESS, "... still used by the stream ...");
  TAP_EQ(cuMemFreeAsync(c, s), CUDA_SUCCESS, "... freed with cuMemFreeAsync");
  TAP_EQ(cuMemFreeAsync(c, s), CUDA_ERROR_INVALID_VALUE, "a second cuMemFreeAsync of it");
  TAP_EQ(cuStreamSynchronize(s), CUDA_SUCCESS, "synchronize");
  TAP_EQ(free_now(), 64 * MiB - 2 * MiB + 2 * MiB, "everything is free again");
  TAP_EQ(fakecudaHazards(), 0, "no hazard");
}

static void managed(void) {
  CUdeviceptr a = 0, b = 0;
  TAP_EQ(cuMemAllocManaged(&a, 48 * MiB, CU_MEM_ATTACH_GLOBAL), 0, "managed 48 MiB");
  TAP_EQ(cuMemAllocManaged(&b, 32 * MiB, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY,
         "managed memory counts against the cap");
  TAP_EQ(cuMemAllocManaged(&b, 16, 0), CUDA_ERROR_INVALID_VALUE, "bad flags: driver's code");
  TAP_EQ(cuMemFree_v2(a), CUDA_SUCCESS, "cuMemFree frees managed memory");
  TAP_EQ(free_now(), 64 * MiB, "and gives its charge back");
}

static void vmm(void) {
  CUmemAllocationProp prop;
  CUmemGenericAllocationHandle h1 = 0, h2 = 0, h3 = 0;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  TAP_EQ(cuMemCreate(&h1, 48 * MiB, &prop, 0), CUDA_SUCCESS, "cuMemCreate 48 MiB on the device");
  TAP_EQ(cuMemCreate(&h2, 32 * MiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY,
         "cuMemCreate past the cap: CUDA_ERROR_OUT_OF_MEMORY");
  TAP_EQ(free_now(), 16 * MiB, "get-info sees the physical allocation");
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CUresult rc = cuMemCreate(&h3, 32 * MiB, &prop, 0);
  tap_ok(rc != CUDA_ERROR_OUT_OF_MEMORY, "a host-located allocation is not charged (rc %d)", rc);
  if (rc == CUDA_SUCCESS) {
    cuMemRelease(h3);
  }
  TAP_EQ(cuMemRelease(h1), CUDA_SUCCESS, "cuMemRelease");
  TAP_EQ(cuMemRelease(h1), CUDA_ERROR_INVALID_VALUE, "a second cuMemRelease: driver's code");
  TAP_EQ(free_now(), 64 * MiB, "release gives the charge back");
}

static void pointers(void) {
  CUdeviceptr a = 0, b = 0, base = 0;
  size_t size = 0;
  TAP_EQ(cuMemAlloc_v2(&a, 1000), CUDA_SUCCESS, "block A, 1000 bytes");
  TAP_EQ(cuMemAlloc_v2(&b, 5000), CUDA_SUCCESS, "block B, 5000 bytes");
  TAP_EQ(cuMemGetAddressRange_v2(&base, &size, b + 100), CUDA_SUCCESS, "address range of B+100");
  tap_ok(base == b && size == 5000, "is B itself (%#llx, %zu), not the pool region",
         (unsigned long long)base, size);
  CUdeviceptr start = 0;
  size_t rsize = 0;
  TAP_EQ(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a + 10), 0,
         "RANGE_START_ADDR of A+10");
  TAP_EQ(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, a + 10), 0,
         "RANGE_SIZE of A+10");
  tap_ok(start == a && rsize == 1000, "describe A (%#llx, %zu)", (unsigned long long)start, rsize);
  int ordinal = -1;
  TAP_EQ(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a), 0,
         "other attributes come from the driver");
  TAP_EQ(ordinal, 0, "  device ordinal 0");
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void *data[2] = {&start, &rsize};
  TAP_EQ(cuPointerGetAttributes(2, attrs, data, b + 4999), 0, "cuPointerGetAttributes(B+4999)");
  tap_ok(start == b && rsize == 5000, "describe B");
  TAP_EQ(cuMemFree_v2(a), CUDA_SUCCESS, "free A");
  TAP_EQ(cuMemGetAddressRange_v2(&base, &size, a), CUDA_ERROR_NOT_FOUND,
         "freed memory has no address range");
  TAP_EQ(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a),
         CUDA_ERROR_INVALID_VALUE, "nor pointer attributes");
  cuMemFree_v2(b);
}

static void contexts(void) {
  CUdevice dev;
  CUcontext c2;
  CUdeviceptr a = 0, b = 0;
  cuDeviceGet(&dev, 0);
  TAP_EQ(cuMemAlloc_v2(&a, 30 * MiB), CUDA_SUCCESS, "30 MiB in the primary context");
  TAP_EQ(cuCtxCreate_v2(&c2, 0, dev), CUDA_SUCCESS, "a created context");
  TAP_EQ(cuMemAlloc_v2(&b, 40 * MiB), CUDA_ERROR_OUT_OF_MEMORY,
         "both contexts share the device's cap");
  TAP_EQ(cuMemAlloc_v2(&b, 8 * MiB), CUDA_SUCCESS, "8 MiB in the created context");
  TAP_EQ(cuCtxDestroy_v2(c2), CUDA_SUCCESS, "cuCtxDestroy frees its memory ...");
  TAP_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS, "back to the primary context");
  TAP_EQ(free_now(), 34 * MiB, "... and its pool's charge is back");
  TAP_EQ(cuMemFree_v2(a), CUDA_SUCCESS, "free the 30 MiB");
  TAP_EQ(cuCtxCreate_v2(&c2, 0, dev), CUDA_SUCCESS, "another created context");
  TAP_EQ(cuMemAlloc_v2(&b, 48 * MiB), CUDA_SUCCESS,
         "48 MiB there: the primary pool's idle region is given back for it");
  TAP_EQ(cuMemFree_v2(b), CUDA_SUCCESS, "free it");
  TAP_EQ(cuCtxDestroy_v2(c2), CUDA_SUCCESS, "destroy it");
  TAP_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS, "back to the primary context");
  TAP_EQ(cuDevicePrimaryCtxReset_v2(dev), CUDA_SUCCESS, "primary context reset");
  TAP_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS, "retain it again");
  TAP_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS, "make it current");
  TAP_EQ(free_now(), 64 * MiB, "the reset dropped the primary context's pool too");
  TAP_EQ(cuMemAlloc_v2(&a, 60 * MiB), CUDA_SUCCESS, "the whole cap is usable again");
  cuMemFree_v2(a);
}

static void devices(void) {
  CUdevice d1;
  CUcontext c1;
  CUdeviceptr a = 0, b = 0;
  TAP_EQ(cuMemAlloc_v2(&a, 48 * MiB), CUDA_SUCCESS, "device 0: 48 MiB under its 64 MiB");
  TAP_EQ(cuDeviceGet(&d1, 1) || cuDevicePrimaryCtxRetain(&c1, d1) || cuCtxSetCurrent(c1), 0,
         "switch to device 1");
  TAP_EQ(cuMemAlloc_v2(&b, 48 * MiB), CUDA_ERROR_OUT_OF_MEMORY, "device 1: 48 MiB over 32");
  TAP_EQ(cuMemAlloc_v2(&b, 24 * MiB), CUDA_SUCCESS, "device 1: 24 MiB fits");
  TAP_EQ(free_now(), 8 * MiB, "device 1's get-info");
  cuCtxSetCurrent(ctx);
  TAP_EQ(free_now(), 16 * MiB, "device 0's get-info");
  cuMemFree_v2(a);
  cuMemFree_v2(b);
}

static void forked(void) {
  CUdeviceptr a = 0, b = 0;
  TAP_EQ(cuMemAlloc_v2(&a, 8 * MiB), CUDA_SUCCESS, "parent allocates");
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    /* The child has no usable context; gpucap must not hand it the parent's pool. */
    CUresult rc = cuMemAlloc_v2(&b, 1 * MiB);
    _exit(rc == CUDA_SUCCESS ? 1 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  tap_ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
         "the child gets the driver's error, not a block from the parent's pool");
  TAP_EQ(cuMemAlloc_v2(&b, 8 * MiB), CUDA_SUCCESS, "the parent goes on allocating");
  TAP_EQ(cuMemFree_v2(a) || cuMemFree_v2(b), 0, "and freeing");
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "";
  setup(0);
  if (strcmp(what, "async") == 0) {
    async();
  } else if (strcmp(what, "managed") == 0) {
    managed();
  } else if (strcmp(what, "vmm") == 0) {
    vmm();
  } else if (strcmp(what, "pointers") == 0) {
    pointers();
  } else if (strcmp(what, "contexts") == 0) {
    contexts();
  } else if (strcmp(what, "devices") == 0) {
    devices();
  } else if (strcmp(what, "fork") == 0) {
    forked();
  } else {
    tap_ok(0, "unknown mode '%s'", what);
  }
  return tap_done();
}
