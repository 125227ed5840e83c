/* Legacy CUDA IPC of pooled blocks: see shim/entry/ipc.h for the scheme.
 *
 * Exporter: cuIpcGetMemHandle of a pooled block records an export (the block, its owner
 * context, and either the region's driver handle with the block's offset, or the block's units)
 * under a token, starts the server thread if none runs, and hands the program a gpucap handle.
 * The server answers one request per connection: the export's description, then, for a VMM
 * block, its units' descriptors in batches. It takes a unit's descriptor through a handle it
 * retains by address and releases at once, and sends a batch only if the export still stands
 * after those retains: an export is withdrawn before its block is freed or its context's pool
 * unmapped, so a unit retained while the export stands is the block's. The export goes when the
 * block is freed or its context destroyed; at exit the server stops answering.
 * Importer: cuIpcOpenMemHandle(_v2) of a gpucap handle asks the exporter's server; a region is
 * opened through the driver (each open one driver open, each close one driver close); units
 * are imported, mapped at a range reserved for them and their handles released, so that the
 * importer's unmap at the last cuIpcCloseMemHandle frees its hold. Any other handle goes to the
 * driver untouched.
 */
#include "shim/entry/ipc.h"

#include "shim/context/ctx.h"
#include "shim/base/exit.h"
#include "shim/base/fork.h"
#include "shim/entry/prologue.h"
#include "shim/entry/ipcwire.h"
#include "shim/base/log.h"
#include "shim/pool/pool.h"
#include "shim/base/real.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HANDLE_MAGIC "gpucapH2"
#define REQUEST_MAGIC "gpucapQ2"
#define REPLY_MAGIC "gpucapA2"
#define REQUEST_WAIT_MS 2000 /* how long the server waits for a connection's request */
#define REPLY_WAIT_MS 30000  /* how long an importer waits for each answer of the server */
#define MAX_UNITS (1u << 24) /* units of one block an importer accepts (32 TiB of 2 MiB) */

/* The bytes of a gpucap handle (the rest of the 64 are zero). */
struct handle {
  char magic[8];
  int32_t pid;    /* the exporting process */
  uint32_t uid;   /* its user */
  uint64_t key;   /* its server's key */
  uint64_t token; /* the export */
};
_Static_assert(sizeof(struct handle) <= CU_IPC_HANDLE_SIZE, "a gpucap handle must fit");

enum kind { KIND_REGION = 1, KIND_VMM = 2 };

struct request {
  char magic[8];
  uint64_t key;
  uint64_t token;
};

/* The server's answer; for KIND_VMM, nunits descriptors follow in batches. */
struct reply {
  char magic[8];
  int32_t status;        /* 0, or an errno saying why not (ENOENT: no such export) */
  uint32_t kind;         /* enum kind */
  uint64_t offset;       /* of the block in its region (KIND_REGION) or first unit (KIND_VMM) */
  uint64_t size;         /* the size the program asked for */
  uint64_t unit;         /* KIND_VMM: bytes per unit */
  uint32_t nunits;       /* KIND_VMM: units the block lies in */
  uint32_t pad;          /* zero */
  CUipcMemHandle region; /* KIND_REGION: the driver's handle of the region */
};

/* One batch of descriptors (count of them travel with it); status != 0: the export failed. */
struct batch {
  int32_t status;
  uint32_t count;
};

struct export {
  uint64_t block, size, token;
  CUcontext owner; /* the context of the pool holding the block */
  uint32_t kind;
  uint64_t offset;       /* as in struct reply */
  CUipcMemHandle region; /* KIND_REGION */
  uint64_t first, unit;  /* KIND_VMM: the address of the block's first unit, the unit size */
  uint32_t nunits;       /* KIND_VMM */
};

