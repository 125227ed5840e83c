/* Per-thread fronts (docs/design.md, "Per-thread fronts"): each thread that frees pool blocks
 * keeps a core/front cache of them for one context at a time, taken by no lock: its owner marks
 * it busy with one atomic exchange on a line no other thread writes, and another thread that
 * must see inside (a flush, a double-free check) asks first and waits until the owner is out
 * (enter/visit below), so that the common free-then-allocate pair of one size takes no lock and
 * writes no line another thread writes. Beside the cache, a thread keeps a map of the blocks it
 * knows: those the pool handed it (live) and those in its cache (cached), so a free can be checked
 * without the pool. The map is advice for live blocks (a block the thread does not know goes
 * through the pool as before, after every front has been asked whether it caches it: a double
 * free) and exact for cached ones.
 *
 * A cached block is an in-use block of its pool: it is charged, counts as in use in the pool's
 * figures, and is flushed back into the pool (a deferred free) before the pool grows, trims,
 * refuses or reports, when its context is destroyed, and when the thread exits (a pthread key
 * destructor). A block is handed out again only once a synchronisation gpucap made of its
 * context began after its free (the stamp), exactly the rule of the pool's deferred frees.
 */
#include "shim/context/ctx_impl.h"

#include "core/addrmap.h"
#include "core/front.h"
#include "shim/base/check.h"
#include "shim/base/exit.h"
#include "shim/base/fork.h"
#include "shim/context/gate.h"
#include "shim/accounting/ledger.h"
#include "shim/base/log.h"
#include "shim/base/settings.h"
#include "shim/accounting/trace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A block the thread knows: its chunk size, the size asked for, the library (tag), and whether
 * it sits in the cache. Free records are chained through `held`. */
struct rec {
  uint64_t held, requested;
  uint8_t tag, cached;
};

struct tfront {
  gate_t gate;    /* the way in (enter/visit): guards everything below but next/prev (the
                    registry's) */
  struct ctx *c;  /* the context it serves, NULL when unbound */
  uint64_t epoch; /* c's epoch when bound */
  addrmap_t map;  /* block address -> record index + 1 */
  struct rec *recs;
  uint64_t nrecs, caprecs, free_rec; /* free_rec: first free record + 1, 0: none */
  struct tfront *next, *prev;
  /* The owner's alone (no lock): allocations asked of the front in the current window and
   * those it served; while `skip` > 0 the front steps aside (FRONT_SKIP). */
  uint32_t takes, hits, skip;
  uint64_t served; /* allocations served since the last count into c->front_allocs */
  /* The owner's alone: f.bytes when it last left (a visitor may have drained it since, never
   * filled it), so a miss asks its front for blocks to give back only when it may keep some. */
  uint64_t kept;
  front_t f;
};

/* A front that served fewer than 1 in FRONT_POOR of the last FRONT_WINDOW allocations (sizes
 * that do not repeat) steps aside for the next FRONT_SKIP: its calls go to the pool as with no
 * front, since its own scan and give-backs would only add to them. */
enum { FRONT_WINDOW = 256, FRONT_POOR = 16, FRONT_SKIP = 4096 };

static pthread_mutex_t registry = PTHREAD_MUTEX_INITIALIZER; /* the list of fronts */
static struct tfront *fronts;
static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static atomic_bool key_made;
static _Thread_local struct tfront *mine;

atomic_int ctx_fronts_setting = -1;

bool ctx_fronts_read(void) {
  int v = settings_get()->fronts;
  atomic_store_explicit(&ctx_fronts_setting, v, memory_order_relaxed);
  return v;
}

uint64_t ctx_sync_begin(struct ctx *c) {
  return atomic_fetch_add_explicit(&c->sync_started, 1, memory_order_acq_rel) + 1;
}

