/* Internal interface between the modules of the fake CUDA driver (tests/fakecuda/fk_*.c).
 *
 * Invariants: every exported entry point runs fk_enter() first and fk_leave() last, so the whole
 * body runs under the one global lock `fk.lock` (a test driver needs no finer locking; the lock
 * is recursive because the runtime's callbacks, run by the driver, may call back in) and no
 * fk_* function below may be called without it, except where its contract says so. Nothing
 * here blocks or sleeps (FAKECUDA_LATENCY is spent by fk_leave after the lock is dropped):
 * device work "executes" instantly when a sync point completes it.
 * Objects (contexts, streams) are never freed before exit, so a stale handle can always be
 * looked up and rejected; events and work items are freed as soon as they are dead.
 */
#ifndef GPUCAP_TESTS_FAKECUDA_FK_H
#define GPUCAP_TESTS_FAKECUDA_FK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"

#define FK_API __attribute__((visibility("default")))

#define FK_MAX_DEVICES 64
#define FK_MAX_EXPORTS 1024
#define FK_MAX_FAILS 32
#define FK_MAX_CALLERS 32
#define FK_DRIVER_VERSION 13000
#define FK_ALLOC_ALIGN ((size_t)512)
#define FK_PITCH_ALIGN ((size_t)512)
#define FK_GRANULARITY ((size_t)2 << 20)
#define FK_DEFAULT_MEMORY ((size_t)16 << 30)
#define FK_DEFAULT_CONTEXT_MEMORY ((size_t)128 << 20)
#define FK_DEFAULT_PAGE ((size_t)2 << 20)
#define FK_POLLS_TO_COMPLETE 2
#define FK_TEXTURE_MAX 32768 /* every texture and surface extent limit (attributes 21..77) */
#define FK_MACHINE_NAME_MAX 64

/* ---- Configuration (fk_env.c): pure parsing of the FAKECUDA_* variables. ---- */

struct fk_fail {
  int export_index;       /* index into fk_exports */
  unsigned long long nth; /* the call (1-based) that fails */
  int code;               /* the CUresult it returns */
};

struct fk_config {
  int ndev;
  size_t mem[FK_MAX_DEVICES];
  unsigned pci_bus[FK_MAX_DEVICES]; /* FAKECUDA_PCI_BUS: each device's PCI bus (domain 0) */
  int cc_major, cc_minor;
  int backing;
  int stub; /* FAKECUDA_STUB=1: behave like the toolkit's stub libcuda.so */
  char stats_path[1024];
  char trace_path[1024];                 /* FAKECUDA_TRACE: "1" (stderr) or a file; "" off */
  char machine[FK_MACHINE_NAME_MAX + 1]; /* FAKECUDA_MACHINE: the shared machine, "" none */
  int nfail;
  struct fk_fail fail[FK_MAX_FAILS];
  /* FAKECUDA_LATENCY: nanoseconds each call of an entry point spends in the driver, by index
   * into fk_exports (0: none); FAKECUDA_LATENCY_SLEEP=0 charges them without spending them. */
  unsigned long long latency_ns[FK_MAX_EXPORTS];
  int latency_charge_only;
  unsigned long long migration_ns; /* FAKECUDA_MIGRATION: per managed page migrated (0: none) */
  /* The driver's own memory (fk_driver.c), FAKECUDA_DRIVER_MEMORY=off turning all of it off: */
  int driver_memory;     /* modelled at all */
  size_t context_memory; /* FAKECUDA_CONTEXT_MEMORY: each context's, at its creation */
  unsigned module_pct;   /* FAKECUDA_MODULE_MEMORY: a loaded image's, in % of its code size */
  size_t page;           /* FAKECUDA_PAGE_SIZE: cuMemAlloc memory is held in pages of this size */
};

/* Parses one size ("4096", "512KiB", "16GiB", "1T"; binary units only) into *out.
 * Fails (-EINVAL) iff the text is empty, not decimal digits plus an optional unit, or overflows. */
int fk_env_size(const char *s, size_t *out);

/* Fills *cfg from the FAKECUDA_* variables, read through get (NULL when unset). Returns 0, or
 * -EINVAL with a one-line reason (naming the variable) in err. */
int fk_env_parse(struct fk_config *cfg, const char *(*get)(const char *name), char *err,
                 size_t errlen);

/* ---- The export table (generated from exports.txt at build time, fk_gen.c). ---- */

typedef void (*fk_fn)(void);
struct fk_export {
  const char *name;
  fk_fn fn;
};
extern const struct fk_export fk_exports[];
extern const size_t fk_export_count;

/* Index of `name` in fk_exports (sorted by strcmp), or -1. Lock not needed. */
int fk_export_index(const char *name);

/* Body of every generated catch-all: counts the call and answers CUDA_ERROR_NOT_SUPPORTED
 * (or NOT_INITIALIZED before cuInit, or the injected failure). Takes the lock itself. */
int fk_catchall(const char *name);

/* ---- Objects. Handles are pointers to these structs. ---- */

enum { FK_S_LEGACY, FK_S_THREAD, FK_S_USER };

struct fk_work;

/* A stream-ordered memory pool (fk_pool.c): the device's default pool, or one cuMemPoolCreate
 * made (never freed before unload, so a destroyed handle is recognised). Device memory it holds
 * is counted in the device's used bytes: its live allocations (used) plus what it retains after
 * frees, up to its release threshold (reserved - used). */
