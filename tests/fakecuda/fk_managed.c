/* Managed memory hints of the fake driver: cuMemPrefetchAsync (CUDA 8 and 12.2 ABIs, +_ptsz)
 * and cuMemAdvise (both ABIs). The fake's managed memory is host memory that every device
 * reaches, so a prefetch or an advice moves nothing: both check what cuda.h requires (a range
 * inside one cuMemAllocManaged allocation, a valid destination, flags 0, a known advice) and
 * answer its error codes; a prefetch also needs a valid stream. Runs under fk.lock.
 */
#include "tests/fakecuda/fk.h"

/* [p, p + n) inside one live managed allocation (rounded to pages, as the driver rounds). */
static CUresult managed_range(CUdeviceptr p, size_t n) {
  struct fk_alloc *a = fk_mem_find((uintptr_t)p);
  if (a == NULL || a->kind != FK_K_MANAGED || n == 0 || n > a->span - ((uintptr_t)p - a->base)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

/* A destination or advice location: a device, or the host (the fake's one NUMA node, 0). */
static CUresult location_check(CUmemLocation loc) {
  switch (loc.type) {
  case CU_MEM_LOCATION_TYPE_DEVICE:
    return loc.id >= 0 && loc.id < fk.ndev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
  case CU_MEM_LOCATION_TYPE_HOST:
  case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
    return CUDA_SUCCESS;
  case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    return loc.id == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

/* The CUDA 8 ABIs name a device ordinal or CU_DEVICE_CPU. */
static CUmemLocation location_of(CUdevice dev) {
  CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
  if (dev == CU_DEVICE_CPU) {
    loc.type = CU_MEM_LOCATION_TYPE_HOST;
    loc.id = 0;
  }
  return loc;
}

static CUresult prefetch(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream h,
                         int ptsz) {
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc == CUDA_SUCCESS && flags != 0) {
    rc = CUDA_ERROR_INVALID_VALUE;
  }
  if (rc == CUDA_SUCCESS) {
    rc = managed_range(p, n);
  }
  return rc == CUDA_SUCCESS ? location_check(loc) : rc;
}

FK_API CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                   CUstream hStream) {
  FK_BODY(FK_NEED_INIT, prefetch(devPtr, count, location_of(dstDevice), 0, hStream, 0));
}

FK_API CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                        CUstream hStream) {
  FK_BODY(FK_NEED_INIT, prefetch(devPtr, count, location_of(dstDevice), 0, hStream, 1));
}

FK_API CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                      unsigned int flags, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, prefetch(devPtr, count, location, flags, hStream, 0));
}

FK_API CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                           unsigned int flags, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, prefetch(devPtr, count, location, flags, hStream, 1));
}

/* The location matters only for the advices that name one. */
static CUresult advise(CUdeviceptr p, size_t n, int advice, CUmemLocation loc) {
  if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult rc = managed_range(p, n);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION || advice == CU_MEM_ADVISE_SET_ACCESSED_BY ||
      advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY) {
    return location_check(loc);
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                            CUdevice device) {
  FK_BODY(FK_NEED_INIT, advise(devPtr, count, (int)advice, location_of(device)));
}

FK_API CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                               CUmemLocation location) {
  FK_BODY(FK_NEED_INIT, advise(devPtr, count, (int)advice, location));
}
