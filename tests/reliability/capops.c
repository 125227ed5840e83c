/* capops: see capops.h. Each worker keeps its blocks in a small array; a block remembers its
 * family, device, the context slot it was made in (0: the worker's created context, 1: the
 * primary context, owner only) and, for stream-ordered memory, the device's reset epoch when
 * it was allocated: a primary-context reset frees the device's stream-ordered memory, so a
 * block from an older epoch may be gone (its free may then answer CUDA_ERROR_INVALID_VALUE).
 */
#include "tests/reliability/capops.h"

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fake driver's test hooks are weak references: on a real driver (tests/gpu/check.sh) they
 * are absent, and no device work is left pending nor any hazard looked for. */
#pragma weak fakecudaClaim
#pragma weak fakecudaEnqueueWork

#define MiB ((size_t)1 << 20)
#define UNIT ((size_t)512) /* the fake's allocation unit: every size is a multiple */
#define MAX_BLOCKS 48
#define DEV CAPOPS_DEVICES

enum family {
  POOLED,
  PITCH,
  ASYNC,
  ASYNC_OTHER_POOL,
  ASYNC_OTHER_STREAM,
  MANAGED,
  VMM,
  ARRAY,
  GRAPH,
  SPILLED /* a device allocation served beyond the cap as managed memory (GPUCAP_SPILL) */
};

const char *const capops_names[CAPOPS_COUNTERS] = {"ops",
                                                   "allocs",
                                                   "refused",
                                                   "frees",
                                                   "pending_frees",
                                                   "destroys",
                                                   "resets",
                                                   "checked",
                                                   "errors",
                                                   "corrupt",
                                                   "hazards",
                                                   "over",
                                                   "pooled",
                                                   "pitched",
                                                   "stream-ordered",
                                                   "other-device pool",
                                                   "other-device stream",
                                                   "managed",
                                                   "VMM",
                                                   "arrays",
                                                   "graph memory",
                                                   "spilled"};

struct block {
  int family, dev, slot;
  CUdeviceptr ptr; /* VMM: the mapped address */
  size_t bytes;
  unsigned epoch;
  uint32_t pattern;
  bool written;
  CUmemGenericAllocationHandle retained; /* VMM: a reference retained again (0: none) */
  CUarray array;
  CUgraphExec exec; /* GRAPH: what holds the memory (bytes: its allocation) */
};

struct capops_worker {
  int id;
  bool owner;
  CUcontext ctx[DEV][2];
  CUstream stream[DEV][2][2];
  struct block b[MAX_BLOCKS];
  int n;
  uint32_t serial;
  capops_stats_t st;
};

#define MAX_WORKERS 16

static uint64_t caps[DEV];
static bool backing;
/* A reset is made with every other worker stopped (write lock) and every context synchronised
 * first, as a program resets a device: with no work of its own in flight on memory the reset
 * frees. Every other operation holds the read lock. */
static pthread_rwlock_t world = PTHREAD_RWLOCK_INITIALIZER;
static pthread_mutex_t registry = PTHREAD_MUTEX_INITIALIZER;
static CUcontext created[MAX_WORKERS][DEV]; /* every worker's created contexts */
static int ndev;
static CUcontext primary[DEV];
static atomic_uint epoch[DEV];

struct reader {
  const uint8_t *p;
  size_t n, i;
};

static unsigned u8(struct reader *r) {
  return r->i < r->n ? r->p[r->i++] : 0;
}

static unsigned u16(struct reader *r) {
  unsigned lo = u8(r);
  return lo | u8(r) << 8;
}

__attribute__((format(printf, 3, 4))) static void fail(capops_worker_t *w, CUresult rc,
                                                       const char *fmt, ...) {
  if (w->st.n[CAPOPS_ERRORS]++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(w->st.first_error, sizeof w->st.first_error, fmt, ap);
    va_end(ap);
    if (len >= 0 && (size_t)len < sizeof w->st.first_error) {
      snprintf(w->st.first_error + len, sizeof w->st.first_error - (size_t)len, " (rc %d)",
               (int)rc);
    }
  }
}

static bool use(capops_worker_t *w, int dev, int slot) {
  CUresult rc = cuCtxSetCurrent(w->ctx[dev][slot]);
  if (rc != CUDA_SUCCESS) {
    fail(w, rc, "worker %d: cuCtxSetCurrent(device %d, slot %d)", w->id, dev, slot);
  }
  return rc == CUDA_SUCCESS;
}