void ctx_sync_end(struct ctx *c, uint64_t ticket) {
  uint64_t done = atomic_load_explicit(&c->sync_done, memory_order_acquire);
  while (done < ticket &&
         !atomic_compare_exchange_weak_explicit(&c->sync_done, &done, ticket, memory_order_acq_rel,
                                                memory_order_acquire)) {
  }
}

/* ---- the way in (shim/context/gate.h): visitors are serialised by the registry lock
 * --------------- */

static void enter(struct tfront *t) {
  gate_enter(&t->gate);
}

static void leave(struct tfront *t) {
  t->kept = t->f.bytes;
  gate_leave(&t->gate);
}

/* Another thread's way in (the registry lock held): true once the owner is out. `bounded`: the
 * exit path's, which gives up (false, nothing asked any more) once exit_wait's time is spent. */
static bool visit(struct tfront *t, bool bounded) {
  return gate_visit(&t->gate, bounded ? exit_wait : gate_yield);
}

static void unvisit(struct tfront *t) {
  gate_unvisit(&t->gate);
}

/* ---- the thread's map of known blocks (the front entered or visited) ---------------------- */

static struct rec *find(struct tfront *t, uint64_t addr) {
  void *v = t->map.slots ? addrmap_get(&t->map, addr) : NULL;
  return v ? &t->recs[(uintptr_t)v - 1] : NULL;
}

static void forget(struct tfront *t, uint64_t addr) {
  void *v = t->map.slots ? addrmap_take(&t->map, addr) : NULL;
  if (v) {
    uint64_t i = (uintptr_t)v - 1;
    t->recs[i].held = t->free_rec;
    t->free_rec = i + 1;
  }
}

/* Records addr; false when host memory runs out (the block is then simply not known). */
static bool remember(struct tfront *t, uint64_t addr, const struct rec *r) {
  if (!t->map.slots && addrmap_init(&t->map, 64) != 0) {
    return false;
  }
  if (t->free_rec == 0 && t->nrecs == t->caprecs) {
    uint64_t cap = t->caprecs ? 2 * t->caprecs : 64;
    struct rec *grown = realloc(t->recs, cap * sizeof(*grown));
    if (!grown) {
      return false;
    }
    t->recs = grown;
    t->caprecs = cap;
  }
  if (addrmap_reserve(&t->map, 1) != 0) {
    return false;
  }
  uint64_t i;
  if (t->free_rec) {
    i = t->free_rec - 1;
    t->free_rec = t->recs[i].held;
  } else {
    i = t->nrecs++;
  }
  t->recs[i] = *r;
  addrmap_put(&t->map, addr, (void *)(uintptr_t)(i + 1));
  return true;
}

/* Forgets every block (the front's context is gone or changes). */
static void forget_all(struct tfront *t) {
  addrmap_fini(&t->map);
  memset(&t->map, 0, sizeof t->map);
  t->nrecs = t->free_rec = 0;
}

/* Takes up to `room` cached blocks out of t (entered or visited), forgetting them. */
static size_t drain(struct tfront *t, front_block_t *out, size_t room) {
  size_t n = front_drain(&t->f, out, room);
  for (size_t i = 0; i < n; i++) {
    forget(t, out[i].addr);
  }
  return n;
}

/* Cached blocks go back into c's pool (c's lock held): free at once when a synchronisation
 * that began after their free has completed, else deferred as the pool defers every free. */
static void give_back(struct ctx *c, const front_block_t *b, size_t n) {
  uint64_t safe = atomic_load_explicit(&c->sync_done, memory_order_acquire);
  for (size_t i = 0; i < n && c->pool.bfc; i++) {
    if (b[i].stamp < safe) {
      bfc_free(c->pool.bfc, b[i].addr);
    } else {
      bfc_free_deferred(c->pool.bfc, b[i].addr);
    }
  }
}

/* Empties t (the owner's) into its context's pool, the context's lock taken for each batch;
 * the blocks are dropped when that context is gone. Leaves t unbound. Returns the bytes given
 * back and stores the blocks' number in *blocks. */
