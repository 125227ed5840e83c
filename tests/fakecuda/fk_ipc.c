/* Legacy CUDA IPC of device memory: cuIpcGetMemHandle, cuIpcOpenMemHandle(_v2),
 * cuIpcCloseMemHandle, between real processes.
 *
 * A handle names the whole cuMemAlloc allocation holding the exported address (an interior
 * address exports its allocation, which an importer then opens at the allocation's base), by
 * the exporting process, the allocation's id, its device, size, and its place in the
 * exporter's device-memory file. With FAKECUDA_BACKING=1 that file is the exporter's memfd
 * (fk_mem.c): the importer opens it through /proc/PID/fd and maps the allocation's pages into
 * its own device region, so both processes see the same bytes. Without backing no byte is
 * shared (device bytes are never touched then) but the address bookkeeping is the same.
 * Opening a handle twice in one context returns the same address and counts a reference;
 * cuIpcCloseMemHandle drops one and unmaps at the last; destroying the context unmaps.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/fakecuda/fk.h"

#define PAGE ((uintptr_t)4096)
#define HANDLE_MAGIC "fkIPCv1"

/* The bytes of a CUipcMemHandle as the fake lays them out. */
struct handle {
  char magic[8];
  int32_t pid;     /* the exporting process */
  int32_t fd;      /* its device-memory memfd, -1 without backing */
  int32_t dev;     /* the device holding the memory */
  uint32_t unused; /* zero */
  uint64_t offset; /* the allocation's base - the exporter's va_base (its place in fd) */
  uint64_t size;   /* bytes requested */
  uint64_t span;   /* bytes held */
  uint64_t id;     /* the allocation's id in the exporter */
};
_Static_assert(sizeof(struct handle) <= CU_IPC_HANDLE_SIZE, "the handle must fit");

static CUresult get_handle(CUipcMemHandle *out, CUdeviceptr dptr) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct fk_alloc *a = fk_mem_find((uintptr_t)dptr);
  if (out == NULL || a == NULL || a->freeing || a->kind != FK_K_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE; /* only cuMemAlloc memory is legacy-IPC capable */
  }
  struct handle h = {.pid = (int32_t)getpid(),
                     .fd = fk.dev_fd,
                     .dev = a->dev,
                     .offset = a->base - fk.va_base,
                     .size = a->size,
                     .span = a->span,
                     .id = a->id};
  memcpy(h.magic, HANDLE_MAGIC, sizeof h.magic);
  memset(out, 0, sizeof *out);
  memcpy(out, &h, sizeof h);
  return CUDA_SUCCESS;
}

FK_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr) {
  FK_BODY(FK_NEED_INIT, get_handle(pHandle, dptr));
}

/* The opening of (pid, id) in context c, or NULL. */
static struct fk_alloc *opened(pid_t pid, unsigned long long id, const struct CUctx_st *c) {
  for (size_t i = 0; i < fk_nallocs; i++) {
    struct fk_alloc *a = fk_allocs[i];
    if (a->kind == FK_K_IPC && a->ipc_pid == pid && a->ipc_id == id && a->ctx == c) {
      return a;
    }
  }
  return NULL;
}

/* Maps the exporter's pages of h at addr (page-aligned, len bytes from file offset off). */
static CUresult map_exported(const struct handle *h, uintptr_t addr, size_t len, uint64_t off) {
  char path[64];
  (void)snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return CUDA_ERROR_INVALID_VALUE; /* the exporter is gone, or not ours to see */
  }
  int r = fk_mem_map_pages(addr, len, fd, off);
  close(fd);
  return r == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult open_handle(CUdeviceptr *pdptr, const CUipcMemHandle *handle, unsigned flags) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct handle h;
  if (pdptr == NULL || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  memcpy(&h, handle, sizeof h);
  if (memcmp(h.magic, HANDLE_MAGIC, sizeof h.magic) != 0 || h.dev < 0 || h.dev >= fk.ndev ||
      h.size == 0 || h.span < h.size || h.pid <= 0 || (h.fd >= 0) != (fk.cfg.backing != 0)) {
    return CUDA_ERROR_INVALID_VALUE; /* not a handle this driver made */
  }
  if (h.pid == getpid()) {
    return CUDA_ERROR_INVALID_CONTEXT; /* a process cannot open its own handles */
  }
  if (kill(h.pid, 0) != 0 && errno == ESRCH) {
    return CUDA_ERROR_INVALID_VALUE; /* the exporter is gone, and its memory with it */
  }
  struct fk_alloc *a = opened(h.pid, h.id, c);
  if (a != NULL) {
    a->ipc_refs++;
    *pdptr = a->base;
    return CUDA_SUCCESS;
  }
  struct fk_device *d = &fk.dev[h.dev];
  size_t lead = h.offset % PAGE, pages = (lead + h.span + PAGE - 1) / PAGE * PAGE;
  uintptr_t at = fk_mem_carve(d->va_base, d->va_base + d->va_size, pages, PAGE);
  if (at == 0) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (fk.cfg.backing) {
    rc = map_exported(&h, at, pages, h.offset - lead);
    if (rc != CUDA_SUCCESS) {
      return rc;
    }
  }
  a = fk_mem_new(FK_K_IPC, at + lead, h.size, pages - lead, h.dev);
  a->lead = lead;
  a->ctx = c;
  a->ipc_pid = h.pid;
  a->ipc_id = h.id;
  a->ipc_refs = 1;
  *pdptr = a->base;
  return CUDA_SUCCESS;
}

FK_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) {
  FK_BODY(FK_NEED_INIT, open_handle(pdptr, &handle, Flags));
}

FK_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                      unsigned int Flags) {
  FK_BODY(FK_NEED_INIT, open_handle(pdptr, &handle, Flags));
}

static CUresult close_handle(CUdeviceptr dptr) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct fk_alloc *a = fk_mem_find((uintptr_t)dptr);
  if (a == NULL || a->kind != FK_K_IPC || a->base != (uintptr_t)dptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (--a->ipc_refs == 0) {
    fk_sync_device(a->dev); /* like cuMemFree: outstanding work on it completes first */
    fk_mem_release(a);
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  FK_BODY(FK_NEED_INIT, close_handle(dptr));
}