struct import {
  uint64_t ptr;  /* what the open answered */
  uint64_t size; /* the block's size */
  uint32_t kind;
  uint64_t base;       /* KIND_REGION: what the driver's open answered; KIND_VMM: the range */
  uint64_t unit, span; /* KIND_VMM: unit size and the range's bytes */
  int32_t pid;         /* whose export (KIND_VMM: opened once per process) */
  uint64_t key, token;
  unsigned refs; /* opens not yet closed */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct export *exports;
static size_t nexports, capexports;
static atomic_size_t exported; /* == nexports, read without the lock */
static struct import *imports;
static size_t nimports, capimports;
static atomic_size_t imported; /* == nimports, read without the lock */
static uint64_t next_token;
/* The server: its listening socket (-1 before the first export), its key. */
static int listen_fd = -1;
static uint64_t key;
static atomic_bool exiting;
static pthread_t server_thread;    /* joinable; set before server_started */
static atomic_bool server_started; /* server_thread runs (or ended unjoined) */
static atomic_int exiting_fd = -1; /* listen_fd, for the exit path (which takes no lock) */

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

/* ---- Exporter ------------------------------------------------------------------------- */

/* The export of token (-1: none). Lock held. */
static long find_export(uint64_t token) {
  for (size_t i = 0; i < nexports; i++) {
    if (exports[i].token == token) {
      return (long)i;
    }
  }
  return -1;
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

static void drop_export(size_t i) {
  exports[i] = exports[--nexports];
  atomic_store_explicit(&exported, nexports, memory_order_relaxed);
}

/* Descriptors of n units from address at (each unit bytes): a handle retained by address,
 * exported and released. Returns the driver's answer; on failure no descriptor stays open. */
static CUresult unit_fds(uint64_t at, uint64_t unit, uint32_t n, int *fds) {
  CUresult rc = CUDA_SUCCESS;
  uint32_t done = 0;
  for (; done < n && rc == CUDA_SUCCESS; done++) {
    CUmemGenericAllocationHandle h = 0;
    rc = real.cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)(at + done * unit));
    if (rc == CUDA_SUCCESS) {
      fds[done] = -1;
      rc = real.cuMemExportToShareableHandle(&fds[done], h,
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      real.cuMemRelease(h);
    }
  }
  if (rc != CUDA_SUCCESS) {
    for (uint32_t i = 0; i + 1 < done; i++) {
      close(fds[i]);
    }
  }
  return rc;
}

/* Whether every unit of e can be exported as a descriptor: each is exported once and closed.
 * The driver's answer. */
static CUresult check_units(const struct export *e) {
  int fds[IPCWIRE_MAX_FDS];
  CUresult rc = CUDA_SUCCESS;
  for (uint32_t i = 0; i < e->nunits && rc == CUDA_SUCCESS; i += IPCWIRE_MAX_FDS) {
    uint32_t n = e->nunits - i < IPCWIRE_MAX_FDS ? e->nunits - i : IPCWIRE_MAX_FDS;
    rc = unit_fds(e->first + i * e->unit, e->unit, n, fds);
    for (uint32_t k = 0; rc == CUDA_SUCCESS && k < n; k++) {
      close(fds[k]);
    }
  }
  return rc;
}

/* Serves one connection: its request, the export's description, a VMM block's descriptors. */
static void serve_one(int sock) {
  struct request q;
  struct reply r = {.status = ENOENT};
  struct export e = {0};
  int n = 0;
  memcpy(r.magic, REPLY_MAGIC, sizeof r.magic);
  if (ipcwire_recv(sock, &q, sizeof q, NULL, 0, &n, REQUEST_WAIT_MS) != 0 ||
      memcmp(q.magic, REQUEST_MAGIC, sizeof q.magic) != 0) {
    return;
  }
  pthread_mutex_lock(&lock);
  long i = q.key == key ? find_export(q.token) : -1;
  if (i >= 0) {
    e = exports[i];
  }
  pthread_mutex_unlock(&lock);
  if (i >= 0) {
    r = (struct reply){.status = atomic_load(&exiting) ? ESHUTDOWN : 0,
                       .kind = e.kind,
                       .offset = e.offset,
                       .size = e.size,
                       .unit = e.unit,
                       .nunits = e.nunits,
                       .region = e.region};
    memcpy(r.magic, REPLY_MAGIC, sizeof r.magic);
  }
  if (ipcwire_send(sock, &r, sizeof r, NULL, 0) != 0 || r.status != 0 || e.kind != KIND_VMM) {
    return;
  }
  /* VMM memory belongs to no context, but the driver may want one current for these calls. */
  if (real.cuCtxSetCurrent) {
    real.cuCtxSetCurrent(e.owner);
  }
  for (uint32_t at = 0; at < e.nunits;) {
    int fds[IPCWIRE_MAX_FDS];
    struct batch b = {.count = e.nunits - at < IPCWIRE_MAX_FDS ? e.nunits - at : IPCWIRE_MAX_FDS};
    CUresult rc = atomic_load(&exiting) ? CUDA_ERROR_DEINITIALIZED
                                        : unit_fds(e.first + at * e.unit, e.unit, b.count, fds);
    if (rc == CUDA_SUCCESS) {
      pthread_mutex_lock(&lock);
      bool stands = find_export(e.token) >= 0;
      pthread_mutex_unlock(&lock);
      if (!stands) { /* freed meanwhile: the units retained may be another block's */
        for (uint32_t k = 0; k < b.count; k++) {
          close(fds[k]);
        }
        b.status = ENOENT;
      }
    } else {
      b.status = rc == CUDA_ERROR_DEINITIALIZED ? ESHUTDOWN : EIO;
    }
    int sent = ipcwire_send(sock, &b, sizeof b, fds, b.status == 0 ? (int)b.count : 0);
    for (uint32_t k = 0; b.status == 0 && k < b.count; k++) {
      close(fds[k]);
    }
    if (sent != 0 || b.status != 0) {
      return;
    }
    at += b.count;
  }
}

/* The server thread: serves connections on its socket one at a time, until the socket is shut
 * down at exit. Runs with every signal blocked and never calls the program's code. */
static void *server(void *arg) {
  int lfd = (int)(intptr_t)arg;
  uint32_t uid = (uint32_t)getuid();
  for (;;) {
    int sock = ipcwire_accept(lfd, uid);
    if (sock >= 0) {
      serve_one(sock);
      close(sock);
    } else if (sock == -EINVAL || sock == -EBADF || atomic_load(&exiting)) {
      return NULL; /* shut down */
    } else if (sock == -EMFILE || sock == -ENFILE || sock == -ENOMEM || sock == -ENOBUFS) {
      usleep(10000); /* out of descriptors for now: the next try, not a spin */
    }
  }
}

/* Starts the server unless it runs; false (one message said why) when it cannot. Lock held. */
static bool serve(void) {
  if (listen_fd >= 0) {
    return true;
  }
  if (atomic_load(&exiting)) {
    log_msg(LOG_ERROR, "cuIpcGetMemHandle: the process is exiting: nothing is shared any more");
    return false;
  }
  int fd = -EADDRINUSE;
  for (int tries = 0; tries < 4 && fd == -EADDRINUSE; tries++) {
    key = ipcwire_key();
    fd = ipcwire_listen((uint32_t)getuid(), (int32_t)getpid(), key);
  }
  if (fd < 0) {
    log_msg(LOG_ERROR, "cuIpcGetMemHandle: cannot open a socket to share blocks: %s",
            strerror(-fd));
    return false;
  }
  /* The thread starts with every signal blocked, so that none of the program's lands on it. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_t t;
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int err = pthread_create(&t, NULL, server, (void *)(intptr_t)fd);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (err != 0) {
    close(fd);
    log_msg(LOG_ERROR, "cuIpcGetMemHandle: cannot start the thread that shares blocks: %s",
            strerror(err));
    return false;
  }
  listen_fd = fd;
  server_thread = t;
  atomic_store(&server_started, true);
  atomic_store(&exiting_fd, fd);
  return true;
}

static void fill_handle(CUipcMemHandle *out, uint64_t token) {
  struct handle h = {
      .pid = (int32_t)getpid(), .uid = (uint32_t)getuid(), .key = key, .token = token};
  memcpy(h.magic, HANDLE_MAGIC, sizeof h.magic);
  memset(out, 0, sizeof *out);
  memcpy(out, &h, sizeof h);
}

/* Describes the pooled block at base (size bytes) for export; the driver's answer. */
static CUresult describe(struct export *e, uint64_t base, uint64_t size, CUcontext owner,
                         uint64_t unit) {
  *e = (struct export){.block = base, .size = size, .owner = owner};
  if (unit == 0) {
    CUdeviceptr region = 0;
    size_t region_size = 0;
    CUresult rc = real.cuMemGetAddressRange_v2(&region, &region_size, base);
    if (rc == CUDA_SUCCESS) {
      rc = real.cuIpcGetMemHandle(&e->region, region);
    }
    e->kind = KIND_REGION;
    e->offset = base - region;
    return rc;
  }
  e->kind = KIND_VMM;
  e->unit = unit;
  e->first = base / unit * unit;
  e->offset = base - e->first;
  e->nunits = (uint32_t)((e->offset + size + unit - 1) / unit);
  if (!real.cuMemRetainAllocationHandle || !real.cuMemExportToShareableHandle ||
      !real.cuMemRelease) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return check_units(e);
}

/* Exports the pooled block at base (size bytes) of the pool of owner (unit: its VMM unit, 0 for
 * a region pool). */
static CUresult export_block(CUipcMemHandle *out, uint64_t base, uint64_t size, CUcontext owner,
                             uint64_t unit) {
  pthread_mutex_lock(&lock);
  uint64_t token = export_token(base);
  pthread_mutex_unlock(&lock);
  if (token) {
    fill_handle(out, token); /* "may be called multiple times on an allocation" */
    return CUDA_SUCCESS;
  }
  struct export e;
  CUresult rc = describe(&e, base, size, owner, unit);
  if (rc != CUDA_SUCCESS && unit != 0) {
    static atomic_bool said;
    if (!atomic_exchange(&said, true)) {
      log_msg(LOG_WARN,
              "cuIpcGetMemHandle: the driver cannot export the memory of this pool (error "
              "%d); run with GPUCAP_POOL=regions to share pooled blocks",
              rc);
    }
    return CUDA_ERROR_INVALID_VALUE; /* what the driver answers for VMM memory */
  }
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  pthread_mutex_lock(&lock);
  token = export_token(base); /* another thread may have exported it meanwhile */
  if (!token) {
    if (!reserve_one((void **)&exports, &capexports, nexports, sizeof *exports)) {
      pthread_mutex_unlock(&lock);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!serve()) {
      pthread_mutex_unlock(&lock);
      return CUDA_ERROR_MAP_FAILED;
    }
    e.token = token = ++next_token;
    exports[nexports++] = e;
    atomic_store_explicit(&exported, nexports, memory_order_relaxed);
  }
  pthread_mutex_unlock(&lock);
  /* A free racing the export may have withdrawn nothing (there was nothing yet): the export
   * stands only for a block that is still held. */
  uint64_t now = 0, now_size = 0;
  if (ctx_block(base, &now, &now_size) != CTX_BLOCK || now != base || now_size != size) {
    pthread_mutex_lock(&lock);
    long i = find_export(token);
    if (i >= 0) {
      drop_export((size_t)i);
    }
    pthread_mutex_unlock(&lock);
    return CUDA_ERROR_INVALID_VALUE; /* freed memory: the driver's answer */
  }
  fill_handle(out, token);
  return CUDA_SUCCESS;
}

GPUCAP_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr) {
  uint64_t base, size, unit = 0;
  CUcontext owner = NULL;
  HOOK_PROLOGUE(real.cuIpcGetMemHandle);
  switch (ctx_block(dptr, &base, &size)) {
  case CTX_OUTSIDE:
    return real.cuIpcGetMemHandle(pHandle, dptr);
  case CTX_NOT_HELD:
    return CUDA_ERROR_INVALID_VALUE; /* freed memory: the driver's answer */
  default:
    if (!pHandle || !ctx_pool_of(base, &owner, &unit)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return export_block(pHandle, base, size, owner, unit);
  }
}

void ipc_forget_block(uint64_t base) {
  if (atomic_load_explicit(&exported, memory_order_relaxed) == 0) {
    return;
  }
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < nexports; i++) {
    if (exports[i].block == base) {
      drop_export(i);
      break;
    }
  }
  pthread_mutex_unlock(&lock);
}

void ipc_forget_context(CUcontext ctx) {
  if (atomic_load_explicit(&exported, memory_order_relaxed) == 0) {
    return;
  }
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < nexports;) {
    if (exports[i].owner == ctx) {
      drop_export(i);
    } else {
      i++;
    }
  }
  pthread_mutex_unlock(&lock);
}

