/* One BFC pool per context. Regions come from the real cuMemAlloc_v2 in the context that owns
 * the pool (the calling thread's current context) and are charged to the device cap first, so
 * the cap counts bytes reserved from the driver. Frees are deferred; when a request could only
 * be met by memory freed since the last synchronize, the pool lock is dropped, the context is
 * synchronised once and every deferred block becomes reusable (one synchronize retires a whole
 * batch instead of one per cudaFree).
 */
#include "shim/pool.h"

#include "shim/cap.h"
#include "shim/capture.h"
#include "shim/exit.h"
#include "shim/fork.h"
#include "shim/ipc.h"
#include "shim/log.h"
#include "shim/pending.h"
#include "shim/real.h"
#include "shim/settings.h"
#include "shim/trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The unit a driver holds device memory in, at the least: what it takes for an allocation
 * whose size is not a multiple of it (real drivers round large allocations further, to their
 * page size: see docs/design.md, "Rounding"). */
#define DRIVER_UNIT ((uint64_t)512)

/* A pool region aligned inside the driver's allocation. */
struct shifted {
  uint64_t base, driver, extra;
};

struct ctx_pool {
  _Atomic(CUcontext) ctx; /* set once the pool is ready */
  int dev;
  int index; /* among the pools of dev */
  pthread_mutex_t lock;
  bfc_pool_t *pool;
  CUresult last_driver_rc; /* the driver's answer behind a failed reserve */
  unsigned oom_streak;     /* failures since the last success: report only the first */
  size_t pitch_align;
  bool gone; /* the driver already freed the regions: release only returns the charge */
  /* The driver is destroying the context: it may free the regions and hand their addresses
   * out again before gpucap learns the outcome, so other threads leave this pool alone. */
  atomic_bool dying;
  bool driver_full; /* the driver refused a region for want of memory (this request) */
  /* Regions aligned inside a larger driver allocation (an object between gpucap and the
   * driver answered addresses not 256-byte aligned): region base -> what the driver gave. */
  bool misaligns;
  struct shifted *shifted;
  size_t nshifted, capshifted;
};

static struct ctx_pool pools[POOL_MAX];

/* Pools whose context the driver destroyed, as they stood then (for the exit report), and the
 * contexts seen per device (a pool's index). Guarded by `registry`. */
static struct ended {
  int dev, index;
  bfc_stats_t stats;
  uint64_t largest_request;
} ended[POOL_MAX];
static int nended;
static int contexts_seen[GPUCAP_MAX_DEVICES];
static atomic_int npools;
static pthread_mutex_t registry = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local struct ctx_pool *last_used;

bool pool_enabled(void) {
  return settings_valid() && settings_get()->pool;
}

/* Records that the region at base lies in the driver's allocation at driver, extra bytes
 * larger; false when host memory ran out. Pool lock held. */
static bool note_shift(struct ctx_pool *p, uint64_t base, uint64_t driver, uint64_t extra) {
  if (p->nshifted == p->capshifted) {
    size_t want = p->capshifted ? 2 * p->capshifted : 8;
    struct shifted *bigger = realloc(p->shifted, want * sizeof *bigger);
    if (!bigger) {
      return false;
    }
    p->shifted = bigger;
    p->capshifted = want;
  }
  p->shifted[p->nshifted++] = (struct shifted){.base = base, .driver = driver, .extra = extra};
  return true;
}

/* What a region of `bytes` (regions are multiples of 256 bytes) asks the driver for: whole
 * driver units, `extra` bytes more when regions must be aligned inside their allocations. The
 * driver holds whole units whatever it is asked, so that is what is charged. */
static uint64_t driver_bytes(uint64_t bytes, uint64_t extra) {
  return (bytes + extra + DRIVER_UNIT - 1) / DRIVER_UNIT * DRIVER_UNIT;
}

