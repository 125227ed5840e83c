/* The table of context objects and their lifecycle (see shim/context/ctx.h): look-up and creation
 * on first use, dying and dropping when the driver destroys a context, the fork child's fresh start
 * and the exit listing. The allocation path is shim/context/ctx_alloc.c.
 */
#include "shim/context/ctx_impl.h"

#include "shim/accounting/cap.h"
#include "shim/base/check.h"
#include "shim/base/exit.h"
#include "shim/base/fork.h"
#include "shim/accounting/ledger.h"
#include "shim/base/log.h"
#include "shim/pool/ordered.h"
#include "shim/pool/passthru.h"
#include "shim/pool/pending.h"
#include "shim/base/real.h"
#include "shim/base/settings.h"

#include <string.h>
#include <unistd.h>

static struct ctx slots[CTX_MAX];

/* Contexts the driver destroyed, as their pools stood then (for the exit report), and the
 * contexts seen per device (an object's index). Guarded by `registry`. */
static struct ctx_report ended[CTX_MAX];
static int nended;
static int contexts_seen[GPUCAP_MAX_DEVICES];
static atomic_int nslots;
static pthread_mutex_t registry = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local struct ctx *last_used;
/* The calling thread's arena, given at its first look-up (-1 until then), and the next to give
 * (docs/design.md, "Arenas"). */
static _Thread_local int my_arena = -1;
static atomic_uint next_arena;
/* GPUCAP_ARENAS=auto: the most arenas a context opens as its threads contend; 0 until read. */
static atomic_int auto_most;

bool ctx_pooling(void) {
  return pool_enabled();
}

int ctx_count(void) {
  return atomic_load_explicit(&nslots, memory_order_acquire);
}

ctx_t *ctx_slot(int i) {
  return &slots[i];
}

/* The calling thread's arena. With GPUCAP_ARENAS=N threads take them in turn, in the order of
 * their first look-up; with auto every thread starts in arena 0 and moves on contention
 * (ctx_lock_arena). A preallocating pool reserves the whole cap: then a context has one. */
static int thread_arena(void) {
  if (my_arena < 0) {
    const cfg_t *s = settings_get();
    int n = settings_valid() && s->allow_growth ? s->arenas : 1;
    my_arena =
        n > 1 ? (int)(atomic_fetch_add_explicit(&next_arena, 1, memory_order_relaxed) % (unsigned)n)
              : 0;
  }
  return my_arena;
}

/* GPUCAP_ARENAS=auto's bound: one arena per online CPU, at most AUTO_ARENAS_MAX; 1 when the
 * setting is a count, or when the pools preallocate. */
enum { AUTO_ARENAS_MAX = 8 };
static int arenas_auto_most(void) {
  int most = atomic_load_explicit(&auto_most, memory_order_relaxed);
  if (most == 0) {
    const cfg_t *s = settings_get();
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    most = !settings_valid() || !s->allow_growth || s->arenas != CFG_ARENAS_AUTO ? 1
           : cpus < 1                                                            ? 1
           : cpus > AUTO_ARENAS_MAX                                              ? AUTO_ARENAS_MAX
                                                                                 : (int)cpus;
    atomic_store_explicit(&auto_most, most, memory_order_relaxed);
  }
  return most;
}

/* The object of arena `arena` of the context `handle`, or NULL. index: set to the index of any
 * of the context's objects (-1 when it has none). */
static struct ctx *find(CUcontext handle, int arena, int *index) {
  int n = ctx_count();
  if (index) {
    *index = -1;
  }
  for (int i = 0; i < n; i++) {
    if (atomic_load_explicit(&slots[i].handle, memory_order_acquire) == handle) {
      if (atomic_load_explicit(&slots[i].arena, memory_order_relaxed) == arena) {
        return &slots[i];
      }
      if (index) {
        *index = slots[i].index;
      }
    }
  }
  return NULL;
}

