/* Device memory of the fake driver: the address space, the registry of allocations, cuMemAlloc
 * and friends (stream-ordered pools: fk_pool.c), managed and pinned host memory, cuMemGetInfo,
 * cuMemGetAddressRange and pointer attributes.
 *
 * Address space: cuInit reserves one PROT_NONE, MAP_NORESERVE mapping holding, per device, a
 * region of twice its memory for cuMemAlloc-style allocations (first fit, FK_ALLOC_ALIGN
 * aligned), then a region for cuMemAddressReserve. Device addresses therefore never collide
 * with host memory. With FAKECUDA_BACKING=1 the device regions are a shared mapping of one
 * memfd (so another process can map an exported allocation's bytes: fk_ipc.c), and the pages
 * of live device allocations are made read/write (and punched out of the file again when
 * freed) so copies and memsets move real bytes; without it device bytes are never touched. Managed
 * and pinned host memory are ordinary anonymous mappings, always accessible (which managed pages
 * a device holds is fk_managed.c's model, counted through fk_mem_take). Registry: an array of
 * allocations sorted by base address.
 *
 * Accounting: every path that holds device memory (allocations, pools, VMM, arrays, graph memory,
 * module variables, the driver's own memory for contexts and images) takes and gives it through
 * fk_mem_take / fk_mem_give, the one point where it is admitted: against this process's device, or
 * with FAKECUDA_MACHINE against the device the machine's processes share (fk_machine.c), where
 * this process's slot mirrors used + driver + rounding.
 *
 * Pages (with the driver's memory modelled): a cuMemAlloc allocation of a page or more takes whole
 * pages of its own, page-aligned; a smaller one is packed with the others into shared pages (it
 * never straddles two), and a page is held while any of them lies in it. Their bytes count as the
 * program's, the rest of the pages as rounding. small_pages keeps the held shared pages.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/fakecuda/fk.h"
#include "tests/fakecuda/fk_machine.h"

#define PAGE ((uintptr_t)4096)

struct fk_alloc **fk_allocs;
size_t fk_nallocs;
static size_t capallocs;
static void *reservation;
static size_t reservation_size;
static struct fk_machine machine; /* FAKECUDA_MACHINE: the ledger, once joined */

struct small_page {
  uintptr_t base;
  size_t allocs; /* small allocations in it */
};
static struct small_page *small_pages; /* sorted by base */
static size_t nsmall, capsmall;

static void paged_release(const struct fk_alloc *a);

static uintptr_t round_up(uintptr_t v, uintptr_t a) {
  return (v + a - 1) / a * a;
}

static uintptr_t round_down(uintptr_t v, uintptr_t a) {
  return v / a * a;
}

size_t fk_mem_held(int dev) {
  const struct fk_device *d = &fk.dev[dev];
  return d->used + d->driver + d->rounding;
}

/* The device's memory this process does not hold. */
static size_t own_free(int dev) {
  return fk.dev[dev].total - fk_mem_held(dev);
}