struct CUmemPoolHandle_st {
  int dev;
  int live;    /* the default pool, or a created pool not yet destroyed */
  int created; /* made by cuMemPoolCreate */
  size_t max_size;
  size_t used, used_high, reserved, reserved_high;
  uint64_t threshold;   /* CU_MEMPOOL_ATTR_RELEASE_THRESHOLD */
  int reuse[3];         /* CU_MEMPOOL_ATTR_REUSE_* (1..3), stored only */
  uint64_t read, write; /* devices with read / read-write access */
};

/* What the driver holds on the device for one live context, bytes (all 0 with
 * FAKECUDA_DRIVER_MEMORY=off): counted in the device's `driver` figure. */
struct fk_ctx_memory {
  size_t base;   /* the context itself (FAKECUDA_CONTEXT_MEMORY) */
  size_t local;  /* local memory: CU_LIMIT_STACK_SIZE x the device's resident threads */
  size_t fifo;   /* the printf FIFO (CU_LIMIT_PRINTF_FIFO_SIZE) */
  size_t heap;   /* the device malloc heap (CU_LIMIT_MALLOC_HEAP_SIZE) */
  size_t images; /* the code of the modules loaded in it */
};

struct fk_cls {
  void *key, *value;
  void (*dtor)(struct CUctx_st *ctx, void *key, void *value);
};

struct CUctx_st {
  int dev;
  int primary; /* the device's primary context (one per device, never destroyed) */
  int active;  /* created and not destroyed / reset */
  int dying;   /* its context-local storage destructors are running (lock dropped) */
  unsigned flags;
  int refs; /* primary contexts: retain count */
  unsigned long long id;
  struct CUstream_st *legacy;
  struct CUstream_st **streams; /* every stream of this context, dead ones included */
  size_t nstreams, capstreams;
  struct fk_cls *cls; /* context-local storage */
  size_t ncls, capcls;
  /* settings (fk_settings.c) */
  size_t limits[10];        /* CU_LIMIT_* */
  int cache_config;         /* CU_FUNC_CACHE_* */
  int smem_config;          /* CU_SHARED_MEM_CONFIG_* */
  uint64_t peers;           /* devices whose memory it may access (cuCtxEnablePeerAccess) */
  struct fk_ctx_memory mem; /* the driver's own device memory for it (fk_driver.c) */
};

struct fk_capture;

struct CUstream_st {
  struct CUctx_st *ctx;
  struct fk_capture *cap; /* the capture sequence it takes part in (fk_graph.c), or NULL */
  int kind;               /* FK_S_* */
  int live;
  unsigned flags;
  int priority;
  pthread_t owner; /* FK_S_THREAD: the thread it belongs to */
  struct fk_work *head, *tail;
  int polls;
  unsigned long long id;
};

struct CUevent_st {
  struct CUctx_st *ctx;
  unsigned flags;
  int recorded;
  struct CUstream_st *stream; /* where it was recorded */
  uint64_t seq;               /* ... and the position in that stream */
  int polls;
  struct fk_capture *cap;   /* last recorded inside this capture sequence, or NULL */
  double ms;                /* when it was recorded (CLOCK_MONOTONIC, milliseconds) */
  struct fk_ipc_event *ipc; /* an interprocess event's shared state (fk_ipcevent.c), or NULL */
};

struct fk_device {
  size_t total;
  size_t used;       /* device memory of the program's allocations, bytes */
  size_t driver;     /* device memory the driver holds for itself: contexts (their local memory,
                      * FIFO and heap included), module images and variables */
  size_t rounding;   /* what cuMemAlloc allocations hold beyond their bytes (whole pages) */
  size_t peak;       /* the peak of used + driver + rounding (of used alone with
                      * FAKECUDA_DRIVER_MEMORY=off) */
  uintptr_t va_base; /* this device's cuMemAlloc region */
  size_t va_size;
  struct CUctx_st *primary;
  struct CUmemPoolHandle_st pool;     /* the default pool */
  struct CUmemPoolHandle_st *current; /* cuDeviceSetMemPool's, or NULL: the default */
  unsigned long long alloc_calls, free_calls;
  /* Managed memory (fk_managed.c): bytes of managed pages resident here now (part of `used`)
   * and at most, and the bytes migrated here and evicted or prefetched back to the host. */
  size_t managed, managed_peak;
  unsigned long long migrated_in, migrated_out;
};

struct fk_caller {
  char name[64];
  unsigned long long count;
};

struct fk_global {
  pthread_mutex_t lock;
  struct fk_config cfg;
  int cfg_error;     /* a FAKECUDA_* variable was malformed: every entry point fails */
  int initialized;   /* cuInit succeeded */
  int forked;        /* this is the child of a process that had initialised the driver */
  int deinitialized; /* the library destructor ran: every entry point fails DEINITIALIZED */
  pid_t pid;         /* the process that loaded the library (stats are written only by it) */
  int ndev;
  struct fk_device dev[FK_MAX_DEVICES];
  uintptr_t va_base; /* one PROT_NONE reservation: every device region, then the VMM region */
  size_t va_size;
  uintptr_t vmm_base;
  size_t vmm_size;
  int dev_fd;             /* FAKECUDA_BACKING=1: the memfd behind every device region (file offset =
                           * address - va_base), shared with importers through cuIpcOpenMemHandle; else -1 */
  struct CUctx_st **ctxs; /* every context ever created */
  size_t nctxs, capctxs;
  struct CUstream_st **ustreams; /* live user streams (handle validation) */
  size_t nustreams, capustreams;
  struct CUevent_st **events; /* live events */
  size_t nevents, capevents;
  uint64_t seq; /* global work sequence: enqueue order across all streams */
  unsigned long long next_id;
  unsigned long long calls[FK_MAX_EXPORTS];
  unsigned long long latency_ns[FK_MAX_EXPORTS]; /* FAKECUDA_LATENCY charged, per entry point */
  unsigned long long gpa_queries;
  struct fk_caller callers[FK_MAX_CALLERS];
  unsigned long long hazards, stale_work;
  unsigned long long migration_ns; /* FAKECUDA_MIGRATION charged, in total */
};

