/* Context teardown. When the driver destroys a context it frees the context's memory, so the
 * pool gpucap kept for it is dropped (its charges returned, no driver call made for its
 * regions): after cuCtxDestroy (which also returns the charges of the pass-through blocks made
 * in that context), after cuDevicePrimaryCtxReset, and after the last
 * cuDevicePrimaryCtxRelease of a device's primary context (the driver's state says inactive).
 */
#include "shim/memory.h"
#include "shim/pool.h"
#include "shim/real.h"

#define GPUCAP_EXPORT __attribute__((visibility("default")))

GPUCAP_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  if (!real_driver_ready(NULL) || !real.cuCtxDestroy_v2) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  CUresult rc = real.cuCtxDestroy_v2(ctx);
  if (rc == CUDA_SUCCESS) {
    pool_drop_context(ctx);
    memory_drop_context(ctx);
  }
  return rc;
}

/* After a successful release: once the driver says the primary context is inactive, drop its
 * pool. (Pass-through charges made in it stay: see docs/compatibility.md.) */
static CUresult after_release(CUresult rc, CUdevice dev) {
  unsigned int flags = 0;
  int active = 1;
  if (rc == CUDA_SUCCESS && real.cuDevicePrimaryCtxGetState &&
      real.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && !active) {
    pool_drop_primary(dev);
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  if (!real_driver_ready(NULL) || !real.cuDevicePrimaryCtxRelease) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return after_release(real.cuDevicePrimaryCtxRelease(dev), dev);
}

GPUCAP_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  if (!real_driver_ready(NULL) || !real.cuDevicePrimaryCtxRelease_v2) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return after_release(real.cuDevicePrimaryCtxRelease_v2(dev), dev);
}

/* After a successful reset: the primary context's memory is gone. */
static CUresult after_reset(CUresult rc, CUdevice dev) {
  if (rc == CUDA_SUCCESS) {
    pool_drop_primary(dev);
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  if (!real_driver_ready(NULL) || !real.cuDevicePrimaryCtxReset) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return after_reset(real.cuDevicePrimaryCtxReset(dev), dev);
}

GPUCAP_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (!real_driver_ready(NULL) || !real.cuDevicePrimaryCtxReset_v2) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return after_reset(real.cuDevicePrimaryCtxReset_v2(dev), dev);
}