void ipc_exit(bool wait) {
  atomic_store(&exiting, true);
  int fd = atomic_load(&exiting_fd);
  if (fd >= 0) {
    shutdown(fd, SHUT_RDWR); /* the server's accept fails; new connections are refused */
  }
  if (wait && atomic_exchange(&server_started, false)) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += EXIT_WAIT_MS * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    (void)pthread_timedjoin_np(server_thread, NULL, &until); /* else it ends with the process */
  }
}

/* ---- Importer ------------------------------------------------------------------------- */

/* Says why the export of process pid cannot be opened (err: an errno of the wire or the
 * server's status). */
static void say_why(int32_t pid, int err) {
  if (err == ENOENT || err == ECONNREFUSED) {
    log_msg(LOG_ERROR,
            "cuIpcOpenMemHandle: process %d no longer shares this block (it freed the block "
            "or exited)",
            (int)pid);
  } else if (err == ESHUTDOWN) {
    log_msg(LOG_ERROR, "cuIpcOpenMemHandle: process %d is exiting: it shares nothing any more",
            (int)pid);
  } else if (err == EPERM) {
    log_msg(LOG_ERROR,
            "cuIpcOpenMemHandle: the block was shared by another user's process; only that "
            "user's processes can open it");
  } else {
    log_msg(LOG_ERROR, "cuIpcOpenMemHandle: cannot get the block shared by process %d: %s",
            (int)pid, strerror(err));
  }
}

