/* The device-memory hooks: allocation, free, get-info, total-mem and pitch, in every ABI the
 * driver resolves them to. cuMemAlloc_v2 and cuMemAllocPitch_v2 are served from the context's
 * pool (shim/context/ctx.h) unless GPUCAP_POOL=off. Otherwise, and for the legacy 32-bit ABIs,
 * allocation is pass-through with the cap enforced before the driver is asked (pitch: right
 * after, since only the driver knows the pitch), and each live block remembered with its
 * device and charge (shim/pool/passthru.h) so a free credits exactly what was charged.
 * No lock of its own.
 */
#include "shim/accounting/cap.h"
#include "shim/context/ctx.h"
#include "shim/entry/prologue.h"
#include "shim/entry/ipc.h"
#include "shim/accounting/ledger.h"
#include "shim/base/log.h"
#include "shim/pool/ordered.h"
#include "shim/accounting/overhead.h"
#include "shim/pool/passthru.h"
#include "shim/pool/pending.h"
#include "shim/base/real.h"
#include "shim/accounting/spill.h"
#include "shim/accounting/trace.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

static CUresult free_v2(uint64_t ptr, void *arg) {
  (void)arg;
  return real.cuMemFree_v2(ptr);
}

static CUresult free_v1(uint64_t ptr, void *arg) {
  (void)arg;
  return real.cuMemFree((CUdeviceptr_v1)ptr);
}

/* A request of `bytes` on dev that the cap refused: spilled to host memory when GPUCAP_SPILL says
 * so (docs/design.md, "Beyond the card"), else refused. */
static CUresult beyond_cap(CUdeviceptr *dptr, int dev, uint64_t bytes) {
  bool full = false;
  int lib = ledger_caller();
  if (dev < 0 || !spill_devices(dev)) {
    return passthru_refuse_as(dev, bytes, lib);
  }
  CUresult rc = passthru_spill(dptr, dev, bytes, CU_MEM_ATTACH_GLOBAL, lib, &full);
  return full ? passthru_refuse_spill(dev, bytes, lib) : rc;
}

GPUCAP_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  LEDGER_ENTER();
  int dev;
  HOOK_PROLOGUE(real.cuMemAlloc_v2);
  if (dptr && bytesize > 0 && ctx_pooling()) {
    return ctx_alloc(dptr, bytesize);
  }
  CUresult drc;
  if (!passthru_prepare(dptr && bytesize > 0, &dev, &drc)) {
    return drc == CUDA_SUCCESS ? real.cuMemAlloc_v2(dptr, bytesize) : drc;
  }
  if (!ctx_admit(dev, bytesize)) {
    return beyond_cap(dptr, dev, bytesize);
  }
  CUresult rc = real.cuMemAlloc_v2(dptr, bytesize);
  if (ctx_retry(dev, rc)) {
    rc = real.cuMemAlloc_v2(dptr, bytesize);
  }
  return passthru_settle(rc, rc == CUDA_SUCCESS ? *dptr : 0, dev, bytesize, PASSTHRU_CONTEXT,
                         free_v2, NULL);
}

GPUCAP_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize) {
  LEDGER_ENTER();
  int dev;
  HOOK_PROLOGUE(real.cuMemAlloc);
  CUresult drc;
  if (!passthru_prepare(dptr && bytesize > 0, &dev, &drc)) {
    return drc == CUDA_SUCCESS ? real.cuMemAlloc(dptr, bytesize) : drc;
  }
  if (!ctx_admit(dev, bytesize)) {
    return passthru_refuse(dev, bytesize);
  }
  CUresult rc = real.cuMemAlloc(dptr, bytesize);
  if (ctx_retry(dev, rc)) {
    rc = real.cuMemAlloc(dptr, bytesize);
  }
  return passthru_settle(rc, rc == CUDA_SUCCESS ? *dptr : 0, dev, bytesize, PASSTHRU_CONTEXT,
                         free_v1, NULL);
}

GPUCAP_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  CUresult rc;
  HOOK_PROLOGUE(real.cuMemFree_v2);
  if (dptr && ctx_free(dptr, true, ipc_forget_block, &rc)) {
    return rc;
  }
  return passthru_untrack_free(dptr, free_v2, NULL, NULL);
}

GPUCAP_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr) {
  HOOK_PROLOGUE(real.cuMemFree);
  return passthru_untrack_free(dptr, free_v1, NULL, NULL);
}

/* A program looking at free memory: the current device's pools give back what has been idle
 * for GPUCAP_RELEASE_AFTER first. */
static void release_idle(void) {
  int dev;
  if (ctx_pooling() && cap_current_device(&dev) == CUDA_SUCCESS) {
    ctx_release_idle(dev);
  }
}

