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
#include "shim/hook.h"
#include "shim/log.h"
#include "shim/memory.h"
#include "shim/pending.h"
#include "shim/pool.h"
#include "shim/real.h"
#include "shim/trace.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

static charges_t live = CHARGES_INIT; /* pass-through blocks: address -> (device, bytes) */

/* Counters of the pass-through path, per device, for the exit report. */
struct passthru {
  _Atomic uint64_t allocs, frees, ooms, in_use, peak, largest;
};
static struct passthru passthru[GPUCAP_MAX_DEVICES];

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

static CUresult free_v2(uint64_t ptr, void *arg) {
  (void)arg;
  return real.cuMemFree_v2(ptr);
}

static CUresult free_v1(uint64_t ptr, void *arg) {
  (void)arg;
  return real.cuMemFree((CUdeviceptr_v1)ptr);
}

/* Takes a block out of the counters and the trace (its charge is returned separately). */
static void forget_block(uint64_t ptr, const charge_t *e) {
  atomic_fetch_sub(&passthru[e->dev].in_use, e->bytes);
  atomic_fetch_add(&passthru[e->dev].frees, 1);
  trace_event(TRACE_FREE, ptr, e->bytes);
}

/* Returns a tracked block's charge once the driver no longer has it. */
static void credit_block(uint64_t ptr, const charge_t *e) {
  forget_block(ptr, e);
  cap_credit(e->dev, e->bytes);
}