/* Records one more open (*im, refs 1, or a reference to the same open); false when host memory
 * ran out. Lock held. */
static bool note_import(const struct import *im) {
  for (size_t i = 0; i < nimports; i++) {
    if (imports[i].ptr == im->ptr) {
      imports[i].refs++;
      return true;
    }
  }
  if (!reserve_one((void **)&imports, &capimports, nimports, sizeof *imports)) {
    return false;
  }
  imports[nimports] = *im;
  imports[nimports++].refs = 1;
  atomic_store_explicit(&imported, nimports, memory_order_relaxed);
  return true;
}

/* The open of export (pid, key, token) of a VMM block, counted once more (0: none). */
static uint64_t open_again(const struct handle *h) {
  uint64_t ptr = 0;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < nimports && !ptr; i++) {
    if (imports[i].kind == KIND_VMM && imports[i].pid == h->pid && imports[i].key == h->key &&
        imports[i].token == h->token) {
      imports[i].refs++;
      ptr = imports[i].ptr;
    }
  }
  pthread_mutex_unlock(&lock);
  return ptr;
}

/* Unmaps the first `mapped` units of an imported range and frees the range. */
static CUresult unmap_import(uint64_t base, uint64_t unit, uint64_t span, uint64_t mapped) {
  CUresult rc = CUDA_SUCCESS;
  for (uint64_t i = 0; i < mapped; i++) {
    CUresult u = real.cuMemUnmap(base + i * unit, unit);
    rc = rc == CUDA_SUCCESS ? u : rc;
  }
  CUresult f = real.cuMemAddressFree(base, span);
  return rc == CUDA_SUCCESS ? f : rc;
}