extern struct fk_global fk;

/* ---- Entry and exit of every entry point (fk_core.c). ---- */

enum { FK_ANYTIME = 0, FK_NEED_INIT = 1 };

/* Takes the lock (always), parses the configuration on first use, counts the call of `fn` and
 * applies FAKECUDA_FAIL. Returns CUDA_SUCCESS to go on, or the code the entry point must return
 * at once: the injected failure, CUDA_ERROR_INVALID_VALUE for a bad configuration,
 * CUDA_ERROR_NOT_INITIALIZED in a forked child or (need_init) before cuInit. */
CUresult fk_enter(const char *fn, int need_init);

/* Appends "fn failed: ..." to the driver's error log and tells its callbacks (fk_errors.c);
 * nothing for CUDA_SUCCESS and CUDA_ERROR_NOT_READY. */
void fk_log_failure(const char *fn, CUresult rc);
void fk_logs_teardown(void);

/* Releases the lock; returns rc. */
CUresult fk_leave(CUresult rc);

/* Charges FAKECUDA_MIGRATION for `pages` managed pages migrated to the entry point the calling
 * thread is in (the call that executes the work or prefetch), spent with its latency. */
void fk_charge_migration(size_t pages);

/* Around a call out of the driver into the program's code (context-local storage destructors):
 * fk_callout_begin drops the lock when the calling thread holds it once (it is inside one entry
 * point, not in a call the program made from a callout) and returns whether it did;
 * fk_callout_end(dropped) takes it back. The real driver cannot hold its own locks there: the
 * program's code takes its locks and calls the driver, from this thread and others. */
int fk_callout_begin(void);
void fk_callout_end(int dropped);

#define FK_BODY(need, expr)                                                                        \
  do {                                                                                             \
    CUresult fk_rc_ = fk_enter(__func__, (need));                                                  \
    if (fk_rc_ == CUDA_SUCCESS) {                                                                  \
      fk_rc_ = (expr);                                                                             \
    }                                                                                              \
    return fk_leave(fk_rc_);                                                                       \
  } while (0)

/* Appends p to a growable pointer array (aborts the process on ENOMEM: a test driver). */
void fk_push(void ***arr, size_t *n, size_t *cap, void *p);

/* Message to stderr prefixed "fakecuda: ", through a stack buffer and write(2). */
__attribute__((format(printf, 1, 2))) void fk_log(const char *fmt, ...);

unsigned long long fk_new_id(void);

/* With FAKECUDA_TRACE set, one line "fakecuda: trace: [tid] ..." to its destination; fk_leave
 * logs every call's name and result this way. */
__attribute__((format(printf, 1, 2))) void fk_trace(const char *fmt, ...);

/* ---- Devices and contexts (fk_ctx.c). ---- */

/* Sets up the devices and their address space (called by cuInit once). */
CUresult fk_devices_init(void);

/* The calling thread's current context: INVALID_CONTEXT when there is none, and
 * CONTEXT_IS_DESTROYED when it has been destroyed or is an inactive primary context. */
CUresult fk_ctx_current(struct CUctx_st **out);

/* The context an explicit handle names (INVALID_CONTEXT if unknown, CONTEXT_IS_DESTROYED if
 * destroyed), or the current one for NULL. */
CUresult fk_ctx_or_current(struct CUctx_st *c, struct CUctx_st **out);

/* cuCtxGetCurrent, cuCtxGetDevice and cuCtxGetId without counting as the program's calls (for
 * the private tables). */
CUresult fk_ctx_get_current(CUcontext *out);
CUresult fk_ctx_device_of(CUcontext ctx, CUdevice *dev);
CUresult fk_ctx_id_of(CUcontext ctx, unsigned long long *id);

/* Gives a new context the driver's default settings (limits, cache configuration). */
void fk_ctx_settings_init(struct CUctx_st *c);

/* Adds a stream to its context's list. */
void fk_ctx_add_stream(struct CUctx_st *c, struct CUstream_st *s);

/* Live contexts on device dev: created and not destroyed, or primary and retained. O(contexts). */
int fk_ctx_live(int dev);

/* Device dev's UUID, and the value of a device attribute (0 for those not modelled). */
void fk_dev_uuid(int dev, CUuuid *out);
int fk_dev_attr(int attr, int dev);

/* Context-local storage (the runtime's private table c693336e): one value per (context, key),
 * with a destructor called when the context is destroyed or a primary context reset or released
 * for the last time. ctx NULL means the current context. put replaces; get of a missing key is
 * CUDA_ERROR_INVALID_HANDLE; delete of a missing key succeeds. */
typedef void (*fk_cls_dtor)(CUcontext ctx, void *key, void *value);
CUresult fk_cls_put(CUcontext ctx, void *key, void *value, fk_cls_dtor dtor);
CUresult fk_cls_delete(CUcontext ctx, void *key);
CUresult fk_cls_get(void **value, CUcontext ctx, void *key);

/* ---- The driver's own device memory (fk_driver.c); none with FAKECUDA_DRIVER_MEMORY=off. ---- */