/* Makes the streams of w's context in (dev, slot); that context is current afterwards. */
static bool make_streams(capops_worker_t *w, int dev, int slot) {
  if (!use(w, dev, slot)) {
    return false;
  }
  for (int i = 0; i < 2; i++) {
    CUresult rc = cuStreamCreate(&w->stream[dev][slot][i], 0);
    if (rc != CUDA_SUCCESS) {
      fail(w, rc, "worker %d: cuStreamCreate", w->id);
      return false;
    }
  }
  return true;
}

/* w's created context on dev, made anew (not left on the thread's stack). */
static bool make_context(capops_worker_t *w, int dev) {
  CUcontext c = NULL, popped;
  CUresult rc = cuCtxCreate_v2(&c, 0, dev);
  if (rc != CUDA_SUCCESS || (rc = cuCtxPopCurrent_v2(&popped)) != CUDA_SUCCESS) {
    fail(w, rc, "worker %d: cuCtxCreate_v2(device %d)", w->id, dev);
    return false;
  }
  w->ctx[dev][0] = c;
  pthread_mutex_lock(&registry);
  created[w->id % MAX_WORKERS][dev] = c;
  pthread_mutex_unlock(&registry);
  return make_streams(w, dev, 0);
}

bool capops_fake_hooks(void) {
  return fakecudaClaim != NULL && fakecudaEnqueueWork != NULL;
}

int capops_init(const uint64_t cap[CAPOPS_DEVICES], bool with_backing) {
  int count = 0;
  backing = with_backing;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS || count < 1) {
    return -1;
  }
  ndev = count < DEV ? count : DEV;
  for (int d = 0; d < ndev; d++) {
    caps[d] = cap[d];
    if (cuDevicePrimaryCtxRetain(&primary[d], d) != CUDA_SUCCESS) {
      return -1;
    }
  }
  /* Device 0's default stream-ordered pool keeps what is freed into it (CuPy's MemoryAsyncPool
   * sets this), device 1's gives it back at each synchronisation (the driver's default). */
  CUmemoryPool pool;
  cuuint64_t keep = UINT64_MAX;
  if (cuDeviceGetDefaultMemPool(&pool, 0) != CUDA_SUCCESS ||
      cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep) != CUDA_SUCCESS) {
    return -1;
  }
  return 0;
}

capops_worker_t *capops_worker(int id, bool owner) {
  capops_worker_t *w = calloc(1, sizeof *w);
  if (!w) {
    return NULL;
  }
  w->id = id;
  w->owner = owner;
  bool ok = true;
  pthread_rwlock_rdlock(&world); /* the owner may be resetting a primary context */
  for (int d = 0; d < ndev && ok; d++) {
    w->ctx[d][1] = primary[d];
    ok = make_context(w, d) && (!owner || make_streams(w, d, 1));
  }
  pthread_rwlock_unlock(&world);
  if (!ok) {
    free(w);
    return NULL;
  }
  return w;
}

/* ---- Patterns (FAKECUDA_BACKING=1): one 32-bit word per block, written on a stream. ---- */

static void write_pattern(capops_worker_t *w, struct block *b) {
  b->pattern = (uint32_t)w->id << 24 | (w->serial++ & 0xffffff);
  if (!backing || b->family == ARRAY || b->family == GRAPH || b->slot < 0) {
    return; /* arrays and graphs have no address; slot -1: made on a stream of another device */
  }
  CUresult rc;
  if (b->family == MANAGED) {
    uint32_t *p = (uint32_t *)(uintptr_t)b->ptr;
    p[0] = p[b->bytes / 4 - 1] = b->pattern;
    b->written = true;
    return;
  }
  rc = cuMemsetD32Async(b->ptr, b->pattern, b->bytes / 4, w->stream[b->dev][b->slot][0]);
  if (rc != CUDA_SUCCESS) {
    fail(w, rc, "worker %d: cuMemsetD32Async of family %d", w->id, b->family);
    return;
  }
  b->written = true;
}

/* Whether the block is stream-ordered memory a reset may have freed since it was made. */
static bool stale(const struct block *b) {
  return b->family >= ASYNC && b->family <= ASYNC_OTHER_STREAM &&
         atomic_load(&epoch[b->dev]) != b->epoch;
}

