/* Legacy CUDA IPC of pooled blocks: see shim/ipc.h for the scheme.
 *
 * Exporter: cuIpcGetMemHandle of a pooled block asks the driver for its region (address range)
 * and the region's handle, writes {region handle, offset, size} to
 * /dev/shm/gpucap-UID/PID-TOKEN and hands the program a gpucap handle naming that file. The
 * file goes when the block is freed or the process exits: the exit path removes every file of
 * its pid from the directory once no thread is creating one, and no thread creates one after
 * the exit path began (so none outlives the process, whatever the other threads are doing).
 * Importer: cuIpcOpenMemHandle(_v2) of a gpucap handle reads the file, opens the region
 * through the driver, checks the block lies inside what the driver mapped and answers
 * region + offset; each open is one driver open, each cuIpcCloseMemHandle one driver close of
 * the region. Any other handle goes to the driver untouched.
 */
#include "shim/ipc.h"

#include "shim/exit.h"
#include "shim/fork.h"
#include "shim/hook.h"
#include "shim/log.h"
#include "shim/ctx.h"
#include "shim/real.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define HANDLE_MAGIC "gpucapH1"
#define RECORD_MAGIC "gpucapR1"
#define DIR_FMT "/dev/shm/gpucap-%u"
#define PATH_FMT DIR_FMT "/%d-%llu"

/* The bytes of a gpucap handle (the rest of the 64 are zero). */
struct handle {
  char magic[8];
  int32_t pid;    /* the exporting process */
  uint32_t uid;   /* its user (the directory) */
  uint64_t token; /* the file's name within it, with pid */
};
_Static_assert(sizeof(struct handle) <= CU_IPC_HANDLE_SIZE, "a gpucap handle must fit");

/* The contents of an export file. */
struct record {
  char magic[8];
  CUipcMemHandle region; /* the driver's handle of the pool region */
  uint64_t offset;       /* of the block in the region */
  uint64_t size;         /* the size the program asked for */
};

struct export {
  uint64_t block;
  uint64_t token;
};

struct import {
  uint64_t ptr;    /* what the open answered: region + offset */
  uint64_t size;   /* the block's size */
  uint64_t region; /* what the driver's open answered */
  unsigned refs;   /* opens not yet closed */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct export *exports;
static size_t nexports, capexports;
static atomic_size_t exported; /* == nexports, read without the lock */
static struct import *imports;
static size_t nimports, capimports;
static atomic_size_t imported; /* == nimports, read without the lock */
static uint64_t next_token;
/* Export files and the exit path, sequentially consistent: a thread counts itself in creating,
 * then creates a file only if exiting is still false; the exit path sets exiting, then waits
 * for creating to drop to 0 before it scans. Either the thread sees exiting (and creates
 * nothing) or the exit path sees it counted (and scans after its file exists). */
static atomic_bool exiting;
static atomic_int creating;
static atomic_bool ever_exported;

/* Grows *arr (of elem-sized items) to hold n + 1; false when host memory ran out. */
static bool reserve_one(void **arr, size_t *cap, size_t n, size_t elem) {
  if (n < *cap) {
    return true;
  }
  size_t want = *cap ? 2 * *cap : 8;
  void *p = realloc(*arr, want * elem);
  if (!p) {
    return false;
  }
  *arr = p;
  *cap = want;
  return true;
}

static void file_path(char *buf, size_t len, uint32_t uid, int32_t pid, uint64_t token) {
  (void)snprintf(buf, len, PATH_FMT, (unsigned)uid, (int)pid, (unsigned long long)token);
}

/* Creates (or checks) this user's directory: a real directory, ours, closed to others. */
static bool own_dir(void) {
  char dir[64];
  struct stat st;
  (void)snprintf(dir, sizeof dir, DIR_FMT, (unsigned)getuid());
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    log_msg(LOG_ERROR, "cuIpcGetMemHandle: cannot create %s: %s", dir, strerror(errno));
    return false;
  }
  if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
      (st.st_mode & 077) != 0) {
    log_msg(LOG_ERROR,
            "cuIpcGetMemHandle: %s is not a directory of this user closed to others; "
            "remove it",
            dir);
    return false;
  }
  return true;
}