/* Imports, maps and grants access to the units of a VMM block whose description r came over
 * sock; their descriptors follow. Stores the range's base. The driver's answer (or
 * INVALID_VALUE, after a message, when the exporter stopped). */
static CUresult map_units(int sock, const struct reply *r, int32_t pid, uint64_t *base) {
  uint64_t span = (uint64_t)r->nunits * r->unit, mapped = 0;
  CUdeviceptr va = 0;
  int dev = -1;
  if (!real.cuMemAddressReserve || !real.cuMemAddressFree || !real.cuMemImportFromShareableHandle ||
      !real.cuMemMap || !real.cuMemUnmap || !real.cuMemRelease || !real.cuMemSetAccess) {
    return CUDA_ERROR_NOT_SUPPORTED; /* a driver without VMM cannot map the exporter's units */
  }
  CUresult rc = real.cuMemAddressReserve(&va, span, r->unit, 0, 0);
  while (rc == CUDA_SUCCESS && mapped < r->nunits) {
    struct batch b;
    int fds[IPCWIRE_MAX_FDS], n = 0;
    int got = ipcwire_recv(sock, &b, sizeof b, fds, IPCWIRE_MAX_FDS, &n, REPLY_WAIT_MS);
    uint32_t want =
        r->nunits - mapped < IPCWIRE_MAX_FDS ? r->nunits - (uint32_t)mapped : IPCWIRE_MAX_FDS;
    if (got != 0 || b.status != 0 || b.count != want || n != (int)want) {
      for (int k = 0; k < n; k++) {
        close(fds[k]);
      }
      say_why(pid, got != 0 ? -got : b.status != 0 ? b.status : EPROTO);
      rc = CUDA_ERROR_INVALID_VALUE;
      break;
    }
    for (int k = 0; k < n; k++) {
      CUmemGenericAllocationHandle h = 0;
      if (rc == CUDA_SUCCESS) {
        rc = real.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fds[k],
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      }
      close(fds[k]); /* the imported handle keeps the memory */
      if (rc != CUDA_SUCCESS) {
        continue;
      }
      CUmemAllocationProp prop;
      if (dev < 0 && real.cuMemGetAllocationPropertiesFromHandle &&
          real.cuMemGetAllocationPropertiesFromHandle(&prop, h) == CUDA_SUCCESS) {
        dev = prop.location.id;
      }
      rc = real.cuMemMap(va + mapped * r->unit, r->unit, 0, h, 0);
      real.cuMemRelease(h); /* the mapping keeps the memory until it is unmapped */
      mapped += rc == CUDA_SUCCESS;
    }
  }
  CUdevice here = 0;
  if (rc == CUDA_SUCCESS && dev < 0 && real.cuCtxGetDevice &&
      real.cuCtxGetDevice(&here) == CUDA_SUCCESS) {
    dev = here; /* the driver did not say where the memory lies: this context's device */
  }
  if (rc == CUDA_SUCCESS) {
    CUmemAccessDesc access[GPUCAP_MAX_DEVICES];
    int n = pool_access_of(dev < 0 ? 0 : dev, access);
    rc = real.cuMemSetAccess(va, span, access, (size_t)n);
  }
  if (rc != CUDA_SUCCESS) {
    if (va) {
      unmap_import(va, r->unit, span, mapped);
    }
    return rc;
  }
  *base = va;
  return CUDA_SUCCESS;
}

