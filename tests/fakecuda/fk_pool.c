/* Stream-ordered allocation of the fake driver: each device's default memory pool, pools made by
 * cuMemPoolCreate, the device's current pool, pool attributes and access, cuMemAllocAsync /
 * cuMemAllocFromPoolAsync / cuMemFreeAsync and cuMemPoolTrimTo.
 *
 * Accounting: a pool holds device memory in bytes (not addresses): its live allocations (used)
 * and what it retained after frees (reserved - used). An allocation takes retained bytes first
 * and new device memory for the rest; a free returns its bytes to the pool when it executes (a
 * work item on its stream), and the pool keeps at most its release threshold of them, giving
 * the device the rest then (the fake's frees execute at sync points, where the real driver
 * releases). cuMemPoolTrimTo releases down to what it asks; a device reset releases everything.
 * Addresses are carved from the device's region like cuMemAlloc's. Everything runs under fk.lock.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/fakecuda/fk.h"

static struct CUmemPoolHandle_st **created; /* every pool cuMemPoolCreate made */
static size_t ncreated, capcreated;

static void pool_defaults(struct CUmemPoolHandle_st *p, int dev) {
  memset(p, 0, sizeof *p);
  p->dev = dev;
  p->live = 1;
  p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
  p->read = p->write = (uint64_t)1 << dev;
}

void fk_pool_init_device(int dev) {
  pool_defaults(&fk.dev[dev].pool, dev);
  fk.dev[dev].current = NULL;
}

/* The live pool a handle names, or NULL. */
static struct CUmemPoolHandle_st *pool_find(const struct CUmemPoolHandle_st *h) {
  for (int d = 0; d < fk.ndev; d++) {
    if (h == &fk.dev[d].pool) {
      return &fk.dev[d].pool;
    }
  }
  for (size_t i = 0; h != NULL && i < ncreated; i++) {
    if (created[i] == h) {
      return created[i]->live ? created[i] : NULL;
    }
  }
  return NULL;
}

/* Gives the device the pool's retained bytes above keep. */
static void pool_release(struct CUmemPoolHandle_st *p, size_t keep) {
  size_t retained = p->reserved - p->used;
  if (retained > keep) {
    fk_mem_give(p->dev, retained - keep, 0);
    p->reserved -= retained - keep;
  }
}

void fk_pool_give_back(struct fk_alloc *a) {
  struct CUmemPoolHandle_st *p = a->pool;
  p->used -= a->span;
  pool_release(p, p->live ? (size_t)p->threshold : 0); /* a destroyed pool keeps nothing */
}

void fk_pool_trim_device(int dev) {
  pool_release(&fk.dev[dev].pool, 0);
  for (size_t i = 0; i < ncreated; i++) {
    if (created[i]->dev == dev) {
      pool_release(created[i], 0);
    }
  }
}

void fk_pool_teardown(void) {
  for (size_t i = 0; i < ncreated; i++) {
    free(created[i]);
  }
  free(created);
  created = NULL;
  ncreated = capcreated = 0;
}

/* ---- Pools: creation, destruction, the device's current pool. ---- */

static CUresult pool_create(CUmemoryPool *out, const CUmemPoolProps *props) {
  if (out == NULL || props == NULL || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->win32SecurityAttributes != NULL ||
      (props->usage & ~CU_MEM_POOL_CREATE_USAGE_HW_DECOMPRESS) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < sizeof props->reserved; i++) {
    if (props->reserved[i] != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  switch (props->location.type) {
  case CU_MEM_LOCATION_TYPE_DEVICE:
    if (props->location.id < 0 || props->location.id >= fk.ndev) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    break;
  case CU_MEM_LOCATION_TYPE_HOST:
  case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    return CUDA_ERROR_NOT_SUPPORTED; /* host pools are not modelled */
  default:
    return CUDA_ERROR_INVALID_VALUE; /* HOST_NUMA_CURRENT included, as cuda.h says */
  }
  /* Shareable pools and hardware decompression need device support the fake reports absent
   * (CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES and the decompression attributes). */
  if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE || props->usage != 0) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  struct CUmemPoolHandle_st *p = malloc(sizeof *p);
  if (p == NULL) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pool_defaults(p, props->location.id);
  p->created = 1;
  p->max_size = props->maxSize;
  fk_push((void ***)&created, &ncreated, &capcreated, p);
  *out = p;
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps) {
  FK_BODY(FK_NEED_INIT, pool_create(pool, poolProps));
}

/* Outstanding allocations stay valid and return their memory to the device when freed. */
static CUresult pool_destroy(struct CUmemPoolHandle_st *h) {
  struct CUmemPoolHandle_st *p = pool_find(h);
  if (p == NULL || !p->created) {
    return CUDA_ERROR_INVALID_VALUE; /* "A device's default memory pool cannot be destroyed" */
  }
  if (fk.dev[p->dev].current == p) {
    fk.dev[p->dev].current = NULL;
  }
  p->live = 0;
  pool_release(p, 0);
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  FK_BODY(FK_NEED_INIT, pool_destroy(pool));
}

static CUresult default_pool(CUmemoryPool *out, CUdevice dev) {
  if (out == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev < 0 || dev >= fk.ndev) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *out = &fk.dev[dev].pool;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, default_pool(pool_out, dev));
}