static void check_pattern(capops_worker_t *w, const struct block *b) {
  uint32_t first = 0, last = 0;
  if (!b->written) {
    return;
  }
  if (b->family == MANAGED) {
    const uint32_t *p = (const uint32_t *)(uintptr_t)b->ptr;
    first = p[0];
    last = p[b->bytes / 4 - 1];
  } else {
    CUresult rc = cuMemcpyDtoH_v2(&first, b->ptr, 4);
    if (rc == CUDA_SUCCESS) {
      rc = cuMemcpyDtoH_v2(&last, b->ptr + b->bytes - 4, 4);
    }
    if (rc != CUDA_SUCCESS) {
      if (!stale(b)) {
        fail(w, rc, "worker %d: reading back a block of family %d", w->id, b->family);
      }
      return;
    }
  }
  w->st.n[CAPOPS_CHECKED]++;
  if (first != b->pattern || last != b->pattern) {
    w->st.n[CAPOPS_CORRUPT]++;
  }
}

/* ---- Allocations. ---- */

/* Whether the driver says p is managed memory. */
static bool is_managed(CUdeviceptr p) {
  unsigned v = 0;
  return cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) == CUDA_SUCCESS && v;
}

/* Records a block just handed out: no pending work may touch it; its pattern is written. */
static void take(capops_worker_t *w, struct block *b) {
  if ((b->family == POOLED || b->family == PITCH) && is_managed(b->ptr)) {
    b->family = SPILLED;
  }
  if (b->family != ARRAY && b->family != MANAGED && b->family != GRAPH && capops_fake_hooks() &&
      fakecudaClaim(b->ptr, b->bytes) != 0) {
    w->st.n[CAPOPS_HAZARDS]++;
  }
  w->b[w->n++] = *b;
  w->st.n[CAPOPS_ALLOCS]++;
  w->st.n[CAPOPS_FAMILY + b->family]++;
  write_pattern(w, &w->b[w->n - 1]);
}

/* Counts an allocation's answer; true iff it succeeded. */
static bool answered(capops_worker_t *w, CUresult rc, const char *what) {
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
    w->st.n[CAPOPS_REFUSED]++;
  } else if (rc != CUDA_SUCCESS) {
    fail(w, rc, "worker %d: %s", w->id, what);
  }
  return rc == CUDA_SUCCESS;
}

static void alloc_vmm(capops_worker_t *w, struct block *b, size_t size) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = b->dev;
  CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CUmemGenericAllocationHandle h = 0;
  CUresult rc = cuMemAddressReserve(&b->ptr, size, 0, 0, 0);
  if (rc != CUDA_SUCCESS) {
    fail(w, rc, "worker %d: cuMemAddressReserve", w->id);
    return;
  }
  rc = cuMemCreate(&h, size, &prop, 0);
  if (!answered(w, rc, "cuMemCreate")) {
    cuMemAddressFree(b->ptr, size);
    return;
  }
  /* NVIDIA's sample pattern: map, set access, release the handle at once. */
  if ((rc = cuMemMap(b->ptr, size, 0, h, 0)) != CUDA_SUCCESS ||
      (rc = cuMemSetAccess(b->ptr, size, &access, 1)) != CUDA_SUCCESS ||
      (rc = cuMemRelease(h)) != CUDA_SUCCESS) {
    fail(w, rc, "worker %d: mapping a VMM allocation", w->id);
    return;
  }
  b->bytes = size;
  take(w, b);
}

static void alloc_array(capops_worker_t *w, struct block *b, unsigned width, unsigned height) {
  CUDA_ARRAY_DESCRIPTOR d = {
      .Width = width, .Height = height, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
  if (answered(w, cuArrayCreate_v2(&b->array, &d), "cuArrayCreate_v2")) {
    b->bytes = 0;
    take(w, b);
  }
}

/* A graph that allocates `size` bytes, writes them and frees them, captured on s (relaxed mode:
 * other threads' calls go on meanwhile), instantiated and launched once. */
static void alloc_graph(capops_worker_t *w, struct block *b, size_t size, CUstream s) {
  CUgraph g = NULL;
  CUdeviceptr p = 0;
  CUresult rc = cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED);
  if (rc == CUDA_SUCCESS && (rc = cuMemAllocAsync(&p, size, s)) == CUDA_SUCCESS) {
    rc = cuMemsetD32Async(p, 0x6a6a6a6a, size / 4, s);
    CUresult f = cuMemFreeAsync(p, s);
    rc = rc == CUDA_SUCCESS ? f : rc;
  }
  CUresult end = cuStreamEndCapture(s, &g);
  rc = rc == CUDA_SUCCESS ? end : rc;
  if (rc == CUDA_SUCCESS) {
    rc = cuGraphInstantiateWithFlags(&b->exec, g, 0);
    cuGraphDestroy(g);
  }
  if (rc != CUDA_SUCCESS) {
    fail(w, rc, "worker %d: capturing a graph", w->id);
    return;
  }
  rc = cuGraphLaunch(b->exec, s);
  if (!answered(w, rc, "cuGraphLaunch")) {
    cuGraphExecDestroy(b->exec);
    return;
  }
  b->bytes = size;
  take(w, b);
}

