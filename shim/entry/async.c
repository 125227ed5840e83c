/* Stream-ordered allocation: cuMemAllocAsync, cuMemAllocFromPoolAsync and cuMemFreeAsync, each
 * with its per-thread-stream (_ptsz) variant, and cuMemPoolCreate / cuMemPoolDestroy. These stay
 * with the driver's own stream-ordered pools (which already give stream-ordered reuse: at once
 * on the freeing stream, on other streams after the free completes). Each pool is charged as a
 * whole for what it holds (shim/pool/ordered.h): an allocation admits what the pool may have to
 * grow by before the driver is asked, on the device the memory comes from (the pool's; for
 * cuMemAllocAsync the current pool of the stream's device, never the current context's, which
 * may be another device's or none at all), and the pool's charge is read back after it. The
 * memory belongs to no context: only a reset of its device's primary context frees it. A pool
 * gpucap cannot place is charged block by block, each charge kept until the stream reaches the
 * free (shim/pool/pending.h). A cuMemFreeAsync of a block from gpucap's own pool is a deferred pool
 * free, reused only after the device has synchronised. On a stream being captured both become
 * graph nodes and go to the driver as they are: graph memory is charged when a launch maps it
 * (shim/entry/graph.h). No lock of its own.
 */
#include "shim/accounting/cap.h"
#include "shim/context/ctx.h"
#include "shim/context/capture.h"
#include "shim/entry/prologue.h"
#include "shim/entry/ipc.h"
#include "shim/base/log.h"
#include "shim/pool/ordered.h"
#include "shim/pool/passthru.h"
#include "shim/pool/pending.h"
#include "shim/base/real.h"
#include "shim/accounting/trace.h"

/* The device of a context, without making it current where the driver can say. */
static CUresult context_device(CUcontext ctx, int *dev) {
  CUdevice d = 0;
  CUresult rc = real.cuCtxGetDevice_v2 ? real.cuCtxGetDevice_v2(&d, ctx) : CUDA_ERROR_NOT_FOUND;
  if (rc != CUDA_SUCCESS) {
    CUcontext mine = NULL, popped;
    if ((rc = real.cuCtxGetCurrent(&mine)) != CUDA_SUCCESS ||
        (rc = real.cuCtxPushCurrent_v2(ctx)) != CUDA_SUCCESS) {
      return rc;
    }
    rc = real.cuCtxGetDevice(&d);
    if (real.cuCtxPopCurrent_v2(&popped) != CUDA_SUCCESS) {
      real.cuCtxSetCurrent(mine); /* never leave the program in another context */
    }
  }
  if (rc == CUDA_SUCCESS) {
    *dev = d >= 0 && d < GPUCAP_MAX_DEVICES ? d : -1;
  }
  return rc;
}

/* The device of a stream: the current context's for the default streams. */
static CUresult stream_device(CUstream stream, int *dev) {
  CUcontext ctx = NULL;
  if (!stream || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) {
    return passthru_current_device(dev);
  }
  CUresult rc = real.cuStreamGetCtx ? real.cuStreamGetCtx(stream, &ctx) : CUDA_ERROR_NOT_SUPPORTED;
  return rc == CUDA_SUCCESS ? context_device(ctx, dev) : rc;
}

/* How one of the four allocation entry points reaches the driver. */
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

/* How a free of a stream-ordered block reaches the driver (arg: struct on). */
struct on {
  CUstream stream;
  bool ptsz;
};

static CUresult free_async(uint64_t ptr, void *arg) {
  const struct on *o = arg;
  if (o->ptsz) {
    return real.cuMemFreeAsync_ptsz ? real.cuMemFreeAsync_ptsz(ptr, o->stream)
                                    : CUDA_ERROR_NOT_SUPPORTED;
  }
  return real.cuMemFreeAsync ? real.cuMemFreeAsync(ptr, o->stream) : CUDA_ERROR_NOT_SUPPORTED;
}

/* A freed block's charge stays until the stream reaches the free. A block of a pool charged as
 * a whole has none, but its free is tracked all the same: once the stream reaches it, the
 * memory is the pool's to give back (ordered_relieve trims it after pending_wait). */
static void after_free(const charge_t *e, void *arg) {
  const struct on *o = arg;
  pending_add(e->dev, passthru_charge_of(e), e->kind != PASSTHRU_CONTEXT, o->stream, o->ptsz);
}

/* Gives back a block the driver just handed out that gpucap cannot keep, and waits for the
 * stream to free it. */
static void drop_block(uint64_t ptr, struct on *o) {
  if (free_async(ptr, o) == CUDA_SUCCESS) {
    real.cuStreamSynchronize(o->ptsz && !o->stream ? CU_STREAM_PER_THREAD : o->stream);
  }
}

/* The device a block lies on, from the driver (for a pool gpucap could not place). */
static CUresult free_and_wait(uint64_t ptr, void *arg) {
  drop_block(ptr, arg);
  return CUDA_SUCCESS;
}