/* Removes this process's export file of token. */
static void unlink_export(uint64_t token) {
  char path[96];
  file_path(path, sizeof path, (uint32_t)getuid(), (int32_t)getpid(), token);
  unlink(path);
}

/* Writes the export file of token; never once the process is exiting. */
static bool write_record(uint64_t token, const struct record *r) {
  char path[96];
  file_path(path, sizeof path, (uint32_t)getuid(), (int32_t)getpid(), token);
  if (!own_dir()) {
    return false;
  }
  atomic_store(&ever_exported, true);
  atomic_fetch_add(&creating, 1);
  if (atomic_load(&exiting)) {
    atomic_fetch_sub(&creating, 1);
    log_msg(LOG_ERROR, "cuIpcGetMemHandle: the process is exiting: nothing is shared any more");
    return false;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
  atomic_fetch_sub(&creating, 1);
  bool ok = fd >= 0 && log_write_fd(fd, (const char *)r, sizeof *r, NULL) == 0;
  if (!ok) {
    log_msg(LOG_ERROR, "cuIpcGetMemHandle: cannot write %s: %s", path, strerror(errno));
  }
  if (fd >= 0) {
    close(fd);
  }
  if (!ok) {
    unlink(path);
  }
  return ok;
}

static void fill_handle(CUipcMemHandle *out, uint64_t token) {
  struct handle h = {.pid = (int32_t)getpid(), .uid = (uint32_t)getuid(), .token = token};
  memcpy(h.magic, HANDLE_MAGIC, sizeof h.magic);
  memset(out, 0, sizeof *out);
  memcpy(out, &h, sizeof h);
}

/* The token under which block is exported, or 0. Lock held. */
static uint64_t export_token(uint64_t block) {
  for (size_t i = 0; i < nexports; i++) {
    if (exports[i].block == block) {
      return exports[i].token;
    }
  }
  return 0;
}

/* Exports the pooled block at base (size bytes). */
static CUresult export_block(CUipcMemHandle *out, uint64_t base, uint64_t size) {
  pthread_mutex_lock(&lock);
  uint64_t token = export_token(base);
  pthread_mutex_unlock(&lock);
  if (token) {
    fill_handle(out, token); /* "may be called multiple times on an allocation" */
    return CUDA_SUCCESS;
  }
  CUdeviceptr region = 0;
  size_t region_size = 0;
  struct record r = {.size = size};
  memcpy(r.magic, RECORD_MAGIC, sizeof r.magic);
  CUresult rc = real.cuMemGetAddressRange_v2(&region, &region_size, base);
  if (rc == CUDA_SUCCESS) {
    rc = real.cuIpcGetMemHandle(&r.region, region);
  }
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  r.offset = base - region;
  pthread_mutex_lock(&lock);
  token = export_token(base); /* another thread may have exported it meanwhile */
  if (!token) {
    if (!reserve_one((void **)&exports, &capexports, nexports, sizeof *exports)) {
      pthread_mutex_unlock(&lock);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    token = ++next_token;
    if (!write_record(token, &r)) {
      pthread_mutex_unlock(&lock);
      return CUDA_ERROR_MAP_FAILED;
    }
    exports[nexports++] = (struct export){.block = base, .token = token};
    atomic_store_explicit(&exported, nexports, memory_order_relaxed);
  }
  pthread_mutex_unlock(&lock);
  fill_handle(out, token);
  return CUDA_SUCCESS;
}

GPUCAP_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr) {
  uint64_t base, size;
  HOOK_PROLOGUE(real.cuIpcGetMemHandle);
  switch (ctx_block(dptr, &base, &size)) {
  case CTX_OUTSIDE:
    return real.cuIpcGetMemHandle(pHandle, dptr);
  case CTX_NOT_HELD:
    return CUDA_ERROR_INVALID_VALUE; /* freed memory: the driver's answer */
  default:
    if (ctx_vmm_backed(dptr)) {
      /* VMM memory has no legacy IPC handle: the driver's own answer, said once. */
      static atomic_bool said;
      if (!atomic_exchange(&said, true)) {
        log_msg(LOG_WARN, "cuIpcGetMemHandle: a block of a pool backed by virtual memory "
                          "management cannot be shared by legacy IPC; run with "
                          "GPUCAP_POOL=regions to share pooled blocks");
      }
      return real.cuIpcGetMemHandle(pHandle, dptr);
    }
    return pHandle ? export_block(pHandle, base, size) : CUDA_ERROR_INVALID_VALUE;
  }
}

void ipc_forget_block(uint64_t base) {
  if (atomic_load_explicit(&exported, memory_order_relaxed) == 0) {
    return;
  }
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < nexports; i++) {
    if (exports[i].block == base) {
      unlink_export(exports[i].token);
      exports[i] = exports[--nexports];
      atomic_store_explicit(&exported, nexports, memory_order_relaxed);
      break;
    }
  }
  pthread_mutex_unlock(&lock);
}