/* A context being created or activated takes its memory (fk_ctx_memory: the context, local memory
 * for its stack limit, the printf FIFO and heap by its limits). Fails with
 * CUDA_ERROR_OUT_OF_MEMORY, taking nothing. */
CUresult fk_driver_ctx_open(struct CUctx_st *c);

/* A context destroyed or deactivated gives back all its memory but its module images (given back
 * by its modules' unload, which comes first). */
void fk_driver_ctx_close(struct CUctx_st *c);

/* cuCtxSetLimit of CU_LIMIT_STACK_SIZE, _PRINTF_FIFO_SIZE or _MALLOC_HEAP_SIZE to value (other
 * limits: no memory): resizes that reservation of c. Fails with CUDA_ERROR_OUT_OF_MEMORY (the
 * reservation and the limit stay as they were). */
CUresult fk_driver_set_limit(struct CUctx_st *c, int limit, size_t value);

/* A launch of a kernel whose threads need local_bytes of stack: the driver raises c's
 * CU_LIMIT_STACK_SIZE to it (rounded up to 16) when it is larger, reserving the local memory
 * for it; fails with CUDA_ERROR_OUT_OF_MEMORY when that does not fit (nothing changed). */
CUresult fk_driver_launch(struct CUctx_st *c, size_t local_bytes);

/* A module image of code_bytes loaded into c takes its code's memory (in proportion to its size,
 * FAKECUDA_MODULE_MEMORY); *taken is what to give back at its unload. Fails with
 * CUDA_ERROR_OUT_OF_MEMORY (*taken 0). */
CUresult fk_driver_image(struct CUctx_st *c, size_t code_bytes, size_t *taken);
void fk_driver_image_release(struct CUctx_st *c, size_t taken);

/* The driver memory of device dev's live contexts, by part, summed (for the report). */
void fk_driver_usage(int dev, struct fk_ctx_memory *sum);

/* ---- Streams, events and the pending-work engine (fk_stream.c). ---- */

enum {
  FK_W_COPY,
  FK_W_SET,
  FK_W_HOOK,
  FK_W_FREE,
  FK_W_WAIT,
  FK_W_HOST,
  FK_W_GRAPH_ALLOC,
  FK_W_GRAPH_FREE
};

struct fk_range {
  uintptr_t addr;
  size_t n;                    /* bytes; 0 for a staged pageable source */
  int where;                   /* FK_AT_* when enqueued */
  unsigned long long alloc_id; /* the registry allocation it lay in then (0: none) */
};

struct fk_work {
  struct fk_work *next;
  struct CUstream_st *stream; /* where it was enqueued (NULL: executed at the call) */
  uint64_t seq;
  int kind;
  int dev;                         /* the device executing it */
  struct fk_range dst, src;        /* FK_W_COPY: both; SET/HOOK/FREE: dst */
  void *staging;                   /* FK_W_COPY from pageable memory: snapshot taken at enqueue */
  unsigned value, elem;            /* FK_W_SET: the pattern and its width (1, 2, 4) */
  size_t count;                    /* FK_W_SET: elements; FK_W_COPY: bytes */
  struct CUstream_st *wait_stream; /* FK_W_WAIT: work to wait for */
  uint64_t wait_seq;
  void (*host_fn)(void *);                      /* FK_W_HOST: cuLaunchHostFunc's function */
  void (*callback)(CUstream, CUresult, void *); /* ... or cuStreamAddCallback's */
  CUstream callback_stream;
  void *host_arg;
};

/* A copy of a chain of items (through ->next), and the freeing of one (NULL: nothing). */
struct fk_work *fk_work_clone_chain(const struct fk_work *w);
void fk_work_free_chain(struct fk_work *w);

/* Runs w's effect now (it is complete) and frees it. */
void fk_work_execute(struct fk_work *w);

/* A copy of w for another queue (its staging buffer duplicated). */
struct fk_work *fk_work_clone(const struct fk_work *w);

/* The driver's own object behind stream handle h (the tools-context table's slot 51): a
 * created stream, or for NULL / CU_STREAM_LEGACY / CU_STREAM_PER_THREAD the default stream of
 * ctx (NULL: the current context; ptsz: NULL means the per-thread stream). Fails with the
 * context's error, CUDA_ERROR_INVALID_HANDLE for an unknown or destroyed stream. */
CUresult fk_stream_object(CUcontext ctx, CUstream h, int ptsz, struct CUstream_st **out);

/* The unique id (as cuStreamGetId) of a stream object fk_stream_object returned (slot 39).
 * CUDA_ERROR_INVALID_HANDLE when s is no live stream of a live context. */
CUresult fk_stream_object_id(const struct CUstream_st *s, unsigned long long *id);

/* Creates a stream of `kind` in c (never fails but for ENOMEM, which aborts). */
struct CUstream_st *fk_stream_new(struct CUctx_st *c, int kind, unsigned flags, int priority);

/* Resolves a stream handle. ptsz: the _ptsz convention (NULL = per-thread stream) instead of
 * the legacy one (NULL = legacy stream). Default streams need a current context. */
CUresult fk_stream_resolve(CUstream h, int ptsz, struct CUstream_st **out);

/* The calling thread's per-thread default stream of c (created on first use). */
struct CUstream_st *fk_stream_thread(struct CUctx_st *c);

/* Allocates a zeroed work item (aborts on ENOMEM). */
struct fk_work *fk_work_new(int kind);

/* Appends w to s and gives it the next global sequence number. */
void fk_work_enqueue(struct CUstream_st *s, struct fk_work *w);