CUresult mem_track(uint64_t ptr, int dev, uint64_t bytes, enum mem_kind kind,
                   mem_free_fn driver_free, void *arg) {
  charge_t e = {.bytes = bytes, .ctx = NULL, .dev = dev, .kind = (int)kind}, old;
  if (kind == MEM_CONTEXT) {
    real.cuCtxGetCurrent(&e.ctx); /* the context whose teardown frees the block */
  }
  int put = charges_put(&live, ptr, &e, &old);
  if (put < 0) {
    driver_free(ptr, arg);
    cap_credit(dev, bytes);
    log_msg(LOG_ERROR, "out of host memory while recording a device allocation");
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (put > 0) {
    credit_block(ptr, &old); /* freed in a way gpucap did not see */
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
    log_msg(LOG_ERROR, "device ordinal beyond %d: allocation refused", GPUCAP_MAX_DEVICES - 1);
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
  HOOK_PROLOGUE(real.cuMemAlloc_v2);
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
  return mem_settle(rc, rc == CUDA_SUCCESS ? *dptr : 0, dev, bytesize, MEM_CONTEXT, free_v2, NULL);
}

GPUCAP_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize) {
  int dev;
  HOOK_PROLOGUE(real.cuMemAlloc);
  CUresult drc;
  if (!mem_prepare(dptr && bytesize > 0, &dev, &drc)) {
    return drc == CUDA_SUCCESS ? real.cuMemAlloc(dptr, bytesize) : drc;
  }
  if (!mem_admit(dev, bytesize)) {
    return mem_refuse(dev, bytesize);
  }
  CUresult rc = real.cuMemAlloc(dptr, bytesize);
  return mem_settle(rc, rc == CUDA_SUCCESS ? *dptr : 0, dev, bytesize, MEM_CONTEXT, free_v1, NULL);
}

bool mem_admit(int dev, uint64_t bytes) {
  if (dev < 0) {
    return false;
  }
  if (cap_charge(dev, bytes)) {
    return true;
  }
  pending_wait(dev); /* memory the stream-ordered frees are about to give back */
  if (cap_charge(dev, bytes)) {
    return true;
  }
  /* Regions the pools hold that nothing is allocated in: the program freed that memory, and
   * this allocation must not fail for want of it. */
  return pool_trim(dev) > 0 && cap_charge(dev, bytes);
}

bool mem_recharge(int dev, uint64_t admitted, uint64_t exact) {
  if (exact > admitted && !mem_admit(dev, exact - admitted)) {
    cap_credit(dev, admitted);
    return false;
  }
  if (exact < admitted) {
    cap_credit(dev, admitted - exact);
  }
  return true;
}

CUresult mem_settle(CUresult rc, uint64_t ptr, int dev, uint64_t bytes, enum mem_kind kind,
                    mem_free_fn driver_free, void *arg) {
  if (rc != CUDA_SUCCESS) {
    cap_credit(dev, bytes);
    return rc;
  }
  return mem_track(ptr, dev, bytes, kind, driver_free, arg);
}

static bool made_in(const charge_t *e, const void *ctx) {
  return e->kind == MEM_CONTEXT && e->ctx == ctx;
}

static bool ordered_on(const charge_t *e, const void *dev) {
  return e->kind == MEM_ORDERED && e->dev == *(const int *)dev;
}

void memory_drop_context(CUcontext ctx) {
  if (ctx) {
    charges_drop(&live, made_in, ctx, credit_block);
  }
}

void memory_drop_ordered(int dev) {
  charges_drop(&live, ordered_on, &dev, credit_block);
}

CUresult mem_untrack_free(uint64_t ptr, mem_free_fn driver_free, void *arg, mem_after_fn after) {
  charge_hold_t *held = ptr ? charges_hold(&live, ptr) : NULL;
  CUresult rc = driver_free(ptr, arg);
  charge_t e;
  if (charges_settle(&live, ptr, held, rc == CUDA_SUCCESS, &e)) {
    forget_block(ptr, &e);
    if (after) {
      after(&e, arg);
    } else {
      cap_credit(e.dev, e.bytes);
    }
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  CUresult rc;
  HOOK_PROLOGUE(real.cuMemFree_v2);
  if (dptr && pool_free(dptr, true, &rc)) {
    return rc;
  }
  return mem_untrack_free(dptr, free_v2, NULL, NULL);
}

GPUCAP_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr) {
  HOOK_PROLOGUE(real.cuMemFree);
  return mem_untrack_free(dptr, free_v1, NULL, NULL);
}

GPUCAP_EXPORT CUresult cuMemGetInfo_v2(size_t *freeBytes, size_t *totalBytes) {
  int dev;
  HOOK_PROLOGUE(real.cuMemGetInfo_v2);
  CUresult rc = real.cuMemGetInfo_v2(freeBytes, totalBytes);
  if (rc == CUDA_SUCCESS && (rc = cap_current_device(&dev)) == CUDA_SUCCESS) {
    uint64_t f = *freeBytes, t = *totalBytes;
    pending_poll(dev);
    cap_view(dev, pool_idle_bytes(dev), t, &f, &t);
    *freeBytes = (size_t)f;
    *totalBytes = (size_t)t;
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuMemGetInfo(unsigned int *freeBytes, unsigned int *totalBytes) {
  int dev;
  HOOK_PROLOGUE(real.cuMemGetInfo);
  CUresult rc = real.cuMemGetInfo(freeBytes, totalBytes);
  if (rc == CUDA_SUCCESS && (rc = cap_current_device(&dev)) == CUDA_SUCCESS) {
    uint64_t f = *freeBytes, t = *totalBytes;
    pending_poll(dev);
    /* The device's size comes from the 64-bit query, never from this clamped one. */
    cap_view(dev, pool_idle_bytes(dev), 0, &f, &t);
    *freeBytes = f > UINT_MAX ? UINT_MAX : (unsigned int)f;
    *totalBytes = t > UINT_MAX ? UINT_MAX : (unsigned int)t;
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  HOOK_PROLOGUE(real.cuDeviceTotalMem_v2);
  CUresult rc = real.cuDeviceTotalMem_v2(bytes, dev);
  if (rc == CUDA_SUCCESS && dev >= 0 && dev < GPUCAP_MAX_DEVICES) {
    uint64_t limit = cap_limit(dev, *bytes);
    if (limit < *bytes) {
      *bytes = (size_t)limit;
    }
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
  HOOK_PROLOGUE(real.cuDeviceTotalMem);
  CUresult rc = real.cuDeviceTotalMem(bytes, dev);
  if (rc == CUDA_SUCCESS && dev >= 0 && dev < GPUCAP_MAX_DEVICES) {
    uint64_t limit = cap_limit(dev, 0);
    if (limit < *bytes) {
      *bytes = (unsigned int)limit;
    }
  }
  return rc;
}

/* The driver's pitched allocation through the v2 or the legacy 32-bit entry point, with the
 * program's own pointers (so bad ones get the driver's answer); the block and pitch it wrote. */
static CUresult pitch_call(bool legacy, void *dptr, void *pitch, size_t width, size_t height,
                           unsigned int elem, uint64_t *ptr, uint64_t *row) {
  CUresult rc;
  if (legacy) {
    rc = real.cuMemAllocPitch(dptr, pitch, (unsigned int)width, (unsigned int)height, elem);
    if (rc == CUDA_SUCCESS) {
      *ptr = *(CUdeviceptr_v1 *)dptr;
      *row = *(unsigned int *)pitch;
    }
  } else {
    rc = real.cuMemAllocPitch_v2(dptr, pitch, width, height, elem);
    if (rc == CUDA_SUCCESS) {
      *ptr = *(CUdeviceptr *)dptr;
      *row = *(size_t *)pitch;
    }
  }
  return rc;
}

static void pitch_clear(bool legacy, void *dptr) {
  if (legacy) {
    *(CUdeviceptr_v1 *)dptr = 0;
  } else {
    *(CUdeviceptr *)dptr = 0;
  }
}

/* The device's pitch alignment (CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT), cached; 1 when the
 * driver does not say (a lower bound must stay a lower bound). */
static uint64_t pitch_alignment(int dev) {
  static _Atomic uint32_t cache[GPUCAP_MAX_DEVICES];
  uint32_t a = atomic_load_explicit(&cache[dev], memory_order_relaxed);
  if (a == 0) {
    int v = 0;
    bool ok =
        real.cuDeviceGetAttribute &&
        real.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, dev) == CUDA_SUCCESS &&
        v > 0;
    a = ok ? (uint32_t)v : 1;
    atomic_store_explicit(&cache[dev], a, memory_order_relaxed);
  }
  return a;
}

/* A pass-through pitched allocation (GPUCAP_POOL=off, or the legacy ABI). Only the driver knows
 * the pitch, so the lower bound width rounded up to the device's pitch alignment, times the
 * height, is admitted before the driver is asked (an over-cap request never reaches it), then
 * the charge is settled to the driver's pitch x height. */
static CUresult pitch_passthrough(bool legacy, void *dptr, void *pitch, size_t width, size_t height,
                                  unsigned int elem) {
  int dev;
  CUresult rc;
  uint64_t ptr = 0, row = 0;
  bool args_ok = dptr && pitch && width > 0 && height > 0 && (elem == 4 || elem == 8 || elem == 16);
  if (!mem_prepare(args_ok, &dev, &rc)) {
    return rc == CUDA_SUCCESS ? pitch_call(legacy, dptr, pitch, width, height, elem, &ptr, &row)
                              : rc;
  }
  if (dev < 0) {
    return mem_refuse(dev, 0);
  }
  uint64_t align = pitch_alignment(dev);
  uint64_t lower = (width + align - 1) / align * align;
  bool huge = lower < width || lower > 2147483647u || height > UINT64_MAX / lower;
  lower = huge ? 0 : lower * height; /* past the device's maximum pitch: the driver refuses */
  if (!huge && !mem_admit(dev, lower)) {
    return mem_refuse(dev, lower);
  }
  rc = pitch_call(legacy, dptr, pitch, width, height, elem, &ptr, &row);
  if (rc != CUDA_SUCCESS) {
    cap_credit(dev, lower);
    return rc;
  }
  mem_free_fn driver_free = legacy ? free_v1 : free_v2;
  uint64_t exact = row * height;
  if (!mem_recharge(dev, lower, exact)) {
    driver_free(ptr, NULL);
    pitch_clear(legacy, dptr);
    return mem_refuse(dev, exact);
  }
  rc = mem_track(ptr, dev, exact, MEM_CONTEXT, driver_free, NULL);
  if (rc != CUDA_SUCCESS) {
    pitch_clear(legacy, dptr);
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                          size_t Height, unsigned int ElementSizeBytes) {
  HOOK_PROLOGUE(real.cuMemAllocPitch_v2);
  if (pool_enabled()) {
    return pool_alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  }
  return pitch_passthrough(false, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
}

GPUCAP_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                       unsigned int WidthInBytes, unsigned int Height,
                                       unsigned int ElementSizeBytes) {
  HOOK_PROLOGUE(real.cuMemAllocPitch);
  return pitch_passthrough(true, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
}

void memory_each_passthrough(void (*fn)(void *arg, int dev, const bfc_stats_t *stats), void *arg) {
  for (int dev = 0; dev < GPUCAP_MAX_DEVICES; dev++) {
    struct passthru *c = &passthru[dev];
    bfc_stats_t s = {0};
    s.num_allocs = atomic_load(&c->allocs);
    if (s.num_allocs == 0 && atomic_load(&c->ooms) == 0) {
      continue;
    }
    s.bytes_in_use = s.bytes_requested_in_use = atomic_load(&c->in_use);
    s.peak_bytes_in_use = s.peak_bytes_requested_in_use = atomic_load(&c->peak);
    s.largest_alloc_size = atomic_load(&c->largest);
    s.driver_alloc_calls = s.num_allocs;
    s.driver_free_calls = atomic_load(&c->frees);
    s.num_ooms = atomic_load(&c->ooms);
    s.num_in_use = s.num_allocs - s.driver_free_calls;
    s.bytes_limit = cap_limit(dev, 0) == CAP_NONE ? 0 : cap_limit(dev, 0);
    fn(arg, dev, &s);
  }
}

void memory_fork_child(void) {
  charges_fork_child(&live);
  for (int dev = 0; dev < GPUCAP_MAX_DEVICES; dev++) {
    struct passthru *c = &passthru[dev];
    atomic_store(&c->allocs, 0);
    atomic_store(&c->frees, 0);
    atomic_store(&c->ooms, 0);
    atomic_store(&c->in_use, 0);
    atomic_store(&c->peak, 0);
    atomic_store(&c->largest, 0);
  }
}
