/* ctxswitch: a program that changes its current context and device between allocations, on
 * one thread and across threads, every way the driver API offers (set, push, pop, create,
 * destroy, a primary context's reset), over two devices. Each allocation must land on the
 * device of the context current at that moment and be charged there: the driver itself says
 * which device holds each block (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) and how much each device
 * held at its peak (fakecudaPeakBytes), and a cap of CAP0 MiB on device 0 and CAP1 MiB on
 * device 1 (the test script's GPUCAP_MEMORY_LIMIT) refuses what device 1 cannot take right
 * after a switch from device 0. Run bare (no cap: "nocap") and under gpucap with each pool.
 * Any cache of the current context or device (gpucap's hooks, its arenas) must keep
 * these answers. Linked with -lcuda. Prints TAP. usage: ctxswitch cap|nocap
 */
#include "shim/base/cudadefs.h"
#include "tests/tap.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define MIB ((size_t)1 << 20)
#define CAP0 64 /* MiB: GPUCAP_MEMORY_LIMIT=0:64MiB,1:32MiB in tests/integ/ctxswitch.sh */
#define CAP1 32

unsigned long long fakecudaPeakBytes(int dev, int restart);

static CUcontext primary[2];

/* The device the driver says holds ptr, or -1. */
static int device_of(CUdeviceptr ptr) {
  int ordinal = -1;
  if (cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) != CUDA_SUCCESS) {
    return -1;
  }
  return ordinal;
}

/* Allocates bytes in the current context and checks the driver puts it on device want. */
static CUdeviceptr alloc_on(int want, size_t bytes, const char *how) {
  CUdeviceptr p = 0;
  CUresult rc = cuMemAlloc_v2(&p, bytes);
  TAP_EQ(rc, CUDA_SUCCESS, "%s: %zu bytes allocated", how, bytes);
  if (rc == CUDA_SUCCESS) {
    TAP_EQ(device_of(p), want, "%s: the block is on device %d", how, want);
  }
  return rc == CUDA_SUCCESS ? p : 0;
}

struct other {
  int dev;
  int wrong; /* blocks the driver put elsewhere */
  int failed;
};

/* Another thread: its own current context (device dev's primary), switching to the other
 * device and back between allocations while the main thread does the same the other way. */
static void *other_thread(void *arg) {
  struct other *o = arg;
  for (int i = 0; i < 200; i++) {
    int d = (o->dev + i) % 2;
    CUdeviceptr p = 0;
    if (cuCtxSetCurrent(primary[d]) != CUDA_SUCCESS ||
        cuMemAlloc_v2(&p, (size_t)(1 + i % 7) * 4096) != CUDA_SUCCESS) {
      o->failed++;
      continue;
    }
    o->wrong += device_of(p) != d;
    o->failed += cuMemFree_v2(p) != CUDA_SUCCESS;
  }
  return NULL;
}