static uint64_t unload(struct tfront *t, uint64_t *blocks) {
  front_block_t out[64];
  uint64_t bytes = 0;
  *blocks = 0;
  enter(t);
  struct ctx *c = t->c;
  uint64_t epoch = t->epoch, served = t->served;
  t->served = 0;
  leave(t);
  for (bool first = true;; first = false) {
    enter(t);
    size_t n = t->c == c ? drain(t, out, 64) : 0;
    leave(t);
    if ((n == 0 && !first) || !c) {
      break;
    }
    pthread_mutex_lock(&c->lock);
    if (atomic_load_explicit(&c->epoch, memory_order_relaxed) == epoch && c->pool.bfc) {
      atomic_fetch_add_explicit(&c->front_allocs, served, memory_order_relaxed);
      served = 0;
      give_back(c, out, n);
      for (size_t i = 0; i < n; i++) {
        bytes += out[i].size;
      }
      *blocks += n;
    }
    pthread_mutex_unlock(&c->lock);
  }
  enter(t);
  forget_all(t);
  t->c = NULL;
  leave(t);
  return bytes;
}

/* ---- the thread's front: made on first use, gone with the thread ------------------------- */

/* Thread exit (a pthread key destructor, so it runs while gpucap is loaded: the key is deleted
 * before the library could go): out of the registry, cached blocks back to the pool. */
static void thread_gone(void *arg) {
  struct tfront *t = arg;
  pthread_mutex_lock(&registry);
  if (t->prev) {
    t->prev->next = t->next;
  } else if (fronts == t) {
    fronts = t->next;
  }
  if (t->next) {
    t->next->prev = t->prev;
  }
  pthread_mutex_unlock(&registry);
  uint64_t blocks, bytes = unload(t, &blocks);
  if (blocks > 0) {
    log_msg(LOG_DEBUG, "a thread exited: its front gave %llu cached blocks (%llu bytes) back",
            (unsigned long long)blocks, (unsigned long long)bytes);
  }
  free(t->recs);
  free(t);
  mine = NULL;
}

static void make_key(void) {
  atomic_store_explicit(&key_made, pthread_key_create(&key, thread_gone) == 0,
                        memory_order_release);
}

/* Should gpucap ever be unloaded, no destructor of a thread still running may point into it. */
__attribute__((destructor)) static void delete_key(void) {
  if (atomic_load_explicit(&key_made, memory_order_acquire)) {
    pthread_key_delete(key);
  }
}

/* The calling thread's front bound to c (made or rebound as needed); NULL when none can be
 * made. */
static struct tfront *front_for(struct ctx *c) {
  struct tfront *t = mine;
  if (!t) {
    pthread_once(&key_once, make_key);
    if (!atomic_load_explicit(&key_made, memory_order_acquire) ||
        !(t = aligned_alloc(_Alignof(struct tfront), sizeof(*t)))) {
      return NULL;
    }
    memset(t, 0, sizeof(*t));
    gate_init(&t->gate);
    if (pthread_setspecific(key, t) != 0) {
      free(t);
      return NULL;
    }
    pthread_mutex_lock(&registry);
    t->next = fronts;
    if (fronts) {
      fronts->prev = t;
    }
    fronts = t;
    pthread_mutex_unlock(&registry);
    mine = t;
  }
  enter(t);
  bool bound = t->c == c && t->epoch == atomic_load_explicit(&c->epoch, memory_order_acquire);
  if (!bound) {
    leave(t);
    uint64_t blocks;
    unload(t, &blocks); /* its blocks to their own context's pool (or dropped with it) */
    enter(t);
    t->c = c;
    t->epoch = atomic_load_explicit(&c->epoch, memory_order_acquire);
    front_init(&t->f, c->front_budget);
  }
  return t; /* entered: the caller leaves */
}

