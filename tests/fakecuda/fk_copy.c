/* Copies and memsets: validation (bounds against allocations), the choice between executing
 * now and enqueueing pending work, and the data effect executed when the work completes.
 *
 * Host synchronisation follows CUDA's "API synchronization behavior" notes:
 *  - synchronous copies wait for the stream (legacy default, or per-thread for _ptds) and copy
 *    at once, except device-to-device copies, which are enqueued and do not block the host;
 *  - synchronous memsets of device memory are enqueued too; of pinned or managed memory they
 *    complete at once;
 *  - asynchronous copies are enqueued; from pageable memory the source is staged (copied) at
 *    the call, to pageable memory the copy is synchronous;
 *  - asynchronous memsets are enqueued.
 * A pending item reads and writes memory only when it completes, so reusing a buffer before
 * synchronising corrupts data exactly as on a GPU.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/fakecuda/fk.h"

int fk_mem_host_visible(int where) {
  return where != FK_AT_DEVICE || fk.cfg.backing;
}

CUresult fk_mem_check(uintptr_t p, size_t n, int dev, int allow_pageable, int write, int *where,
                      unsigned long long *alloc_id) {
  if (p == 0 || p + n < p) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct fk_alloc *a = fk_mem_find(p);
  if (a != NULL) {
    if (a->freeing) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (a->kind == FK_K_RESERVE) {
      if (!fk_vmm_covered(a, p, n, dev, write)) {
        return CUDA_ERROR_INVALID_VALUE; /* unmapped, or no cuMemSetAccess for this device */
      }
    } else if (p + n > a->base + a->size) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *where = a->kind == FK_K_HOST      ? FK_AT_PINNED
             : a->kind == FK_K_MANAGED ? FK_AT_MANAGED
                                       : FK_AT_DEVICE;
    *alloc_id = a->id;
    return CUDA_SUCCESS;
  }
  if (fk_mem_in_reservation(p) || fk_mem_in_reservation(p + n - 1) || !allow_pageable) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *where = FK_AT_PAGEABLE;
  *alloc_id = 0;
  return CUDA_SUCCESS;
}

/* Whether a range recorded at enqueue time can still be touched; flags stale work. Freeing
 * allocations are still there: their stream-ordered free has not executed yet. */
static int still_there(const struct fk_range *r, int dev, int write, int *stale, int *visible) {
  if (r->alloc_id == 0) {
    *visible = 1; /* pageable: only ever touched synchronously */
    return 1;
  }
  struct fk_alloc *a = fk_mem_find(r->addr);
  if (a == NULL) {
    *stale = 1;
    return 0;
  }
  if (a->id != r->alloc_id) {
    *stale = 1; /* freed and reallocated: the write lands in the new owner's memory */
  }
  int ok = a->kind == FK_K_RESERVE ? fk_vmm_covered(a, r->addr, r->n, dev, write)
                                   : r->addr + r->n <= a->base + a->size;
  *visible = fk_mem_host_visible(a->kind == FK_K_HOST || a->kind == FK_K_MANAGED ? FK_AT_PINNED
                                                                                 : FK_AT_DEVICE);
  return ok;
}

void fk_mem_effect(struct fk_work *w) {
  int stale = 0, dst_vis = 0, src_vis = 1;
  int ok = still_there(&w->dst, w->dev, 1, &stale, &dst_vis);
  if (w->kind == FK_W_COPY && w->src.n != 0) {
    ok &= still_there(&w->src, w->dev, 0, &stale, &src_vis);
  }
  if (stale) {
    fk.stale_work++;
  }
  if (!ok || !dst_vis) {
    return;
  }
  void *dst = (void *)w->dst.addr;
  if (w->kind == FK_W_COPY) {
    const void *src = w->staging != NULL ? w->staging : src_vis ? (const void *)w->src.addr : NULL;
    if (src != NULL) {
      memmove(dst, src, w->count);
    }
    return;
  }
  switch (w->elem) {
  case 1:
    memset(dst, (int)(w->value & 0xff), w->count);
    break;
  case 2:
    for (size_t i = 0; i < w->count; i++) {
      uint16_t v = (uint16_t)w->value;
      memcpy((char *)dst + 2 * i, &v, 2);
    }
    break;
  default:
    for (size_t i = 0; i < w->count; i++) {
      uint32_t v = w->value;
      memcpy((char *)dst + 4 * i, &v, 4);
    }
    break;
  }
}