static struct ctx *create(CUcontext handle, int dev, int arena) {
  pthread_mutex_lock(&registry);
  int n = atomic_load_explicit(&nslots, memory_order_relaxed), index;
  struct ctx *c = find(handle, arena, &index);
  if (c) {
    pthread_mutex_unlock(&registry);
    return c;
  }
  int slot = n;
  for (int i = 0; i < n; i++) {
    if (!slots[i].pool.bfc && !atomic_load_explicit(&slots[i].handle, memory_order_relaxed)) {
      slot = i; /* a dropped context's slot */
      break;
    }
  }
  if (slot == CTX_MAX) {
    log_msg(LOG_ERROR, "more than %d CUDA contexts: allocation refused", CTX_MAX);
  } else {
    c = &slots[slot];
    pool_setup_t setup;
    pool_setup(dev, &setup);
    if (slot == n) {
      pthread_mutex_init(&c->lock, NULL);
    }
    /* A dropped context's slot is still visible to other threads (trims, look-ups). */
    pthread_mutex_lock(&c->lock);
    c->dev = dev;
    c->index = index >= 0                             ? index /* another arena's */
               : dev >= 0 && dev < GPUCAP_MAX_DEVICES ? contexts_seen[dev]++
                                                      : 0;
    atomic_store_explicit(&c->arena, arena, memory_order_relaxed);
    atomic_store_explicit(&c->dying, false, memory_order_relaxed);
    atomic_store_explicit(&c->spreads, setup.vmm && arenas_auto_most() > 1, memory_order_relaxed);
    int made = pool_open(&c->pool, dev, &setup);
    exit_arm(); /* the runtime has started: its teardown at exit is told from a program's destroy */
    c->ooms_taken_back = 0;
    pthread_mutex_unlock(&c->lock);
    if (made != 0) {
      c = NULL;
    } else {
      atomic_store_explicit(&c->handle, handle, memory_order_release);
      if (slot == n) {
        atomic_store_explicit(&nslots, n + 1, memory_order_release);
      }
    }
  }
  pthread_mutex_unlock(&registry);
  return c;
}

ctx_t *ctx_current(CUresult *rc) {
  CUcontext handle = NULL;
  int dev;
  CUresult q = real.cuCtxGetCurrent ? real.cuCtxGetCurrent(&handle) : CUDA_ERROR_NOT_INITIALIZED;
  /* No usable context: the driver answers the call; any other failure is returned as is. */
  *rc = q == CUDA_SUCCESS || cap_no_context(q) ? CUDA_SUCCESS : q;
  if (q != CUDA_SUCCESS || !handle) {
    return NULL;
  }
  struct ctx *c = last_used;
  if (c && atomic_load_explicit(&c->handle, memory_order_acquire) == handle) {
    return c;
  }
  int arena = thread_arena();
  c = find(handle, arena, NULL);
  if (c) {
    return last_used = c;
  }
  CUresult drc = cap_current_device(&dev);
  if (drc != CUDA_SUCCESS) {
    *rc = drc == CUDA_ERROR_INVALID_DEVICE ? CUDA_ERROR_OUT_OF_MEMORY
          : cap_no_context(drc)            ? CUDA_SUCCESS
                                           : drc;
    return NULL;
  }
  c = create(handle, dev, arena);
  *rc = c ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  return last_used = c;
}

struct ctx *ctx_lock_arena(struct ctx *c) {
  if (pthread_mutex_trylock(&c->lock) == 0) {
    return c;
  }
  if (!atomic_load_explicit(&c->spreads, memory_order_relaxed)) {
    pthread_mutex_lock(&c->lock);
    return c;
  }
  /* Contention: another arena, the others taken in turn, made if need be. */
  CUcontext handle = atomic_load_explicit(&c->handle, memory_order_acquire);
  unsigned most = (unsigned)arenas_auto_most(),
           turn = atomic_fetch_add_explicit(&next_arena, 1, memory_order_relaxed) % (most - 1);
  int arena =
      (int)(((unsigned)atomic_load_explicit(&c->arena, memory_order_relaxed) + 1 + turn) % most);
  struct ctx *o = handle ? find(handle, arena, NULL) : NULL;
  if (!o && handle) {
    o = create(handle, c->dev, arena);
  }
  if (!o || atomic_load_explicit(&o->handle, memory_order_acquire) != handle) {
    o = c; /* no slot left, or the context went meanwhile: wait for this one */
  } else {
    my_arena = arena;
    last_used = o;
  }
  pthread_mutex_lock(&o->lock);
  return o;
}

