/* Context creation and teardown. A context costs the device memory of its own (the driver's:
 * shim/accounting/overhead.h), measured around each creation (cuCtxCreate, a retain that activates
 * a primary context) and teardown. When the driver destroys a context it frees the context's
 * memory, so the pool gpucap kept for it is dropped and the charges of the pass-through blocks and
 * arrays made in it are returned (no driver call made for either): after cuCtxDestroy, after
 * cuDevicePrimaryCtxReset, and after the last cuDevicePrimaryCtxRelease of a device's primary
 * context. The primary context's handle and retain count come from the program's own retains
 * (shim/entry/ctxapi.h).
 */
#include "shim/entry/ctxapi.h"

#include "shim/accounting/cap.h"
#include "shim/context/ctx.h"
#include "shim/base/fork.h"
#include "shim/entry/graph.h"
#include "shim/entry/prologue.h"
#include "shim/entry/ipc.h"
#include "shim/accounting/overhead.h"
#include "shim/base/real.h"

#include <stdatomic.h>

/* Per device: the primary context's handle and the retains the program holds on it. */
static _Atomic(CUcontext) primary[GPUCAP_MAX_DEVICES];
static atomic_int retains[GPUCAP_MAX_DEVICES];

static bool dev_ok(int dev) {
  return dev >= 0 && dev < GPUCAP_MAX_DEVICES;
}

CUcontext ctxapi_primary(int dev) {
  return dev_ok(dev) ? atomic_load_explicit(&primary[dev], memory_order_acquire) : NULL;
}

/* In a fork child: no primary context is held. */
static void fork_child(void) {
  for (int d = 0; d < GPUCAP_MAX_DEVICES; d++) {
    atomic_store_explicit(&primary[d], NULL, memory_order_relaxed);
    atomic_store_explicit(&retains[d], 0, memory_order_relaxed);
  }
}
FORK_CHILD(fork_child)

/* The driver freed everything the context ctx held, and completed the work of its streams
 * (stream-ordered frees included): its exports of pooled blocks, its object and what was made
 * in it (shim/context/ctx.h), and its graphs. Stream-ordered memory belongs to no context: it
 * stays. */
static void forget(CUcontext ctx) {
  if (ctx) {
    ipc_forget_context(ctx); /* first: the pool unmaps the blocks' units */
    ctx_destroyed(ctx);
    graph_forget_context(ctx);
  }
}

/* The driver destroyed device dev's primary context ctx: with it went the device's graph memory
 * and its stream-ordered memory, whatever context it was allocated in (what the driver does on
 * a device reset). */
static void forget_primary(CUcontext ctx, int dev) {
  forget(ctx);
  graph_forget_device(ctx, dev);
  ctx_device_reset(dev);
}

/* Whether device dev's primary context is active (made); true when the driver cannot say. */
static bool primary_active(CUdevice dev) {
  unsigned int flags = 0;
  int active = 1;
  return !real.cuDevicePrimaryCtxGetState ||
         real.cuDevicePrimaryCtxGetState(dev, &flags, &active) != CUDA_SUCCESS || active;
}

GPUCAP_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  HOOK_PROLOGUE(real.cuDevicePrimaryCtxRetain);
  struct overhead_call m;
  overhead_before(&m, primary_active(dev) ? -1 : dev, false); /* a retain that makes it */
  CUresult rc = real.cuDevicePrimaryCtxRetain(pctx, dev);
  overhead_after(&m, OVERHEAD_CONTEXT, "cuDevicePrimaryCtxRetain", rc);
  if (rc == CUDA_SUCCESS && dev_ok(dev)) {
    atomic_store_explicit(&primary[dev], *pctx, memory_order_release);
    atomic_fetch_add_explicit(&retains[dev], 1, memory_order_relaxed);
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  HOOK_PROLOGUE(real.cuCtxCreate_v2);
  struct overhead_call m;
  overhead_before(&m, dev, false);
  CUresult rc = real.cuCtxCreate_v2(pctx, flags, dev);
  overhead_after(&m, OVERHEAD_CONTEXT, "cuCtxCreate", rc);
  return rc;
}

GPUCAP_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray,
                                      int numParams, unsigned int flags, CUdevice dev) {
  HOOK_PROLOGUE(real.cuCtxCreate_v3);
  struct overhead_call m;
  overhead_before(&m, dev, false);
  CUresult rc = real.cuCtxCreate_v3(pctx, paramsArray, numParams, flags, dev);
  overhead_after(&m, OVERHEAD_CONTEXT, "cuCtxCreate", rc);
  return rc;
}

GPUCAP_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                      unsigned int flags, CUdevice dev) {
  HOOK_PROLOGUE(real.cuCtxCreate_v4);
  struct overhead_call m;
  overhead_before(&m, dev, false);
  CUresult rc = real.cuCtxCreate_v4(pctx, ctxCreateParams, flags, dev);
  overhead_after(&m, OVERHEAD_CONTEXT, "cuCtxCreate", rc);
  return rc;
}

