/* Copies and memsets (1D, 2D, 3D, to and from CUDA arrays, between devices): validation
 * (bounds against allocations), the choice between executing now and enqueueing pending work,
 * and the data effect executed when the work completes.
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
  fk_managed_access(w); /* the device reads and writes managed pages: they may migrate */
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

/* Appends w to the chain whose last link is *tail. */
static void chain_add(struct fk_work ***tail, struct fk_work *w) {
  **tail = w;
  *tail = &w->next;
}

/* ---- Shaped copies: 1D, 2D and 3D, linear memory or CUDA arrays. ----
 *
 * A copy is Depth slices of Height rows of WidthInBytes bytes. Each operand is linear memory
 * (host, device or unified addresses with a pitch and a slice height) or a CUDA array. The
 * whole copy is validated first (nothing happens when any row is invalid); then each row is one
 * work item, or one item for the whole copy when both operands are contiguous. Copies that
 * involve an array execute when called, after the work their stream holds (a legal schedule:
 * the device was quick); the fake keeps no pending work on arrays. */

struct operand {
  int array;           /* a CUDA array (view), else linear memory at addr */
  uintptr_t addr;      /* linear: the first byte, X, Y and Z applied */
  size_t pitch, slice; /* linear: bytes between rows and between slices */
  int allow_pageable;  /* linear: plain host memory is acceptable */
  struct fk_array_view view;
  size_t x, y, z; /* array: the origin, X in bytes */
};

struct shape {
  size_t width, height, depth;
};

static int contiguous(const struct operand *o, const struct shape *sh) {
  return !o->array && (sh->height == 1 || o->pitch == sh->width) &&
         (sh->depth == 1 || o->slice == sh->width * sh->height);
}

/* A copy whose two operands are contiguous is one row. */
static void flatten(const struct operand *d, const struct operand *v, struct shape *sh) {
  if (contiguous(d, sh) && contiguous(v, sh)) {
    sh->width *= sh->height * sh->depth;
    sh->height = sh->depth = 1;
  }
}

/* Row r (0 .. height x depth - 1) of an operand: its linear address, or its bytes in the array
 * (NULL without backing). */
static uintptr_t row_addr(const struct operand *o, const struct shape *sh, size_t r) {
  size_t y = r % sh->height, z = r / sh->height;
  if (o->array) {
    if (o->view.bytes == NULL) {
      return 0;
    }
    return (uintptr_t)(o->view.bytes + ((o->z + z) * o->view.height + o->y + y) * o->view.pitch +
                       o->x);
  }
  return o->addr + z * o->slice + y * o->pitch;
}