static int block_device(uint64_t ptr) {
  int ordinal = -1;
  if (!real.cuPointerGetAttribute ||
      real.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) !=
          CUDA_SUCCESS ||
      ordinal < 0 || ordinal >= GPUCAP_MAX_DEVICES) {
    return -1;
  }
  return ordinal;
}

/* whole_pool's answer when the pool was destroyed while its hold was let go: look again. */
#define LOOK_AGAIN ((CUresult)-1)

/* An allocation from a pool gpucap charges as a whole (shim/pool/ordered.h), on device dev. Held
 * from the admission's last step to the read of what the pool holds after the driver's answer,
 * so that no other allocation grows the pool meanwhile: what it holds unused can serve this one
 * without growth, so only the rest is admitted; relieving memory (which reads every pool) is
 * done with the hold let go. */
static CUresult whole_pool(enum which w, CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                           CUstream stream, CUmemoryPool whole, int dev, ordered_pool_t *p) {
  struct on o = {.stream = stream, .ptsz = w == ASYNC_PTSZ || w == FROM_POOL_PTSZ};
  uint64_t spare = ordered_spare(p), admitted = bytes > spare ? bytes - spare : 0;
  if (admitted > 0 && !cap_charge(dev, admitted)) {
    ordered_drop(p);
    if (!ctx_admit(dev, bytes)) { /* after relieving: the spare memory may be gone */
      return passthru_refuse(dev, bytes);
    }
    admitted = bytes;
    if (!(p = ordered_hold(whole, dev))) {
      cap_credit(dev, admitted);
      return LOOK_AGAIN;
    }
  }
  CUresult rc = call(w, dptr, bytes, pool, stream);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
    /* The device refused: give idle memory back (the hold let go) and ask once more. */
    ordered_drop(p);
    bool retry = ctx_retry(dev, rc);
    if (!(p = ordered_hold(whole, dev))) {
      cap_credit(dev, admitted);
      return retry ? LOOK_AGAIN : rc;
    }
    if (retry) {
      rc = call(w, dptr, bytes, pool, stream);
    }
  }
  if (!ordered_settle(p, admitted) && rc == CUDA_SUCCESS) {
    /* The pool grew past the cap: the driver's rounding was more than was admitted. */
    drop_block(*dptr, &o);
    ordered_relieve(dev);
    *dptr = 0;
    return passthru_refuse(dev, bytes);
  }
  if (rc == CUDA_SUCCESS &&
      (rc = passthru_track_in_pool(*dptr, dev, bytes, whole, free_and_wait, &o)) != CUDA_SUCCESS) {
    ordered_refresh(dev); /* the block was given back */
    *dptr = 0;
  }
  return rc;
}

static CUresult alloc_on(enum which w, CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                         CUstream stream) {
  struct on o = {.stream = stream, .ptsz = w == ASYNC_PTSZ || w == FROM_POOL_PTSZ};
  HOOK_PROLOGUE(true);
  bool from_pool = w == FROM_POOL || w == FROM_POOL_PTSZ;
  int dev = from_pool && pool ? ordered_device(pool) : ORDERED_UNKNOWN;
  if (dev == ORDERED_HOST || !dptr || bytes == 0) {
    return call(w, dptr, bytes, pool, stream); /* host memory, or the driver's own error */
  }
  if (capture_stream(stream, o.ptsz)) {
    return call(w, dptr, bytes, pool, stream); /* a graph's allocation node (shim/entry/graph.h) */
  }
  /* sure: dev is the device the driver will take the memory from. Otherwise the stream's device
   * is charged meanwhile (none when the driver does not describe the stream: it will refuse
   * it) and the block, if any, tells. */
  bool sure = dev != ORDERED_UNKNOWN;
  if (!sure) {
    CUresult q = stream_device(stream, &dev);
    if (q != CUDA_SUCCESS && !cap_no_context(q) && q != CUDA_ERROR_INVALID_HANDLE) {
      return q; /* never allocate what cannot be attributed */
    }
    if (q != CUDA_SUCCESS) {
      dev = ORDERED_UNKNOWN;
    } else if (dev < 0) {
      return passthru_refuse(dev, bytes); /* a device beyond what gpucap can cap */
    } else {
      sure = !from_pool;
    }
  }
  /* The pool this allocation may grow, when gpucap charges it as a whole. */
  for (;;) {
    CUmemoryPool whole = !sure ? NULL : from_pool ? pool : ordered_current(dev);
    ordered_pool_t *held = whole ? ordered_hold(whole, dev) : NULL;
    CUresult rc = held ? whole_pool(w, dptr, bytes, pool, stream, whole, dev, held) : LOOK_AGAIN;
    if (!held) {
      break;
    }
    if (rc != LOOK_AGAIN) {
      return rc;
    }
  }
  if (dev >= 0 && !ctx_admit(dev, bytes)) {
    return passthru_refuse(dev, bytes);
  }
  CUresult rc = call(w, dptr, bytes, pool, stream);
  if (ctx_retry(dev, rc)) { /* the device refused: idle memory came back, ask once more */
    rc = call(w, dptr, bytes, pool, stream);
  }
  if (rc != CUDA_SUCCESS) {
    if (dev >= 0) {
      cap_credit(dev, bytes);
    }
    return rc;
  }
  int on = sure ? dev : block_device(*dptr);
  if (on != dev) {
    /* The charge moves to the device the block is on. */
    bool kept = on >= 0 && ctx_admit(on, bytes);
    if (dev >= 0) {
      cap_credit(dev, bytes);
    }
    if (!kept) {
      drop_block(*dptr, &o);
      *dptr = 0;
      return passthru_refuse(on, bytes);
    }
    if (from_pool && pool) {
      log_msg(LOG_DEBUG, "stream-ordered pool %p is on device %d", (void *)pool, on);
      ordered_learn(pool, on);
    }
  }
  rc = passthru_track(*dptr, on, bytes, PASSTHRU_ORDERED, free_and_wait, &o);
  if (rc != CUDA_SUCCESS) {
    *dptr = 0;
  }
  return rc;
}

