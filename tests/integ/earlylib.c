/* libearly.so: allocates device memory from its constructor, which the dynamic loader runs
 * before the constructors of a preloaded gpucap. gpucap must already cap that allocation. */
#include "shim/base/cudadefs.h"

#define EXPORT __attribute__((visibility("default")))

static CUresult early_rc = CUDA_ERROR_UNKNOWN;
static CUresult small_rc = CUDA_ERROR_UNKNOWN;

EXPORT CUresult early_big(void);
EXPORT CUresult early_small(void);

EXPORT CUresult early_big(void) {
  return early_rc;
}

EXPORT CUresult early_small(void) {
  return small_rc;
}

__attribute__((constructor)) static void allocate_early(void) {
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr p = 0;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
      cuCtxSetCurrent(ctx)) {
    return;
  }
  early_rc = cuMemAlloc_v2(&p, 100u << 20);
  small_rc = cuMemAlloc_v2(&p, 1u << 20);
  if (small_rc == CUDA_SUCCESS) {
    small_rc = cuMemFree_v2(p);
  }
}