/* The stream an operation runs on: for synchronous calls the current context's legacy (or,
 * _ptds, per-thread) stream; for asynchronous ones the resolved handle. */
static CUresult op_stream(int async, CUstream h, int pt, struct CUstream_st **s) {
  if (async) {
    return fk_stream_resolve(h, pt, s);
  }
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc == CUDA_SUCCESS) {
    rc = fk_capture_unsafe(); /* a synchronous copy or memset waits for the device */
  }
  if (rc == CUDA_SUCCESS) {
    *s = pt ? fk_stream_thread(c) : c->legacy;
  }
  return rc;
}

static CUresult check_range(uintptr_t p, size_t n, int dev, int allow_pageable, int write,
                            struct fk_range *r) {
  r->addr = p;
  r->n = n;
  return fk_mem_check(p, n, dev, allow_pageable, write, &r->where, &r->alloc_id);
}

static void run_now(struct CUstream_st *s, struct fk_work *w) {
  fk_stream_reach(s, fk.seq);
  fk_mem_effect(w);
}

static void enqueue_copy(struct CUstream_st *s, const struct fk_work *w) {
  struct fk_work *item = fk_work_new(FK_W_COPY);
  *item = *w;
  item->next = NULL;
  if (w->src.where == FK_AT_PAGEABLE) {
    /* Pageable source: the driver stages it before returning, so the caller may reuse it. */
    item->src.n = 0;
    if (fk_mem_host_visible(w->dst.where)) {
      item->staging = malloc(w->count);
      if (item->staging == NULL) {
        fk_log("error: out of host memory");
        abort();
      }
      memcpy(item->staging, (const void *)w->src.addr, w->count);
    }
  }
  fk_work_enqueue(s, item);
}

/* dst_host / src_host: the operand may be plain (pageable) host memory. */
static CUresult copy(uintptr_t dst, int dst_host, uintptr_t src, int src_host, size_t n, int async,
                     CUstream h, int pt) {
  struct CUstream_st *s;
  CUresult rc = op_stream(async, h, pt, &s);
  if (rc != CUDA_SUCCESS || n == 0) {
    return rc;
  }
  struct fk_work w = {.kind = FK_W_COPY, .dev = s->ctx->dev, .count = n};
  rc = check_range(dst, n, w.dev, dst_host, 1, &w.dst);
  if (rc == CUDA_SUCCESS) {
    rc = check_range(src, n, w.dev, src_host, 0, &w.src);
  }
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  int device_to_device = w.dst.where == FK_AT_DEVICE && w.src.where == FK_AT_DEVICE;
  int now = async ? w.dst.where == FK_AT_PAGEABLE : !device_to_device;
  if (now) {
    run_now(s, &w);
  } else {
    enqueue_copy(s, &w);
  }
  return CUDA_SUCCESS;
}

static CUresult set(uintptr_t dst, unsigned value, unsigned elem, size_t count, int async,
                    CUstream h, int pt) {
  struct CUstream_st *s;
  CUresult rc = op_stream(async, h, pt, &s);
  if (rc != CUDA_SUCCESS || count == 0) {
    return rc;
  }
  if (dst % elem != 0 || count > SIZE_MAX / elem) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct fk_work w = {
      .kind = FK_W_SET, .dev = s->ctx->dev, .value = value, .elem = elem, .count = count};
  rc = check_range(dst, count * elem, w.dev, 0, 1, &w.dst);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (!async && w.dst.where != FK_AT_DEVICE) {
    run_now(s, &w);
  } else {
    struct fk_work *item = fk_work_new(FK_W_SET);
    *item = w;
    item->next = NULL;
    fk_work_enqueue(s, item);
  }
  return CUDA_SUCCESS;
}