static CUresult free_async_on(CUdeviceptr dptr, CUstream stream, bool ptsz) {
  CUresult rc;
  struct on o = {.stream = stream, .ptsz = ptsz};
  HOOK_PROLOGUE(true);
  if (capture_stream(stream, ptsz)) {
    /* A graph's free node: nothing is freed now. A block gpucap charged stays charged until
     * the driver hands its address out again (passthru_track). */
    return free_async(dptr, &o);
  }
  if (dptr && ctx_block(dptr, &(uint64_t){0}, &(uint64_t){0}) != CTX_OUTSIDE) {
    /* A pooled block: the stream must be one the driver would accept (its error, and the
     * block kept, otherwise). The special handles need no check. */
    CUcontext owner;
    bool special = !stream || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
    if (!special && (rc = real.cuStreamGetCtx(stream, &owner)) != CUDA_SUCCESS) {
      return rc;
    }
    if (ctx_free(dptr, special, ipc_forget_block,
                 &rc)) { /* a default stream needs a current context */
      return rc;
    }
  }
  return passthru_untrack_free(dptr, free_async, &o, after_free);
}

/* The stream as the trace records it: the per-thread default stream of a _ptsz call is 0x2
 * (CU_STREAM_PER_THREAD), as RMM's replay reads it. */
static uint64_t stream_id(CUstream stream, bool ptsz) {
  return ptsz && !stream ? (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD : (uint64_t)(uintptr_t)stream;
}

static CUresult alloc(enum which w, CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool,
                      CUstream stream) {
  trace_stream(stream_id(stream, w == ASYNC_PTSZ || w == FROM_POOL_PTSZ));
  CUresult rc = alloc_on(w, dptr, bytes, pool, stream);
  trace_stream(0);
  return rc;
}

static CUresult free_on(CUdeviceptr dptr, CUstream stream, bool ptsz) {
  trace_stream(stream_id(stream, ptsz));
  CUresult rc = free_async_on(dptr, stream, ptsz);
  trace_stream(0);
  return rc;
}

GPUCAP_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  LEDGER_ENTER();
  return alloc(ASYNC, dptr, bytesize, NULL, hStream);
}

GPUCAP_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  LEDGER_ENTER();
  return alloc(ASYNC_PTSZ, dptr, bytesize, NULL, hStream);
}

GPUCAP_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                               CUmemoryPool pool, CUstream hStream) {
  LEDGER_ENTER();
  return alloc(FROM_POOL, dptr, bytesize, pool, hStream);
}

GPUCAP_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                    CUmemoryPool pool, CUstream hStream) {
  LEDGER_ENTER();
  return alloc(FROM_POOL_PTSZ, dptr, bytesize, pool, hStream);
}

GPUCAP_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return free_on(dptr, hStream, false);
}

GPUCAP_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return free_on(dptr, hStream, true);
}

GPUCAP_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps) {
  HOOK_PROLOGUE(real.cuMemPoolCreate);
  CUresult rc = real.cuMemPoolCreate(pool, poolProps);
  if (rc == CUDA_SUCCESS && pool && poolProps) {
    const CUmemLocation *loc = &poolProps->location;
    if (loc->type == CU_MEM_LOCATION_TYPE_DEVICE && loc->id >= 0 && loc->id < GPUCAP_MAX_DEVICES) {
      ordered_learn(*pool, loc->id);
    } else if (loc->type == CU_MEM_LOCATION_TYPE_HOST ||
               loc->type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
               loc->type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) {
      ordered_learn(*pool, ORDERED_HOST);
    }
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  HOOK_PROLOGUE(real.cuMemPoolDestroy);
  CUresult rc = real.cuMemPoolDestroy(pool);
  if (rc == CUDA_SUCCESS) {
    /* The driver released what the pool held unused; its live blocks stay until freed. */
    passthru_pool_gone(pool);
    ordered_forget(pool);
  }
  return rc;
}