/* Reads the export file a gpucap handle names; false after one message saying why. */
static bool read_record(const struct handle *h, struct record *r) {
  char path[96];
  struct stat st;
  file_path(path, sizeof path, h->uid, h->pid, h->token);
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  int err = errno;
  bool ok = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == h->uid &&
            read(fd, r, sizeof *r) == (ssize_t)sizeof *r &&
            memcmp(r->magic, RECORD_MAGIC, sizeof r->magic) == 0;
  if (fd >= 0) {
    close(fd);
  }
  if (ok) {
    return true;
  }
  if (fd < 0 && err == ENOENT) {
    log_msg(LOG_ERROR,
            "cuIpcOpenMemHandle: process %d no longer shares this block (it freed "
            "the block or exited)",
            (int)h->pid);
  } else if (fd < 0 && err == EACCES) {
    log_msg(LOG_ERROR,
            "cuIpcOpenMemHandle: the block was shared by user %u; only that user's "
            "processes can open it",
            (unsigned)h->uid);
  } else {
    log_msg(LOG_ERROR, "cuIpcOpenMemHandle: %s is not a gpucap export: %s", path,
            fd < 0 ? strerror(err) : "wrong owner, type or contents");
  }
  return false;
}

/* Records one more open of the block at ptr; false when host memory ran out. Lock held. */
static bool note_import(uint64_t ptr, uint64_t size, uint64_t region) {
  for (size_t i = 0; i < nimports; i++) {
    if (imports[i].ptr == ptr) {
      imports[i].refs++;
      return true;
    }
  }
  if (!reserve_one((void **)&imports, &capimports, nimports, sizeof *imports)) {
    return false;
  }
  imports[nimports++] = (struct import){.ptr = ptr, .size = size, .region = region, .refs = 1};
  atomic_store_explicit(&imported, nimports, memory_order_relaxed);
  return true;
}

typedef CUresult (*open_fn)(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags);

static CUresult open_handle(open_fn open_region, CUdeviceptr *pdptr, CUipcMemHandle handle,
                            unsigned int flags) {
  struct handle h;
  struct record r;
  memcpy(&h, &handle, sizeof h);
  if (memcmp(h.magic, HANDLE_MAGIC, sizeof h.magic) != 0) {
    return open_region(pdptr, handle, flags); /* the driver's own handle */
  }
  if (!pdptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!read_record(&h, &r)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUdeviceptr region = 0, start = 0;
  size_t mapped = 0;
  CUresult rc = open_region(&region, r.region, flags);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (real.cuMemGetAddressRange_v2(&start, &mapped, region) != CUDA_SUCCESS || start != region ||
      r.offset > mapped || r.size > mapped - r.offset) {
    real.cuIpcCloseMemHandle(region);
    log_msg(LOG_ERROR,
            "cuIpcOpenMemHandle: the block shared by process %d does not lie in the "
            "memory the driver mapped; refused",
            (int)h.pid);
    return CUDA_ERROR_INVALID_VALUE;
  }
  pthread_mutex_lock(&lock);
  bool noted = note_import(region + r.offset, r.size, region);
  pthread_mutex_unlock(&lock);
  if (!noted) {
    real.cuIpcCloseMemHandle(region);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *pdptr = region + r.offset;
  return CUDA_SUCCESS;
}

GPUCAP_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                          unsigned int Flags) {
  HOOK_PROLOGUE(real.cuIpcOpenMemHandle);
  return open_handle(real.cuIpcOpenMemHandle, pdptr, handle, Flags);
}

GPUCAP_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                             unsigned int Flags) {
  HOOK_PROLOGUE(real.cuIpcOpenMemHandle_v2);
  return open_handle(real.cuIpcOpenMemHandle_v2, pdptr, handle, Flags);
}