CUresult fk_mem_init(void) {
  size_t total = 0, sum = 0;
  for (int d = 0; d < fk.ndev; d++) {
    fk.dev[d].va_size = round_up(2 * fk.dev[d].total, FK_GRANULARITY);
    total += fk.dev[d].va_size;
    sum += fk.dev[d].total;
  }
  fk.vmm_size = round_up(4 * sum, FK_GRANULARITY) + ((size_t)16 << 30);
  total += fk.vmm_size;
  void *p = mmap(NULL, total + FK_GRANULARITY, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    fk_log("error: cannot reserve %zu bytes of address space", total);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  reservation = p;
  reservation_size = total + FK_GRANULARITY;
  uintptr_t base = round_up((uintptr_t)p, FK_GRANULARITY);
  fk.va_base = base;
  fk.va_size = total;
  for (int d = 0; d < fk.ndev; d++) {
    fk.dev[d].va_base = base;
    base += fk.dev[d].va_size;
  }
  fk.vmm_base = base;
  fk.dev_fd = -1;
  if (fk.cfg.backing) {
    size_t len = fk.vmm_base - fk.va_base;
    int fd = memfd_create("fakecuda-device", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0 ||
        mmap((void *)fk.va_base, len, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
      fk_log("error: cannot back %zu bytes of device memory", len);
      if (fd >= 0) {
        close(fd);
      }
      return CUDA_ERROR_OPERATING_SYSTEM;
    }
    fk.dev_fd = fd;
  }
  return CUDA_SUCCESS;
}

int fk_mem_map_pages(uintptr_t addr, size_t len, int fd, uint64_t off) {
  void *p = fd >= 0 ? mmap((void *)addr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
                           (off_t)off)
            : fk.dev_fd >= 0 ? mmap((void *)addr, len, PROT_NONE, MAP_SHARED | MAP_FIXED, fk.dev_fd,
                                    (off_t)(addr - fk.va_base))
                             : mmap((void *)addr, len, PROT_NONE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  return p == MAP_FAILED ? -1 : 0;
}

int fk_mem_in_reservation(uintptr_t p) {
  return fk.va_size != 0 && p >= fk.va_base && p - fk.va_base < fk.va_size;
}

/* Index of the first allocation whose base is >= p. */
static size_t lower_bound(uintptr_t p) {
  size_t lo = 0, hi = fk_nallocs;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (fk_allocs[mid]->base < p) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

struct fk_alloc *fk_mem_find(uintptr_t p) {
  size_t i = lower_bound(p + 1); /* first with base > p */
  if (i == 0) {
    return NULL;
  }
  struct fk_alloc *a = fk_allocs[i - 1];
  return p - a->base < a->size ? a : NULL;
}

struct fk_alloc *fk_mem_by_id(unsigned long long id) {
  for (size_t i = 0; i < fk_nallocs; i++) {
    if (fk_allocs[i]->id == id) {
      return fk_allocs[i];
    }
  }
  return NULL;
}

void fk_mem_insert(struct fk_alloc *a) {
  fk_push((void ***)&fk_allocs, &fk_nallocs, &capallocs, a); /* grow by one */
  size_t i = lower_bound(a->base);
  memmove(&fk_allocs[i + 1], &fk_allocs[i], (fk_nallocs - 1 - i) * sizeof *fk_allocs);
  fk_allocs[i] = a;
}

static void registry_remove(struct fk_alloc *a) {
  size_t i = lower_bound(a->base);
  while (i < fk_nallocs && fk_allocs[i] != a) {
    i++;
  }
  if (i < fk_nallocs) {
    memmove(&fk_allocs[i], &fk_allocs[i + 1], (fk_nallocs - 1 - i) * sizeof *fk_allocs);
    fk_nallocs--;
  }
}

/* First fit of span bytes, align-aligned, in [lo, hi) between registered allocations. */
uintptr_t fk_mem_carve(uintptr_t lo, uintptr_t hi, size_t span, size_t align) {
  uintptr_t cur = lo;
  for (size_t i = lower_bound(lo); i < fk_nallocs && fk_allocs[i]->base < hi; i++) {
    uintptr_t start = round_up(cur, align);
    if (start + span <= fk_allocs[i]->base - fk_allocs[i]->lead) {
      return start;
    }
    uintptr_t end = fk_allocs[i]->base + fk_allocs[i]->span;
    cur = end > cur ? end : cur;
  }
  uintptr_t start = round_up(cur, align);
  return start + span <= hi && start + span > start ? start : 0;
}

struct fk_alloc *fk_mem_new(int kind, uintptr_t base, size_t size, size_t span, int dev) {
  struct fk_alloc *a = calloc(1, sizeof *a);
  if (a == NULL) {
    fk_log("error: out of host memory");
    abort();
  }
  a->kind = kind;
  a->base = base;
  a->size = size;
  a->span = span;
  a->dev = dev;
  a->id = fk_new_id();
  fk_mem_insert(a);
  return a;
}

/* Makes the host pages of a device allocation's span inaccessible again, except pages it shares
 * with a neighbour that is still alive. Call after removing a from the registry. */
static void pages_release(const struct fk_alloc *a) {
  uintptr_t lo = round_down(a->base, PAGE), hi = round_up(a->base + a->span, PAGE);
  size_t i = lower_bound(a->base);
  if (i > 0 && fk_allocs[i - 1]->base + fk_allocs[i - 1]->span > lo) {
    lo = round_up(a->base, PAGE);
  }
  if (i < fk_nallocs && fk_allocs[i]->base < hi) {
    hi = round_down(a->base + a->span, PAGE);
  }
  if (lo < hi) {
    if (fk.dev_fd >= 0) {
      fallocate(fk.dev_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(lo - fk.va_base),
                (off_t)(hi - lo));
    } else {
      madvise((void *)lo, hi - lo, MADV_DONTNEED);
    }
    mprotect((void *)lo, hi - lo, PROT_NONE);
  }
}

void fk_mem_unplace(struct fk_alloc *a) {
  registry_remove(a);
  if (fk.cfg.backing) {
    pages_release(a);
  }
  free(a->maps);
  free(a);
}

void fk_mem_release(struct fk_alloc *a) {
  registry_remove(a);
  switch (a->kind) {
  case FK_K_DEVICE:
  case FK_K_ASYNC:
  case FK_K_MODULE:
    if (a->kind == FK_K_ASYNC) {
      fk_pool_give_back(a);
    } else if (a->kind == FK_K_DEVICE && fk.cfg.driver_memory) {
      paged_release(a);
    } else {
      fk_mem_give(a->dev, a->span, a->kind == FK_K_MODULE ? FK_MEM_DRIVER : FK_MEM_PROGRAM);
    }
    if (fk.cfg.backing) {
      pages_release(a);
    }
    break;
  case FK_K_MANAGED:
  case FK_K_HOST:
    if (a->kind == FK_K_MANAGED) {
      fk_managed_release(a);
    }
    munmap((void *)a->base, a->span);
    break;
  case FK_K_IPC:
    if (fk.cfg.backing) {
      fk_mem_map_pages(a->base - a->lead, a->lead + a->span, -1, 0);
    }
    break;
  case FK_K_GRAPH:
    if (a->graph_phys) {
      fk_mem_give(a->dev, a->span, FK_MEM_PROGRAM);
      fk.dev[a->dev].free_calls++;
      if (fk.cfg.backing) {
        pages_release(a);
      }
    }
    break;
  default:
    break;
  }
  free(a->maps);
  free(a);
}

void fk_mem_free_ctx(struct CUctx_st *c, int pools) {
  for (size_t i = 0; i < fk_nallocs;) {
    struct fk_alloc *a = fk_allocs[i];
    int mine =
        a->ctx == c && (a->kind == FK_K_DEVICE || a->kind == FK_K_MANAGED || a->kind == FK_K_HOST ||
                        a->kind == FK_K_IPC || a->kind == FK_K_GRAPH);
    int pool = pools && a->kind == FK_K_ASYNC && a->dev == c->dev;
    if (mine || pool) {
      fk_mem_release(a); /* shifts the array down: stay at i */
    } else {
      i++;
    }
  }
  if (pools) {
    fk_pool_trim_device(c->dev);
  }
}

/* Makes a graph allocation's pages inaccessible again (its neighbours' shared pages kept). */
static void graph_pages_release(struct fk_alloc *a) {
  if (fk.cfg.backing) {
    registry_remove(a);
    pages_release(a);
    fk_mem_insert(a);
  }
}

CUresult fk_mem_graph_memory(struct fk_alloc *a, int take) {
  struct fk_device *d = &fk.dev[a->dev];
  if (take && !a->graph_phys) {
    uintptr_t lo = round_down(a->base, PAGE), hi = round_up(a->base + a->span, PAGE);
    if (a->span > own_free(a->dev) + d->managed || /* managed pages are evicted for it */
        (fk.cfg.backing && mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE) != 0)) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (fk_mem_take(a->dev, a->span, FK_MEM_PROGRAM) != CUDA_SUCCESS) {
      graph_pages_release(a);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    d->alloc_calls++;
    a->graph_phys = 1;
  } else if (!take && a->graph_phys) {
    fk_mem_give(a->dev, a->span, FK_MEM_PROGRAM);
    d->free_calls++;
    a->graph_phys = 0;
    graph_pages_release(a);
  }
  return CUDA_SUCCESS;
}

size_t fk_dev_free(int dev) {
  if (machine.l != NULL) {
    struct fk_machine_usage u;
    fk_machine_usage(&machine, dev, &u);
    return u.used < u.total ? u.total - u.used : 0;
  }
  return own_free(dev);
}

/* The figure of d the peak follows: everything with the driver's memory modelled, the
 * program's allocations alone without. */
static void note_peak(struct fk_device *d, int dev) {
  size_t now = fk.cfg.driver_memory ? fk_mem_held(dev) : d->used;
  d->peak = now > d->peak ? now : d->peak;
}

static size_t *figure(struct fk_device *d, int whose) {
  return whose == FK_MEM_DRIVER ? &d->driver : whose == FK_MEM_ROUNDING ? &d->rounding : &d->used;
}

CUresult fk_mem_take(int dev, size_t bytes, int whose) {
  struct fk_device *d = &fk.dev[dev];
  fk_managed_make_room(dev, bytes);
  int fits = machine.l != NULL ? bytes == 0 || fk_machine_take(&machine, dev, bytes) == 0
                               : bytes <= own_free(dev);
  if (!fits) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *figure(d, whose) += bytes;
  note_peak(d, dev);
  return CUDA_SUCCESS;
}

void fk_mem_give(int dev, size_t bytes, int whose) {
  struct fk_device *d = &fk.dev[dev];
  if (machine.l != NULL && bytes > 0) {
    fk_machine_give(&machine, dev, bytes);
  }
  *figure(d, whose) -= bytes;
}

/* Counts bytes of held pages as the program's allocation (to_program) or back as rounding: the
 * device holds the same memory either way. */
static void shift(int dev, size_t bytes, int to_program) {
  struct fk_device *d = &fk.dev[dev];
  d->used = to_program ? d->used + bytes : d->used - bytes;
  d->rounding = to_program ? d->rounding - bytes : d->rounding + bytes;
  note_peak(d, dev);
}

CUresult fk_mem_machine_join(void) {
  if (fk.cfg.machine[0] == '\0' || machine.l != NULL) {
    return CUDA_SUCCESS;
  }
  char err[512];
  int rc = fk_machine_open(fk.cfg.machine, &fk.cfg, &machine, err, sizeof err);
  if (rc == 0 && fk_machine_join(&machine) != 0) {
    (void)snprintf(err, sizeof err,
                   "machine ledger %s: its %u process slots are all held by live "
                   "processes",
                   machine.path, FK_MACHINE_SLOTS);
    fk_machine_close(&machine);
    rc = -ENOSPC;
  }
  if (rc == 0) {
    return CUDA_SUCCESS;
  }
  /* The ledger plays the kernel driver's part: one that disagrees with this process is the
   * "display driver and CUDA driver" mismatch cuInit documents. */
  CUresult cr = rc == -EPROTO   ? CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
                : rc == -ENOSPC ? CUDA_ERROR_OUT_OF_MEMORY
                                : CUDA_ERROR_OPERATING_SYSTEM;
  fk_log("error: %s; cuInit fails with %s", err,
         cr == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH ? "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"
         : cr == CUDA_ERROR_OUT_OF_MEMORY        ? "CUDA_ERROR_OUT_OF_MEMORY"
                                                 : "CUDA_ERROR_OPERATING_SYSTEM");
  return cr;
}

void fk_mem_machine_contexts(int dev, int n) {
  if (machine.l != NULL) {
    fk_machine_contexts(&machine, dev, (unsigned)n);
  }
}

int fk_mem_machine_usage(int dev, struct fk_machine_usage *u) {
  if (machine.l == NULL) {
    return -1;
  }
  fk_machine_usage(&machine, dev, u);
  return 0;
}

void fk_mem_machine_leave(void) {
  fk_machine_close(&machine);
}

/* Registers an allocation at base (made accessible with backing); NULL when that fails. */
static struct fk_alloc *place_at(int kind, int dev, uintptr_t base, size_t size, size_t span) {
  if (fk.cfg.backing &&
      mprotect((void *)round_down(base, PAGE), round_up(base + span, PAGE) - round_down(base, PAGE),
               PROT_READ | PROT_WRITE) != 0) {
    return NULL;
  }
  return fk_mem_new(kind, base, size, span, dev);
}

struct fk_alloc *fk_mem_place(int kind, int dev, size_t size, size_t span) {
  struct fk_device *d = &fk.dev[dev];
  uintptr_t base = fk_mem_carve(d->va_base, d->va_base + d->va_size, span, FK_ALLOC_ALIGN);
  return base == 0 ? NULL : place_at(kind, dev, base, size, span);
}

/* ---- Pages (the file's comment). ---- */

/* Index of the first held shared page whose base is >= b. */
static size_t small_lower(uintptr_t b) {
  size_t lo = 0, hi = nsmall;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (small_pages[mid].base < b) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

static struct small_page *small_find(uintptr_t b) {
  size_t i = small_lower(b);
  return i < nsmall && small_pages[i].base == b ? &small_pages[i] : NULL;
}

static void small_add(uintptr_t b) {
  if (nsmall == capsmall) {
    size_t ncap = capsmall ? capsmall * 2 : 64;
    struct small_page *n = realloc(small_pages, ncap * sizeof *n);
    if (n == NULL) {
      fk_log("error: out of host memory");
      abort();
    }
    small_pages = n;
    capsmall = ncap;
  }
  size_t i = small_lower(b);
  memmove(&small_pages[i + 1], &small_pages[i], (nsmall - i) * sizeof *small_pages);
  small_pages[i] = (struct small_page){b, 1};
  nsmall++;
}

/* Drops one allocation from the shared page at b; true when the page is left empty (dropped). */
static int small_drop(uintptr_t b) {
  size_t i = small_lower(b);
  if (i == nsmall || small_pages[i].base != b || --small_pages[i].allocs > 0) {
    return 0;
  }
  memmove(&small_pages[i], &small_pages[i + 1], (nsmall - 1 - i) * sizeof *small_pages);
  nsmall--;
  return 1;
}

/* Where a small allocation of span bytes goes on dev: in a shared page already held when one
 * has room (packing), else the first place that does not straddle two pages; 0: none. */
static uintptr_t small_place(int dev, size_t span) {
  const struct fk_device *d = &fk.dev[dev];
  size_t page = fk.cfg.page;
  uintptr_t lo = d->va_base, hi = d->va_base + d->va_size;
  for (size_t i = small_lower(lo); i < nsmall && small_pages[i].base < hi; i++) {
    uintptr_t b =
        fk_mem_carve(small_pages[i].base, small_pages[i].base + page, span, FK_ALLOC_ALIGN);
    if (b != 0) {
      return b;
    }
  }
  for (;;) {
    uintptr_t b = fk_mem_carve(lo, hi, span, FK_ALLOC_ALIGN);
    if (b == 0 || round_down(b, page) == round_down(b + span - 1, page)) {
      return b;
    }
    lo = round_down(b + span - 1, page);
  }
}

/* A cuMemAlloc allocation of size (bytes: size rounded to 512) held in pages. */
static CUresult paged_alloc(int dev, size_t size, size_t bytes, struct fk_alloc **out) {
  size_t page = fk.cfg.page;
  int small = bytes < page;
  size_t span = small ? bytes : round_up(bytes, page);
  const struct fk_device *d = &fk.dev[dev];
  if (span < bytes) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  uintptr_t base = small ? small_place(dev, span)
                         : fk_mem_carve(d->va_base, d->va_base + d->va_size, span, page);
  struct small_page *sp = small && base != 0 ? small_find(round_down(base, page)) : NULL;
  size_t need = !small ? span : sp != NULL ? 0 : page;
  struct fk_alloc *a =
      base != 0 && need <= own_free(dev) ? place_at(FK_K_DEVICE, dev, base, size, span) : NULL;
  if (a == NULL) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (need > 0 && fk_mem_take(dev, need, FK_MEM_ROUNDING) != CUDA_SUCCESS) {
    fk_mem_unplace(a);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (sp != NULL) {
    sp->allocs++;
  } else if (small) {
    small_add(round_down(base, page));
  }
  shift(dev, bytes, 1);
  *out = a;
  return CUDA_SUCCESS;
}

/* Gives back a paged allocation's memory: its pages, or its share of a shared page. */
static void paged_release(const struct fk_alloc *a) {
  size_t page = fk.cfg.page, bytes = round_up(a->size, FK_ALLOC_ALIGN);
  shift(a->dev, bytes, 0);
  if (bytes >= page) {
    fk_mem_give(a->dev, a->span, FK_MEM_ROUNDING);
  } else if (small_drop(round_down(a->base, page))) {
    fk_mem_give(a->dev, page, FK_MEM_ROUNDING);
  }
}

CUresult fk_mem_device_alloc(int kind, int dev, size_t size, struct CUctx_st *c,
                             struct fk_alloc **out) {
  size_t span = round_up(size, FK_ALLOC_ALIGN);
  if (span < size || span > own_free(dev) + fk.dev[dev].managed) {
    return CUDA_ERROR_OUT_OF_MEMORY; /* cannot fit even without the other processes */
  }
  struct fk_alloc *a = NULL;
  if (kind == FK_K_DEVICE && fk.cfg.driver_memory) {
    CUresult rc = paged_alloc(dev, size, span, &a);
    if (rc != CUDA_SUCCESS) {
      return rc;
    }
  } else {
    a = fk_mem_place(kind, dev, size, span);
    if (a == NULL) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (fk_mem_take(dev, span, kind == FK_K_MODULE ? FK_MEM_DRIVER : FK_MEM_PROGRAM) !=
        CUDA_SUCCESS) {
      fk_mem_unplace(a);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  a->ctx = c;
  if (kind != FK_K_MODULE) {
    fk.dev[dev].alloc_calls++;
  }
  *out = a;
  return CUDA_SUCCESS;
}

/* Maps page-rounded host memory for managed / pinned allocations. */
static CUresult host_alloc(int kind, size_t size, unsigned flags, struct CUctx_st *c,
                           struct fk_alloc **out) {
  size_t span = round_up(size, PAGE);
  if (span < size) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  struct fk_alloc *a = fk_mem_new(kind, (uintptr_t)p, size, span, c->dev);
  a->ctx = c;
  a->flags = flags;
  *out = a;
  return CUDA_SUCCESS;
}

/* ---- cuMemAlloc, cuMemAllocPitch, cuMemFree, cuMemGetInfo. ---- */

static CUresult mem_alloc(CUdeviceptr *dptr, size_t size) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc == CUDA_SUCCESS) {
    rc = fk_capture_unsafe();
  }
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (dptr == NULL || size == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct fk_alloc *a;
  rc = fk_mem_device_alloc(FK_K_DEVICE, c->dev, size, c, &a);
  if (rc == CUDA_SUCCESS) {
    *dptr = a->base;
  }
  return rc;
}

FK_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  FK_BODY(FK_NEED_INIT, mem_alloc(dptr, bytesize));
}

static CUresult mem_alloc_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                unsigned elem) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc == CUDA_SUCCESS) {
    rc = fk_capture_unsafe();
  }
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (dptr == NULL || pitch == NULL || width == 0 || height == 0 ||
      (elem != 4 && elem != 8 && elem != 16)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t p = round_up(width, FK_PITCH_ALIGN);
  if (p < width || p > 2147483647u) { /* CU_DEVICE_ATTRIBUTE_MAX_PITCH */
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (height > SIZE_MAX / p) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  struct fk_alloc *a;
  rc = fk_mem_device_alloc(FK_K_DEVICE, c->dev, p * height, c, &a);
  if (rc == CUDA_SUCCESS) {
    *dptr = a->base;
    *pitch = p;
  }
  return rc;
}

FK_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                   size_t Height, unsigned int ElementSizeBytes) {
  FK_BODY(FK_NEED_INIT, mem_alloc_pitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
}

static CUresult mem_free(CUdeviceptr dptr) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc == CUDA_SUCCESS) {
    rc = fk_capture_unsafe();
  }
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (dptr == 0) {
    return CUDA_SUCCESS; /* free(NULL) semantics, as the real driver */
  }
  struct fk_alloc *a = fk_mem_find((uintptr_t)dptr);
  if (a != NULL && a->kind == FK_K_GRAPH && a->base == (uintptr_t)dptr) {
    fk_sync_device(a->dev);
    return fk_graph_free(a, NULL); /* back to the graph pool */
  }
  if (a == NULL || a->base != (uintptr_t)dptr || a->freeing ||
      (a->kind != FK_K_DEVICE && a->kind != FK_K_ASYNC && a->kind != FK_K_MANAGED)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  /* cuMemFree waits for outstanding device work, except for stream-ordered allocations
   * ("will not perform any implicit synchronization", cuda.h). */
  if (a->kind != FK_K_ASYNC) {
    fk_sync_device(a->dev);
  }
  if (a->kind != FK_K_MANAGED) {
    fk.dev[a->dev].free_calls++;
  }
  fk_mem_release(a);
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  FK_BODY(FK_NEED_INIT, mem_free(dptr));
}

static CUresult mem_get_info(size_t *free_b, size_t *total_b, unsigned *free32, unsigned *total32) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct fk_device *d = &fk.dev[c->dev];
  size_t f = fk_dev_free((int)(d - fk.dev)), t = d->total;
  if (free_b != NULL && total_b != NULL) {
    *free_b = f;
    *total_b = t;
    return CUDA_SUCCESS;
  }
  if (free32 != NULL && total32 != NULL) {
    *free32 = f > 0xffffffffu ? 0xffffffffu : (unsigned)f;
    *total32 = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

FK_API CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
  FK_BODY(FK_NEED_INIT, mem_get_info(free, total, NULL, NULL));
}

FK_API CUresult cuMemGetInfo(unsigned int *free, unsigned int *total) {
  FK_BODY(FK_NEED_INIT, mem_get_info(NULL, NULL, free, total));
}

/* ---- Managed and pinned host memory. ---- */

static CUresult mem_alloc_managed(CUdeviceptr *dptr, size_t size, unsigned flags) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc == CUDA_SUCCESS) {
    rc = fk_capture_unsafe();
  }
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (dptr == NULL || size == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct fk_alloc *a;
  rc = host_alloc(FK_K_MANAGED, size, flags, c, &a);
  if (rc == CUDA_SUCCESS) {
    fk_managed_new(a);
    *dptr = a->base;
  }
  return rc;
}

FK_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
  FK_BODY(FK_NEED_INIT, mem_alloc_managed(dptr, bytesize, flags));
}

static CUresult mem_host_alloc(void **pp, size_t size, unsigned flags) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc == CUDA_SUCCESS) {
    rc = fk_capture_unsafe();
  }
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  unsigned known =
      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (pp == NULL || size == 0 || (flags & ~known) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct fk_alloc *a;
  rc = host_alloc(FK_K_HOST, size, flags, c, &a);
  if (rc == CUDA_SUCCESS) {
    *pp = (void *)a->base;
  }
  return rc;
}

FK_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags) {
  FK_BODY(FK_NEED_INIT, mem_host_alloc(pp, bytesize, Flags));
}