static void allocate(capops_worker_t *w, struct reader *r, int op, int dev, int slot) {
  struct block b = {.dev = dev, .slot = slot};
  int other = ndev > 1 ? (dev + 1) % ndev : dev;
  CUresult rc;
  switch (op) {
  case 0:
  case 1: /* sizes up to 4 MiB, in the fake's units */
    b.family = POOLED;
    b.bytes = (u16(r) % 8192 + 1) * UNIT;
    if (answered(w, cuMemAlloc_v2(&b.ptr, b.bytes), "cuMemAlloc_v2")) {
      take(w, &b);
    }
    return;
  case 2: {
    size_t pitch = 0, width = 1 + u16(r) % 4096, height = 1 + u16(r) % 1024;
    b.family = PITCH;
    if (answered(w, cuMemAllocPitch_v2(&b.ptr, &pitch, width, height, 4), "cuMemAllocPitch_v2")) {
      b.bytes = pitch * height;
      take(w, &b);
    }
    return;
  }
  case 3: {
    unsigned how = u8(r) % 3;
    size_t bytes = (u16(r) % 6144 + 1) * UNIT;
    CUstream s = w->stream[dev][slot][u8(r) & 1];
    if (how == 0) {
      b.family = ASYNC;
    } else if (how == 1) {
      CUmemoryPool pool = NULL;
      b.family = ASYNC_OTHER_POOL;
      b.dev = other;
      if ((rc = cuDeviceGetDefaultMemPool(&pool, other)) != CUDA_SUCCESS) {
        fail(w, rc, "worker %d: cuDeviceGetDefaultMemPool", w->id);
        return;
      }
      b.epoch = atomic_load(&epoch[b.dev]);
      rc = cuMemAllocFromPoolAsync(&b.ptr, bytes, pool, s);
      b.bytes = bytes;
      if (answered(w, rc, "cuMemAllocFromPoolAsync")) {
        b.slot = -1; /* not written: the stream is another device's */
        take(w, &b);
      }
      return;
    } else {
      b.family = ASYNC_OTHER_STREAM; /* this device current, the other one's stream */
      b.dev = other;
      s = w->stream[other][0][0];
    }
    b.epoch = atomic_load(&epoch[b.dev]);
    b.bytes = bytes;
    if (answered(w, cuMemAllocAsync(&b.ptr, bytes, s), "cuMemAllocAsync")) {
      b.slot = b.family == ASYNC ? slot : 0;
      take(w, &b);
    }
    return;
  }
  case 4:
    b.family = MANAGED;
    b.bytes = (u8(r) % 64 + 1) * 4096;
    if (answered(w, cuMemAllocManaged(&b.ptr, b.bytes, CU_MEM_ATTACH_GLOBAL),
                 "cuMemAllocManaged")) {
      take(w, &b);
    }
    return;
  case 5:
    b.family = VMM;
    alloc_vmm(w, &b, (u8(r) % 2 + 1) * 2 * MiB);
    return;
  default:
    if (u8(r) & 1) {
      b.family = GRAPH;
      alloc_graph(w, &b, (u16(r) % 4096 + 1) * UNIT, w->stream[dev][slot][u8(r) & 1]);
      return;
    }
    b.family = ARRAY;
    alloc_array(w, &b, 1 + u16(r) % 512, 1 + u16(r) % 1024);
    return;
  }
}

/* ---- Frees. ---- */

static void forget(capops_worker_t *w, int i) {
  w->b[i] = w->b[--w->n];
}

/* Whether an answer to a free is right: success, or for a block a reset may have freed, the
 * driver's "not allocated". */
