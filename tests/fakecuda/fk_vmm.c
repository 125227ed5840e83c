/* Virtual memory management: address reservations (registry entries of kind FK_K_RESERVE,
 * carved from the VMM region), physical allocations (cuMemCreate handles, charged to their
 * device), mappings of one into the other, per-device access, and POSIX file-descriptor
 * shareable handles (export to a descriptor another process can receive, import from one).
 *
 * Invariants: a physical allocation lives while it has a handle reference or a mapping, and
 * holds device memory for exactly that long (an imported one holds none of this process's).
 * Mappings of a reservation are sorted by address and never overlap. With FAKECUDA_BACKING=1
 * each physical allocation's bytes are a memfd, mapped MAP_SHARED at each of its mappings, so
 * two mappings of one handle see the same bytes; host protection follows the widest access any
 * device was granted (none until cuMemSetAccess). A shareable allocation's memfd (made at its
 * first export when there is no backing, so that unexported ones hold no descriptor) has a
 * description (struct share) in its first page, its bytes after it; an exported descriptor is
 * a duplicate of it, so an importer reads the description and, with backing, maps the bytes.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/fakecuda/fk.h"

static struct fk_phys **phys;
static size_t nphys, capphys;

static struct fk_phys *phys_find(CUmemGenericAllocationHandle h) {
  for (size_t i = 0; i < nphys; i++) {
    if (phys[i]->handle == h) {
      return phys[i];
    }
  }
  return NULL;
}

/* Frees a physical allocation once nothing refers to it. */
static void phys_maybe_free(struct fk_phys *p) {
  if (p->refs > 0 || p->maps > 0) {
    return;
  }
  for (size_t i = 0; i < nphys; i++) {
    if (phys[i] == p) {
      phys[i] = phys[--nphys];
      break;
    }
  }
  if (!p->imported) {
    fk_mem_give(p->prop.location.id, p->size, 0);
  }
  if (p->fd >= 0) {
    close(p->fd);
  }
  free(p);
}

void fk_vmm_leaked(int dev, unsigned long long *count, size_t *bytes) {
  for (size_t i = 0; i < nphys; i++) {
    if (phys[i]->prop.location.id == dev && !phys[i]->imported) {
      ++*count;
      *bytes += phys[i]->size;
    }
  }
}

struct fk_map *fk_vmm_map_at(struct fk_alloc *r, uintptr_t p) {
  for (size_t i = 0; i < r->nmaps; i++) {
    if (p >= r->maps[i].va && p - r->maps[i].va < r->maps[i].size) {
      return &r->maps[i];
    }
  }
  return NULL;
}

int fk_vmm_covered(struct fk_alloc *r, uintptr_t p, size_t n, int dev, int write) {
  uintptr_t cur = p, end = p + n;
  for (size_t i = 0; i < r->nmaps && cur < end; i++) {
    const struct fk_map *m = &r->maps[i];
    if (m->va + m->size <= cur) {
      continue;
    }
    if (m->va > cur) {
      return 0;
    }
    if (dev >= 0 && !((write ? m->wmask : m->rmask) >> dev & 1)) {
      return 0;
    }
    cur = m->va + m->size;
  }
  return cur >= end;
}

static CUresult prop_check(const CUmemAllocationProp *prop) {
  if (prop == NULL || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST ||
      prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA) {
    return CUDA_ERROR_NOT_SUPPORTED; /* host VMM: the attribute reads 0 */
  }
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (prop->location.id < 0 || prop->location.id >= fk.ndev) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  return CUDA_SUCCESS;
}