FK_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) {
  FK_BODY(FK_NEED_INIT, mem_host_alloc(pp, bytesize, 0));
}

static CUresult mem_free_host(void *p) {
  if (p == NULL) {
    return CUDA_SUCCESS; /* free(NULL) semantics, as the real driver */
  }
  struct fk_alloc *a = fk_mem_find((uintptr_t)p);
  if (a == NULL || a->kind != FK_K_HOST || a->base != (uintptr_t)p) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult rc = fk_capture_unsafe();
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  fk_sync_all(); /* pinned memory may be the target of pending copies on any device */
  fk_mem_release(a);
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemFreeHost(void *p) {
  FK_BODY(FK_NEED_INIT, mem_free_host(p));
}

static CUresult host_device_pointer(CUdeviceptr *pdptr, void *p, unsigned flags) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct fk_alloc *a = fk_mem_find((uintptr_t)p);
  if (pdptr == NULL || flags != 0 || a == NULL || a->kind != FK_K_HOST) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pdptr = (CUdeviceptr)(uintptr_t)p; /* unified addressing: same address */
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags) {
  FK_BODY(FK_NEED_INIT, host_device_pointer(pdptr, p, Flags));
}

static CUresult host_get_flags(unsigned *flags, void *p) {
  struct fk_alloc *a = fk_mem_find((uintptr_t)p);
  if (flags == NULL || a == NULL || a->kind != FK_K_HOST) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *flags = a->flags;
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p) {
  FK_BODY(FK_NEED_INIT, host_get_flags(pFlags, p));
}

