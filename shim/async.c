/* Stream-ordered allocation: cuMemAllocAsync, cuMemAllocFromPoolAsync and cuMemFreeAsync, each
 * with its per-thread-stream (_ptsz) variant. Rule: these stay with the driver's own stream-
 * ordered pools (which already give stream-ordered reuse: at once on the freeing stream, on
 * other streams after the free completes), and gpucap charges each allocation to the cap and
 * returns the charge at the free. A cuMemFreeAsync of a block from gpucap's own pool is a
 * deferred pool free, reused only after the device has synchronised.
 */
#include "shim/cap.h"
#include "shim/memory.h"
#include "shim/pool.h"
#include "shim/real.h"

#define GPUCAP_EXPORT __attribute__((visibility("default")))

/* How one of the six allocation entry points reaches the driver. */
enum which { ASYNC, ASYNC_PTSZ, FROM_POOL, FROM_POOL_PTSZ };

static CUresult call(enum which w, CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                     CUstream stream) {
  switch (w) {
  case ASYNC:
    return real.cuMemAllocAsync ? real.cuMemAllocAsync(dptr, bytes, stream)
                                : CUDA_ERROR_NOT_SUPPORTED;
  case ASYNC_PTSZ:
    return real.cuMemAllocAsync_ptsz ? real.cuMemAllocAsync_ptsz(dptr, bytes, stream)
                                     : CUDA_ERROR_NOT_SUPPORTED;
  case FROM_POOL:
    return real.cuMemAllocFromPoolAsync ? real.cuMemAllocFromPoolAsync(dptr, bytes, pool, stream)
                                        : CUDA_ERROR_NOT_SUPPORTED;
  default:
    return real.cuMemAllocFromPoolAsync_ptsz
               ? real.cuMemAllocFromPoolAsync_ptsz(dptr, bytes, pool, stream)
               : CUDA_ERROR_NOT_SUPPORTED;
  }
}

static CUresult free_async(uint64_t ptr, void *stream) {
  return real.cuMemFreeAsync ? real.cuMemFreeAsync(ptr, (CUstream)stream)
                             : CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult free_async_ptsz(uint64_t ptr, void *stream) {
  return real.cuMemFreeAsync_ptsz ? real.cuMemFreeAsync_ptsz(ptr, (CUstream)stream)
                                  : CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult alloc(enum which w, CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                      CUstream stream) {
  int dev;
  if (!real_driver_ready(NULL)) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  CUresult drc;
  if (!mem_prepare(dptr && bytes > 0, &dev, &drc)) {
    return drc == CUDA_SUCCESS ? call(w, dptr, bytes, pool, stream) : drc;
  }
  if (!mem_admit(dev, bytes)) {
    return mem_refuse(dev, bytes);
  }
  CUresult rc = call(w, dptr, bytes, pool, stream);
  bool ptsz = w == ASYNC_PTSZ || w == FROM_POOL_PTSZ;
  return mem_settle(rc, rc == CUDA_SUCCESS ? *dptr : 0, dev, bytes,
                    ptsz ? free_async_ptsz : free_async, stream);
}

static CUresult free_on(CUdeviceptr dptr, CUstream stream, mem_free_fn driver_free) {
  CUresult rc;
  if (!real_driver_ready(NULL)) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  if (dptr && pool_block(dptr, &(uint64_t){0}, &(uint64_t){0}) != POOL_OUTSIDE) {
    /* A pooled block: the stream must be one the driver would accept (its error, and the
     * block kept, otherwise). The special handles need no check. */
    CUcontext owner;
    if (stream && stream != CU_STREAM_LEGACY && stream != CU_STREAM_PER_THREAD &&
        (rc = real.cuStreamGetCtx(stream, &owner)) != CUDA_SUCCESS) {
      return rc;
    }
    if (pool_free(dptr, &rc)) {
      return rc;
    }
  }
  return mem_untrack_free(dptr, driver_free, stream);
}

GPUCAP_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  return alloc(ASYNC, dptr, bytesize, NULL, hStream);
}

GPUCAP_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                            CUstream hStream) {
  return alloc(ASYNC_PTSZ, dptr, bytesize, NULL, hStream);
}

GPUCAP_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                               CUmemoryPool pool, CUstream hStream) {
  return alloc(FROM_POOL, dptr, bytesize, pool, hStream);
}

GPUCAP_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                    CUmemoryPool pool, CUstream hStream) {
  return alloc(FROM_POOL_PTSZ, dptr, bytesize, pool, hStream);
}

GPUCAP_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return free_on(dptr, hStream, free_async);
}

GPUCAP_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return free_on(dptr, hStream, free_async_ptsz);
}
