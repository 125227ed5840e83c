/* Managed memory of the fake driver: where the pages of a cuMemAllocManaged allocation live, and
 * what moves them: device work (kernels, copies, memsets, from the work engine when it executes
 * them), cuMemPrefetchAsync (CUDA 8 and 12.2 ABIs, +_ptsz), cuMemAdvise (both ABIs),
 * cuStreamAttachMemAsync (+_ptsz) and eviction when a device is full.
 *
 * Model (README.md, "Managed memory", names the cuda.h text or programming-guide section behind
 * each rule): a page is 4 KiB, the CPU page size cuda.h rounds advice and prefetches to. It
 * starts on the host. A device that touches it takes it into its own memory (counted in its
 * used bytes and peak through fk_mem_take, like any device memory) unless the advice says
 * otherwise: read-mostly pages get a read-only copy on a reading device; a page at its preferred
 * location, or mapped by the device (accessed-by), is read across the bus and stays. A device
 * that is full evicts managed pages, least recently touched allocation first, to the host; never
 * another kind of allocation. A page that still does not fit is read across the bus (the
 * driver's thrashing answer). Runs under fk.lock.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/fakecuda/fk.h"

#define MPAGE ((size_t)4096)

/* One page: which copy is the writable one, the read-only copies of devices (read-mostly), and
 * its advice. Zero is a fresh page: on the host, no advice. */
struct mpage {
  uint64_t dup; /* devices holding a read-only copy besides the owner */
  uint64_t acc; /* devices it is mapped for (CU_MEM_ADVISE_SET_ACCESSED_BY) */
  uint8_t at;   /* the owner: 0 the host, d + 1 device d */
  uint8_t pref; /* its preferred location: 0 none, 1 the host, d + 2 device d */
  uint8_t rm;   /* CU_MEM_ADVISE_SET_READ_MOSTLY */
};

struct fk_managed {
  size_t npages;
  struct mpage *pages;
  unsigned attach;            /* CU_MEM_ATTACH_GLOBAL, _HOST or _SINGLE */
  struct CUstream_st *stream; /* _SINGLE: the stream it is attached to */
  unsigned long long stamp;   /* when a device last touched it: eviction order */
  size_t resident[FK_MAX_DEVICES];
};

static unsigned long long touches; /* the clock of stamps */

void fk_managed_new(struct fk_alloc *a) {
  struct fk_managed *m = calloc(1, sizeof *m);
  size_t n = a->span / MPAGE;
  struct mpage *pages = calloc(n ? n : 1, sizeof *pages);
  if (m == NULL || pages == NULL) {
    fk_log("error: out of host memory");
    abort();
  }
  m->npages = n;
  m->pages = pages;
  m->attach = a->flags;
  a->mg = m;
}

void fk_managed_release(struct fk_alloc *a) {
  struct fk_managed *m = a->mg;
  if (m == NULL) {
    return;
  }
  for (int d = 0; d < fk.ndev; d++) {
    if (m->resident[d] > 0) {
      fk_mem_give(d, m->resident[d], 0);
      fk.dev[d].managed -= m->resident[d];
    }
  }
  free(m->pages);
  free(m);
  a->mg = NULL;
}

/* Device dev no longer holds `bytes` of a's pages (to_host: the only copy went back). */
static void give(struct fk_alloc *a, int dev, size_t bytes, int to_host) {
  fk_mem_give(dev, bytes, 0);
  a->mg->resident[dev] -= bytes;
  fk.dev[dev].managed -= bytes;
  if (to_host) {
    fk.dev[dev].migrated_out += bytes;
    fk_charge_migration(bytes / MPAGE);
  }
}

/* Device dev gained `bytes` of a's pages (already taken with fk_mem_take). */
static void gain(struct fk_alloc *a, int dev, size_t bytes) {
  struct fk_device *d = &fk.dev[dev];
  a->mg->resident[dev] += bytes;
  d->managed += bytes;
  d->managed_peak = d->managed > d->managed_peak ? d->managed : d->managed_peak;
  d->migrated_in += bytes;
  fk_charge_migration(bytes / MPAGE);
}