static int reserve(void *arg, uint64_t bytes, uint64_t *base) {
  struct ctx_pool *p = arg;
  uint64_t extra = p->misaligns ? BFC_MIN_ALLOC : 0, ask = driver_bytes(bytes, extra);
  if (!cap_charge(p->dev, ask)) {
    return -ENOMEM;
  }
  CUdeviceptr d = 0;
  CUresult rc = real.cuMemAlloc_v2(&d, ask);
  if (rc != CUDA_SUCCESS) {
    cap_credit(p->dev, ask);
    p->last_driver_rc = rc;
    p->driver_full |= rc == CUDA_ERROR_OUT_OF_MEMORY;
    return rc == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
  }
  if (d % BFC_MIN_ALLOC != 0 && !p->misaligns) {
    /* Not what a driver hands out, but what an object between gpucap and the driver may:
     * from now on this pool asks for 256 bytes more and aligns its regions inside. */
    log_msg(LOG_DEBUG,
            "device %d: the driver answered %#llx, not 256-byte aligned; regions "
            "are aligned inside allocations 256 bytes larger",
            p->dev, (unsigned long long)d);
    real.cuMemFree_v2(d);
    cap_credit(p->dev, ask);
    p->misaligns = true;
    return reserve(arg, bytes, base);
  }
  *base = extra ? (d + BFC_MIN_ALLOC - 1) / BFC_MIN_ALLOC * BFC_MIN_ALLOC : d;
  if (extra && !note_shift(p, *base, d, extra)) {
    real.cuMemFree_v2(d);
    cap_credit(p->dev, ask);
    return -ENOMEM;
  }
  return 0;
}

static int release(void *arg, uint64_t base, uint64_t bytes) {
  struct ctx_pool *p = arg;
  uint64_t driver = base, extra = 0;
  size_t i = 0;
  while (i < p->nshifted && p->shifted[i].base != base) {
    i++;
  }
  if (i < p->nshifted) {
    driver = p->shifted[i].driver;
    extra = p->shifted[i].extra;
  }
  CUresult rc = p->gone ? CUDA_SUCCESS : real.cuMemFree_v2(driver);
  if (rc != CUDA_SUCCESS) {
    log_msg(LOG_WARN, "device %d: the driver refused to free a %llu-byte region (error %d)", p->dev,
            (unsigned long long)bytes, rc);
    return -EIO;
  }
  if (i < p->nshifted) {
    p->shifted[i] = p->shifted[--p->nshifted];
  }
  cap_credit(p->dev, driver_bytes(bytes, extra));
  return 0;
}

/* The pool limit: the device cap, else (no cap) what TensorFlow would take: the whole card
 * when growing, free memory minus its MinSystemMemory reserve when preallocating. */
