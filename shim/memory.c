/* The device-memory hooks: allocation, free, get-info, total-mem and pitch, in every ABI the
 * driver resolves them to. cuMemAlloc_v2 and cuMemAllocPitch_v2 are served from the context's
 * pool (shim/pool.c) unless GPUCAP_POOL=off. Otherwise, and for the legacy 32-bit ABIs,
 * allocation is pass-through with the cap enforced before the driver is asked (pitch: right
 * after, since only the driver knows the pitch), and each live block remembered with its
 * device and charge so a free credits exactly what was charged.
 * Locking: one mutex guards the live-block map; it is never held across a driver call.
 */
#include "shim/cap.h"
#include "shim/charges.h"
#include "shim/log.h"
#include "shim/memory.h"
#include "shim/pool.h"
#include "shim/real.h"
#include "shim/trace.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#define GPUCAP_EXPORT __attribute__((visibility("default")))

static charges_t live = CHARGES_INIT; /* pass-through blocks: address -> (device, bytes) */

/* Counters of the pass-through path, per device, for the exit report. */
struct passthru {
  _Atomic uint64_t allocs, frees, ooms, in_use, peak, largest;
};
static struct passthru passthru[CAP_MAX_DEVICES];

static void count_alloc(int dev, uint64_t bytes) {
  struct passthru *c = &passthru[dev];
  uint64_t now = atomic_fetch_add(&c->in_use, bytes) + bytes;
  uint64_t peak = atomic_load(&c->peak), largest = atomic_load(&c->largest);
  while (now > peak && !atomic_compare_exchange_weak(&c->peak, &peak, now)) {
  }
  while (bytes > largest && !atomic_compare_exchange_weak(&c->largest, &largest, bytes)) {
  }
  atomic_fetch_add(&c->allocs, 1);
}

static bool driver_ready(void) {
  return real_driver_ready(NULL);
}

static CUresult free_v2(uint64_t ptr, void *arg) {
  (void)arg;
  return real.cuMemFree_v2(ptr);
}

static CUresult free_v1(uint64_t ptr, void *arg) {
  (void)arg;
  return real.cuMemFree((CUdeviceptr_v1)ptr);
}

CUresult mem_track(uint64_t ptr, int dev, uint64_t bytes, mem_free_fn driver_free, void *arg) {
  charge_t e = {.bytes = bytes, .ctx = NULL, .dev = dev};
  real.cuCtxGetCurrent(&e.ctx); /* the context whose teardown frees the block */
  if (!charges_put(&live, ptr, &e)) {
    driver_free(ptr, arg);
    cap_credit(dev, bytes);
    log_msg(LOG_ERROR, "out of host memory while recording a device allocation");
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  count_alloc(dev, bytes);
  trace_event(TRACE_ALLOC, ptr, bytes);
  return CUDA_SUCCESS;
}

CUresult mem_current_device(int *dev) {
  CUresult rc = cap_current_device(dev);
  if (rc == CUDA_ERROR_INVALID_DEVICE) {
    *dev = -1;
    return CUDA_SUCCESS;
  }
  return rc;
}

bool mem_prepare(bool args_ok, int *dev, CUresult *rc) {
  *rc = CUDA_SUCCESS;
  if (!args_ok) {
    return false;
  }
  CUresult q = mem_current_device(dev);
  if (q == CUDA_SUCCESS) {
    return true;
  }
  *rc = cap_no_context(q) ? CUDA_SUCCESS : q;
  return false;
}

CUresult mem_refuse(int dev, uint64_t bytes) {
  if (dev < 0) {
    log_msg(LOG_ERROR, "device ordinal beyond %d: allocation refused", CAP_MAX_DEVICES - 1);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  atomic_fetch_add(&passthru[dev].ooms, 1);
  trace_event(TRACE_ALLOC_FAILURE, 0, bytes);
  log_msg(LOG_DEBUG, "device %d: %llu bytes refused: %llu of %llu in use", dev,
          (unsigned long long)bytes, (unsigned long long)cap_used(dev),
          (unsigned long long)cap_limit(dev, 0));
  return CUDA_ERROR_OUT_OF_MEMORY;
}

GPUCAP_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  int dev;
  if (!driver_ready() || !real.cuMemAlloc_v2) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  if (dptr && bytesize > 0 && pool_enabled()) {
    return pool_alloc(dptr, bytesize);
  }
  CUresult drc;
  if (!mem_prepare(dptr && bytesize > 0, &dev, &drc)) {
    return drc == CUDA_SUCCESS ? real.cuMemAlloc_v2(dptr, bytesize) : drc;
  }
  if (!mem_admit(dev, bytesize)) {
    return mem_refuse(dev, bytesize);
  }
  CUresult rc = real.cuMemAlloc_v2(dptr, bytesize);
  return mem_settle(rc, rc == CUDA_SUCCESS ? *dptr : 0, dev, bytesize, free_v2, NULL);
}

GPUCAP_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize) {
  int dev;
  if (!driver_ready() || !real.cuMemAlloc) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  CUresult drc;
  if (!mem_prepare(dptr && bytesize > 0, &dev, &drc)) {
    return drc == CUDA_SUCCESS ? real.cuMemAlloc(dptr, bytesize) : drc;
  }
  if (!mem_admit(dev, bytesize)) {
    return mem_refuse(dev, bytesize);
  }
  CUresult rc = real.cuMemAlloc(dptr, bytesize);
  return mem_settle(rc, rc == CUDA_SUCCESS ? *dptr : 0, dev, bytesize, free_v1, NULL);
}