/* Drops device dev's copy of page i: the read-only one, or the owner, which goes to the host. */
static void evict_page(struct fk_alloc *a, size_t i, int dev) {
  struct mpage *p = &a->mg->pages[i];
  uint64_t bit = (uint64_t)1 << dev;
  if (p->dup & bit) {
    p->dup &= ~bit;
    give(a, dev, MPAGE, 0);
  } else if (p->at == dev + 1) {
    p->at = 0;
    give(a, dev, MPAGE, 1);
  }
}

/* Evicts managed pages of dev but those of `keep` until `bytes` fit in its free memory. */
static void make_room(int dev, size_t bytes, const struct fk_alloc *keep) {
  for (;;) {
    size_t avail = fk_dev_free(dev);
    if (avail >= bytes || fk.dev[dev].managed == 0) {
      return;
    }
    struct fk_alloc *victim = NULL;
    for (size_t k = 0; k < fk_nallocs; k++) {
      struct fk_alloc *a = fk_allocs[k];
      if (a->kind == FK_K_MANAGED && a->mg != NULL && a != keep && a->mg->resident[dev] > 0 &&
          (victim == NULL || a->mg->stamp < victim->mg->stamp)) {
        victim = a;
      }
    }
    if (victim == NULL) {
      return;
    }
    size_t short_by = bytes - avail;
    for (size_t i = 0; i < victim->mg->npages && victim->mg->resident[dev] > 0; i++) {
      size_t before = victim->mg->resident[dev];
      evict_page(victim, i, dev);
      size_t freed = before - victim->mg->resident[dev];
      if (freed >= short_by) {
        break;
      }
      short_by -= freed;
    }
  }
}

void fk_managed_make_room(int dev, size_t bytes) {
  if (fk.dev[dev].managed > 0) {
    make_room(dev, bytes, NULL);
  }
}

enum { STAY, MOVE, COPY }; /* what an access or a prefetch does to a page */

/* Drops the read-only copies of page i of a on every device but `keep` (-1: none). */
static void drop_copies(struct fk_alloc *a, size_t i, int keep) {
  struct mpage *p = &a->mg->pages[i];
  for (int e = 0; p->dup != 0 && e < fk.ndev; e++) {
    if (e != keep && (p->dup >> e & 1)) {
      p->dup &= ~((uint64_t)1 << e);
      give(a, e, MPAGE, 0);
    }
  }
}

/* A device's write invalidates every other copy of a read-mostly page; a copy of its own becomes
 * the owner. */
static void invalidate(struct fk_alloc *a, size_t i, int dev) {
  struct mpage *p = &a->mg->pages[i];
  uint64_t bit = (uint64_t)1 << dev;
  drop_copies(a, i, dev);
  if (p->dup & bit) {
    p->dup = 0;
    if (p->at > 0) {
      give(a, p->at - 1, MPAGE, 0); /* the old owner's copy is stale */
    }
    p->at = (uint8_t)(dev + 1);
  }
}

/* Device dev reads (write 0) or writes page p. */
static int on_access(const struct mpage *p, int dev, int write) {
  uint64_t bit = (uint64_t)1 << dev;
  if (p->rm && !write) {
    return p->at == dev + 1 || (p->dup & bit) ? STAY : COPY;
  }
  if (p->at == dev + 1) {
    return STAY;
  }
  if (p->pref != 0 && p->at == p->pref - 1) {
    return STAY; /* at its preferred location, and the device can map it there */
  }
  if ((p->acc & bit) && p->pref != dev + 2) {
    return STAY; /* mapped for the device: read across the bus, no fault, no migration */
  }
  return MOVE;
}

/* A prefetch to device dev: migrates whatever the advice, read-only copies of read-mostly pages. */
static int on_prefetch(const struct mpage *p, int dev, int write) {
  (void)write;
  uint64_t bit = (uint64_t)1 << dev;
  if (p->at == dev + 1 || (p->rm && (p->dup & bit))) {
    return STAY;
  }
  return p->rm ? COPY : MOVE;
}