/* Completes the work that an operation enqueued on s now would wait for. */
void fk_stream_reach(struct CUstream_st *s, uint64_t seq);

/* Completes every pending item of c / of device dev / of the process. */
void fk_sync_ctx(struct CUctx_st *c);
void fk_sync_device(int dev);
void fk_sync_all(void);

/* Number of pending items (wait markers excluded). */
int fk_work_pending(void);

/* Number of pending items touching [addr, addr + n). */
int fk_work_overlapping(uintptr_t addr, size_t n);

/* Drops every stream and event of c (after its work completed). */
void fk_stream_kill_ctx(struct CUctx_st *c);

/* The live event behind handle h, or NULL; fk_event_add makes e live (its handle). */
struct CUevent_st *fk_event_find(CUevent h);
void fk_event_add(struct CUevent_st *e);

/* ---- Interprocess events (fk_ipcevent.c). ---- */

/* Gives a new CU_EVENT_INTERPROCESS event its shared slot; CUDA_ERROR_OUT_OF_MEMORY when the
 * host refuses or the process's table is full. */
CUresult fk_ipc_event_new(struct CUevent_st *e);

/* Forgets e's shared state (the exporter's slot is freed; an opened one unmapped). No effect on
 * an event without one. */
void fk_ipc_event_drop(struct CUevent_st *e);

/* e (interprocess) was recorded outside a capture, after completing the work it follows;
 * had_work: some was pending. Every process that opened it sees the record. */
void fk_ipc_event_recorded(struct CUevent_st *e, int had_work);

/* cuEventQuery of an interprocess event: NOT_READY on the first poll of a record that had work
 * to complete, else SUCCESS; INVALID_HANDLE once the exporter destroyed it. */
CUresult fk_ipc_event_query(struct CUevent_st *e);

/* cuEventSynchronize / cuStreamWaitEvent of an interprocess event: its work is complete
 * (SUCCESS), or INVALID_HANDLE once the exporter destroyed it. */
CUresult fk_ipc_event_complete(struct CUevent_st *e);

/* ---- Memory (fk_mem.c, fk_vmm.c, fk_copy.c). ---- */

enum {
  FK_K_DEVICE = 1,
  FK_K_ASYNC,
  FK_K_MANAGED,
  FK_K_HOST,
  FK_K_RESERVE,
  FK_K_IPC,
  FK_K_MODULE,
  FK_K_GRAPH /* a graph memory node's allocation: address fixed at capture, memory at launch */
};

struct fk_phys {
  CUmemGenericAllocationHandle handle;
  size_t size;
  CUmemAllocationProp prop;
  int refs;        /* handle references (cuMemCreate, cuMemRetainAllocationHandle, imports) */
  int maps;        /* live mappings */
  int fd;          /* memfd: its bytes at data_off (and, when shareable, its description at 0) */
  int host_bytes;  /* its bytes are host memory at its mappings (FAKECUDA_BACKING=1) */
  int imported;    /* another process's allocation (cuMemImportFromShareableHandle): not this
                    * process's device memory */
  int released;    /* its last handle reference was released once (counted as a free call) */
  size_t data_off; /* where its bytes start in fd */
  unsigned long long id;
};

struct fk_map {
  uintptr_t va;
  size_t size;
  struct fk_phys *phys;
  uint64_t rmask, wmask; /* devices with read / write access */
  unsigned long long id;
};

struct fk_alloc {
  uintptr_t base;
  size_t size; /* requested bytes (pitch x height for pitched allocations) */
  size_t span; /* address space and device memory it holds */
  int kind;    /* FK_K_* */
  int dev;
  int freeing;    /* cuMemFreeAsync enqueued: gone for the API, alive for pending work */
  int graph_phys; /* FK_K_GRAPH: its memory is held (counted in used) */
  int graph_live; /* FK_K_GRAPH: allocated by a launch and not freed since */
  struct CUctx_st *ctx;
  struct CUmemPoolHandle_st *pool; /* FK_K_ASYNC: the pool it came from */
  unsigned long long id;
  unsigned flags;      /* cuMemHostAlloc / cuMemAllocManaged flags */
  struct fk_map *maps; /* FK_K_RESERVE: mappings, sorted by va */
  size_t nmaps, capmaps;
  /* FK_K_IPC (another process's allocation opened here): its pages start `lead` bytes before
   * base; the exporter, the allocation's id there, and the opens of it in ctx. */
  size_t lead;
  pid_t ipc_pid;
  unsigned long long ipc_id;
  int ipc_refs;
  struct fk_managed *mg; /* FK_K_MANAGED: where its pages are, its advice and stream association */
};

/* A graph allocation takes (take=1) or gives back (take=0) its device memory: counted as the
 * program's like any allocation. Fails with CUDA_ERROR_OUT_OF_MEMORY. */
CUresult fk_mem_graph_memory(struct fk_alloc *a, int take);

/* Device memory of dev that cuMemGetInfo_v2 reports free: not held by the program or the driver,
 * and with FAKECUDA_MACHINE not by any live process of the machine (dead ones reclaimed first). */
size_t fk_dev_free(int dev);

/* Whose device memory fk_mem_take counts: the program's allocations, the driver's own, or
 * the page rounding of allocations. */
enum { FK_MEM_PROGRAM = 0, FK_MEM_DRIVER = 1, FK_MEM_ROUNDING = 2 };