static struct CUmemPoolHandle_st *current_pool(int dev) {
  return fk.dev[dev].current != NULL ? fk.dev[dev].current : &fk.dev[dev].pool;
}

static CUresult get_pool(CUmemoryPool *out, CUdevice dev) {
  CUresult rc = default_pool(out, dev);
  if (rc == CUDA_SUCCESS) {
    *out = current_pool(dev);
  }
  return rc;
}

FK_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, get_pool(pool, dev));
}

static CUresult set_pool(CUdevice dev, struct CUmemPoolHandle_st *h) {
  if (dev < 0 || dev >= fk.ndev) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  struct CUmemPoolHandle_st *p = pool_find(h);
  if (p == NULL || p->dev != dev) {
    return CUDA_ERROR_INVALID_VALUE; /* "must be local to the specified device" */
  }
  fk.dev[dev].current = p == &fk.dev[dev].pool ? NULL : p;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  FK_BODY(FK_NEED_INIT, set_pool(dev, pool));
}

/* ---- Attributes and access. ---- */

static CUresult set_attribute(struct CUmemPoolHandle_st *h, int attr, const void *value) {
  struct CUmemPoolHandle_st *p = pool_find(h);
  if (p == NULL || value == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t v64;
  int v;
  switch (attr) {
  case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
  case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
  case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
    memcpy(&v, value, sizeof v);
    p->reuse[attr - 1] = v != 0;
    return CUDA_SUCCESS;
  case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
    memcpy(&p->threshold, value, sizeof p->threshold);
    return CUDA_SUCCESS;
  case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
  case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
    memcpy(&v64, value, sizeof v64);
    if (v64 != 0) {
      return CUDA_ERROR_INVALID_VALUE; /* "illegal to set this attribute to a non-zero value" */
    }
    if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) {
      p->reserved_high = p->reserved;
    } else {
      p->used_high = p->used;
    }
    return CUDA_SUCCESS;
  default:
    return CUDA_ERROR_INVALID_VALUE; /* the current figures are read-only */
  }
}

FK_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
  FK_BODY(FK_NEED_INIT, set_attribute(pool, (int)attr, value));
}