bool mem_admit(int dev, uint64_t bytes) {
  return dev >= 0 && cap_charge(dev, bytes);
}

CUresult mem_settle(CUresult rc, uint64_t ptr, int dev, uint64_t bytes, mem_free_fn driver_free,
                    void *arg) {
  if (rc != CUDA_SUCCESS) {
    cap_credit(dev, bytes);
    return rc;
  }
  return mem_track(ptr, dev, bytes, driver_free, arg);
}

/* Returns a tracked block's charge once the driver no longer has it. */
static void credit_block(uint64_t ptr, const charge_t *e) {
  cap_credit(e->dev, e->bytes);
  atomic_fetch_sub(&passthru[e->dev].in_use, e->bytes);
  atomic_fetch_add(&passthru[e->dev].frees, 1);
  trace_event(TRACE_FREE, ptr, e->bytes);
}

void memory_drop_context(CUcontext ctx) {
  if (ctx) {
    charges_drop_context(&live, ctx, credit_block);
  }
}

CUresult mem_untrack_free(uint64_t ptr, mem_free_fn driver_free, void *arg) {
  charge_t e;
  bool known = ptr && charges_take(&live, ptr, &e);
  CUresult rc = driver_free(ptr, arg);
  if (known) {
    if (rc == CUDA_SUCCESS) {
      credit_block(ptr, &e);
    } else if (!charges_put(&live, ptr, &e)) {
      log_msg(LOG_ERROR, "out of host memory: block %#llx is no longer tracked",
              (unsigned long long)ptr);
    }
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  CUresult rc;
  if (!driver_ready() || !real.cuMemFree_v2) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  if (dptr && pool_free(dptr, &rc)) {
    return rc;
  }
  return mem_untrack_free(dptr, free_v2, NULL);
}

GPUCAP_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr) {
  if (!driver_ready() || !real.cuMemFree) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return mem_untrack_free(dptr, free_v1, NULL);
}