/* c, locked, iff its pool holds addr and the driver is not destroying its context. */
static bool holds(struct ctx *c, uint64_t addr) {
  if (atomic_load_explicit(&c->dying, memory_order_acquire)) {
    return false;
  }
  pthread_mutex_lock(&c->lock);
  if (c->pool.bfc && bfc_owns(c->pool.bfc, addr)) {
    return true;
  }
  pthread_mutex_unlock(&c->lock);
  return false;
}

struct ctx *ctx_owning_locked(uint64_t addr) {
  /* The thread's own pool first: a block is most often freed by the thread that allocated it,
   * and with arenas that takes no other thread's lock. */
  struct ctx *mine = last_used;
  if (mine && holds(mine, addr)) {
    return mine;
  }
  int n = ctx_count();
  for (int i = 0; i < n; i++) {
    if (&slots[i] != mine && holds(&slots[i], addr)) {
      return &slots[i];
    }
  }
  return NULL;
}

enum ctx_where ctx_block(uint64_t addr, uint64_t *base, uint64_t *size) {
  struct ctx *c = ctx_owning_locked(addr);
  enum ctx_where where = CTX_OUTSIDE;
  if (c) {
    /* The block is what the program asked for: the chunk's rounding is not part of it. */
    where = bfc_lookup(c->pool.bfc, addr, base, NULL, size) == 0 && addr - *base < *size
                ? CTX_BLOCK
                : CTX_NOT_HELD;
    pthread_mutex_unlock(&c->lock);
  }
  return where;
}

bool ctx_pool_of(uint64_t addr, CUcontext *owner, uint64_t *unit) {
  struct ctx *c = ctx_owning_locked(addr);
  if (c) {
    *owner = atomic_load_explicit(&c->handle, memory_order_acquire);
    *unit = c->pool.vmm ? c->pool.unit : 0;
    pthread_mutex_unlock(&c->lock);
  }
  return c != NULL;
}

uint64_t ctx_idle_bytes(int dev) {
  uint64_t idle = 0;
  int n = ctx_count();
  for (int i = 0; i < n; i++) {
    if (atomic_load_explicit(&slots[i].dying, memory_order_acquire)) {
      continue;
    }
    uint64_t in_use = 0, deferred = 0, free_b = 0, reserved = 0;
    pthread_mutex_lock(&slots[i].lock);
    if (slots[i].pool.bfc && slots[i].dev == dev) {
      bfc_usage(slots[i].pool.bfc, &in_use, &deferred, &free_b, &reserved);
    }
    /* A wholly idle pool's regions go back whole, their rounding with them. */
    uint64_t rounding = in_use == 0 ? slots[i].pool.rounding : 0;
    pthread_mutex_unlock(&slots[i].lock);
    idle += reserved - in_use + rounding;
  }
  return idle;
}

void ctx_dying(CUcontext handle, bool dying) {
  int n = ctx_count();
  for (int i = 0; handle && i < n; i++) {
    if (atomic_load_explicit(&slots[i].handle, memory_order_acquire) == handle) {
      atomic_store_explicit(&slots[i].dying, dying, memory_order_release);
    }
  }
}

/* The ledger's share of a block still held when its pool goes (shim/accounting/ledger.h). */
static int unledger(void *arg, const bfc_chunk_info_t *k) {
  if (k->state == BFC_IN_USE) {
    ledger_sub(*(const int *)arg, (int)k->tag, k->size);
  }
  return 0;
}

/* c's figures for the exit report (its lock held, its pool open): its pool's, with the
 * refusals the program did not see taken out. */
static void report_of(struct ctx *c, struct ctx_report *r) {
  CHECK_HELD(&c->lock);
  r->dev = c->dev;
  r->index = c->index;
  r->arena = atomic_load_explicit(&c->arena, memory_order_relaxed);
  pool_report(&c->pool, &r->stats, &r->largest_request, &r->backing);
  r->stats.num_ooms -= c->ooms_taken_back;
}