static uint64_t pool_limit(int dev, bool growth) {
  uint64_t cap = cap_limit(dev, 0);
  if (cap != CAP_NONE) {
    return cap;
  }
  size_t free_b = 0, total_b = 0;
  if (real.cuMemGetInfo_v2(&free_b, &total_b) != CUDA_SUCCESS) {
    return 0;
  }
  if (growth) {
    return total_b;
  }
  int cc = 0;
  real.cuDeviceGetAttribute(&cc, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  uint64_t keep = bfc_min_system_memory(free_b, cc);
  return free_b > keep ? free_b - keep : 0;
}

static struct ctx_pool *create(CUcontext ctx, int dev) {
  pthread_mutex_lock(&registry);
  int n = atomic_load_explicit(&npools, memory_order_relaxed);
  for (int i = 0; i < n; i++) {
    if (atomic_load_explicit(&pools[i].ctx, memory_order_acquire) == ctx) {
      pthread_mutex_unlock(&registry);
      return &pools[i];
    }
  }
  struct ctx_pool *p = NULL;
  int slot = n;
  for (int i = 0; i < n; i++) {
    if (!pools[i].pool && !atomic_load_explicit(&pools[i].ctx, memory_order_relaxed)) {
      slot = i; /* a dropped context's slot */
      break;
    }
  }
  if (slot == POOL_MAX) {
    log_msg(LOG_ERROR, "more than %d CUDA contexts: allocation refused", POOL_MAX);
  } else {
    p = &pools[slot];
    bool growth = settings_get()->allow_growth;
    bfc_options_t opts = {.limit = pool_limit(dev, growth), .allow_growth = growth};
    bfc_prim_t prim = {.ctx = p, .reserve = reserve, .release = release};
    int align = 0;
    real.cuDeviceGetAttribute(&align, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, dev);
    if (slot == n) {
      pthread_mutex_init(&p->lock, NULL);
    }
    /* A dropped context's slot is still visible to other threads (trims, look-ups). */
    pthread_mutex_lock(&p->lock);
    p->dev = dev;
    p->index = dev >= 0 && dev < GPUCAP_MAX_DEVICES ? contexts_seen[dev]++ : 0;
    p->gone = false;
    atomic_store_explicit(&p->dying, false, memory_order_relaxed);
    p->oom_streak = 0;
    p->misaligns = false;
    p->nshifted = 0;
    p->pitch_align = align > 0 ? (size_t)align : 512;
    int made = opts.limit == 0 ? -EINVAL : bfc_create(&opts, &prim, &p->pool);
    pthread_mutex_unlock(&p->lock);
    if (made != 0) {
      log_msg(LOG_ERROR, "device %d: cannot create a pool (limit %llu bytes)", dev,
              (unsigned long long)opts.limit);
      p = NULL;
    } else {
      atomic_store_explicit(&p->ctx, ctx, memory_order_release);
      if (slot == n) {
        atomic_store_explicit(&npools, n + 1, memory_order_release);
      }
    }
  }
  pthread_mutex_unlock(&registry);
  return p;
}

/* The current context's pool; or NULL with *rc = CUDA_SUCCESS when there is no usable current
 * context (the driver must answer the call itself), *rc = CUDA_ERROR_OUT_OF_MEMORY when gpucap
 * refuses (no pool can be made, or the device is beyond what gpucap can cap), or the driver's
 * error when a context query failed otherwise. */
static struct ctx_pool *current_pool(CUresult *rc) {
  CUcontext ctx = NULL;
  int dev;
  CUresult q = real.cuCtxGetCurrent ? real.cuCtxGetCurrent(&ctx) : CUDA_ERROR_NOT_INITIALIZED;
  /* No usable context: the driver answers the call; any other failure is returned as is. */
  *rc = q == CUDA_SUCCESS || cap_no_context(q) ? CUDA_SUCCESS : q;
  if (q != CUDA_SUCCESS || !ctx) {
    return NULL;
  }
  struct ctx_pool *p = last_used;
  if (p && atomic_load_explicit(&p->ctx, memory_order_acquire) == ctx) {
    return p;
  }
  int n = atomic_load_explicit(&npools, memory_order_acquire);
  for (int i = 0; i < n; i++) {
    if (atomic_load_explicit(&pools[i].ctx, memory_order_acquire) == ctx) {
      return last_used = &pools[i];
    }
  }
  CUresult drc = cap_current_device(&dev);
  if (drc != CUDA_SUCCESS) {
    *rc = drc == CUDA_ERROR_INVALID_DEVICE ? CUDA_ERROR_OUT_OF_MEMORY
          : cap_no_context(drc)            ? CUDA_SUCCESS
                                           : drc;
    return NULL;
  }
  p = create(ctx, dev);
  *rc = p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  return last_used = p;
}

/* Synchronises o's context from this thread (push, synchronize, pop) and retires the
 * deferred frees that covered; `mine` is the thread's current context, restored if the pop
 * fails. Called and returns with o's lock held; drops it meanwhile. */
static void settle_other(struct ctx_pool *o, CUcontext mine) {
  uint64_t in_use, deferred, free_b, reserved;
  bfc_usage(o->pool, &in_use, &deferred, &free_b, &reserved);
  CUcontext ctx = atomic_load_explicit(&o->ctx, memory_order_acquire);
  if (deferred == 0 || !ctx || capture_any()) {
    return; /* a synchronisation would invalidate a capture going on (shim/capture.h) */
  }
  uint64_t mark = bfc_defer_mark(o->pool);
  pthread_mutex_unlock(&o->lock);
  CUcontext popped;
  bool synced = real.cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS;
  if (synced) {
    synced = real.cuCtxSynchronize() == CUDA_SUCCESS;
    if (real.cuCtxPopCurrent_v2(&popped) != CUDA_SUCCESS) {
      real.cuCtxSetCurrent(mine); /* never leave the program in another context */
    }
  }
  pthread_mutex_lock(&o->lock);
  if (synced && o->pool) {
    bfc_retire_upto(o->pool, mark);
  }
}

/* Releases the fully free regions of the pools on device dev but `skip` (settling their
 * deferred frees first, `mine` being the thread's current context); returns the bytes
 * released. Takes each pool's lock in turn: the caller holds none. */
static uint64_t trim_device(int dev, const struct ctx_pool *skip, CUcontext mine) {
  uint64_t total = 0;
  int n = atomic_load_explicit(&npools, memory_order_acquire);
  for (int i = 0; i < n; i++) {
    struct ctx_pool *o = &pools[i];
    uint64_t released = 0;
    if (o == skip || atomic_load_explicit(&o->dying, memory_order_acquire)) {
      continue;
    }
    pthread_mutex_lock(&o->lock);
    bool same_device = o->dev == dev;
    if (o->pool && same_device) {
      settle_other(o, mine);
    }
    if (o->pool && same_device) {
      bfc_trim(o->pool, &released);
    }
    pthread_mutex_unlock(&o->lock);
    total += released;
  }
  return total;
}

static uint64_t trim_others(struct ctx_pool *p) {
  return trim_device(p->dev, p, atomic_load_explicit(&p->ctx, memory_order_acquire));
}

uint64_t pool_trim(int dev) {
  bool any = false;
  int n = atomic_load_explicit(&npools, memory_order_acquire);
  for (int i = 0; i < n && !any; i++) {
    pthread_mutex_lock(&pools[i].lock);
    any = pools[i].pool && pools[i].dev == dev;
    pthread_mutex_unlock(&pools[i].lock);
  }
  CUcontext mine = NULL;
  if (!any || !real.cuCtxGetCurrent || real.cuCtxGetCurrent(&mine) != CUDA_SUCCESS) {
    return 0; /* no pool there; or the thread's context, to restore, is not known */
  }
  return trim_device(dev, NULL, mine);
}

/* The setting that would help, after an out-of-memory report. driver_full: the driver itself
 * refused a region for want of memory (then the device is full, whatever the cap). */
static void oom_hint(int dev, uint64_t bytes, const bfc_stats_t *s, bool driver_full) {
  uint64_t cap = cap_limit(dev, 0);
  if (s->free_bytes >= bytes && s->largest_free_block_bytes < bytes) {
    log_msg(LOG_INFO, "hint: enough memory is free but fragmented; GPUCAP_ALLOW_GROWTH=false "
                      "preallocates one region and fragments less");
  } else if (driver_full) {
    log_msg(LOG_INFO,
            "hint: device %d itself is out of memory (the driver refused it, below "
            "the cap): other processes or allocations outside gpucap's pools hold the rest",
            dev);
  } else if (cap != CAP_NONE) {
    log_msg(LOG_INFO,
            "hint: the cap on device %d is %llu bytes; raise GPUCAP_MEMORY_LIMIT or "
            "GPUCAP_MEMORY_FRACTION if the device has room",
            dev, (unsigned long long)cap);
  } else {
    log_msg(LOG_INFO, "hint: device %d itself is out of memory (no cap is set)", dev);
  }
}

CUresult pool_alloc(CUdeviceptr *dptr, size_t bytes) {
  CUresult rc;
  struct ctx_pool *p = current_pool(&rc);
  if (!p) {
    return rc == CUDA_SUCCESS ? real.cuMemAlloc_v2(dptr, bytes) : rc;
  }
  uint64_t addr = 0;
  int err;
  pthread_mutex_lock(&p->lock);
  p->driver_full = false;
  bool trimmed_others = false;
  for (int tries = 0;; tries++) {
    uint64_t in_use, deferred, free_b, reserved;
    if (!p->pool) { /* its context was destroyed while the lock was dropped */
      pthread_mutex_unlock(&p->lock);
      return real.cuMemAlloc_v2(dptr, bytes);
    }
    bfc_usage(p->pool, &in_use, &deferred, &free_b, &reserved);
    /* Retire early, once deferred memory is a quarter of the free memory: waiting until a
     * request fails lets placement drift around the deferred holes and needs a looser cap
     * (docs/benchmarks.md measures both policies). */
    bool can_sync = !capture_any(); /* shim/capture.h */
    bool due = can_sync && tries == 0 && deferred > 0 && deferred >= free_b / 4;
    if (!due) {
      p->last_driver_rc = CUDA_SUCCESS;
      err = bfc_alloc(p->pool, bytes, &addr);
      if (err == -ENOMEM && !trimmed_others) {
        /* Other contexts' pools on this device may hold fully free regions under the same
         * cap, and stream-ordered frees not yet reached by their streams hold charges they are
         * about to return: give those back and try once more. */
        trimmed_others = true;
        pthread_mutex_unlock(&p->lock);
        uint64_t released = trim_others(p);
        bool waited = pending_wait(p->dev);
        pthread_mutex_lock(&p->lock);
        if (!p->pool || released > 0 || waited) {
          continue; /* retry, or (context destroyed meanwhile) let the driver answer below */
        }
      }
      if (err != -EAGAIN || tries >= 16 || !can_sync) {
        break;
      }
    }
    /* Wait for the device work issued before the deferred frees, without holding the pool,
     * then make reusable exactly the blocks this synchronize covered. */
    uint64_t mark = bfc_defer_mark(p->pool);
    pthread_mutex_unlock(&p->lock);
    CUresult sync = real.cuCtxSynchronize();
    pthread_mutex_lock(&p->lock);
    if (sync != CUDA_SUCCESS) {
      pthread_mutex_unlock(&p->lock);
      return sync;
    }
    if (p->pool) {
      bfc_retire_upto(p->pool, mark);
    }
  }
  static _Thread_local char oom_text[8192];
  bfc_stats_t oom_stats;
  bool print_oom = false;
  if (err == 0) {
    p->oom_streak = 0;
    *dptr = addr;
  } else if (err == -ENOMEM || err == -EAGAIN) {
    print_oom = p->oom_streak++ == 0;
    if (print_oom) {
      bfc_format_report(p->pool, bytes, oom_text, sizeof oom_text);
      bfc_stats(p->pool, &oom_stats);
    }
  }
  CUresult driver_rc = p->last_driver_rc;
  bool driver_full = p->driver_full;
  int dev = p->dev;
  pthread_mutex_unlock(&p->lock);
  if (err == 0) {
    trace_event(TRACE_ALLOC, addr, bytes);
    return CUDA_SUCCESS;
  }
  trace_event(TRACE_ALLOC_FAILURE, 0, bytes);
  if (print_oom) {
    log_msg(LOG_WARN, "device %d: out of memory allocating %zu bytes under the cap", dev, bytes);
    log_write_raw(oom_text, strnlen(oom_text, sizeof oom_text));
    oom_hint(dev, bytes, &oom_stats, driver_full);
  }
  if (err == -ENOMEM || err == -EAGAIN) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return driver_rc != CUDA_SUCCESS ? driver_rc : CUDA_ERROR_UNKNOWN;
}

CUresult pool_alloc_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                          unsigned int element_size) {
  CUresult rc;
  if (!dptr || !pitch || width == 0 || height == 0 ||
      (element_size != 4 && element_size != 8 && element_size != 16)) {
    return real.cuMemAllocPitch_v2(dptr, pitch, width, height, element_size);
  }
  struct ctx_pool *p = current_pool(&rc);
  if (!p) {
    return rc == CUDA_SUCCESS ? real.cuMemAllocPitch_v2(dptr, pitch, width, height, element_size)
                              : rc;
  }
  size_t align = p->pitch_align;
  size_t row = (width + align - 1) / align * align;
  if (row < width || row > 2147483647u || height > SIZE_MAX / row) {
    return real.cuMemAllocPitch_v2(dptr, pitch, width, height, element_size);
  }
  rc = pool_alloc(dptr, row * height);
  if (rc == CUDA_SUCCESS) {
    *pitch = row;
  }
  return rc;
}