/* The operand a CUDA_MEMCPY2D/3D side describes. height is the slice height (3D only). */
static CUresult operand_of(CUmemorytype type, const void *host, CUdeviceptr dev, CUarray arr,
                           size_t x, size_t y, size_t z, size_t pitch, size_t height,
                           const struct shape *sh, struct operand *o) {
  memset(o, 0, sizeof *o);
  if (type == CU_MEMORYTYPE_ARRAY) {
    CUresult rc = fk_array_view(arr, &o->view);
    if (rc != CUDA_SUCCESS) {
      return rc;
    }
    const struct fk_array_view *v = &o->view;
    if (x % v->elem != 0 || x > v->width || sh->width > v->width - x || y > v->height ||
        sh->height > v->height - y || z > v->depth || sh->depth > v->depth - z) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    o->array = 1;
    o->x = x;
    o->y = y;
    o->z = z;
    return CUDA_SUCCESS;
  }
  uintptr_t base;
  if (type == CU_MEMORYTYPE_HOST) {
    base = (uintptr_t)host;
    o->allow_pageable = 1;
  } else if (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED) {
    base = (uintptr_t)dev;
    o->allow_pageable = type == CU_MEMORYTYPE_UNIFIED;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  /* cuda.h: pitch >= WidthInBytes + X, slice height >= Height + Y, pitch <= MAX_PITCH. */
  if ((sh->height > 1 || sh->depth > 1) && (pitch < x || pitch - x < sh->width)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (sh->depth > 1 && (height < y || height - y < sh->height)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (pitch > 2147483647u) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t off, slice = 0;
  if (__builtin_mul_overflow(z, height, &off) || __builtin_add_overflow(off, y, &off) ||
      __builtin_mul_overflow(off, pitch, &off) || __builtin_add_overflow(off, x, &off) ||
      __builtin_mul_overflow(pitch, height, &slice) ||
      __builtin_add_overflow(base, off, &o->addr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  o->pitch = pitch;
  o->slice = slice;
  return CUDA_SUCCESS;
}

/* Row r of a linear operand checked as a copy operand of n bytes. */
static CUresult row_check(const struct operand *o, const struct shape *sh, size_t r, size_t n,
                          int dev, int write, struct fk_range *range) {
  return check_range(row_addr(o, sh, r), n, dev, o->allow_pageable, write, range);
}

static CUresult copy_shaped(const struct operand *dst, const struct operand *src, struct shape sh,
                            int async, CUstream h, int pt) {
  struct CUstream_st *s;
  CUresult rc = op_stream(async, h, pt, &s);
  if (rc != CUDA_SUCCESS || sh.width == 0 || sh.height == 0 || sh.depth == 0) {
    return rc;
  }
  flatten(dst, src, &sh);
  size_t rows = sh.height * sh.depth;
  int dev = s->ctx->dev, device_to_device = 1, dst_pageable = 0;
  for (size_t r = 0; r < rows; r++) {
    struct fk_range d = {.where = FK_AT_DEVICE}, v = {.where = FK_AT_DEVICE};
    if ((!dst->array && (rc = row_check(dst, &sh, r, sh.width, dev, 1, &d)) != CUDA_SUCCESS) ||
        (!src->array && (rc = row_check(src, &sh, r, sh.width, dev, 0, &v)) != CUDA_SUCCESS)) {
      return rc;
    }
    device_to_device &= d.where == FK_AT_DEVICE && v.where == FK_AT_DEVICE;
    dst_pageable |= d.where == FK_AT_PAGEABLE;
  }
  if (dst->array || src->array) {
    if (s->cap != NULL) {
      return CUDA_ERROR_NOT_SUPPORTED; /* array copies are never work items, so never nodes */
    }
    fk_stream_reach(s, fk.seq);
    for (size_t r = 0; r < rows; r++) {
      struct fk_range d = {0}, v = {0};
      uintptr_t to = row_addr(dst, &sh, r), from = row_addr(src, &sh, r);
      int vis = (dst->array || (row_check(dst, &sh, r, sh.width, dev, 1, &d) == CUDA_SUCCESS &&
                                fk_mem_host_visible(d.where))) &&
                (src->array || (row_check(src, &sh, r, sh.width, dev, 0, &v) == CUDA_SUCCESS &&
                                fk_mem_host_visible(v.where)));
      if (vis && to != 0 && from != 0) {
        memmove((void *)to, (const void *)from, sh.width);
      }
    }
    return CUDA_SUCCESS;
  }
  int now = async ? dst_pageable : !device_to_device;
  if (now) {
    fk_stream_reach(s, fk.seq);
  }
  for (size_t r = 0; r < rows; r++) {
    struct fk_work w = {.kind = FK_W_COPY, .dev = dev, .count = sh.width};
    row_check(dst, &sh, r, sh.width, dev, 1, &w.dst);
    row_check(src, &sh, r, sh.width, dev, 0, &w.src);
    if (now) {
      fk_mem_effect(&w);
    } else {
      enqueue_copy(s, &w);
    }
  }
  return CUDA_SUCCESS;
}

/* dst_host / src_host: the operand may be plain (pageable) host memory. */
static CUresult copy(uintptr_t dst, int dst_host, uintptr_t src, int src_host, size_t n, int async,
                     CUstream h, int pt) {
  struct operand d = {.addr = dst, .allow_pageable = dst_host};
  struct operand v = {.addr = src, .allow_pageable = src_host};
  return copy_shaped(&d, &v, (struct shape){n, 1, 1}, async, h, pt);
}

static CUresult copy_2d(const CUDA_MEMCPY2D *p, int async, CUstream h, int pt) {
  struct CUstream_st *s;
  CUresult rc = op_stream(async, h, pt, &s);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (p == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct shape sh = {p->WidthInBytes, p->Height, 1};
  struct operand d, v;
  if ((rc = operand_of(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes,
                       p->dstY, 0, p->dstPitch, p->Height, &sh, &d)) != CUDA_SUCCESS ||
      (rc = operand_of(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes,
                       p->srcY, 0, p->srcPitch, p->Height, &sh, &v)) != CUDA_SUCCESS) {
    return rc;
  }
  return copy_shaped(&d, &v, sh, async, h, pt);
}

/* The shape and the two operands of a CUDA_MEMCPY3D (LODs 0 and the reserved pointers NULL). */
static CUresult operands_3d(const CUDA_MEMCPY3D *p, struct shape *sh, struct operand *d,
                            struct operand *v) {
  if (p == NULL || p->srcLOD != 0 || p->dstLOD != 0 || p->reserved0 != NULL ||
      p->reserved1 != NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *sh = (struct shape){p->WidthInBytes, p->Height, p->Depth};
  CUresult rc = operand_of(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes,
                           p->dstY, p->dstZ, p->dstPitch, p->dstHeight, sh, d);
  if (rc == CUDA_SUCCESS) {
    rc = operand_of(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes,
                    p->srcY, p->srcZ, p->srcPitch, p->srcHeight, sh, v);
  }
  return rc;
}

static CUresult copy_3d(const CUDA_MEMCPY3D *p, int async, CUstream h, int pt) {
  struct CUstream_st *s;
  CUresult rc = op_stream(async, h, pt, &s);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct shape sh;
  struct operand d, v;
  rc = operands_3d(p, &sh, &d, &v);
  return rc == CUDA_SUCCESS ? copy_shaped(&d, &v, sh, async, h, pt) : rc;
}

CUresult fk_memcpy_node_work(const CUDA_MEMCPY3D *p, CUcontext ctx, struct fk_work **out) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_or_current(ctx, &c);
  struct shape sh;
  struct operand d, v;
  if (rc == CUDA_SUCCESS) {
    rc = operands_3d(p, &sh, &d, &v);
  }
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (d.array || v.array) {
    return CUDA_ERROR_NOT_SUPPORTED; /* array copies are never work items, so never nodes */
  }
  if (sh.width == 0 || sh.height == 0 || sh.depth == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  flatten(&d, &v, &sh);
  size_t rows = sh.height * sh.depth;
  struct fk_work *head = NULL, **tail = &head;
  for (size_t r = 0; r < rows && rc == CUDA_SUCCESS; r++) {
    struct fk_work *w = fk_work_new(FK_W_COPY);
    w->dev = c->dev;
    w->count = sh.width;
    chain_add(&tail, w);
    if ((rc = row_check(&d, &sh, r, sh.width, c->dev, 1, &w->dst)) == CUDA_SUCCESS &&
        (rc = row_check(&v, &sh, r, sh.width, c->dev, 0, &w->src)) == CUDA_SUCCESS &&
        (w->dst.where == FK_AT_PAGEABLE || w->src.where == FK_AT_PAGEABLE)) {
      rc = CUDA_ERROR_INVALID_VALUE; /* a node cannot stage pageable memory at its launches */
    }
  }
  if (rc != CUDA_SUCCESS) {
    fk_work_free_chain(head);
    return rc;
  }
  *out = head;
  return CUDA_SUCCESS;
}

/* Peer copies: with unified addressing the contexts only have to be valid. cuMemcpyPeer is
 * "serialized with respect to all pending and future asynchronous work" of the current, source
 * and destination contexts: the fake completes their work and copies at once (a legal schedule
 * of an operation that is asynchronous to the host). cuMemcpyPeerAsync is an ordinary
 * device-to-device copy on its stream. */
static CUresult copy_peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
                          size_t n, int async, CUstream h, int pt) {
  struct CUctx_st *cur, *dc, *sc;
  CUresult rc = fk_ctx_current(&cur);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (dctx == NULL || sctx == NULL) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if ((rc = fk_ctx_or_current(dctx, &dc)) != CUDA_SUCCESS ||
      (rc = fk_ctx_or_current(sctx, &sc)) != CUDA_SUCCESS) {
    return rc;
  }
  if (async) {
    return copy((uintptr_t)dst, 0, (uintptr_t)src, 0, n, 1, h, pt);
  }
  if ((rc = fk_capture_unsafe()) != CUDA_SUCCESS) {
    return rc; /* it waits for the device */
  }
  struct fk_work w = {.kind = FK_W_COPY, .dev = sc->dev, .count = n};
  if (n == 0) {
    return CUDA_SUCCESS;
  }
  if ((rc = check_range((uintptr_t)dst, n, dc->dev, 0, 1, &w.dst)) != CUDA_SUCCESS ||
      (rc = check_range((uintptr_t)src, n, sc->dev, 0, 0, &w.src)) != CUDA_SUCCESS) {
    return rc;
  }
  fk_sync_ctx(cur);
  fk_sync_ctx(dc);
  fk_sync_ctx(sc);
  fk_mem_effect(&w);
  return CUDA_SUCCESS;
}

/* The checks of a memset of *height rows of *width elements, pitch bytes apart, on device dev;
 * a contiguous one becomes one row. *device: whether it touches device memory. */
static CUresult set_check(uintptr_t dst, size_t pitch, unsigned elem, size_t *width, size_t *height,
                          int dev, int *device) {
  if (*width > SIZE_MAX / elem || (*height > 1 && pitch < *width * elem) || pitch > 2147483647u) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (*height == 1 || pitch == *width * elem) {
    *width *= *height; /* contiguous: one item */
    *height = 1;
  }
  *device = 0;
  for (size_t y = 0; y < *height; y++) {
    struct fk_range r;
    if ((dst + y * pitch) % elem != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult rc = check_range(dst + y * pitch, *width * elem, dev, 0, 1, &r);
    if (rc != CUDA_SUCCESS) {
      return rc;
    }
    *device |= r.where == FK_AT_DEVICE;
  }
  return CUDA_SUCCESS;
}

/* Row y of a checked memset as a work item. */
static struct fk_work *set_item(uintptr_t dst, size_t pitch, unsigned value, unsigned elem,
                                size_t width, size_t y, int dev) {
  struct fk_work *item = fk_work_new(FK_W_SET);
  item->dev = dev;
  item->value = value;
  item->elem = elem;
  item->count = width;
  check_range(dst + y * pitch, width * elem, dev, 0, 1, &item->dst);
  return item;
}

/* Memsets of height rows of width elements, pitch bytes apart. */
static CUresult set(uintptr_t dst, size_t pitch, unsigned value, unsigned elem, size_t width,
                    size_t height, int async, CUstream h, int pt) {
  struct CUstream_st *s;
  CUresult rc = op_stream(async, h, pt, &s);
  if (rc != CUDA_SUCCESS || width == 0 || height == 0) {
    return rc;
  }
  int dev = s->ctx->dev, device;
  if ((rc = set_check(dst, pitch, elem, &width, &height, dev, &device)) != CUDA_SUCCESS) {
    return rc;
  }
  int now = !async && !device;
  if (now) {
    fk_stream_reach(s, fk.seq);
  }
  for (size_t y = 0; y < height; y++) {
    struct fk_work *item = set_item(dst, pitch, value, elem, width, y, dev);
    if (now) {
      fk_mem_effect(item);
      free(item);
    } else {
      fk_work_enqueue(s, item);
    }
  }
  return CUDA_SUCCESS;
}

CUresult fk_memset_node_work(const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx,
                             struct fk_work **out) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_or_current(ctx, &c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (p == NULL || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) ||
      p->width == 0 || p->height == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t width = p->width, height = p->height;
  int device;
  rc = set_check((uintptr_t)p->dst, p->pitch, p->elementSize, &width, &height, c->dev, &device);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct fk_work *head = NULL, **tail = &head;
  for (size_t y = 0; y < height; y++) {
    chain_add(&tail,
              set_item((uintptr_t)p->dst, p->pitch, p->value, p->elementSize, width, y, c->dev));
  }
  *out = head;
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
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), 0, uc, 1, N, 1, 0, NULL, 0));
}
FK_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), 0, uc, 1, N, 1, 0, NULL, 1));
}
FK_API CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), 0, us, 2, N, 1, 0, NULL, 0));
}
FK_API CUresult cuMemsetD16_v2_ptds(CUdeviceptr dstDevice, unsigned short us, size_t N) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), 0, us, 2, N, 1, 0, NULL, 1));
}
FK_API CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), 0, ui, 4, N, 1, 0, NULL, 0));
}
FK_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), 0, ui, 4, N, 1, 0, NULL, 1));
}
FK_API CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), 0, uc, 1, N, 1, 1, hStream, 0));
}
FK_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                     CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), 0, uc, 1, N, 1, 1, hStream, 1));
}
FK_API CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                 CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), 0, us, 2, N, 1, 1, hStream, 0));
}
FK_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr dstDevice, unsigned short us, size_t N,
                                      CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), 0, us, 2, N, 1, 1, hStream, 1));
}
FK_API CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                 CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), 0, ui, 4, N, 1, 1, hStream, 0));
}
FK_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                      CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), 0, ui, 4, N, 1, 1, hStream, 1));
}