/* Pages [i0, i1) of a come to device dev as `rule` says, as many as fit once other allocations'
 * managed pages were evicted; the rest stay where they are. */
static void bring(struct fk_alloc *a, size_t i0, size_t i1, int dev, int write,
                  int (*rule)(const struct mpage *, int, int)) {
  struct fk_managed *m = a->mg;
  m->stamp = ++touches;
  size_t need = 0;
  for (size_t i = i0; i < i1; i++) {
    if (write && rule == on_access && m->pages[i].dup != 0) {
      invalidate(a, i, dev);
    }
    need += rule(&m->pages[i], dev, write) != STAY ? MPAGE : 0;
  }
  if (need == 0) {
    return;
  }
  make_room(dev, need, a);
  size_t fit = fk_dev_free(dev) / MPAGE * MPAGE;
  fit = fit < need ? fit : need;
  if (fit == 0 || fk_mem_take(dev, fit, 0) != CUDA_SUCCESS) {
    return;
  }
  for (size_t i = i0; i < i1 && fit > 0; i++) {
    struct mpage *p = &m->pages[i];
    int act = rule(p, dev, write);
    if (act == STAY) {
      continue;
    }
    if (act == COPY) {
      p->dup |= (uint64_t)1 << dev;
    } else {
      if (p->at > 0) {
        give(a, p->at - 1, MPAGE, 0); /* from another device's memory */
      }
      p->at = (uint8_t)(dev + 1);
    }
    gain(a, dev, MPAGE);
    fit -= MPAGE;
  }
}

/* The pages of a that [p, p + n) covers, rounded out to whole pages as cuda.h rounds. */
static void pages_of(const struct fk_alloc *a, uintptr_t p, size_t n, size_t *i0, size_t *i1) {
  size_t lo = (p - a->base) / MPAGE, hi = (p - a->base + n + MPAGE - 1) / MPAGE;
  *i0 = lo;
  *i1 = hi < a->mg->npages ? hi : a->mg->npages;
}

/* The live managed allocation a work range lies in (the one it was enqueued for), or NULL. */
static struct fk_alloc *managed_of(const struct fk_range *r) {
  if (r->alloc_id == 0 && r->n == 0) {
    return NULL;
  }
  struct fk_alloc *a = fk_mem_find(r->addr);
  if (a == NULL || a->kind != FK_K_MANAGED || a->mg == NULL ||
      (r->alloc_id != 0 && a->id != r->alloc_id)) {
    return NULL;
  }
  return a;
}

/* Whether kernels on s may touch a: attached globally, or to s (an association with a stream
 * since destroyed reverts to the allocation's own flags). */
static int visible(struct fk_alloc *a, const struct CUstream_st *s) {
  struct fk_managed *m = a->mg;
  if (m->attach == CU_MEM_ATTACH_SINGLE && (m->stream == NULL || !m->stream->live)) {
    m->attach = a->flags;
    m->stream = NULL;
  }
  return m->attach == CU_MEM_ATTACH_GLOBAL || (m->attach == CU_MEM_ATTACH_SINGLE && m->stream == s);
}

void fk_managed_access(const struct fk_work *w) {
  size_t i0, i1;
  if (w->kind == FK_W_HOOK) {
    /* The fake runs no device code: a kernel may reach the whole of every managed allocation it
     * is given a pointer into, so all of it is taken as touched (an upper bound). */
    struct fk_alloc *a = managed_of(&w->dst);
    int dev = w->stream != NULL ? w->stream->ctx->dev : w->dev;
    if (a != NULL && visible(a, w->stream)) {
      bring(a, 0, a->mg->npages, dev, 1, on_access);
    }
    return;
  }
  if (w->kind != FK_W_COPY && w->kind != FK_W_SET) {
    return;
  }
  struct fk_alloc *a = managed_of(&w->dst);
  if (a != NULL && w->dst.n > 0) {
    pages_of(a, w->dst.addr, w->dst.n, &i0, &i1);
    bring(a, i0, i1, w->dev, 1, on_access);
  }
  a = w->kind == FK_W_COPY && w->src.n > 0 ? managed_of(&w->src) : NULL;
  if (a != NULL) {
    pages_of(a, w->src.addr, w->src.n, &i0, &i1);
    bring(a, i0, i1, w->dev, 0, on_access);
  }
}