static CUresult granularity(size_t *g, const CUmemAllocationProp *prop, int option) {
  if (g == NULL || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                    option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult rc = prop_check(prop);
  if (rc == CUDA_SUCCESS) {
    *g = FK_GRANULARITY;
  }
  return rc;
}

FK_API CUresult cuMemGetAllocationGranularity(size_t *granularity_, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option) {
  FK_BODY(FK_NEED_INIT, granularity(granularity_, prop, (int)option));
}

static int is_pow2(size_t v) {
  return (v & (v - 1)) == 0;
}

static CUresult address_reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                unsigned long long flags) {
  long pg = sysconf(_SC_PAGESIZE);
  if (ptr == NULL || size == 0 || size % (size_t)pg != 0 || !is_pow2(alignment) || flags != 0 ||
      addr % (CUdeviceptr)pg != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t align = alignment > FK_GRANULARITY ? alignment : FK_GRANULARITY;
  uintptr_t lo = fk.vmm_base, hi = fk.vmm_base + fk.vmm_size, base = 0;
  /* addr is only a hint: honour it when that range is free. */
  if (addr != 0 && addr % align == 0 && addr >= lo && addr + size <= hi && addr + size > addr &&
      fk_mem_carve(addr, addr + size, size, align) == addr) {
    base = addr;
  }
  if (base == 0) {
    base = fk_mem_carve(lo, hi, size, align);
  }
  if (base == 0) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  fk_mem_new(FK_K_RESERVE, base, size, size, -1);
  *ptr = base;
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                    CUdeviceptr addr, unsigned long long flags) {
  FK_BODY(FK_NEED_INIT, address_reserve(ptr, size, alignment, addr, flags));
}

static CUresult address_free(CUdeviceptr ptr, size_t size) {
  struct fk_alloc *r = fk_mem_find((uintptr_t)ptr);
  if (r == NULL || r->kind != FK_K_RESERVE || r->base != ptr || r->size != size || r->nmaps != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  fk_mem_release(r);
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  FK_BODY(FK_NEED_INIT, address_free(ptr, size));
}

/* The first page of a shareable allocation's memfd: what an importer needs to know. */
#define SHARE_MAGIC "fakecuda-vmm-1"
struct share {
  char magic[16];
  uint64_t size, id, data_off;
  int32_t pid, dev;
  uint32_t handle_types, pad;
};

/* The handle types a device supports (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_*_SUPPORTED): a POSIX
 * file descriptor only (no Win32 on Linux, no fabric without NVLink switches and IMEX). */
#define SUPPORTED_TYPES ((unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
#define KNOWN_TYPES                                                                                \
  ((unsigned)(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_WIN32 |                \
              CU_MEM_HANDLE_TYPE_WIN32_KMT | CU_MEM_HANDLE_TYPE_FABRIC))

/* A memfd for a new allocation's bytes (size bytes at data_off), and its description when
 * shareable; -1 when none is needed or the host is out of memory. */
static int phys_memfd(const struct fk_phys *p, int shareable) {
  int fd = memfd_create(shareable ? "fakecuda-vmm-shareable" : "fakecuda-vmm", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)(p->data_off + p->size)) != 0) {
    goto fail;
  }
  if (shareable) {
    struct share h = {.size = p->size,
                      .id = p->id,
                      .data_off = p->data_off,
                      .pid = (int32_t)getpid(),
                      .dev = p->prop.location.id,
                      .handle_types = (uint32_t)p->prop.requestedHandleTypes};
    memcpy(h.magic, SHARE_MAGIC, sizeof SHARE_MAGIC);
    if (pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
      goto fail;
    }
  }
  return fd;
fail:
  if (fd >= 0) {
    close(fd);
  }
  return -1;
}

/* Registers p (refs 1) under a new handle. */
static void phys_add(struct fk_phys *p) {
  p->id = fk_new_id();
  p->handle = (CUmemGenericAllocationHandle)p->id;
  p->refs = 1;
  fk_push((void ***)&phys, &nphys, &capphys, p);
}