/* ---- the fast paths ----------------------------------------------------------------------- */

bool ctx_front_take(struct ctx *c, uint64_t bytes, int lib, uint64_t *addr, uint64_t *held) {
  struct tfront *t = mine;
  if (!t) {
    return false;
  }
  if (t->skip > 0) {
    t->skip--;
    return false;
  }
  front_block_t b;
  uint64_t safe = atomic_load_explicit(&c->sync_done, memory_order_acquire);
  uint64_t epoch = atomic_load_explicit(&c->epoch, memory_order_acquire);
  enter(t);
  bool hit = t->c == c && t->epoch == epoch && front_take(&t->f, bytes, (uint8_t)lib, safe, &b);
  if (hit) {
    struct rec *r = find(t, b.addr);
    if (r) {
      r->cached = 0;
    }
    t->served++;
    trace_note(TRACE_ALLOC, c->dev, b.addr, bytes, b.size, lib); /* ordered by the front */
  }
  leave(t);
  t->takes++;
  t->hits += hit;
  if (t->takes == FRONT_WINDOW) {
    t->skip = t->hits * FRONT_POOR < t->takes ? FRONT_SKIP : 0;
    t->takes = t->hits = 0;
  }
  if (hit) {
    ledger_add(c->dev, lib, b.size);
    *addr = b.addr;
    *held = b.size;
    trace_poll();
  }
  return hit;
}

void ctx_front_track(struct ctx *c, uint64_t addr, uint64_t held, uint64_t requested, int lib) {
  if (!ctx_fronts_on()) {
    return;
  }
  struct tfront *t = front_for(c); /* entered */
  if (t) {
    if (t->c == c) {
      forget(t, addr); /* a stale entry of a block freed through the pool meanwhile */
      remember(t, addr, &(struct rec){held, requested, (uint8_t)lib, 0});
    }
    leave(t);
  }
}

int ctx_front_free(struct ctx *c, uint64_t ptr, CUresult *rc) {
  struct tfront *t = mine;
  front_block_t out[FRONT_PUT_ROOM];
  size_t n = 0;
  if (!t) {
    return 0;
  }
  enter(t);
  uint64_t epoch = t->epoch;
  bool bound = t->c == c && epoch == atomic_load_explicit(&c->epoch, memory_order_acquire);
  struct rec *r = bound ? find(t, ptr) : NULL;
  if (!r) {
    leave(t);
    return 0;
  }
  if (r->cached) { /* freed already: as the pool answers a double free */
    leave(t);
    *rc = CUDA_ERROR_INVALID_VALUE;
    return 1;
  }
  struct rec k = *r;
  if (t->skip > 0 || atomic_load_explicit(&c->pressure, memory_order_acquire) > 0) {
    /* The pool needs its memory now, or the front steps aside: through the pool. A block this
     * thread knows as live is in no front's cache (a free by another thread would have taken
     * it out of this map first). */
    forget(t, ptr);
    leave(t);
    return -1;
  }
  trace_note(TRACE_FREE, c->dev, ptr, k.requested, k.held, k.tag); /* ordered by the front */
  front_block_t b = {.addr = ptr,
                     .size = k.held,
                     .requested = k.requested,
                     .stamp = atomic_load_explicit(&c->sync_started, memory_order_acquire),
                     .tag = k.tag};
  n = front_put(&t->f, &b, out);
  bool kept = true;
  for (size_t i = 0; i < n; i++) {
    kept &= out[i].addr != ptr;
    forget(t, out[i].addr);
  }
  if (kept) {
    r = find(t, ptr);
    r->cached = 1;
  }
  leave(t);
  ledger_sub(c->dev, k.tag, k.held);
  if (n > 0) {
    pthread_mutex_lock(&c->lock);
    if (atomic_load_explicit(&c->epoch, memory_order_relaxed) == epoch) {
      give_back(c, out, n);
    }
    pthread_mutex_unlock(&c->lock);
  }
  trace_poll();
  *rc = CUDA_SUCCESS;
  return 1;
}