/* The pool whose region holds addr, among those whose context is not being destroyed (the
 * driver may already have freed a dying pool's regions and handed their addresses out again:
 * an address only such a pool owns is the driver's to answer for); NULL when none. Takes each
 * pool's lock briefly. */
static struct ctx_pool *owner_of(uint64_t addr) {
  int n = atomic_load_explicit(&npools, memory_order_acquire);
  for (int i = 0; i < n; i++) {
    if (atomic_load_explicit(&pools[i].dying, memory_order_acquire)) {
      continue;
    }
    pthread_mutex_lock(&pools[i].lock);
    bool owns = pools[i].pool && bfc_owns(pools[i].pool, addr);
    pthread_mutex_unlock(&pools[i].lock);
    if (owns) {
      return &pools[i];
    }
  }
  return NULL;
}

bool pool_free(CUdeviceptr ptr, bool need_context, CUresult *rc) {
  struct ctx_pool *owner = owner_of(ptr);
  if (!owner) {
    return false;
  }
  if (need_context) {
    /* As the driver: with no usable current context nothing is freed (the block stays). */
    int dev;
    CUresult q = cap_current_device(&dev);
    if (q != CUDA_SUCCESS && cap_no_context(q)) {
      *rc = q;
      return true;
    }
  }
  ipc_forget_block(ptr); /* before the block can be handed out again */
  uint64_t requested = 0;
  pthread_mutex_lock(&owner->lock);
  if (!owner->pool) {
    pthread_mutex_unlock(&owner->lock);
    return false; /* its context was destroyed meanwhile: the driver answers */
  }
  bfc_lookup(owner->pool, ptr, NULL, NULL, &requested);
  int err = bfc_free_deferred(owner->pool, ptr);
  pthread_mutex_unlock(&owner->lock);
  if (err == -ENOENT) {
    return false;
  }
  *rc = err == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (err == 0) {
    trace_event(TRACE_FREE, ptr, requested);
  }
  return true;
}