static CUresult mem_create(CUmemGenericAllocationHandle *handle, size_t size,
                           const CUmemAllocationProp *prop, unsigned long long flags) {
  if (handle == NULL || flags != 0 || size == 0 || size % FK_GRANULARITY != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult rc = prop_check(prop);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  unsigned types = (unsigned)prop->requestedHandleTypes;
  if (types & ~KNOWN_TYPES) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (types & ~SUPPORTED_TYPES) {
    return CUDA_ERROR_NOT_SUPPORTED; /* Win32 handles, fabric: the attributes read 0 */
  }
  struct fk_device *d = &fk.dev[prop->location.id];
  if (fk_mem_take(prop->location.id, size, 0) != CUDA_SUCCESS) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  struct fk_phys *p = calloc(1, sizeof *p);
  if (p == NULL) {
    fk_mem_give(prop->location.id, size, 0);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  int shareable = types != 0;
  p->size = size;
  p->prop = *prop;
  p->host_bytes = fk.cfg.backing;
  p->data_off = shareable ? (size_t)sysconf(_SC_PAGESIZE) : 0;
  phys_add(p);
  p->fd = -1;
  if (p->host_bytes) { /* a shareable one without backing gets its memfd at its first export */
    p->fd = phys_memfd(p, shareable);
    if (p->fd < 0) {
      nphys--;
      free(p);
      fk_mem_give(prop->location.id, size, 0);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  d->alloc_calls++;
  *handle = p->handle;
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                            const CUmemAllocationProp *prop, unsigned long long flags) {
  FK_BODY(FK_NEED_INIT, mem_create(handle, size, prop, flags));
}

static CUresult mem_release(CUmemGenericAllocationHandle handle) {
  struct fk_phys *p = phys_find(handle);
  if (p == NULL || p->refs == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (--p->refs == 0 && !p->imported && !p->released) {
    p->released = 1; /* a handle retained again and released is not a second free */
    fk.dev[p->prop.location.id].free_calls++;
  }
  phys_maybe_free(p);
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  FK_BODY(FK_NEED_INIT, mem_release(handle));
}

static CUresult mem_map(CUdeviceptr ptr, size_t size, size_t offset,
                        CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (flags != 0 || offset != 0 || size == 0 || size % FK_GRANULARITY != 0 ||
      ptr % FK_GRANULARITY != 0) {
    return CUDA_ERROR_INVALID_VALUE; /* offset: "currently must be zero" (cuda.h) */
  }
  struct fk_alloc *r = fk_mem_find((uintptr_t)ptr);
  struct fk_phys *p = phys_find(handle);
  if (r == NULL || r->kind != FK_K_RESERVE || ptr + size > r->base + r->size || p == NULL ||
      p->refs == 0 || size > p->size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t at = 0;
  while (at < r->nmaps && r->maps[at].va < ptr) {
    at++;
  }
  if ((at > 0 && r->maps[at - 1].va + r->maps[at - 1].size > ptr) ||
      (at < r->nmaps && r->maps[at].va < ptr + size)) {
    return CUDA_ERROR_INVALID_VALUE; /* only unmapped parts of a reservation can be mapped */
  }
  if (p->host_bytes && mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, p->fd,
                            (off_t)p->data_off) == MAP_FAILED) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (r->nmaps == r->capmaps) {
    size_t ncap = r->capmaps ? r->capmaps * 2 : 4;
    struct fk_map *nm = realloc(r->maps, ncap * sizeof *nm);
    if (nm == NULL) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    r->maps = nm;
    r->capmaps = ncap;
  }
  memmove(&r->maps[at + 1], &r->maps[at], (r->nmaps - at) * sizeof *r->maps);
  r->nmaps++;
  r->maps[at] = (struct fk_map){.va = ptr, .size = size, .phys = p, .id = fk_new_id()};
  p->maps++;
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle handle, unsigned long long flags) {
  FK_BODY(FK_NEED_INIT, mem_map(ptr, size, offset, handle, flags));
}

/* Indexes [first, last) of the mappings that exactly tile [ptr, ptr + size); 0 if none do. */
static int tiling(const struct fk_alloc *r, uintptr_t ptr, size_t size, size_t *first,
                  size_t *last) {
  size_t i = 0;
  while (i < r->nmaps && r->maps[i].va < ptr) {
    i++;
  }
  if (i == r->nmaps || r->maps[i].va != ptr) {
    return 0;
  }
  *first = i;
  uintptr_t cur = ptr;
  while (i < r->nmaps && r->maps[i].va == cur && cur < ptr + size) {
    cur += r->maps[i].size;
    i++;
  }
  *last = i;
  return cur == ptr + size;
}

static CUresult mem_unmap(CUdeviceptr ptr, size_t size) {
  struct fk_alloc *r = fk_mem_find((uintptr_t)ptr);
  size_t first, last;
  if (size == 0 || r == NULL || r->kind != FK_K_RESERVE || !tiling(r, ptr, size, &first, &last)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  fk_sync_all(); /* \note_sync: outstanding work on the range completes first */
  if (fk.cfg.backing) {
    mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  }
  for (size_t i = first; i < last; i++) {
    struct fk_phys *p = r->maps[i].phys;
    p->maps--;
    phys_maybe_free(p);
  }
  memmove(&r->maps[first], &r->maps[last], (r->nmaps - last) * sizeof *r->maps);
  r->nmaps -= last - first;
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  FK_BODY(FK_NEED_INIT, mem_unmap(ptr, size));
}

static CUresult set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                           size_t count) {
  if (desc == NULL || count == 0 || size == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct fk_alloc *r = fk_mem_find((uintptr_t)ptr);
  if (r == NULL || r->kind != FK_K_RESERVE || !fk_vmm_covered(r, ptr, size, -1, 0)) {
    return CUDA_ERROR_INVALID_VALUE; /* the whole range must be mapped */
  }
  for (size_t i = 0; i < count; i++) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (desc[i].location.id < 0 || desc[i].location.id >= fk.ndev) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (size_t j = 0; j < r->nmaps; j++) {
    struct fk_map *m = &r->maps[j];
    if (m->va >= ptr + size || m->va + m->size <= ptr) {
      continue;
    }
    for (size_t i = 0; i < count; i++) {
      uint64_t bit = (uint64_t)1 << desc[i].location.id;
      m->rmask = (desc[i].flags & CU_MEM_ACCESS_FLAGS_PROT_READ) ? m->rmask | bit : m->rmask & ~bit;
      m->wmask =
          desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? m->wmask | bit : m->wmask & ~bit;
    }
    if (m->phys->host_bytes) {
      int prot = m->wmask ? PROT_READ | PROT_WRITE : m->rmask ? PROT_READ : PROT_NONE;
      mprotect((void *)m->va, m->size, prot);
    }
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                               size_t count) {
  FK_BODY(FK_NEED_INIT, set_access(ptr, size, desc, count));
}

static CUresult get_access(unsigned long long *flags, const CUmemLocation *loc, CUdeviceptr ptr) {
  if (flags == NULL || loc == NULL || loc->type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (loc->id < 0 || loc->id >= fk.ndev) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  struct fk_alloc *r = fk_mem_find((uintptr_t)ptr);
  struct fk_map *m = (r != NULL && r->kind == FK_K_RESERVE) ? fk_vmm_map_at(r, ptr) : NULL;
  if (m == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  unsigned dev = (unsigned)loc->id;
  *flags = (unsigned long long)((m->wmask >> dev & 1)   ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                : (m->rmask >> dev & 1) ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                                        : CU_MEM_ACCESS_FLAGS_PROT_NONE);
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
                               CUdeviceptr ptr) {
  FK_BODY(FK_NEED_INIT, get_access(flags, location, ptr));
}

static CUresult properties(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle) {
  struct fk_phys *p = phys_find(handle);
  if (prop == NULL || p == NULL || p->refs == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *prop = p->prop;
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                       CUmemGenericAllocationHandle handle) {
  FK_BODY(FK_NEED_INIT, properties(prop, handle));
}

static CUresult retain_handle(CUmemGenericAllocationHandle *handle, void *addr) {
  struct fk_alloc *r = fk_mem_find((uintptr_t)addr);
  struct fk_map *m =
      (r != NULL && r->kind == FK_K_RESERVE) ? fk_vmm_map_at(r, (uintptr_t)addr) : NULL;
  if (handle == NULL || m == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  m->phys->refs++;
  *handle = m->phys->handle;
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
  FK_BODY(FK_NEED_INIT, retain_handle(handle, addr));
}

/* ---- Shareable handles. ---- */

static CUresult export_handle(void *out, CUmemGenericAllocationHandle handle, int type,
                              unsigned long long flags) {
  struct fk_phys *p = phys_find(handle);
  if (out == NULL || flags != 0 || p == NULL || p->refs == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
      !(p->prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
    return CUDA_ERROR_INVALID_VALUE; /* a type not requested when it was created */
  }
  if (p->fd < 0) {
    p->fd = phys_memfd(p, 1);
  }
  int fd = p->fd < 0 ? -1 : fcntl(p->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  memcpy(out, &fd, sizeof fd); /* the caller owns it and closes it */
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemExportToShareableHandle(void *shareableHandle,
                                             CUmemGenericAllocationHandle handle,
                                             CUmemAllocationHandleType handleType,
                                             unsigned long long flags) {
  FK_BODY(FK_NEED_INIT, export_handle(shareableHandle, handle, (int)handleType, flags));
}

/* The description behind descriptor fd, if the fake made it. */
static int read_share(int fd, struct share *h) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      pread(fd, h, sizeof *h, 0) != (ssize_t)sizeof *h ||
      memcmp(h->magic, SHARE_MAGIC, sizeof SHARE_MAGIC) != 0 || h->size == 0 ||
      (uint64_t)st.st_size < h->data_off + h->size) {
    return 0;
  }
  return 1;
}

static CUresult import_handle(CUmemGenericAllocationHandle *handle, void *os_handle, int type) {
  if (handle == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (type == CU_MEM_HANDLE_TYPE_WIN32 || type == CU_MEM_HANDLE_TYPE_WIN32_KMT ||
      type == CU_MEM_HANDLE_TYPE_FABRIC) {
    return CUDA_ERROR_NOT_SUPPORTED; /* types the device does not support */
  }
  struct share h;
  int fd = (int)(intptr_t)os_handle; /* "the file descriptor cast to void *" */
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !read_share(fd, &h)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (h.dev < 0 || h.dev >= fk.ndev) {
    return CUDA_ERROR_NOT_SUPPORTED; /* memory this process cannot support */
  }
  if (h.pid == (int32_t)getpid()) {
    for (size_t i = 0; i < nphys; i++) {
      if (phys[i]->id == h.id && !phys[i]->imported) { /* this process's own allocation */
        phys[i]->refs++;
        *handle = phys[i]->handle;
        return CUDA_SUCCESS;
      }
    }
  }
  struct fk_phys *p = calloc(1, sizeof *p);
  if (p == NULL) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  p->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0); /* the program may close its descriptor */
  if (p->fd < 0) {
    free(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  p->size = h.size;
  p->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p->prop.location.id = h.dev;
  p->prop.requestedHandleTypes = (CUmemAllocationHandleType)h.handle_types;
  p->host_bytes = fk.cfg.backing;
  p->imported = 1;
  p->data_off = h.data_off;
  phys_add(p);
  *handle = p->handle;
  return CUDA_SUCCESS;
}

FK_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                               CUmemAllocationHandleType shHandleType) {
  FK_BODY(FK_NEED_INIT, import_handle(handle, osHandle, (int)shHandleType));
}

void fk_vmm_teardown(void) {
  for (size_t i = 0; i < nphys; i++) {
    if (phys[i]->fd >= 0) {
      close(phys[i]->fd);
    }
    free(phys[i]);
  }
  free(phys);
  phys = NULL;
  nphys = capphys = 0;
}