/* The one accounting point of device memory: takes bytes of dev for `whose` (FK_MEM_*), iff they
 * fit in what is free on the device, across the machine's processes with FAKECUDA_MACHINE
 * (admitted atomically there); records the peak. Fails with CUDA_ERROR_OUT_OF_MEMORY, changing
 * nothing. Callers take after everything that can fail for want of address space, so a refused
 * allocation never reaches a peak. */
CUresult fk_mem_take(int dev, size_t bytes, int whose);

/* Gives back bytes taken by fk_mem_take for the same owner. */
void fk_mem_give(int dev, size_t bytes, int whose);

/* The device memory dev's process holds now: used + driver + rounding. */
size_t fk_mem_held(int dev);

/* FAKECUDA_MACHINE (cuInit, before anything is set up): maps the machine's ledger and gives this
 * process a slot in it. No effect without the setting. Fails, with a line on stderr, with
 * CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (a ledger that is malformed, foreign or made for other
 * devices), CUDA_ERROR_OUT_OF_MEMORY (no free slot) or CUDA_ERROR_OPERATING_SYSTEM. */
CUresult fk_mem_machine_join(void);

/* Publishes this process's live contexts on dev to the machine (no effect without one). */
void fk_mem_machine_contexts(int dev, int n);

/* The machine's figures for dev (fk_machine.h); -1 without a machine. */
struct fk_machine_usage;
int fk_mem_machine_usage(int dev, struct fk_machine_usage *u);

/* Leaves the machine: this process's slot is freed (at unload; also in a child forked before
 * cuInit that joined on its own). */
void fk_mem_machine_leave(void);

/* Allocates size bytes (rounded up to 512) of device memory on dev in context c: FK_K_DEVICE
 * counts as the program's (used, peak, alloc_calls), FK_K_MODULE as the driver's. With the
 * driver's memory modelled a FK_K_DEVICE allocation is held in whole pages (fk_mem_paged_*).
 * Fails with CUDA_ERROR_OUT_OF_MEMORY. */
CUresult fk_mem_device_alloc(int kind, int dev, size_t size, struct CUctx_st *c,
                             struct fk_alloc **out);

/* Registers an allocation of `kind` holding span bytes of dev's device address space (made
 * accessible with backing), without counting any device memory. NULL when no address is
 * free. */
struct fk_alloc *fk_mem_place(int kind, int dev, size_t size, size_t span);

/* Undoes fk_mem_place of an allocation that never held memory (registry, address space, pages). */
void fk_mem_unplace(struct fk_alloc *a);

/* ---- Stream-ordered memory pools (fk_pool.c). ---- */

/* Sets up device dev's default pool (cuInit). */
void fk_pool_init_device(int dev);

/* A stream-ordered allocation leaves its pool (its free executed, or its context reset): the
 * pool keeps the memory up to its release threshold and gives the device the rest. */
void fk_pool_give_back(struct fk_alloc *a);

/* Releases everything the pools of dev retain (device reset). */
void fk_pool_trim_device(int dev);

/* Frees every created pool (at unload). */
void fk_pool_teardown(void);

/* Reserves the address space of every device and the VMM region. */
CUresult fk_mem_init(void);

/* The allocation containing p (freeing ones included), or NULL. O(log n). */
struct fk_alloc *fk_mem_find(uintptr_t p);

/* The allocation with this id, or NULL. O(n). */
struct fk_alloc *fk_mem_by_id(unsigned long long id);

/* Whether p lies in the fake's reserved (device / VMM) address space. */
int fk_mem_in_reservation(uintptr_t p);

/* Maps the file pages [off, off + len) of fd read/write at addr (page-aligned, inside the
 * device regions); with fd < 0, puts this process's own inaccessible device memory back
 * there. Returns 0 or -1. */
int fk_mem_map_pages(uintptr_t addr, size_t len, int fd, uint64_t off);

/* Releases allocation a now: registry, address space, device memory and host pages. */
void fk_mem_release(struct fk_alloc *a);

/* Frees every allocation that belongs to c (context destroy / reset), and with pools the
 * stream-ordered ones of its device too. */
void fk_mem_free_ctx(struct CUctx_st *c, int pools);

/* First fit of span bytes, align-aligned, in [lo, hi) between registered allocations (each
 * occupying [base - lead, base + span)); 0 when nothing fits. */
uintptr_t fk_mem_carve(uintptr_t lo, uintptr_t hi, size_t span, size_t align);

/* A new registered allocation (aborts on ENOMEM). */
struct fk_alloc *fk_mem_new(int kind, uintptr_t base, size_t size, size_t span, int dev);

/* Adds the physical VMM allocations of device dev still alive (still referenced by a handle
 * or a mapping) to *count and their bytes to *bytes. */
void fk_vmm_leaked(int dev, unsigned long long *count, size_t *bytes);

/* Registry of allocations (sorted by base). */
void fk_mem_insert(struct fk_alloc *a);
extern struct fk_alloc **fk_allocs;
extern size_t fk_nallocs;

/* Where a byte range lives, for copies and memsets. */
enum { FK_AT_PAGEABLE, FK_AT_PINNED, FK_AT_MANAGED, FK_AT_DEVICE };

/* Validates [p, p + n) (n > 0) as one operand of a copy or memset executed by device `dev`.
 * allow_pageable: plain host memory is acceptable. write: the operand is written (VMM
 * mappings need write access then). On success *where is FK_AT_*, *alloc_id the allocation.
 * Fails with CUDA_ERROR_INVALID_VALUE for NULL, unknown or out-of-range device addresses,
 * pointers into freed or unmapped device address space, and missing VMM access. */