#define P(x) ((uintptr_t)(x))

/* Unified copies. */
FK_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  FK_BODY(FK_NEED_INIT, copy(P(dst), 1, P(src), 1, ByteCount, 0, NULL, 0));
}
FK_API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  FK_BODY(FK_NEED_INIT, copy(P(dst), 1, P(src), 1, ByteCount, 0, NULL, 1));
}
FK_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                              CUstream hStream) {
  FK_BODY(FK_NEED_INIT, copy(P(dst), 1, P(src), 1, ByteCount, 1, hStream, 0));
}
FK_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                   CUstream hStream) {
  FK_BODY(FK_NEED_INIT, copy(P(dst), 1, P(src), 1, ByteCount, 1, hStream, 1));
}

/* Host to device. */
FK_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
  FK_BODY(FK_NEED_INIT, copy(P(dstDevice), 0, P(srcHost), 1, ByteCount, 0, NULL, 0));
}
FK_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount) {
  FK_BODY(FK_NEED_INIT, copy(P(dstDevice), 0, P(srcHost), 1, ByteCount, 0, NULL, 1));
}
FK_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                     CUstream hStream) {
  FK_BODY(FK_NEED_INIT, copy(P(dstDevice), 0, P(srcHost), 1, ByteCount, 1, hStream, 0));
}
FK_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                                          size_t ByteCount, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, copy(P(dstDevice), 0, P(srcHost), 1, ByteCount, 1, hStream, 1));
}

/* Device to host. */
FK_API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  FK_BODY(FK_NEED_INIT, copy(P(dstHost), 1, P(srcDevice), 0, ByteCount, 0, NULL, 0));
}
FK_API CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  FK_BODY(FK_NEED_INIT, copy(P(dstHost), 1, P(srcDevice), 0, ByteCount, 0, NULL, 1));
}
FK_API CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                     CUstream hStream) {
  FK_BODY(FK_NEED_INIT, copy(P(dstHost), 1, P(srcDevice), 0, ByteCount, 1, hStream, 0));
}
FK_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                          CUstream hStream) {
  FK_BODY(FK_NEED_INIT, copy(P(dstHost), 1, P(srcDevice), 0, ByteCount, 1, hStream, 1));
}

/* Device to device. */
FK_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
  FK_BODY(FK_NEED_INIT, copy(P(dstDevice), 0, P(srcDevice), 0, ByteCount, 0, NULL, 0));
}
FK_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                     size_t ByteCount) {
  FK_BODY(FK_NEED_INIT, copy(P(dstDevice), 0, P(srcDevice), 0, ByteCount, 0, NULL, 1));
}
FK_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                     CUstream hStream) {
  FK_BODY(FK_NEED_INIT, copy(P(dstDevice), 0, P(srcDevice), 0, ByteCount, 1, hStream, 0));
}
FK_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                          size_t ByteCount, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, copy(P(dstDevice), 0, P(srcDevice), 0, ByteCount, 1, hStream, 1));
}

/* Memsets. */
FK_API CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), uc, 1, N, 0, NULL, 0));
}
FK_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), uc, 1, N, 0, NULL, 1));
}
FK_API CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), us, 2, N, 0, NULL, 0));
}
FK_API CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), us, 2, N, 0, NULL, 1));
}
FK_API CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), ui, 4, N, 0, NULL, 0));
}
FK_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), ui, 4, N, 0, NULL, 1));
}
FK_API CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), uc, 1, N, 1, hStream, 0));
}
FK_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                     CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), uc, 1, N, 1, hStream, 1));
}
FK_API CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                 CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), us, 2, N, 1, hStream, 0));
}
FK_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                      CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), us, 2, N, 1, hStream, 1));
}
FK_API CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                 CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), ui, 4, N, 1, hStream, 0));
}
FK_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                      CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), ui, 4, N, 1, hStream, 1));
}