/* ---- cuMemPrefetchAsync, cuMemAdvise, cuStreamAttachMemAsync. ---- */

/* [p, p + n) inside one live managed allocation (rounded to pages, as the driver rounds). */
static CUresult managed_range(CUdeviceptr p, size_t n, struct fk_alloc **out) {
  struct fk_alloc *a = fk_mem_find((uintptr_t)p);
  if (a == NULL || a->kind != FK_K_MANAGED || n == 0 || n > a->span - ((uintptr_t)p - a->base)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *out = a;
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

/* The pages of [p, p + n) of a go to the host: the only copy of each, migrated (a read-mostly
 * page gains a host copy; the devices keep theirs); or, discarding, their contents are no longer
 * wanted: no device holds them any more, and nothing moves. */
static void to_host(struct fk_alloc *a, CUdeviceptr p, size_t n, int discarding) {
  size_t i0, i1;
  pages_of(a, (uintptr_t)p, n, &i0, &i1);
  for (size_t i = i0; i < i1; i++) {
    struct mpage *pg = &a->mg->pages[i];
    if (discarding) {
      drop_copies(a, i, -1);
    }
    if ((discarding || !pg->rm) && pg->at > 0) {
      int dev = pg->at - 1;
      pg->at = 0;
      give(a, dev, MPAGE, !discarding);
    }
  }
}

static CUresult prefetch(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream h,
                         int ptsz) {
  struct CUstream_st *s;
  struct fk_alloc *a = NULL;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc == CUDA_SUCCESS && flags != 0) {
    rc = CUDA_ERROR_INVALID_VALUE;
  }
  if (rc == CUDA_SUCCESS) {
    rc = managed_range(p, n, &a);
  }
  if (rc == CUDA_SUCCESS) {
    rc = location_check(loc);
  }
  if (rc != CUDA_SUCCESS || s->cap != NULL) {
    return rc; /* on a capturing stream it moves nothing (README.md, "Inferred behaviour") */
  }
  /* Stream-ordered: the migration follows the stream's earlier work, which completes first (a
   * schedule the driver may also take). */
  fk_stream_reach(s, fk.seq);
  if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    size_t i0, i1;
    pages_of(a, (uintptr_t)p, n, &i0, &i1);
    bring(a, i0, i1, loc.id, 0, on_prefetch);
  } else {
    to_host(a, p, n, 0);
  }
  return CUDA_SUCCESS;
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

/* Undoing read-mostly collapses a page's copies into one: the preferred location's when it holds
 * one, else the owner's. */
static void collapse(struct fk_alloc *a, size_t i) {
  struct mpage *p = &a->mg->pages[i];
  if (p->pref >= 2 && (p->dup >> (p->pref - 2) & 1)) {
    int keep = p->pref - 2;
    p->dup &= ~((uint64_t)1 << keep);
    if (p->at > 0) {
      give(a, p->at - 1, MPAGE, 0);
    }
    p->at = (uint8_t)(keep + 1);
  }
  drop_copies(a, i, -1);
}

/* The advice changes where pages may go, never where they are (cuda.h: "does not cause data to
 * migrate"), except read-mostly's end, which collapses copies. */
static void apply_advice(struct fk_alloc *a, size_t i0, size_t i1, int advice, CUmemLocation loc) {
  int dev = loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? loc.id : -1;
  for (size_t i = i0; i < i1; i++) {
    struct mpage *p = &a->mg->pages[i];
    switch (advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY:
      p->rm = 1;
      break;
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
      p->rm = 0;
      collapse(a, i);
      break;
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
      p->pref = (uint8_t)(dev >= 0 ? dev + 2 : 1);
      break;
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
      p->pref = 0;
      break;
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
      p->acc |= dev >= 0 ? (uint64_t)1 << dev : 0; /* the host maps its own memory anyway */
      break;
    default: /* CU_MEM_ADVISE_UNSET_ACCESSED_BY */
      p->acc &= dev >= 0 ? ~((uint64_t)1 << dev) : ~(uint64_t)0;
      break;
    }
  }
}

/* The location matters only for the advices that name one. */
static CUresult advise(CUdeviceptr p, size_t n, int advice, CUmemLocation loc) {
  struct fk_alloc *a = NULL;
  if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult rc = managed_range(p, n, &a);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION || advice == CU_MEM_ADVISE_SET_ACCESSED_BY ||
      advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY) {
    rc = location_check(loc);
  }
  if (rc == CUDA_SUCCESS) {
    size_t i0, i1;
    pages_of(a, (uintptr_t)p, n, &i0, &i1);
    apply_advice(a, i0, i1, advice, loc);
  }
  return rc;
}