CUresult fk_mem_check(uintptr_t p, size_t n, int dev, int allow_pageable, int write, int *where,
                      unsigned long long *alloc_id);

/* Whether the bytes of a range located FK_AT_* can be touched by the fake's own code. */
int fk_mem_host_visible(int where);

/* Executes the data effect of a completed copy / memset item (skipped when its memory is not
 * host-visible); counts stale work (memory freed or reallocated since enqueue). */
void fk_mem_effect(struct fk_work *w);

/* Completes a stream-ordered free. */
void fk_mem_free_effect(struct fk_work *w);

/* The work of a memset or memcpy node in context ctx (NULL: the current one): the items the
 * asynchronous operation would queue, checked as it checks them, as a chain in *out. A memcpy
 * node refuses pageable host memory (INVALID_VALUE: nothing stages it at each launch) and CUDA
 * arrays (NOT_SUPPORTED: the fake's array copies are never work items). */
CUresult fk_memset_node_work(const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx, struct fk_work **out);
CUresult fk_memcpy_node_work(const CUDA_MEMCPY3D *p, CUcontext ctx, struct fk_work **out);

/* VMM look-ups for pointer attributes (fk_vmm.c). */
struct fk_map *fk_vmm_map_at(struct fk_alloc *r, uintptr_t p);
int fk_vmm_covered(struct fk_alloc *r, uintptr_t p, size_t n, int dev, int write);

/* ---- Where managed memory lives (fk_managed.c). ----
 * A managed allocation's pages (4 KiB, the CPU page size cuda.h rounds advice and prefetches
 * to) are on the host until device work touches them, then resident on that device and counted
 * in its used bytes (fk_mem_take), subject to cuMemAdvise; they go back to the host when
 * prefetched there or evicted (least recently touched allocation first) to make room. */

/* Gives a new managed allocation its page table (every page on the host, no advice, associated
 * as its flags say). Aborts on ENOMEM (a test driver). */
void fk_managed_new(struct fk_alloc *a);

/* Gives back the device memory a managed allocation's pages hold and frees its table (its
 * release, a context teardown, unload). */
void fk_managed_release(struct fk_alloc *a);

/* Device work executed now touches managed memory: a copy or memset its ranges (dst written,
 * src read), a kernel (FK_W_HOOK) every page of each managed allocation it points into that its
 * stream may access (attached globally or to that stream). No effect on other memory. */
void fk_managed_access(const struct fk_work *w);

/* Evicts managed pages from dev (least recently touched allocation first) until `bytes` more
 * fit in its free memory or none is left: a device allocation of any kind is never refused
 * for the sake of managed pages, which the driver pages out. */
void fk_managed_make_room(int dev, size_t bytes);

/* ---- CUDA arrays and mipmapped arrays (fk_array.c). ---- */

/* Destroys every array and mipmapped array that belongs to c (context destroy / reset) and
 * frees their device memory. */
void fk_array_free_ctx(struct CUctx_st *c);

/* Adds the arrays and mipmapped arrays of device dev still alive that hold device memory to
 * *count and their bytes to *bytes. */
void fk_array_leaked(int dev, unsigned long long *count, size_t *bytes);

/* An array's contents as copies see them: row y of slice z (of its depth or layers; an extent
 * of 0 counts as 1) starts at bytes + (z * height + y) * pitch and holds width bytes (Width
 * elements of elem bytes). bytes is NULL without FAKECUDA_BACKING=1. Fails with
 * CUDA_ERROR_INVALID_HANDLE for an unknown or destroyed array, CUDA_ERROR_INVALID_VALUE for a
 * deferred-mapping one (its memory is never mapped). */
struct fk_array_view {
  unsigned char *bytes;
  size_t elem, width, pitch, height, depth;
  int dev;
};
CUresult fk_array_view(CUarray h, struct fk_array_view *v);

/* The driver's host-function thread (fk_host.c). fk_host_notify: a host function was queued
 * (the thread, started on first use, runs it once its stream reaches it); called under fk.lock.
 * fk_host_stop: at unload, without fk.lock: stops the thread and waits up to a second for the
 * host function it may be running; 0 when it is still running (its objects must then stay). */
void fk_host_notify(void);
int fk_host_stop(void);

/* Teardown at unload (the destructor in fk_core.c, lock held): frees every object. */
void fk_stream_teardown(void);
void fk_vmm_teardown(void);
void fk_mem_teardown(void);
void fk_array_teardown(void);

/* ---- The integrity handshake (fk_integrity.c): pure computation. ---- */

struct fk_integrity_input { /* hashed byte for byte: no padding */
  uint32_t driver_version, version, pid, thread;
  const void *cudart_table, *integrity_table, *fn;
  uint64_t unix_seconds;
};
struct fk_integrity_device {
  CUuuid uuid;
  int32_t pci_domain, pci_bus, pci_device;
};
_Static_assert(sizeof(struct fk_integrity_input) == 48, "integrity input layout");
_Static_assert(sizeof(struct fk_integrity_device) == 28, "integrity device layout");

/* The 16 bytes the runtime expects for (in, devices). */
void fk_integrity_hash(const struct fk_integrity_input *in, const struct fk_integrity_device *devs,
                       int ndev, uint64_t out[2]);

/* MD2 (RFC 1319) of n bytes. */
void fk_md2(const void *data, size_t n, unsigned char digest[16]);

/* ---- Device code images (fk_image.c): pure parsing. ---- */

enum { FK_IMAGE_ANY, FK_IMAGE_WRAPPER, FK_IMAGE_FATBIN };