typedef CUresult (*open_fn)(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags);

/* Opens the region of r through the driver; the block's address in *ptr, the region's in
 * *base. */
static CUresult open_region(open_fn open, const struct reply *r, int32_t pid, unsigned flags,
                            uint64_t *ptr, uint64_t *base) {
  CUdeviceptr region = 0, start = 0;
  size_t mapped = 0;
  CUresult rc = open(&region, r->region, flags);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (real.cuMemGetAddressRange_v2(&start, &mapped, region) != CUDA_SUCCESS || start != region ||
      r->offset > mapped || r->size > mapped - r->offset) {
    real.cuIpcCloseMemHandle(region);
    log_msg(LOG_ERROR,
            "cuIpcOpenMemHandle: the block shared by process %d does not lie in the "
            "memory the driver mapped; refused",
            (int)pid);
    return CUDA_ERROR_INVALID_VALUE;
  }
  *ptr = region + r->offset;
  *base = region;
  return CUDA_SUCCESS;
}

/* Closes what an open made (the driver's open of a region, or the mapped units). */
static CUresult undo_open(const struct import *im) {
  return im->kind == KIND_VMM ? unmap_import(im->base, im->unit, im->span, im->span / im->unit)
                              : real.cuIpcCloseMemHandle(im->base);
}

/* Asks the exporter of h for its export; *r its answer, the socket in *sock for the units. */
static CUresult ask(const struct handle *h, struct reply *r, int *sock) {
  int s = ipcwire_connect(h->uid, h->pid, h->key), n = 0;
  struct request q = {.key = h->key, .token = h->token};
  memcpy(q.magic, REQUEST_MAGIC, sizeof q.magic);
  int err = s < 0 ? -s : -ipcwire_send(s, &q, sizeof q, NULL, 0);
  if (err == 0) {
    err = -ipcwire_recv(s, r, sizeof *r, NULL, 0, &n, REPLY_WAIT_MS);
  }
  if (err == 0 && (memcmp(r->magic, REPLY_MAGIC, sizeof r->magic) != 0 ||
                   (r->status == 0 && r->kind != KIND_REGION && r->kind != KIND_VMM))) {
    err = EPROTO;
  }
  err = err ? err : r->status;
  if (err == 0 && r->kind == KIND_VMM &&
      (r->unit == 0 || (r->unit & (r->unit - 1)) != 0 || r->nunits == 0 || r->nunits > MAX_UNITS ||
       r->offset >= r->unit || r->size > (uint64_t)r->nunits * r->unit - r->offset)) {
    err = EPROTO;
  }
  if (err != 0) {
    say_why(h->pid, err);
    if (s >= 0) {
      close(s);
    }
    return CUDA_ERROR_INVALID_VALUE;
  }
  *sock = s;
  return CUDA_SUCCESS;
}