FK_API CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                            CUdevice device) {
  FK_BODY(FK_NEED_INIT, advise(devPtr, count, (int)advice, location_of(device)));
}

FK_API CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                               CUmemLocation location) {
  FK_BODY(FK_NEED_INIT, advise(devPtr, count, (int)advice, location));
}

/* cuda.h: the length is 0 or the whole allocation's; a single stream cannot be the NULL
 * stream; the association takes effect once the stream's earlier work has completed. */
static CUresult attach(CUstream h, CUdeviceptr p, size_t length, unsigned flags, int ptsz) {
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct fk_alloc *a = fk_mem_find((uintptr_t)p);
  int null_stream = h == NULL ? !ptsz : h == CU_STREAM_LEGACY;
  if ((flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST &&
       flags != CU_MEM_ATTACH_SINGLE) ||
      a == NULL || a->kind != FK_K_MANAGED || (length != 0 && length != a->size) ||
      (flags == CU_MEM_ATTACH_SINGLE && null_stream)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (s->cap != NULL) {
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* README.md, "Inferred behaviour" */
  }
  fk_stream_reach(s, fk.seq);
  a->mg->attach = flags;
  a->mg->stream = flags == CU_MEM_ATTACH_SINGLE ? s : NULL;
  return CUDA_SUCCESS;
}

FK_API CUresult cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t length,
                                       unsigned int flags) {
  FK_BODY(FK_NEED_INIT, attach(hStream, dptr, length, flags, 0));
}

FK_API CUresult cuStreamAttachMemAsync_ptsz(CUstream hStream, CUdeviceptr dptr, size_t length,
                                            unsigned int flags) {
  FK_BODY(FK_NEED_INIT, attach(hStream, dptr, length, flags, 1));
}

/* ---- Batches (CUDA 13): prefetches, discards, and both. ---- */

/* Checks a batch as cuda.h describes it: count ranges, each inside one managed allocation; with
 * locations (locs non-NULL or nlocs > 0), nlocs of them, idxs starting at 0 and rising below
 * count; flags 0; a stream that is not the legacy NULL stream. */