/* 2D and 3D copies. */
FK_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy) {
  FK_BODY(FK_NEED_INIT, copy_2d(pCopy, 0, NULL, 0));
}
FK_API CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *pCopy) {
  FK_BODY(FK_NEED_INIT, copy_2d(pCopy, 0, NULL, 1));
}
FK_API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy) {
  FK_BODY(FK_NEED_INIT, copy_2d(pCopy, 0, NULL, 0));
}
FK_API CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *pCopy) {
  FK_BODY(FK_NEED_INIT, copy_2d(pCopy, 0, NULL, 1));
}
FK_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, copy_2d(pCopy, 1, hStream, 0));
}
FK_API CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *pCopy, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, copy_2d(pCopy, 1, hStream, 1));
}
FK_API CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy) {
  FK_BODY(FK_NEED_INIT, copy_3d(pCopy, 0, NULL, 0));
}
FK_API CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *pCopy) {
  FK_BODY(FK_NEED_INIT, copy_3d(pCopy, 0, NULL, 1));
}
FK_API CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, copy_3d(pCopy, 1, hStream, 0));
}
FK_API CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *pCopy, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, copy_3d(pCopy, 1, hStream, 1));
}

/* Peer copies. */
FK_API CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                             CUcontext srcContext, size_t ByteCount) {
  FK_BODY(FK_NEED_INIT,
          copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, 0, NULL, 0));
}
FK_API CUresult cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext,
                                  CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount) {
  FK_BODY(FK_NEED_INIT,
          copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, 0, NULL, 1));
}
FK_API CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext,
                                  CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount,
                                  CUstream hStream) {
  FK_BODY(FK_NEED_INIT,
          copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, 1, hStream, 0));
}
FK_API CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext,
                                       CUdeviceptr srcDevice, CUcontext srcContext,
                                       size_t ByteCount, CUstream hStream) {
  FK_BODY(FK_NEED_INIT,
          copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, 1, hStream, 1));
}