/* The import opened at ptr (-1: none); *stray set when ptr is instead the driver's address of
 * an imported region that the program never received. Lock held. */
static long find_import(uint64_t ptr, bool *stray) {
  *stray = false;
  for (size_t i = 0; i < nimports; i++) {
    if (imports[i].ptr == ptr) {
      return (long)i;
    }
    *stray |= imports[i].region == ptr;
  }
  return -1;
}

GPUCAP_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  bool stray;
  HOOK_PROLOGUE(real.cuIpcCloseMemHandle);
  pthread_mutex_lock(&lock);
  long i = find_import(dptr, &stray);
  uint64_t region = i >= 0 ? imports[i].region : 0;
  pthread_mutex_unlock(&lock);
  if (i < 0) {
    return stray ? CUDA_ERROR_INVALID_VALUE : real.cuIpcCloseMemHandle(dptr);
  }
  CUresult rc = real.cuIpcCloseMemHandle(region);
  if (rc == CUDA_SUCCESS) {
    pthread_mutex_lock(&lock);
    i = find_import(dptr, &stray);
    if (i >= 0 && --imports[i].refs == 0) {
      imports[i] = imports[--nimports];
      atomic_store_explicit(&imported, nimports, memory_order_relaxed);
    }
    pthread_mutex_unlock(&lock);
  }
  return rc;
}

bool ipc_imported_block(uint64_t addr, uint64_t *base, uint64_t *size) {
  bool found = false;
  if (atomic_load_explicit(&imported, memory_order_relaxed) == 0) {
    return false;
  }
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < nimports && !found; i++) {
    if (addr >= imports[i].ptr && addr - imports[i].ptr < imports[i].size) {
      *base = imports[i].ptr;
      *size = imports[i].size;
      found = true;
    }
  }
  pthread_mutex_unlock(&lock);
  return found;
}

/* A directory entry as getdents64 returns it. */
struct dirent64_raw {
  uint64_t ino;
  int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[];
};

void ipc_exit(void) {
  atomic_store(&exiting, true);
  if (!atomic_load(&ever_exported)) {
    return;
  }
  while (atomic_load(&creating) > 0 && exit_wait()) {
    /* a thread is creating a file right now: scan once it exists */
  }
  /* Every file of this pid, whether or not another thread holds the list: no lock, no malloc
   * (getdents64 into a stack buffer). */
  char dir[64], prefix[24];
  (void)snprintf(dir, sizeof dir, DIR_FMT, (unsigned)getuid());
  int plen = snprintf(prefix, sizeof prefix, "%d-", (int)getpid());
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  _Alignas(8) char entries[4096];
  long n;
  while (dfd >= 0 && (n = syscall(SYS_getdents64, dfd, entries, sizeof entries)) > 0) {
    for (long at = 0; at < n;) {
      const struct dirent64_raw *e = (const void *)(entries + at);
      if (strncmp(e->name, prefix, (size_t)plen) == 0) {
        unlinkat(dfd, e->name, 0);
      }
      at += e->reclen;
    }
  }
  if (dfd >= 0) {
    close(dfd);
  }
}

/* A fork child's lists as the parent left them: kept, not freed (volatile, so the stores
 * stay), so that leak checkers see them reachable. */
static void *volatile inherited[2];

/* In a fork child: forget every export and import (the parent's files are the parent's). */
static void fork_child(void) {
  pthread_mutex_init(&lock, NULL);
  /* Abandoned unread: another thread may have been growing them at the fork. */
  inherited[0] = exports;
  inherited[1] = imports;
  exports = NULL;
  imports = NULL;
  nexports = nimports = capexports = capimports = 0;
  atomic_store(&exiting, false);
  atomic_store(&creating, 0);
  atomic_store(&ever_exported, false);
  atomic_store_explicit(&exported, 0, memory_order_relaxed);
  atomic_store_explicit(&imported, 0, memory_order_relaxed);
}
FORK_CHILD(fork_child)