static CUresult batch_check(CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *locs,
                            size_t *idxs, size_t nlocs, int with_locs, unsigned long long flags,
                            CUstream h, int ptsz, struct CUstream_st **s) {
  CUresult rc = fk_stream_resolve(h, ptsz, s);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if ((h == NULL && !ptsz) || h == CU_STREAM_LEGACY || flags != 0 || count == 0 || dptrs == NULL ||
      sizes == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (with_locs && (locs == NULL || idxs == NULL || nlocs == 0 || nlocs > count || idxs[0] != 0)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t k = 0; with_locs && k < nlocs; k++) {
    if ((k > 0 && idxs[k] <= idxs[k - 1]) || idxs[k] >= count ||
        (rc = location_check(locs[k])) != CUDA_SUCCESS) {
      return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (size_t i = 0; i < count; i++) {
    struct fk_alloc *a;
    if ((rc = managed_range(dptrs[i], sizes[i], &a)) != CUDA_SUCCESS) {
      return rc;
    }
  }
  return CUDA_SUCCESS;
}

static CUresult batch(CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *locs,
                      size_t *idxs, size_t nlocs, unsigned long long flags, CUstream h, int ptsz,
                      int discarding, int prefetching) {
  struct CUstream_st *s;
  CUresult rc =
      batch_check(dptrs, sizes, count, locs, idxs, nlocs, prefetching, flags, h, ptsz, &s);
  if (rc != CUDA_SUCCESS || s->cap != NULL) {
    return rc;
  }
  fk_stream_reach(s, fk.seq);
  size_t k = 0;
  for (size_t i = 0; i < count; i++) {
    struct fk_alloc *a = fk_mem_find((uintptr_t)dptrs[i]);
    if (discarding) {
      to_host(a, dptrs[i], sizes[i], 1);
    }
    if (!prefetching) {
      continue;
    }
    while (k + 1 < nlocs && idxs[k + 1] <= i) {
      k++;
    }
    if (locs[k].type == CU_MEM_LOCATION_TYPE_DEVICE) {
      size_t i0, i1;
      pages_of(a, (uintptr_t)dptrs[i], sizes[i], &i0, &i1);
      bring(a, i0, i1, locs[k].id, 0, on_prefetch);
    } else {
      to_host(a, dptrs[i], sizes[i], 0);
    }
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                        CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
                                        size_t numPrefetchLocs, unsigned long long flags,
                                        CUstream hStream) {
  FK_BODY(FK_NEED_INIT, batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs,
                              flags, hStream, 0, 0, 1));
}

FK_API CUresult cuMemPrefetchBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                             CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
                                             size_t numPrefetchLocs, unsigned long long flags,
                                             CUstream hStream) {
  FK_BODY(FK_NEED_INIT, batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs,
                              flags, hStream, 1, 0, 1));
}

FK_API CUresult cuMemDiscardBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                       unsigned long long flags, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, batch(dptrs, sizes, count, NULL, NULL, 0, flags, hStream, 0, 1, 0));
}

FK_API CUresult cuMemDiscardBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                            unsigned long long flags, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, batch(dptrs, sizes, count, NULL, NULL, 0, flags, hStream, 1, 1, 0));
}

FK_API CUresult cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                                  CUmemLocation *prefetchLocs,
                                                  size_t *prefetchLocIdxs, size_t numPrefetchLocs,
                                                  unsigned long long flags, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs,
                              flags, hStream, 0, 1, 1));
}

FK_API CUresult cuMemDiscardAndPrefetchBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes,
                                                       size_t count, CUmemLocation *prefetchLocs,
                                                       size_t *prefetchLocIdxs,
                                                       size_t numPrefetchLocs,
                                                       unsigned long long flags, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs,
                              flags, hStream, 1, 1, 1));
}

/* ---- Test hook. ---- */

FK_API CUresult fakecudaManagedUsage(int dev, fakecuda_managed_t *out) {
  CUresult rc = CUDA_SUCCESS;
  pthread_mutex_lock(&fk.lock);
  if (!fk.initialized || fk.forked || fk.deinitialized) {
    rc = CUDA_ERROR_NOT_INITIALIZED;
  } else if (dev < 0 || dev >= fk.ndev) {
    rc = CUDA_ERROR_INVALID_DEVICE;
  } else if (out == NULL) {
    rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    const struct fk_device *d = &fk.dev[dev];
    *out = (fakecuda_managed_t){.resident = d->managed,
                                .peak = d->managed_peak,
                                .migrated_in = d->migrated_in,
                                .migrated_out = d->migrated_out};
  }
  pthread_mutex_unlock(&fk.lock);
  return rc;
}