int main(int argc, char **argv) {
  int capped = argc > 1 && strcmp(argv[1], "cap") == 0;
  CUdevice dev[2];
  int n = 0;
  if (cuInit(0) || cuDeviceGetCount(&n) || n < 2 || cuDeviceGet(&dev[0], 0) ||
      cuDeviceGet(&dev[1], 1) || cuDevicePrimaryCtxRetain(&primary[0], dev[0]) ||
      cuDevicePrimaryCtxRetain(&primary[1], dev[1])) {
    tap_ok(0, "setup: two devices and their primary contexts");
    return tap_done();
  }
  fakecudaPeakBytes(0, 1);
  fakecudaPeakBytes(1, 1);

  /* One thread, cuCtxSetCurrent back and forth. */
  TAP_EQ(cuCtxSetCurrent(primary[0]), CUDA_SUCCESS, "set device 0's primary context");
  CUdeviceptr a = alloc_on(0, 3 * MIB, "set 0");
  TAP_EQ(cuCtxSetCurrent(primary[1]), CUDA_SUCCESS, "set device 1's primary context");
  CUdeviceptr b = alloc_on(1, 5 * MIB, "set 1");
  TAP_EQ(cuCtxSetCurrent(primary[0]), CUDA_SUCCESS, "set device 0's again");
  CUdeviceptr c = alloc_on(0, 7 * MIB, "set 0 again");

  /* Push and pop: a created context is current until popped; then the one below it. */
  CUcontext created = NULL, popped = NULL;
  TAP_EQ(cuCtxCreate_v2(&created, 0, dev[1]), CUDA_SUCCESS, "create a context on device 1");
  CUdeviceptr d = alloc_on(1, 2 * MIB, "created (current on creation)");
  TAP_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS, "pop it");
  CUdeviceptr e = alloc_on(0, 1 * MIB, "after the pop (device 0's primary below it)");
  TAP_EQ(cuCtxPushCurrent_v2(created), CUDA_SUCCESS, "push it again");
  CUdeviceptr f = alloc_on(1, 3 * MIB, "pushed");
  TAP_EQ(cuMemFree_v2(d), CUDA_SUCCESS, "free a block of the created context in it");
  TAP_EQ(cuMemFree_v2(f), CUDA_SUCCESS, "and the other");
  /* Destroying the current context pops it: device 0's primary is current again. */
  TAP_EQ(cuCtxDestroy_v2(created), CUDA_SUCCESS, "destroy the created context while current");
  CUdeviceptr g = alloc_on(0, 2 * MIB, "after the destroy");

  /* A primary context reset while current: its handle stays, its memory goes. */
  TAP_EQ(cuCtxSetCurrent(primary[1]), CUDA_SUCCESS, "set device 1's primary context");
  TAP_EQ(cuMemFree_v2(b), CUDA_SUCCESS, "free device 1's block");
  TAP_EQ(cuDevicePrimaryCtxReset(dev[1]), CUDA_SUCCESS, "reset device 1's primary context");
  CUcontext again = NULL;
  TAP_EQ(cuDevicePrimaryCtxRetain(&again, dev[1]), CUDA_SUCCESS, "retain it again");
  TAP_EQ(cuCtxSetCurrent(again), CUDA_SUCCESS, "make it current");
  primary[1] = again;
  CUdeviceptr h = alloc_on(1, 4 * MIB, "after the reset");

  /* The cap right after a switch: device 1 holds CAP1 MiB, device 0 CAP0. */
  if (capped) {
    CUdeviceptr big = 0;
    TAP_EQ(cuMemAlloc_v2(&big, (CAP1 + 8) * MIB), CUDA_ERROR_OUT_OF_MEMORY,
           "device 1 refuses %d MiB (its cap is %d MiB)", CAP1 + 8, CAP1);
    TAP_EQ(cuCtxSetCurrent(primary[0]), CUDA_SUCCESS, "switch to device 0");
    TAP_EQ(cuMemAlloc_v2(&big, (CAP1 + 8) * MIB), CUDA_SUCCESS,
           "device 0 takes the same %d MiB (its cap is %d MiB)", CAP1 + 8, CAP0);
    TAP_EQ(device_of(big), 0, "  on device 0");
    TAP_EQ(cuMemFree_v2(big), CUDA_SUCCESS, "  freed");
    TAP_EQ(cuCtxSetCurrent(primary[1]), CUDA_SUCCESS, "switch back to device 1");
    TAP_EQ(cuMemAlloc_v2(&big, (CAP1 + 8) * MIB), CUDA_ERROR_OUT_OF_MEMORY,
           "device 1 still refuses it");
  }

  /* Two threads switching devices between allocations at once. */
  struct other o[2] = {{.dev = 0}, {.dev = 1}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    pthread_create(&t[i], NULL, other_thread, &o[i]);
  }
  for (int i = 0; i < 2; i++) {
    pthread_join(t[i], NULL);
    TAP_EQ(o[i].failed, 0, "thread %d: every allocation and free succeeded", i);
    TAP_EQ(o[i].wrong, 0, "thread %d: every block on the device of its current context", i);
  }

  /* Frees from a thread whose current context is the other device's. */
  TAP_EQ(cuCtxSetCurrent(primary[1]), CUDA_SUCCESS, "device 1 current");
  TAP_EQ(cuMemFree_v2(a), CUDA_SUCCESS, "free device 0's blocks from device 1's context");
  TAP_EQ(cuMemFree_v2(c) | cuMemFree_v2(e) | cuMemFree_v2(g), CUDA_SUCCESS, "  the others");
  TAP_EQ(cuMemFree_v2(h), CUDA_SUCCESS, "free device 1's block");

  /* What the driver held: under the caps, never more than each device's. */
  unsigned long long peak0 = fakecudaPeakBytes(0, 0), peak1 = fakecudaPeakBytes(1, 0);
  tap_diag("driver peaks: device 0 %llu, device 1 %llu bytes", peak0, peak1);
  tap_ok(peak0 >= 13 * MIB, "device 0 held its blocks (peak %llu)", peak0);
  tap_ok(peak1 >= 5 * MIB, "device 1 held its blocks (peak %llu)", peak1);
  if (capped) {
    tap_ok(peak0 <= CAP0 * MIB, "device 0's peak is within its cap");
    tap_ok(peak1 <= CAP1 * MIB, "device 1's peak is within its cap");
  }
  return tap_done();
}