uint64_t pool_idle_bytes(int dev) {
  uint64_t idle = 0;
  int n = atomic_load_explicit(&npools, memory_order_acquire);
  for (int i = 0; i < n; i++) {
    if (atomic_load_explicit(&pools[i].dying, memory_order_acquire)) {
      continue;
    }
    uint64_t in_use = 0, deferred = 0, free_b = 0, reserved = 0;
    pthread_mutex_lock(&pools[i].lock);
    if (pools[i].pool && pools[i].dev == dev) {
      bfc_usage(pools[i].pool, &in_use, &deferred, &free_b, &reserved);
    }
    pthread_mutex_unlock(&pools[i].lock);
    idle += reserved - in_use;
  }
  return idle;
}

/* Sums the bytes of the regions whose chunks are all free (bfc_walk visitor). */
struct free_regions {
  uint64_t total;  /* bytes of wholly free regions so far */
  uint64_t region; /* free bytes of the current region */
  int clean;       /* the current region has no chunk in use or deferred */
};

static int add_chunk(void *ctx, const bfc_chunk_info_t *c) {
  struct free_regions *w = ctx;
  if (c->region_start) {
    w->total += w->clean ? w->region : 0;
    w->region = 0;
    w->clean = 1;
  }
  w->region += c->state == BFC_FREE ? c->size : 0;
  w->clean &= c->state == BFC_FREE;
  return 0;
}