#define FK_MAX_PARAMS 256

struct fk_kparam {
  unsigned offset, size;
};

struct fk_ksym { /* a kernel (entry function) of an image */
  char *name;
  size_t symidx; /* its ELF symbol */
  int regs, max_threads, static_shared, const_bytes, local_bytes, param_bytes;
  int nparams;
  struct fk_kparam params[FK_MAX_PARAMS];
};

struct fk_gsym { /* a __device__ or __constant__ variable */
  char *name;
  size_t size;
  const void *init; /* its initial bytes inside the image, or NULL (zero) */
  int constant;
};

struct fk_image {
  unsigned char *code; /* the chosen cubin or PTX, owned, NUL-terminated */
  size_t len;
  int is_ptx, sm;
  size_t nkernels, nglobals;
  struct fk_ksym *kernels;
  struct fk_gsym *globals;
};

/* Chooses and reads the device code of `image` for a device of SM dev_sm (e.g. 90):
 * FK_IMAGE_WRAPPER a __fatBinC_Wrapper_t, FK_IMAGE_FATBIN a fat binary, FK_IMAGE_ANY a fat
 * binary, wrapper, cubin or PTX (what cuModuleLoadData accepts). Fails with
 * CUDA_ERROR_INVALID_IMAGE (malformed), CUDA_ERROR_NO_BINARY_FOR_GPU (nothing this device runs),
 * CUDA_ERROR_INVALID_PTX, CUDA_ERROR_OUT_OF_MEMORY; the reason in err. */
CUresult fk_image_load(const void *image, int kind, int dev_sm, struct fk_image *img, char *err,
                       size_t errlen);
void fk_image_free(struct fk_image *img);

/* The kernel / variable of that name, or NULL. */
struct fk_ksym *fk_image_kernel(struct fk_image *img, const char *name);
struct fk_gsym *fk_image_global(struct fk_image *img, const char *name);

/* ---- Stream capture and graphs (fk_graph.c). ---- */

/* Called by fk_work_enqueue for a stream that takes part in a capture: records w as a node of
 * the capture's graph (or drops it when the capture is invalidated). */
void fk_capture_record(struct CUstream_st *s, struct fk_work *w);

/* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED when the calling thread may not make a "potentially
 * unsafe" call (allocation, free, synchronous copy, context synchronize) now, per its capture
 * mode (cuThreadExchangeStreamCaptureMode): the captures it would disturb are invalidated.
 * CUDA_SUCCESS otherwise. */
CUresult fk_capture_unsafe(void);

/* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and the capture invalidated) when s is capturing:
 * it cannot be waited for. */
CUresult fk_capture_sync_check(struct CUstream_st *s);

/* s waits for an event last recorded in capture cap (NULL: outside any capture): s joins cap,
 * or the dependency stays inside the graph; waiting across the capture boundary is refused
 * (CUDA_ERROR_STREAM_CAPTURE_ISOLATION, or _MERGE between two captures) unless external. */
CUresult fk_capture_wait(struct CUstream_st *s, struct fk_capture *cap, int external);

/* Whether any stream of c takes part in a capture. */
int fk_capture_active(const struct CUctx_st *c);

/* A captured cuMemAllocAsync on s: an allocation node whose address is fixed now and whose
 * memory is taken when the graph is launched. */
CUresult fk_graph_alloc(struct CUstream_st *s, int dev, size_t size, CUdeviceptr *out);

/* The program frees a graph allocation (cuMemFreeAsync on s, or cuMemFree_v2 with s NULL):
 * its memory goes back to the device's graph pool, still held until cuDeviceGraphMemTrim. */
CUresult fk_graph_free(struct fk_alloc *a, struct CUstream_st *s);

/* Drops the graphs and executable graphs of c and the capture state of its streams. */
void fk_graph_free_ctx(struct CUctx_st *c);
void fk_graph_teardown(void);

/* ---- Modules, libraries, functions and launches (fk_module.c). ---- */

/* Loads a module from an image in the current context: FK_IMAGE_WRAPPER a __fatBinC_Wrapper_t,
 * FK_IMAGE_FATBIN a fat binary, FK_IMAGE_ANY a fat binary, cubin (ELF) or PTX text, as
 * cuModuleLoadData accepts. */
CUresult fk_module_load(CUmodule *mod, const void *image, int kind);

/* The tools-module table's slot 7: calls fn(user, function, module) for each kernel of module m
 * in image order and returns how many it visited (0 for a module that is not loaded). */
typedef void (*fk_walk_fn)(void *user, CUfunction f, CUmodule m);
int fk_module_walk(CUmodule m, fk_walk_fn fn, void *user);

/* The work a kernel node makes (cuGraphAddKernelNode, cuGraphExecKernelNodeSetParams): what a
 * launch of p would queue, checked as a launch checks it, as a chain in *out; *ctx the context
 * it runs in (its function's). Fails with INVALID_VALUE for an unknown function, a launch's
 * errors otherwise. */
CUresult fk_kernel_node_work(const CUDA_KERNEL_NODE_PARAMS *p, struct CUctx_st **ctx,
                             struct fk_work **out);

/* Unloads every module of context c (its destruction / reset) and frees their memory. */
void fk_module_free_ctx(struct CUctx_st *c);

/* Frees every module, library, kernel and function (at unload). */
void fk_module_teardown(void);

/* Counts one cuGetProcAddress* query and the object that made it (ret: its return address).
 * Takes the lock itself: call without it. */
void fk_note_caller(void *ret);

#endif
