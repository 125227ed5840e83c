/* Device memory that does not come from cuMemAlloc: managed allocations and the virtual
 * memory management API. cuMemAllocManaged is charged to the current device for its size
 * (the driver may place it there) and credited by cuMemFree. cuMemCreate charges the device
 * a physical allocation is placed on (device locations only: host and host-NUMA locations
 * are host memory and left alone); cuMemRelease credits it (shim/charges tracks handles).
 */
#include "shim/cap.h"
#include "shim/charges.h"
#include "shim/fork.h"
#include "shim/memory.h"
#include "shim/real.h"

#define GPUCAP_EXPORT __attribute__((visibility("default")))

static charges_t handles = CHARGES_INIT; /* generic allocation handle -> (device, bytes) */

static CUresult free_managed(uint64_t ptr, void *arg) {
  (void)arg;
  return real.cuMemFree_v2(ptr);
}

GPUCAP_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
  int dev;
  if (!real_driver_ready(NULL) || !real.cuMemAllocManaged) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  CUresult drc;
  if (!mem_prepare(dptr && bytesize > 0, &dev, &drc)) {
    return drc == CUDA_SUCCESS ? real.cuMemAllocManaged(dptr, bytesize, flags) : drc;
  }
  if (!mem_admit(dev, bytesize)) {
    return mem_refuse(dev, bytesize);
  }
  CUresult rc = real.cuMemAllocManaged(dptr, bytesize, flags);
  return mem_settle(rc, rc == CUDA_SUCCESS ? *dptr : 0, dev, bytesize, free_managed, NULL);
}

GPUCAP_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                   const CUmemAllocationProp *prop, unsigned long long flags) {
  if (!real_driver_ready(NULL) || !real.cuMemCreate) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  bool on_device = handle && prop && size > 0 &&
                   prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  int dev = on_device ? prop->location.id : -1;
  if (!on_device || dev < 0 || dev >= CAP_MAX_DEVICES) {
    return real.cuMemCreate(handle, size, prop, flags); /* not device memory, or the driver's error */
  }
  if (!cap_charge(dev, size)) {
    /* Before cuInit the driver refuses everything: answer as it would (asking it, not calling
     * cuMemCreate, which would allocate uncapped should another thread initialise meanwhile). */
    CUcontext ctx = NULL;
    CUresult q = real.cuCtxGetCurrent ? real.cuCtxGetCurrent(&ctx) : CUDA_SUCCESS;
    bool uninit = q == CUDA_ERROR_NOT_INITIALIZED || q == CUDA_ERROR_DEINITIALIZED;
    return uninit ? q : mem_refuse(dev, size);
  }
  CUresult rc = real.cuMemCreate(handle, size, prop, flags);
  if (rc != CUDA_SUCCESS) {
    cap_credit(dev, size);
    return rc;
  }
  charge_t e = {.bytes = size, .ctx = NULL, .dev = dev}; /* physical memory outlives contexts */
  if (!charges_put(&handles, *handle, &e)) {
    real.cuMemRelease(*handle);
    cap_credit(dev, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

GPUCAP_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  if (!real_driver_ready(NULL) || !real.cuMemRelease) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  charge_t e;
  bool known = charges_take(&handles, handle, &e);
  CUresult rc = real.cuMemRelease(handle);
  if (known) {
    if (rc == CUDA_SUCCESS) {
      cap_credit(e.dev, e.bytes);
    } else {
      charges_put(&handles, handle, &e);
    }
  }
  return rc;
}

void vmm_fork_prepare(void) {
  charges_fork_prepare(&handles);
}

void vmm_fork_parent(void) {
  charges_fork_parent(&handles);
}

void vmm_fork_child(void) {
  charges_fork_child(&handles);
}