/* The largest single request the pool could serve now: its largest free chunk, or (bfc_alloc
 * steps 3 and 5) its wholly free regions released plus the room under its limit, reserved as
 * one region. Lock held; O(chunks). */
static uint64_t largest_request(const bfc_pool_t *pool, const bfc_stats_t *s) {
  struct free_regions w = {0, 0, 0};
  bfc_walk(pool, add_chunk, &w);
  w.total += w.clean ? w.region : 0;
  uint64_t room = s->bytes_limit > s->pool_bytes ? s->bytes_limit - s->pool_bytes : 0;
  uint64_t grown = w.total > UINT64_MAX - room ? UINT64_MAX : w.total + room;
  return grown > s->largest_free_block_bytes ? grown : s->largest_free_block_bytes;
}

void pool_each(void (*fn)(void *arg, const struct pool_report *r),
               void (*busy)(void *arg, int dev, int index), void *arg) {
  if (exit_lock(&registry)) {
    for (int i = 0; i < nended; i++) {
      struct pool_report r = {ended[i].dev, ended[i].index, true, ended[i].stats,
                              ended[i].largest_request};
      fn(arg, &r);
    }
    pthread_mutex_unlock(&registry);
  } else {
    busy(arg, -1, -1); /* the pools of destroyed contexts */
  }
  int n = atomic_load_explicit(&npools, memory_order_acquire);
  for (int i = 0; i < n; i++) {
    /* dev and index only change when a slot is reused, under its lock: read again below. */
    struct pool_report r = {pools[i].dev, pools[i].index, false, {0}, 0};
    if (!exit_lock(&pools[i].lock)) {
      busy(arg, r.dev, r.index); /* still busy in another thread at exit: say so, never hang */
      continue;
    }
    if (pools[i].pool) {
      /* No block will be handed out again: settle the deferred frees (bookkeeping only). */
      bfc_retire(pools[i].pool);
      bfc_stats(pools[i].pool, &r.stats);
      r.largest_request = largest_request(pools[i].pool, &r.stats);
    }
    r.dev = pools[i].dev;
    r.index = pools[i].index;
    pthread_mutex_unlock(&pools[i].lock);
    if (r.stats.num_allocs > 0 || r.stats.num_ooms > 0) {
      fn(arg, &r);
    }
  }
}