static CUresult get_attribute(struct CUmemPoolHandle_st *h, int attr, void *value) {
  struct CUmemPoolHandle_st *p = pool_find(h);
  if (p == NULL || value == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t v64;
  switch (attr) {
  case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
  case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
  case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
    memcpy(value, &p->reuse[attr - 1], sizeof(int));
    return CUDA_SUCCESS;
  case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
    v64 = p->threshold;
    break;
  case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    v64 = p->reserved;
    break;
  case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    v64 = p->reserved_high;
    break;
  case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
    v64 = p->used;
    break;
  case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
    v64 = p->used_high;
    break;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
  memcpy(value, &v64, sizeof v64);
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
  FK_BODY(FK_NEED_INIT, get_attribute(pool, (int)attr, value));
}

/* Every descriptor is checked before any applies; the pool's own device keeps read-write. */
static CUresult set_access(struct CUmemPoolHandle_st *h, const CUmemAccessDesc *map, size_t n) {
  struct CUmemPoolHandle_st *p = pool_find(h);
  if (p == NULL || (map == NULL && n > 0)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < n; i++) {
    const CUmemAccessDesc *m = &map[i];
    if (m->location.type != CU_MEM_LOCATION_TYPE_DEVICE || m->location.id < 0 ||
        m->location.id >= fk.ndev ||
        (m->flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && m->flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
         m->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) ||
        (m->location.id == p->dev && m->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (size_t i = 0; i < n; i++) {
    uint64_t bit = (uint64_t)1 << map[i].location.id;
    p->read = map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE ? p->read | bit : p->read & ~bit;
    p->write =
        map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? p->write | bit : p->write & ~bit;
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count) {
  FK_BODY(FK_NEED_INIT, set_access(pool, map, count));
}

static CUresult get_access(CUmemAccess_flags *flags, struct CUmemPoolHandle_st *h,
                           const CUmemLocation *loc) {
  struct CUmemPoolHandle_st *p = pool_find(h);
  if (p == NULL || flags == NULL || loc == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (loc->type == CU_MEM_LOCATION_TYPE_HOST || loc->type == CU_MEM_LOCATION_TYPE_HOST_NUMA) {
    *flags = CU_MEM_ACCESS_FLAGS_PROT_NONE; /* device pools are not host accessible */
    return CUDA_SUCCESS;
  }
  if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE || loc->id < 0 || loc->id >= fk.ndev) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *flags = (p->write >> loc->id & 1)  ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
           : (p->read >> loc->id & 1) ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                      : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool,
                                   CUmemLocation *location) {
  FK_BODY(FK_NEED_INIT, get_access(flags, memPool, location));
}

static CUresult pool_trim(struct CUmemPoolHandle_st *h, size_t keep) {
  struct CUmemPoolHandle_st *p = pool_find(h);
  if (p == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  /* "the pool will be guaranteed to have at least minBytesToKeep bytes reserved" */
  pool_release(p, keep > p->used ? keep - p->used : 0);
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  FK_BODY(FK_NEED_INIT, pool_trim(pool, minBytesToKeep));
}

/* ---- Allocation and free. ---- */

static struct fk_work *last_free(const struct CUstream_st *s) {
  struct fk_work *last = NULL;
  for (struct fk_work *w = s->head; w != NULL; w = w->next) {
    if (w->kind == FK_W_FREE) {
      last = w;
    }
  }
  return last;
}

/* Takes span bytes from pool p: retained bytes first, then new device memory. */
static CUresult pool_take(struct CUmemPoolHandle_st *p, size_t size, struct fk_alloc **out) {
  size_t span = (size + FK_ALLOC_ALIGN - 1) / FK_ALLOC_ALIGN * FK_ALLOC_ALIGN;
  size_t retained = p->reserved - p->used;
  size_t need = span > retained ? span - retained : 0;
  if (span < size || (p->max_size != 0 && p->reserved + need > p->max_size)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  struct fk_alloc *a = fk_mem_place(FK_K_ASYNC, p->dev, size, span);
  if (a == NULL) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (fk_mem_take(p->dev, need, 0) != CUDA_SUCCESS) {
    fk_mem_unplace(a);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  a->pool = p;
  fk.dev[p->dev].alloc_calls++;
  p->reserved += need;
  p->used += span;
  p->reserved_high = p->reserved > p->reserved_high ? p->reserved : p->reserved_high;
  p->used_high = p->used > p->used_high ? p->used : p->used_high;
  *out = a;
  return CUDA_SUCCESS;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, struct CUmemPoolHandle_st *pool,
                            CUstream h, int ptsz) {
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct CUmemPoolHandle_st *p = current_pool(s->ctx->dev);
  if (pool != NULL && (p = pool_find(pool)) == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dptr == NULL || size == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (s->cap != NULL) {
    return fk_graph_alloc(s, p->dev, size, dptr); /* a graph memory node */
  }
  struct fk_alloc *a;
  rc = pool_take(p, size, &a);
  struct fk_work *w;
  if (rc == CUDA_ERROR_OUT_OF_MEMORY && (w = last_free(s)) != NULL) {
    /* The pool may reuse memory freed earlier in the same stream: those frees are ordered
     * before this allocation, so completing them now is a legal schedule. */
    fk_stream_reach(s, w->seq);
    rc = pool_take(p, size, &a);
  }
  if (rc == CUDA_SUCCESS) {
    *dptr = a->base;
  }
  return rc;
}

FK_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, alloc_async(dptr, bytesize, NULL, hStream, 0));
}

FK_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, alloc_async(dptr, bytesize, NULL, hStream, 1));
}

FK_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                        CUstream hStream) {
  FK_BODY(FK_NEED_INIT,
          pool == NULL ? CUDA_ERROR_INVALID_VALUE : alloc_async(dptr, bytesize, pool, hStream, 0));
}

FK_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream) {
  FK_BODY(FK_NEED_INIT,
          pool == NULL ? CUDA_ERROR_INVALID_VALUE : alloc_async(dptr, bytesize, pool, hStream, 1));
}

static CUresult free_async(CUdeviceptr dptr, CUstream h, int ptsz) {
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct fk_alloc *a = fk_mem_find((uintptr_t)dptr);
  if (a != NULL && a->kind == FK_K_GRAPH && a->base == (uintptr_t)dptr && s->cap == NULL) {
    return fk_graph_free(a, s);
  }
  if (a == NULL || a->base != (uintptr_t)dptr || a->freeing ||
      (a->kind != FK_K_ASYNC && a->kind != FK_K_DEVICE && a->kind != FK_K_GRAPH)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (s->cap == NULL) {
    a->freeing = 1; /* a captured free takes effect when a launch of the graph reaches it */
    fk.dev[a->dev].free_calls++;
  }
  struct fk_work *w = fk_work_new(FK_W_FREE);
  w->dst.addr = a->base;
  w->dst.alloc_id = a->id;
  fk_work_enqueue(s, w);
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, free_async(dptr, hStream, 0));
}

FK_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, free_async(dptr, hStream, 1));
}

void fk_mem_free_effect(struct fk_work *w) {
  struct fk_alloc *a = fk_mem_by_id(w->dst.alloc_id);
  if (a != NULL) {
    fk_mem_release(a);
  }
}