GPUCAP_EXPORT CUresult cuMemGetInfo_v2(size_t *freeBytes, size_t *totalBytes) {
  int dev;
  HOOK_PROLOGUE(real.cuMemGetInfo_v2);
  release_idle();
  CUresult rc = real.cuMemGetInfo_v2(freeBytes, totalBytes);
  if (rc == CUDA_SUCCESS && (rc = cap_current_device(&dev)) == CUDA_SUCCESS) {
    uint64_t f = *freeBytes, t = *totalBytes;
    pending_poll(dev);
    ordered_refresh(dev);
    overhead_measure(dev); /* the room really left: the driver's memory as it is now */
    cap_view(dev, ctx_idle_bytes(dev), t, &f, &t);
    *freeBytes = (size_t)f;
    *totalBytes = (size_t)t;
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuMemGetInfo(unsigned int *freeBytes, unsigned int *totalBytes) {
  int dev;
  HOOK_PROLOGUE(real.cuMemGetInfo);
  release_idle();
  CUresult rc = real.cuMemGetInfo(freeBytes, totalBytes);
  if (rc == CUDA_SUCCESS && (rc = cap_current_device(&dev)) == CUDA_SUCCESS) {
    uint64_t f = *freeBytes, t = *totalBytes;
    pending_poll(dev);
    ordered_refresh(dev);
    overhead_measure(dev);
    /* The device's size comes from the 64-bit query, never from this clamped one. */
    cap_view(dev, ctx_idle_bytes(dev), 0, &f, &t);
    *freeBytes = f > UINT_MAX ? UINT_MAX : (unsigned int)f;
    *totalBytes = t > UINT_MAX ? UINT_MAX : (unsigned int)t;
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  HOOK_PROLOGUE(real.cuDeviceTotalMem_v2);
  CUresult rc = real.cuDeviceTotalMem_v2(bytes, dev);
  if (rc == CUDA_SUCCESS && dev >= 0 && dev < GPUCAP_MAX_DEVICES) {
    cap_bind(dev, *bytes);
    uint64_t limit = cap_limit(dev);
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
    cap_bind(dev, 0);
    uint64_t limit = cap_limit(dev);
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
  if (!passthru_prepare(args_ok, &dev, &rc)) {
    return rc == CUDA_SUCCESS ? pitch_call(legacy, dptr, pitch, width, height, elem, &ptr, &row)
                              : rc;
  }
  if (dev < 0) {
    return passthru_refuse(dev, 0);
  }
  uint64_t align = pitch_alignment(dev);
  uint64_t aligned = (width + align - 1) / align * align;
  bool huge = aligned < width || aligned > 2147483647u || height > UINT64_MAX / aligned;
  uint64_t lower = huge ? 0 : aligned * height; /* past the maximum pitch: the driver refuses */
  if (!huge && !ctx_admit(dev, lower)) {
    if (legacy) {
      return passthru_refuse(dev, lower); /* a 32-bit pointer cannot hold managed memory */
    }
    CUresult s = beyond_cap((CUdeviceptr *)dptr, dev, lower); /* with the driver's pitch */
    if (s == CUDA_SUCCESS) {
      *(size_t *)pitch = (size_t)aligned;
    }
    return s;
  }
  rc = pitch_call(legacy, dptr, pitch, width, height, elem, &ptr, &row);
  if (ctx_retry(dev, rc)) {
    rc = pitch_call(legacy, dptr, pitch, width, height, elem, &ptr, &row);
  }
  if (rc != CUDA_SUCCESS) {
    cap_credit(dev, lower);
    return rc;
  }
  passthru_free_fn driver_free = legacy ? free_v1 : free_v2;
  uint64_t exact = row * height;
  if (!ctx_recharge(dev, lower, exact)) {
    driver_free(ptr, NULL);
    pitch_clear(legacy, dptr);
    return passthru_refuse(dev, exact);
  }
  rc = passthru_track(ptr, dev, exact, PASSTHRU_CONTEXT, driver_free, NULL);
  if (rc != CUDA_SUCCESS) {
    pitch_clear(legacy, dptr);
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                          size_t Height, unsigned int ElementSizeBytes) {
  LEDGER_ENTER();
  HOOK_PROLOGUE(real.cuMemAllocPitch_v2);
  if (ctx_pooling()) {
    return ctx_alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  }
  return pitch_passthrough(false, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
}

GPUCAP_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                       unsigned int WidthInBytes, unsigned int Height,
                                       unsigned int ElementSizeBytes) {
  LEDGER_ENTER();
  HOOK_PROLOGUE(real.cuMemAllocPitch);
  return pitch_passthrough(true, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
}