struct ctx *ctx_front_owner(uint64_t addr) {
  struct tfront *t = mine;
  struct ctx *c = NULL;
  if (t) {
    enter(t);
    if (t->c && !atomic_load_explicit(&t->c->dying, memory_order_acquire) && find(t, addr)) {
      c = t->c;
    }
    leave(t);
  }
  return c;
}

/* ---- under the context's lock ------------------------------------------------------------- */

size_t ctx_front_spill(struct ctx *c, uint64_t bytes) {
  CHECK_HELD(&c->lock);
  if (!ctx_fronts_on()) {
    return 0;
  }
  struct tfront *t = mine;
  front_block_t out[FRONT_PUT_ROOM];
  size_t n = 0;
  if (t && t->kept > 0) {
    enter(t);
    if (t->c == c && t->epoch == atomic_load_explicit(&c->epoch, memory_order_acquire)) {
      n = bytes ? front_drain_from(&t->f, bytes, out, FRONT_PUT_ROOM)
                : front_drain(&t->f, out, FRONT_PUT_ROOM);
      for (size_t i = 0; i < n; i++) {
        forget(t, out[i].addr);
      }
    }
    leave(t);
    give_back(c, out, n);
  }
  return n;
}

bool ctx_fronts_cached(struct ctx *c, uint64_t addr, bool claim) {
  CHECK_HELD(&c->lock);
  bool cached = false;
  pthread_mutex_lock(&registry);
  for (struct tfront *t = fronts; t && !cached; t = t->next) {
    visit(t, false);
    struct rec *r = t->c == c ? find(t, addr) : NULL;
    if (r) {
      cached = r->cached;
      if (claim && !cached) {
        forget(t, addr);
      }
    }
    unvisit(t);
  }
  pthread_mutex_unlock(&registry);
  return cached;
}

bool ctx_fronts_flush(struct ctx *c, bool bounded) {
  CHECK_HELD(&c->lock);
  if (!ctx_fronts_on()) {
    return true;
  }
  front_block_t out[64];
  bool whole = true;
  if (bounded ? !exit_lock(&registry) : pthread_mutex_lock(&registry) != 0) {
    return false;
  }
  for (struct tfront *t = fronts; t; t = t->next) {
    if (!visit(t, bounded)) {
      whole = false; /* still busy at exit: it keeps its blocks (and its count) */
      continue;
    }
    if (t->c == c) {
      size_t n;
      while ((n = drain(t, out, 64)) > 0) {
        give_back(c, out, n);
      }
      atomic_fetch_add_explicit(&c->front_allocs, t->served, memory_order_relaxed);
      t->served = 0;
    }
    unvisit(t);
  }
  pthread_mutex_unlock(&registry);
  return whole;
}

void ctx_fronts_unbind(struct ctx *c) {
  CHECK_HELD(&c->lock);
  if (!ctx_fronts_on()) {
    return;
  }
  ctx_fronts_flush(c, false);
  pthread_mutex_lock(&registry);
  for (struct tfront *t = fronts; t; t = t->next) {
    visit(t, false);
    if (t->c == c) {
      forget_all(t);
      t->c = NULL;
    }
    unvisit(t);
  }
  pthread_mutex_unlock(&registry);
}

/* A fork child has one thread and no context: the fronts (the parent's threads', and this
 * thread's) are abandoned unread, as the contexts are (shim/base/fork.h); kept reachable. */
static struct tfront *volatile inherited;

static void fork_child(void) {
  inherited = fronts;
  fronts = NULL;
  pthread_mutex_init(&registry, NULL);
  if (mine) {
    mine = NULL;
    if (atomic_load_explicit(&key_made, memory_order_acquire)) {
      pthread_setspecific(key, NULL);
    }
  }
}
FORK_CHILD(fork_child)