static void freed(capops_worker_t *w, const struct block *b, CUresult rc, const char *what) {
  if (rc == CUDA_SUCCESS) {
    w->st.n[CAPOPS_FREES]++;
  } else if (!(rc == CUDA_ERROR_INVALID_VALUE && stale(b))) {
    fail(w, rc, "worker %d: %s of family %d", w->id, what, b->family);
  }
}

static void release(capops_worker_t *w, int i, unsigned how) {
  struct block b = w->b[i];
  forget(w, i);
  CUresult rc;
  if (stale(&b)) {
    return; /* its device's stream-ordered memory went with a reset */
  }
  int slot = b.slot < 0 ? 0 : b.slot;
  switch (b.family) {
  case VMM:
    if (use(w, b.dev, slot)) { /* read back where it was written */
      check_pattern(w, &b);
    }
    rc = cuMemUnmap(b.ptr, b.bytes);
    if (rc == CUDA_SUCCESS) {
      rc = cuMemAddressFree(b.ptr, b.bytes);
    }
    if (rc == CUDA_SUCCESS && b.retained) {
      rc = cuMemRelease(b.retained);
    }
    freed(w, &b, rc, "unmapping");
    return;
  case ARRAY:
    freed(w, &b, cuArrayDestroy(b.array), "cuArrayDestroy");
    return;
  case GRAPH:
    if (use(w, b.dev, slot)) {
      rc = cuGraphExecDestroy(b.exec);
      if (rc == CUDA_SUCCESS && how % 2) {
        rc = cuDeviceGraphMemTrim(b.dev);
      }
      freed(w, &b, rc, "destroying a graph");
    }
    return;
  default:
    break;
  }
  if (b.slot >= 0 && !use(w, b.dev, slot)) {
    return;
  }
  check_pattern(w, &b);
  if (b.family == MANAGED || b.family == SPILLED || how % 3 == 0) {
    if (b.family >= ASYNC && b.family <= ASYNC_OTHER_STREAM && b.slot >= 0) {
      /* cuMemFree of stream-ordered memory does not wait for the work on it ("callers must
       * ensure that all accesses ... have completed"): the program's job. */
      cuStreamSynchronize(w->stream[b.dev][slot][0]);
    }
    freed(w, &b, cuMemFree_v2(b.ptr), "cuMemFree_v2");
    return;
  }
  /* Stream-ordered free, with device work still pending on the block half the time, on the
   * stream the block's pattern and work were issued on (freeing on another stream without
   * ordering it after them would be the program's own race). */
  CUcontext cur = NULL;
  cuCtxGetCurrent(&cur);
  int dev = b.dev, sl = slot;
  for (int d = 0; d < ndev; d++) {
    for (int s = 0; s < 2; s++) {
      if (w->ctx[d][s] == cur) {
        dev = d;
        sl = s;
      }
    }
  }
  CUstream s = w->stream[dev][sl][0];
  if ((how & 2) && capops_fake_hooks()) {
    fakecudaEnqueueWork(s, b.ptr, b.bytes);
  }
  rc = cuMemFreeAsync(b.ptr, s);
  freed(w, &b, rc, "cuMemFreeAsync");
  w->st.n[CAPOPS_PENDING_FREES] += rc == CUDA_SUCCESS;
}

/* ---- Contexts. ---- */

/* The driver freed the memory made in (dev, slot) and, for a reset, dev's stream-ordered
 * memory: those blocks are gone. */
static void drop_blocks(capops_worker_t *w, int dev, int slot, bool ordered_too) {
  for (int i = w->n - 1; i >= 0; i--) {
    struct block *b = &w->b[i];
    bool ordered = b->family >= ASYNC && b->family <= ASYNC_OTHER_STREAM;
    bool mine = !ordered && b->family != VMM && b->dev == dev && b->slot == slot;
    if (mine || (ordered_too && ordered && b->dev == dev)) {
      forget(w, i);
    }
  }
}

static void unregister(capops_worker_t *w, int dev) {
  pthread_mutex_lock(&registry);
  created[w->id % MAX_WORKERS][dev] = NULL;
  pthread_mutex_unlock(&registry);
}

static void destroy_context(capops_worker_t *w, int dev) {
  unregister(w, dev);
  CUresult rc = cuCtxDestroy_v2(w->ctx[dev][0]);
  if (rc != CUDA_SUCCESS) {
    fail(w, rc, "worker %d: cuCtxDestroy_v2", w->id);
    return;
  }
  w->st.n[CAPOPS_DESTROYS]++;
  drop_blocks(w, dev, 0, false);
  make_context(w, dev);
}