enum pool_where pool_block(uint64_t addr, uint64_t *base, uint64_t *size) {
  struct ctx_pool *p = owner_of(addr);
  enum pool_where where = POOL_OUTSIDE;
  if (p) {
    pthread_mutex_lock(&p->lock);
    if (p->pool && bfc_owns(p->pool, addr)) {
      /* The block is what the program asked for: the chunk's rounding is not part of it. */
      where = bfc_lookup(p->pool, addr, base, NULL, size) == 0 && addr - *base < *size
                  ? POOL_BLOCK
                  : POOL_NOT_HELD;
    }
    pthread_mutex_unlock(&p->lock);
  }
  return where;
}

/* A block the driver freed with its context: its `free` row in the trace. */
static int trace_dropped(void *arg, const bfc_chunk_info_t *c) {
  (void)arg;
  if (c->state == BFC_IN_USE) {
    trace_event(TRACE_FREE, c->addr, c->requested);
  }
  return 0;
}

/* Forgets p's pool, keeping its figures for the exit report: its regions went with its
 * context, so release() only returns charges. Registry lock held. */
static void drop(struct ctx_pool *p) {
  pthread_mutex_lock(&p->lock);
  if (p->pool) {
    bfc_stats_t st;
    bfc_walk(p->pool, trace_dropped, NULL);
    bfc_stats(p->pool, &st);
    if ((st.num_allocs > 0 || st.num_ooms > 0) && nended < POOL_MAX) {
      ended[nended++] = (struct ended){.dev = p->dev,
                                       .index = p->index,
                                       .stats = st,
                                       .largest_request = largest_request(p->pool, &st)};
    }
    p->gone = true;
    bfc_destroy(p->pool);
    p->pool = NULL;
    log_msg(LOG_DEBUG, "device %d: context destroyed, its pool dropped", p->dev);
  }
  atomic_store_explicit(&p->ctx, NULL, memory_order_release);
  pthread_mutex_unlock(&p->lock);
}

void pool_dying(CUcontext ctx, bool dying) {
  int n = atomic_load_explicit(&npools, memory_order_acquire);
  for (int i = 0; ctx && i < n; i++) {
    if (atomic_load_explicit(&pools[i].ctx, memory_order_acquire) == ctx) {
      atomic_store_explicit(&pools[i].dying, dying, memory_order_release);
    }
  }
}

void pool_drop_context(CUcontext ctx) {
  pthread_mutex_lock(&registry);
  int n = atomic_load_explicit(&npools, memory_order_relaxed);
  for (int i = 0; i < n; i++) {
    if (ctx && atomic_load_explicit(&pools[i].ctx, memory_order_acquire) == ctx) {
      drop(&pools[i]);
    }
  }
  pthread_mutex_unlock(&registry);
}

/* A fork child's pools as the parent left them: kept, not freed (volatile, so the stores stay),
 * so that leak checkers see them reachable. */
static bfc_pool_t *volatile inherited[POOL_MAX];

/* In a fork child: forget every pool (the child has no usable CUDA context). */
static void fork_child(void) {
  int n = atomic_load_explicit(&npools, memory_order_relaxed);
  for (int i = 0; i < n; i++) {
    struct ctx_pool *p = &pools[i];
    /* No lock was held across fork: another thread may have been inside this pool, so its
     * bookkeeping is abandoned unread (the parent's memory is never the child's to free). */
    pthread_mutex_init(&p->lock, NULL);
    inherited[i] = p->pool;
    p->pool = NULL;
    atomic_store_explicit(&p->ctx, NULL, memory_order_relaxed);
  }
  atomic_store_explicit(&npools, 0, memory_order_relaxed);
  last_used = NULL;
  nended = 0;
  memset(contexts_seen, 0, sizeof contexts_seen);
  pthread_mutex_init(&registry, NULL);
}
FORK_CHILD(fork_child)