static CUresult open_handle(open_fn open, CUdeviceptr *pdptr, CUipcMemHandle handle,
                            unsigned int flags) {
  struct handle h;
  memcpy(&h, &handle, sizeof h);
  if (memcmp(h.magic, HANDLE_MAGIC, sizeof h.magic) != 0) {
    return open(pdptr, handle, flags); /* the driver's own handle */
  }
  /* The driver's checks, in its order: a current context, the arguments, not the exporter. */
  CUcontext current = NULL;
  CUresult rc = real.cuCtxGetCurrent ? real.cuCtxGetCurrent(&current) : CUDA_SUCCESS;
  if (rc != CUDA_SUCCESS || !current) {
    return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_INVALID_CONTEXT;
  }
  if (!pdptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (h.pid == (int32_t)getpid()) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  uint64_t again = open_again(&h);
  if (again) {
    *pdptr = again;
    return CUDA_SUCCESS;
  }
  struct reply r;
  int sock = -1;
  rc = ask(&h, &r, &sock);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct import im = {.size = r.size, .kind = r.kind, .pid = h.pid, .key = h.key, .token = h.token};
  if (r.kind == KIND_VMM) {
    rc = map_units(sock, &r, h.pid, &im.base);
    im.ptr = im.base + r.offset;
    im.unit = r.unit;
    im.span = (uint64_t)r.nunits * r.unit;
  } else {
    rc = open_region(open, &r, h.pid, flags, &im.ptr, &im.base);
  }
  close(sock);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  pthread_mutex_lock(&lock);
  bool noted = note_import(&im);
  pthread_mutex_unlock(&lock);
  if (!noted) {
    undo_open(&im);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *pdptr = im.ptr;
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
    *stray |= imports[i].kind == KIND_REGION && imports[i].base == ptr;
  }
  return -1;
}

GPUCAP_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  bool stray;
  HOOK_PROLOGUE(real.cuIpcCloseMemHandle);
  pthread_mutex_lock(&lock);
  long i = find_import(dptr, &stray);
  struct import im = i >= 0 ? imports[i] : (struct import){0};
  bool last = i >= 0 && im.refs == 1;
  if (i >= 0 && im.kind == KIND_VMM) {
    /* The driver counts nothing here: the last close unmaps, the others only count. */
    if (last) {
      imports[i] = imports[--nimports];
      atomic_store_explicit(&imported, nimports, memory_order_relaxed);
    } else {
      imports[i].refs--;
    }
  }
  pthread_mutex_unlock(&lock);
  if (i < 0) {
    return stray ? CUDA_ERROR_INVALID_VALUE : real.cuIpcCloseMemHandle(dptr);
  }
  if (im.kind == KIND_VMM) {
    return last ? undo_open(&im) : CUDA_SUCCESS;
  }
  CUresult rc = real.cuIpcCloseMemHandle(im.base); /* one driver close per open */
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

/* A fork child's lists as the parent left them: kept, not freed (volatile, so the stores
 * stay), so that leak checkers see them reachable. */
static void *volatile inherited[2];

/* In a fork child: no export, no import, no server (the parent's socket is closed here: only
 * the parent's thread serves it). */
static void fork_child(void) {
  pthread_mutex_init(&lock, NULL);
  /* Abandoned unread: another thread may have been growing them at the fork. */
  inherited[0] = exports;
  inherited[1] = imports;
  exports = NULL;
  imports = NULL;
  nexports = nimports = capexports = capimports = 0;
  if (listen_fd >= 0) {
    close(listen_fd);
  }
  listen_fd = -1;
  atomic_store(&exiting_fd, -1);
  atomic_store(&exiting, false);
  atomic_store(&server_started, false); /* the parent's thread is not the child's */
  atomic_store_explicit(&exported, 0, memory_order_relaxed);
  atomic_store_explicit(&imported, 0, memory_order_relaxed);
}
FORK_CHILD(fork_child)
