/* teardown: the cap after contexts go away. When the driver destroys a context it frees the
 * memory allocated in it, so the charges of that memory must go back to the cap: a program that
 * destroys a context holding memory and then allocates again must get the whole cap back, and
 * get-info must show it free. Linked with -lcuda (the fake); run with gpucap preloaded and
 * GPUCAP_MEMORY_LIMIT=64MiB, with and without the pool. Prints TAP.
 * usage: teardown destroy|reset|release   (one scenario per process, so charges cannot leak
 * from one scenario into the next)
 */
#include "shim/base/cudadefs.h"
#include "tests/tap.h"

#include <string.h>

#define MiB ((size_t)1 << 20)
#define CAP (64 * MiB)

/* Whether the whole cap can be allocated (then freed) in the current context, and get-info
 * shows all of it free before. */
static void whole_cap_back(const char *after) {
  char what[160];
  size_t f = 0, t = 0;
  CUdeviceptr p = 0;
  cuMemGetInfo_v2(&f, &t);
  snprintf(what, sizeof what, "after %s: get-info shows the whole cap free (%zu of %zu)", after, f,
           t);
  tap_ok(f == CAP && t == CAP, "%s", what);
  CUresult rc = cuMemAlloc_v2(&p, CAP - 4 * MiB);
  snprintf(what, sizeof what, "after %s: %zu MiB can be allocated again (rc %d)", after,
           (CAP - 4 * MiB) / MiB, rc);
  tap_ok(rc == CUDA_SUCCESS, "%s", what);
  if (rc == CUDA_SUCCESS) {
    cuMemFree_v2(p);
  }
}

/* A created context holding device memory and managed memory is destroyed. */
static void destroy(CUdevice dev, CUcontext primary) {
  CUcontext other;
  CUdeviceptr a = 0, m = 0;
  TAP_EQ(cuCtxCreate_v2(&other, 0, dev), CUDA_SUCCESS, "create a second context");
  TAP_EQ(cuMemAllocManaged(&m, 8 * MiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS,
         "8 MiB of managed memory in it");
  TAP_EQ(cuMemAlloc_v2(&a, 40 * MiB), CUDA_SUCCESS, "40 MiB in it");
  TAP_EQ(cuCtxDestroy_v2(other), CUDA_SUCCESS, "destroy it without freeing either");
  TAP_EQ(cuCtxSetCurrent(primary), CUDA_SUCCESS, "back to the primary context");
  whole_cap_back("cuCtxDestroy_v2");
}

/* The primary context holding memory goes: `end` (a reset, or the last release) frees it. */
static void primary_gone(CUdevice dev, CUcontext primary, CUresult (*end)(CUdevice),
                         const char *what, const char *after) {
  CUdeviceptr a = 0;
  TAP_EQ(cuMemAlloc_v2(&a, 16 * MiB), CUDA_SUCCESS, "16 MiB in the primary context");
  TAP_EQ(end(dev), CUDA_SUCCESS, "%s", what);
  TAP_EQ(cuDevicePrimaryCtxRetain(&primary, dev) || cuCtxSetCurrent(primary), CUDA_SUCCESS,
         "retain it again");
  whole_cap_back(after);
}

int main(int argc, char **argv) {
  const char *scenario = argc > 1 ? argv[1] : "destroy";
  CUdevice dev;
  CUcontext primary;
  TAP_EQ(cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&primary, dev) ||
             cuCtxSetCurrent(primary),
         CUDA_SUCCESS, "set up the primary context");

  if (strcmp(scenario, "destroy") == 0) {
    destroy(dev, primary);
  } else if (strcmp(scenario, "reset") == 0) {
    primary_gone(dev, primary, cuDevicePrimaryCtxReset_v2, "reset the primary context",
                 "cuDevicePrimaryCtxReset_v2");
  } else {
    primary_gone(dev, primary, cuDevicePrimaryCtxRelease_v2, "its last release",
                 "the last cuDevicePrimaryCtxRelease_v2");
  }
  return tap_done();
}