/* The device of context ctx, or -1. */
static int device_of(CUcontext ctx) {
  CUdevice d = -1;
  return ctx && real.cuCtxGetDevice_v2 && real.cuCtxGetDevice_v2(&d, ctx) == CUDA_SUCCESS ? d : -1;
}

GPUCAP_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  HOOK_PROLOGUE(real.cuCtxDestroy_v2);
  struct overhead_call m;
  overhead_before(&m, device_of(ctx), true);
  ctx_dying(ctx, true);
  CUresult rc = real.cuCtxDestroy_v2(ctx);
  if (rc == CUDA_SUCCESS) {
    forget(ctx);
  } else {
    ctx_dying(ctx, false);
  }
  overhead_after(&m, OVERHEAD_CONTEXT, "cuCtxDestroy", rc);
  return rc;
}

/* After a successful release: the context is gone when the driver says it is inactive, or,
 * when that query fails, when the program's last retain was released. (A retain gpucap did not
 * see cannot make it drop a live context: the driver's answer comes first.) */
static CUresult after_release(CUresult rc, CUdevice dev) {
  if (rc != CUDA_SUCCESS || !dev_ok(dev)) {
    ctx_dying(ctxapi_primary(dev), false);
    return rc;
  }
  int left = atomic_fetch_sub_explicit(&retains[dev], 1, memory_order_relaxed) - 1;
  if (left < 0) {
    atomic_fetch_add_explicit(&retains[dev], 1, memory_order_relaxed); /* retained unseen */
    left = 0;
  }
  unsigned int flags = 0;
  int active = 1;
  CUresult q = real.cuDevicePrimaryCtxGetState
                   ? real.cuDevicePrimaryCtxGetState(dev, &flags, &active)
                   : CUDA_ERROR_NOT_SUPPORTED;
  if (q == CUDA_SUCCESS ? !active : left == 0) {
    forget_primary(atomic_exchange_explicit(&primary[dev], NULL, memory_order_acq_rel), dev);
  } else {
    ctx_dying(ctxapi_primary(dev), false);
  }
  return rc;
}

/* Before a release that may be the last (the program holds no other retain gpucap saw): the
 * pool is left alone meanwhile, as for a destroy. */
static void release_begins(CUdevice dev) {
  if (dev_ok(dev) && atomic_load_explicit(&retains[dev], memory_order_relaxed) <= 1) {
    ctx_dying(ctxapi_primary(dev), true);
  }
}

/* After a release or reset that may have destroyed device dev's primary context: the driver's
 * memory for it measured again. */
static CUresult remeasured(struct overhead_call *m, const char *call, CUresult rc) {
  overhead_after(m, OVERHEAD_CONTEXT, call, rc);
  return rc;
}

GPUCAP_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  HOOK_PROLOGUE(real.cuDevicePrimaryCtxRelease);
  struct overhead_call m;
  overhead_before(&m, dev, true);
  release_begins(dev);
  return remeasured(&m, "cuDevicePrimaryCtxRelease",
                    after_release(real.cuDevicePrimaryCtxRelease(dev), dev));
}

GPUCAP_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  HOOK_PROLOGUE(real.cuDevicePrimaryCtxRelease_v2);
  struct overhead_call m;
  overhead_before(&m, dev, true);
  release_begins(dev);
  return remeasured(&m, "cuDevicePrimaryCtxRelease",
                    after_release(real.cuDevicePrimaryCtxRelease_v2(dev), dev));
}

/* After a successful reset: the primary context's memory is gone (its handle and the
 * program's retains stay). */
static CUresult after_reset(CUresult rc, CUdevice dev) {
  if (rc == CUDA_SUCCESS && dev_ok(dev)) {
    forget_primary(ctxapi_primary(dev), dev);
  } else {
    ctx_dying(ctxapi_primary(dev), false);
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  HOOK_PROLOGUE(real.cuDevicePrimaryCtxReset);
  struct overhead_call m;
  overhead_before(&m, dev, true);
  ctx_dying(ctxapi_primary(dev), true);
  return remeasured(&m, "cuDevicePrimaryCtxReset",
                    after_reset(real.cuDevicePrimaryCtxReset(dev), dev));
}

GPUCAP_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  HOOK_PROLOGUE(real.cuDevicePrimaryCtxReset_v2);
  struct overhead_call m;
  overhead_before(&m, dev, true);
  ctx_dying(ctxapi_primary(dev), true);
  return remeasured(&m, "cuDevicePrimaryCtxReset",
                    after_reset(real.cuDevicePrimaryCtxReset_v2(dev), dev));
}