/* Forgets c's pool, keeping its figures for the exit report: its regions went with its
 * context, so the pool only returns charges. Registry lock held. */
static void drop(struct ctx *c) {
  CHECK_HELD(&registry);
  pthread_mutex_lock(&c->lock);
  if (c->pool.bfc) {
    /* Destroyed before exit, or released by the runtime's teardown at exit (reported as the
     * live pools are); the driver completed the context's work, so no free is pending. */
    struct ctx_report r = {.destroyed = !exit_started()};
    bfc_retire(c->pool.bfc);
    report_of(c, &r);
    if ((r.stats.num_allocs > 0 || r.stats.num_ooms > 0) && nended < CTX_MAX) {
      ended[nended++] = r;
    }
    if (r.destroyed) { /* at exit, what the program held stays its own, as in a live pool */
      bfc_walk(c->pool.bfc, unledger, &c->dev);
    }
    pool_close(&c->pool);
    log_msg(LOG_DEBUG, "device %d: context destroyed, its pool dropped", c->dev);
  }
  atomic_store_explicit(&c->handle, NULL, memory_order_release);
  pthread_mutex_unlock(&c->lock);
}

void ctx_destroyed(CUcontext handle) {
  if (!handle) {
    return;
  }
  pthread_mutex_lock(&registry);
  int n = atomic_load_explicit(&nslots, memory_order_relaxed);
  for (int i = 0; i < n; i++) {
    if (atomic_load_explicit(&slots[i].handle, memory_order_acquire) == handle) {
      drop(&slots[i]);
    }
  }
  pthread_mutex_unlock(&registry);
  /* The driver freed everything the context held and completed its streams' work. */
  passthru_drop_context(handle);
  pending_drop_context(handle);
}

void ctx_device_reset(int dev) {
  passthru_drop_ordered(dev);
  ordered_reset(dev);
  pending_drop_device(dev);
}

void ctx_each(void (*fn)(void *arg, const struct ctx_report *r),
              void (*busy)(void *arg, int dev, int index), void *arg) {
  if (exit_lock(&registry)) {
    for (int i = 0; i < nended; i++) {
      fn(arg, &ended[i]);
    }
    pthread_mutex_unlock(&registry);
  } else {
    busy(arg, -1, -1); /* the pools of destroyed contexts */
  }
  int n = ctx_count();
  for (int i = 0; i < n; i++) {
    struct ctx *c = &slots[i];
    /* dev and index only change when a slot is reused, under its lock: read again there. */
    struct ctx_report r = {.dev = c->dev, .index = c->index};
    if (!exit_lock(&c->lock)) {
      busy(arg, r.dev, r.index); /* still busy in another thread at exit: say so, never hang */
      continue;
    }
    if (c->pool.bfc) {
      /* No block will be handed out again: the deferred frees settled (bookkeeping only). */
      bfc_retire(c->pool.bfc);
      report_of(c, &r);
    }
    pthread_mutex_unlock(&c->lock);
    if (r.stats.num_allocs > 0 || r.stats.num_ooms > 0) {
      fn(arg, &r);
    }
  }
}

/* A fork child's pools as the parent left them: kept, not freed (volatile, so the stores stay),
 * so that leak checkers see them reachable. */
static bfc_pool_t *volatile inherited[CTX_MAX];

/* In a fork child: forget every context (the child has no usable CUDA context) with fresh
 * locks. No lock was held across fork: another thread may have been inside an object, so its
 * bookkeeping is abandoned unread (the parent's memory is never the child's to free). */
static void fork_child(void) {
  int n = atomic_load_explicit(&nslots, memory_order_relaxed);
  for (int i = 0; i < n; i++) {
    struct ctx *c = &slots[i];
    pthread_mutex_init(&c->lock, NULL);
    inherited[i] = c->pool.bfc;
    c->pool.bfc = NULL;
    atomic_store_explicit(&c->handle, NULL, memory_order_relaxed);
  }
  atomic_store_explicit(&nslots, 0, memory_order_relaxed);
  last_used = NULL;
  nended = 0;
  memset(contexts_seen, 0, sizeof contexts_seen);
  pthread_mutex_init(&registry, NULL);
}
FORK_CHILD(fork_child)