GPUCAP_EXPORT CUresult cuMemGetInfo_v2(size_t *freeBytes, size_t *totalBytes) {
  int dev;
  if (!driver_ready() || !real.cuMemGetInfo_v2) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  CUresult rc = real.cuMemGetInfo_v2(freeBytes, totalBytes);
  if (rc == CUDA_SUCCESS && (rc = cap_current_device(&dev)) == CUDA_SUCCESS) {
    uint64_t f = *freeBytes, t = *totalBytes;
    cap_view(dev, pool_idle_bytes(dev), &f, &t);
    *freeBytes = (size_t)f;
    *totalBytes = (size_t)t;
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuMemGetInfo(unsigned int *freeBytes, unsigned int *totalBytes) {
  int dev;
  if (!driver_ready() || !real.cuMemGetInfo) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  CUresult rc = real.cuMemGetInfo(freeBytes, totalBytes);
  if (rc == CUDA_SUCCESS && (rc = cap_current_device(&dev)) == CUDA_SUCCESS) {
    uint64_t f = *freeBytes, t = *totalBytes;
    cap_view(dev, pool_idle_bytes(dev), &f, &t);
    *freeBytes = f > UINT_MAX ? UINT_MAX : (unsigned int)f;
    *totalBytes = t > UINT_MAX ? UINT_MAX : (unsigned int)t;
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  if (!driver_ready() || !real.cuDeviceTotalMem_v2) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  CUresult rc = real.cuDeviceTotalMem_v2(bytes, dev);
  if (rc == CUDA_SUCCESS && dev >= 0 && dev < CAP_MAX_DEVICES) {
    uint64_t limit = cap_limit(dev, *bytes);
    if (limit < *bytes) {
      *bytes = (size_t)limit;
    }
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
  if (!driver_ready() || !real.cuDeviceTotalMem) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  CUresult rc = real.cuDeviceTotalMem(bytes, dev);
  if (rc == CUDA_SUCCESS && dev >= 0 && dev < CAP_MAX_DEVICES) {
    uint64_t limit = cap_limit(dev, 0);
    if (limit < *bytes) {
      *bytes = (unsigned int)limit;
    }
  }
  return rc;
}

/* Charges a block the driver already handed out (pitch allocations: only the driver knows
 * the pitch); gives it back if the charge would pass the cap. */
static CUresult charge_after(uint64_t ptr, int dev, uint64_t bytes, mem_free_fn driver_free) {
  if (!mem_admit(dev, bytes)) {
    driver_free(ptr, NULL);
    return mem_refuse(dev, bytes);
  }
  return mem_track(ptr, dev, bytes, driver_free, NULL);
}

GPUCAP_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                          size_t Height, unsigned int ElementSizeBytes) {
  int dev;
  if (!driver_ready() || !real.cuMemAllocPitch_v2) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  if (pool_enabled()) {
    return pool_alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  }
  CUresult rc = real.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if ((rc = mem_current_device(&dev)) != CUDA_SUCCESS) {
    real.cuMemFree_v2(*dptr); /* cannot be attributed to a device: never kept uncapped */
    *dptr = 0;
    return rc;
  }
  rc = charge_after(*dptr, dev, (uint64_t)*pPitch * Height, free_v2);
  if (rc != CUDA_SUCCESS) {
    *dptr = 0;
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                       unsigned int WidthInBytes, unsigned int Height,
                                       unsigned int ElementSizeBytes) {
  int dev;
  if (!driver_ready() || !real.cuMemAllocPitch) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  CUresult rc = real.cuMemAllocPitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if ((rc = mem_current_device(&dev)) != CUDA_SUCCESS) {
    real.cuMemFree((CUdeviceptr_v1)*dptr); /* cannot be attributed: never kept uncapped */
    *dptr = 0;
    return rc;
  }
  rc = charge_after(*dptr, dev, (uint64_t)*pPitch * Height, free_v1);
  if (rc != CUDA_SUCCESS) {
    *dptr = 0;
  }
  return rc;
}

void memory_each_passthrough(void (*fn)(void *arg, int dev, const bfc_stats_t *stats),
                             void *arg) {
  for (int dev = 0; dev < CAP_MAX_DEVICES; dev++) {
    struct passthru *c = &passthru[dev];
    bfc_stats_t s = {0};
    s.num_allocs = atomic_load(&c->allocs);
    if (s.num_allocs == 0 && atomic_load(&c->ooms) == 0) {
      continue;
    }
    s.bytes_in_use = s.bytes_requested_in_use = atomic_load(&c->in_use);
    s.peak_bytes_in_use = s.peak_bytes_requested_in_use =
        atomic_load(&c->peak);
    s.largest_alloc_size = atomic_load(&c->largest);
    s.driver_alloc_calls = s.num_allocs;
    s.driver_free_calls = atomic_load(&c->frees);
    s.num_ooms = atomic_load(&c->ooms);
    s.num_in_use = s.num_allocs - s.driver_free_calls;
    s.bytes_limit = cap_limit(dev, 0) == CAP_NONE ? 0 : cap_limit(dev, 0);
    fn(arg, dev, &s);
  }
}

void memory_fork_prepare(void) {
  charges_fork_prepare(&live);
}

void memory_fork_parent(void) {
  charges_fork_parent(&live);
}

void memory_fork_child(void) {
  charges_fork_child(&live);
  for (int dev = 0; dev < CAP_MAX_DEVICES; dev++) {
    struct passthru *c = &passthru[dev];
    atomic_store(&c->allocs, 0);
    atomic_store(&c->frees, 0);
    atomic_store(&c->ooms, 0);
    atomic_store(&c->in_use, 0);
    atomic_store(&c->peak, 0);
    atomic_store(&c->largest, 0);
  }
}