/* ---- Address ranges and pointer attributes. ---- */

static CUresult address_range(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct fk_alloc *a = fk_mem_find((uintptr_t)dptr);
  if (a == NULL || a->freeing) {
    return CUDA_ERROR_NOT_FOUND;
  }
  uintptr_t base = a->base;
  size_t size = a->size;
  if (a->kind == FK_K_RESERVE) {
    /* For VMM the range is the mapping that holds dptr, not the reservation. */
    struct fk_map *m = fk_vmm_map_at(a, (uintptr_t)dptr);
    if (m == NULL) {
      return CUDA_ERROR_NOT_FOUND;
    }
    base = m->va;
    size = m->size;
  }
  if (pbase != NULL) {
    *pbase = base;
  }
  if (psize != NULL) {
    *psize = size;
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
  FK_BODY(FK_NEED_INIT, address_range(pbase, psize, dptr));
}

#define ATTR_IS_HW_DECOMPRESS_CAPABLE 21 /* CUDA 13.0, not in shim/base/cudadefs.h */

static void put_u32(void *data, unsigned v) {
  memcpy(data, &v, sizeof v);
}

static void put_u64(void *data, unsigned long long v) {
  memcpy(data, &v, sizeof v);
}

static void put_ptr(void *data, const void *v) {
  memcpy(data, &v, sizeof v);
}

/* One attribute of a known allocation a (p inside it). */
static CUresult attribute(void *data, int attr, uintptr_t p, struct fk_alloc *a) {
  struct fk_map *m = a->kind == FK_K_RESERVE ? fk_vmm_map_at(a, p) : NULL;
  int device_mem = a->kind == FK_K_DEVICE || a->kind == FK_K_ASYNC || a->kind == FK_K_IPC ||
                   a->kind == FK_K_MODULE || m != NULL;
  if (a->kind == FK_K_RESERVE && m == NULL && attr != CU_POINTER_ATTRIBUTE_MAPPED &&
      attr != CU_POINTER_ATTRIBUTE_RANGE_START_ADDR && attr != CU_POINTER_ATTRIBUTE_RANGE_SIZE) {
    return CUDA_ERROR_INVALID_VALUE; /* reserved but unmapped */
  }
  struct CUctx_st *cur = NULL;
  int dev = m != NULL ? m->phys->prop.location.id : a->dev;
  switch (attr) {
  case CU_POINTER_ATTRIBUTE_CONTEXT:
    put_ptr(data, a->ctx); /* NULL for pool and VMM memory: no owning context */
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    put_u32(data, a->kind == FK_K_HOST ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: {
    CUresult rc = fk_ctx_current(&cur);
    if (rc != CUDA_SUCCESS) {
      return rc;
    }
    put_u64(data, p);
    return CUDA_SUCCESS;
  }
  case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    if (device_mem) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    put_ptr(data, (void *)p);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
    return CUDA_ERROR_NOT_SUPPORTED;
  case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
  case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
  case ATTR_IS_HW_DECOMPRESS_CAPABLE:
    put_u32(data, 0);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    put_u64(data, m != NULL ? m->id : a->id);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    put_u32(data, a->kind == FK_K_MANAGED);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    put_u32(data, (unsigned)dev);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    put_u32(data, a->kind == FK_K_DEVICE);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    put_u64(data, a->base); /* the reservation for VMM, as documented */
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    put_u64(data, a->size);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MAPPED:
    put_u32(data, a->kind != FK_K_RESERVE || m != NULL);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    put_u64(data, m != NULL ? (unsigned long long)m->phys->prop.requestedHandleTypes : 0);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: {
    unsigned flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (m != NULL) {
      unsigned who = (unsigned)(fk_ctx_current(&cur) == CUDA_SUCCESS ? cur->dev : dev);
      flags = (unsigned)((m->wmask >> who & 1)   ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                         : (m->rmask >> who & 1) ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                                 : CU_MEM_ACCESS_FLAGS_PROT_NONE);
    }
    put_u32(data, flags);
    return CUDA_SUCCESS;
  }
  case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    put_ptr(data, a->kind == FK_K_ASYNC ? a->pool : NULL);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
    put_u64(data, m != NULL ? m->size : a->size);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
    put_u64(data, m != NULL ? m->va : a->base);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
    put_u64(data, m != NULL ? m->phys->id : a->id);
    return CUDA_SUCCESS;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

static struct fk_alloc *live_at(uintptr_t p) {
  struct fk_alloc *a = fk_mem_find(p);
  return (a != NULL && !a->freeing) ? a : NULL;
}

static CUresult pointer_attribute(void *data, int attr, CUdeviceptr ptr) {
  if (data == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct fk_alloc *a = live_at((uintptr_t)ptr);
  if (a == NULL) {
    return CUDA_ERROR_INVALID_VALUE; /* "not allocated by ... a context using UVA" */
  }
  return attribute(data, attr, (uintptr_t)ptr, a);
}

FK_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute_, CUdeviceptr ptr) {
  FK_BODY(FK_NEED_INIT, pointer_attribute(data, (int)attribute_, ptr));
}

/* The attributes cuPointerGetAttributes documents, and what it reports for memory it does
 * not know ("default NULL values"; the device ordinal reads -2, cudaInvalidDeviceId). */
static int multi_default(int attr, void *data) {
  switch (attr) {
  case CU_POINTER_ATTRIBUTE_CONTEXT:
  case CU_POINTER_ATTRIBUTE_HOST_POINTER:
  case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
    put_ptr(data, NULL);
    return 1;
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
  case CU_POINTER_ATTRIBUTE_BUFFER_ID:
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
  case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
    put_u64(data, 0);
    return 1;
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
  case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
  case CU_POINTER_ATTRIBUTE_IS_MANAGED:
  case CU_POINTER_ATTRIBUTE_MAPPED:
  case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
  case ATTR_IS_HW_DECOMPRESS_CAPABLE:
    put_u32(data, 0);
    return 1;
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    put_u32(data, (unsigned)-2);
    return 1;
  default:
    return 0;
  }
}

static CUresult pointer_attributes(unsigned n, CUpointer_attribute *attrs, void **data,
                                   CUdeviceptr ptr) {
  if (n > 0 && (attrs == NULL || data == NULL)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  char scratch[8];
  for (unsigned i = 0; i < n; i++) {
    if (!multi_default((int)attrs[i], scratch)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  struct fk_alloc *a = live_at((uintptr_t)ptr);
  for (unsigned i = 0; i < n; i++) {
    if (data[i] == NULL) {
      continue;
    }
    if (a == NULL || attribute(data[i], (int)attrs[i], (uintptr_t)ptr, a) != CUDA_SUCCESS) {
      multi_default((int)attrs[i], data[i]);
    }
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                       void **data, CUdeviceptr ptr) {
  FK_BODY(FK_NEED_INIT, pointer_attributes(numAttributes, attributes, data, ptr));
}

void fk_mem_teardown(void) {
  fk_pool_teardown();
  for (size_t i = 0; i < fk_nallocs; i++) {
    struct fk_alloc *a = fk_allocs[i];
    if (a->kind == FK_K_MANAGED) {
      fk_managed_release(a);
    }
    if (a->kind == FK_K_MANAGED || a->kind == FK_K_HOST) {
      munmap((void *)a->base, a->span);
    }
    free(a->maps);
    free(a);
  }
  free(fk_allocs);
  fk_allocs = NULL;
  fk_nallocs = capallocs = 0;
  free(small_pages);
  small_pages = NULL;
  nsmall = capsmall = 0;
  if (reservation != NULL) {
    munmap(reservation, reservation_size); /* VMM mappings inside it go too */
    reservation = NULL;
  }
  if (fk.dev_fd >= 0) {
    close(fk.dev_fd);
    fk.dev_fd = -1;
  }
  fk_mem_machine_leave();
}