/* Waits for the work of every context of every worker (the caller holds the write lock). */
static void quiesce(capops_worker_t *w) {
  CUcontext all[MAX_WORKERS * DEV + DEV], popped;
  int n = 0;
  pthread_mutex_lock(&registry);
  for (int i = 0; i < MAX_WORKERS; i++) {
    for (int d = 0; d < ndev; d++) {
      if (created[i][d]) {
        all[n++] = created[i][d];
      }
    }
  }
  pthread_mutex_unlock(&registry);
  for (int d = 0; d < ndev; d++) {
    all[n++] = primary[d];
  }
  for (int i = 0; i < n; i++) {
    CUresult rc = cuCtxPushCurrent_v2(all[i]);
    if (rc == CUDA_SUCCESS) {
      rc = cuCtxSynchronize();
      cuCtxPopCurrent_v2(&popped);
    }
    if (rc != CUDA_SUCCESS) {
      fail(w, rc, "worker %d: synchronising every context before a reset", w->id);
    }
  }
}

static void reset_primary(capops_worker_t *w, int dev) {
  quiesce(w);
  atomic_fetch_add(&epoch[dev], 1); /* the device's stream-ordered blocks are gone */
  CUresult rc = cuDevicePrimaryCtxReset_v2(dev);
  if (rc != CUDA_SUCCESS || (rc = cuDevicePrimaryCtxRetain(&primary[dev], dev)) != CUDA_SUCCESS) {
    fail(w, rc, "worker %d: resetting device %d's primary context", w->id, dev);
    return;
  }
  w->st.n[CAPOPS_RESETS]++;
  drop_blocks(w, dev, 1, true);
  w->ctx[dev][1] = primary[dev];
  make_streams(w, dev, 1);
}

/* ---- The rest. ---- */

static void get_info(capops_worker_t *w, int dev) {
  size_t f = 0, t = 0;
  CUresult rc = cuMemGetInfo_v2(&f, &t);
  if (rc != CUDA_SUCCESS) {
    fail(w, rc, "worker %d: cuMemGetInfo_v2", w->id);
  } else if (t > caps[dev] || f > t) {
    w->st.n[CAPOPS_OVER]++;
  }
}

static void retain_vmm(capops_worker_t *w, unsigned pick) {
  for (int k = 0; k < w->n; k++) {
    struct block *b = &w->b[(pick + (unsigned)k) % (unsigned)w->n];
    if (b->family == VMM && !b->retained) {
      CUresult rc = cuMemRetainAllocationHandle(&b->retained, (void *)(uintptr_t)b->ptr);
      if (rc != CUDA_SUCCESS) {
        fail(w, rc, "worker %d: cuMemRetainAllocationHandle", w->id);
        b->retained = 0;
      }
      return;
    }
  }
}

/* What a program may do to bring managed memory to its device: prefetch it there, advise it
 * read-mostly or preferred there (bits of how). Spilled memory must stay on the host whatever
 * it does (shim/entry/managed.c); the fake's peak says whether it did. */
static void pull(capops_worker_t *w, const struct block *b, CUstream s, unsigned how) {
  CUmemLocation here = {CU_MEM_LOCATION_TYPE_DEVICE, b->dev};
  CUresult rc = CUDA_SUCCESS;
  if (how & 1) {
    rc = cuMemPrefetchAsync_v2(b->ptr, b->bytes, here, 0, s);
  }
  if (rc == CUDA_SUCCESS && (how & 2)) {
    rc = cuMemAdvise_v2(b->ptr, b->bytes, CU_MEM_ADVISE_SET_READ_MOSTLY, here);
  }
  if (rc == CUDA_SUCCESS && (how & 4)) {
    rc = cuMemAdvise_v2(b->ptr, b->bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, here);
  }
  if (rc != CUDA_SUCCESS) {
    fail(w, rc, "worker %d: prefetch or advice of family %d", w->id, b->family);
  }
}

/* Device work on a block of this context (a kernel's touch: managed pages come to the device
 * when it runs), with some of pull() first for managed memory. */