/* 2D memsets. */
FK_API CUresult cuMemsetD2D8_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                size_t Width, size_t Height) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), dstPitch, uc, 1, Width, Height, 0, NULL, 0));
}
FK_API CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                     size_t Width, size_t Height) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), dstPitch, uc, 1, Width, Height, 0, NULL, 1));
}
FK_API CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                  size_t Width, size_t Height, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), dstPitch, uc, 1, Width, Height, 1, hStream, 0));
}
FK_API CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
                                       size_t Width, size_t Height, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), dstPitch, uc, 1, Width, Height, 1, hStream, 1));
}
FK_API CUresult cuMemsetD2D16_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                 size_t Width, size_t Height) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), dstPitch, us, 2, Width, Height, 0, NULL, 0));
}
FK_API CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                      size_t Width, size_t Height) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), dstPitch, us, 2, Width, Height, 0, NULL, 1));
}
FK_API CUresult cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                   size_t Width, size_t Height, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), dstPitch, us, 2, Width, Height, 1, hStream, 0));
}
FK_API CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
                                        size_t Width, size_t Height, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), dstPitch, us, 2, Width, Height, 1, hStream, 1));
}
FK_API CUresult cuMemsetD2D32_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                 size_t Width, size_t Height) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), dstPitch, ui, 4, Width, Height, 0, NULL, 0));
}
FK_API CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                      size_t Width, size_t Height) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), dstPitch, ui, 4, Width, Height, 0, NULL, 1));
}
FK_API CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                   size_t Width, size_t Height, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), dstPitch, ui, 4, Width, Height, 1, hStream, 0));
}
FK_API CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
                                        size_t Width, size_t Height, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, set(P(dstDevice), dstPitch, ui, 4, Width, Height, 1, hStream, 1));
}