static void pending_work(capops_worker_t *w, unsigned pick, unsigned how, int dev, int slot) {
  for (int k = 0; k < w->n; k++) {
    struct block *b = &w->b[(pick + (unsigned)k) % (unsigned)w->n];
    if (b->dev == dev && b->slot == slot && b->family != ARRAY && !stale(b)) {
      if (b->family == MANAGED || b->family == SPILLED) {
        pull(w, b, w->stream[dev][slot][0], how);
      }
      if (capops_fake_hooks()) {
        fakecudaEnqueueWork(w->stream[dev][slot][0], b->ptr, b->bytes);
      }
      return;
    }
  }
}

static void step(capops_worker_t *w, struct reader *rd, unsigned op, int dev, int slot);
static void finish(capops_worker_t *w, capops_stats_t *out);

void capops_step(capops_worker_t *w, const uint8_t *bytes, size_t n) {
  struct reader r = {.p = bytes, .n = n};
  unsigned op = u8(&r) % 16, where = u8(&r);
  int dev = (int)(where % (unsigned)ndev);
  int slot = w->owner && (where & 0x80) ? 1 : 0;
  bool exclusive = op == 14 && w->owner;
  w->st.n[CAPOPS_OPS]++;
  if (exclusive) {
    pthread_rwlock_wrlock(&world);
  } else {
    pthread_rwlock_rdlock(&world);
  }
  if (use(w, dev, slot)) {
    step(w, &r, op, dev, slot);
  }
  pthread_rwlock_unlock(&world);
}

void capops_finish(capops_worker_t *w, capops_stats_t *out) {
  pthread_rwlock_wrlock(&world);
  finish(w, out);
  pthread_rwlock_unlock(&world);
}

static void step(capops_worker_t *w, struct reader *rd, unsigned op, int dev, int slot) {
  struct reader r = *rd;
  if (op < 7 && w->n == MAX_BLOCKS) {
    op = 7; /* full: free one instead */
  }
  if (op < 7) {
    allocate(w, &r, (int)op, dev, slot);
  } else if (op < 10) {
    if (w->n > 0) {
      unsigned pick = u8(&r);
      release(w, (int)(pick % (unsigned)w->n), u8(&r));
    }
  } else if (op == 10) {
    CUresult rc = (u8(&r) & 1) ? cuCtxSynchronize() : cuStreamSynchronize(w->stream[dev][slot][0]);
    if (rc != CUDA_SUCCESS) {
      fail(w, rc, "worker %d: synchronising", w->id);
    }
  } else if (op == 11) {
    get_info(w, dev);
  } else if (op == 12) {
    retain_vmm(w, u8(&r));
  } else if (op == 13) {
    if (u8(&r) < 64) {
      destroy_context(w, dev);
    }
  } else if (op == 14) {
    if (w->owner && u8(&r) < 64) {
      reset_primary(w, dev);
    }
  } else {
    unsigned pick = u8(&r);
    pending_work(w, pick, u8(&r), dev, slot);
  }
}

static void finish(capops_worker_t *w, capops_stats_t *out) {
  while (w->n > 0) {
    release(w, w->n - 1, 0);
  }
  for (int d = 0; d < ndev; d++) {
    unregister(w, d);
    CUresult rc = cuCtxDestroy_v2(w->ctx[d][0]);
    if (rc != CUDA_SUCCESS) {
      fail(w, rc, "worker %d: cuCtxDestroy_v2 at the end", w->id);
    }
    if (w->owner) {
      reset_primary(w, d); /* frees what a reset left behind in other workers' names too */
    }
  }
  cuCtxSetCurrent(NULL);
  *out = w->st;
  free(w);
}

bool capops_all_free(uint64_t *free_out) {
  bool all = true;
  *free_out = UINT64_MAX;
  for (int d = 0; d < ndev; d++) {
    size_t f = 0, t = 0;
    if (cuCtxSetCurrent(primary[d]) != CUDA_SUCCESS) {
      return false;
    }
    /* A pending stream-ordered free is seen complete on a later look (the fake completes a
     * polled event on the second poll). */
    for (int tries = 0; tries < 4; tries++) {
      if (cuMemGetInfo_v2(&f, &t) != CUDA_SUCCESS) {
        return false;
      }
      if (f == t && t == caps[d]) {
        break;
      }
    }
    all = all && f == t && t == caps[d];
    if (f < *free_out) {
      *free_out = f;
    }
  }
  cuCtxSetCurrent(NULL);
  return all;
}
