/* gpucap-replay: replays an RMM-format allocation log through core/bfc; prints one JSON line.
 *
 * The trace (RMM's CSV, or GPUCAP_TRACE's, read by scripts/tracecsv.c, the CLI's reader) is
 * parsed once into dense events: logged pointers become slot numbers, so the timed loop does
 * only pool work. The device primitive hands out addresses and never memory. Cold = a fresh pool,
 * warm = the same pool replaying again; both are medians over --runs. A no-pool baseline (bump
 * addresses plus the same hash map a pass-through shim would keep) is timed in the same run.
 * `--threads N` replays the trace in N threads sharing one pool behind one lock; `--scaling` in
 * 1, 2 and 8 threads under one cap, two ways (scaling(): one lock, and arenas: with --vmm as
 * GPUCAP_ARENAS=auto opens them, over regions one per thread). `--driver` replays it instead
 * through the CUDA driver API of libcuda.so.1 (dlopen'ed: with gpucap preloaded, through
 * gpucap), for the driver calls and the driver's time it costs. Options: see usage(). `--vmm UNIT`
 * replays through the pool's mapped mode (the VMM-backed pool: one address space mapped in units,
 * the limit being the cap factor times the peak plus one unit).
 * `--count` replays one cold and one warm pass and nothing else, the warm one inside
 * count_warm_pass(), for `valgrind --tool=callgrind --toggle-collect=count_warm_pass`: the
 * instructions of one warm pass, a steady figure on a noisy host.
 */
#include "core/addrmap.h"
#include "core/bfc.h"
#include "scripts/tracecsv.h"
#include "shim/base/cudadefs.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NONE UINT64_MAX
enum { OP_ALLOC = 0, OP_FREE = 1, MAX_RUNS = 101, MAX_THREADS = 64 };

typedef struct ev {
  uint64_t size;
  uint32_t slot;
  uint32_t op;
} ev_t;

typedef struct trace {
  ev_t *ev;
  uint64_t nev, pairs, nslots;
  uint64_t peak_live, peak_live_rounded, max_live_blocks;
  uint64_t failures_skipped, unmatched_frees, duplicate_allocs, leaked;
} trace_t;

typedef struct options {
  const char *path;
  double cap_factor;   /* 0: no cap */
  double retire_ratio; /* > 0: retire once deferred bytes reach this share of free bytes */
  int preallocate, deferred, threads, runs, spin, find_min_cap, driver, scaling, count;
  int arenas_max;     /* --arenas-max: auto's most arenas (0: the shim's rule, arenas_max()) */
  long driver_events; /* --driver: replay only the first N events (-1: all; 0: set up only) */
  uint64_t vmm_unit;  /* --vmm: mapped mode in units of this many bytes */
} options_t;

/* ---- timing, locks ----------------------------------------------------------------------- */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct lock {
  int spin;
  atomic_int flag;
  pthread_mutex_t mu;
} lock_t;

static inline void lock_take(lock_t *l) {
  if (l->spin) {
    while (atomic_exchange_explicit(&l->flag, 1, memory_order_acquire) != 0) {
      while (atomic_load_explicit(&l->flag, memory_order_relaxed) != 0) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
    }
  } else {
    pthread_mutex_lock(&l->mu);
  }
}

/* 1 iff the lock was free and is now taken: one exchange for the spin lock, a trylock for the
 * mutex. */
static inline int lock_try(lock_t *l) {
  if (l->spin) {
    return atomic_exchange_explicit(&l->flag, 1, memory_order_acquire) == 0;
  }
  return pthread_mutex_trylock(&l->mu) == 0;
}

static inline void lock_drop(lock_t *l) {
  if (l->spin) {
    atomic_store_explicit(&l->flag, 0, memory_order_release);
  } else {
    pthread_mutex_unlock(&l->mu);
  }
}

static void lock_init(lock_t *l, int spin) {
  l->spin = spin;
  atomic_init(&l->flag, 0);
  pthread_mutex_init(&l->mu, NULL);
}

/* ---- the device primitive: addresses only ------------------------------------------------ */

/* One device cap that several pools charge (the shim's cap_charge/cap_credit): the bytes they
 * hold reserved, never above limit. On a line of its own: every growth and release writes it. */
typedef struct device_cap {
  _Alignas(64) _Atomic uint64_t used;
  uint64_t limit;
} device_cap_t;

typedef struct addr_space {
  uint64_t next;
  uint64_t reserves, releases;
  uint64_t units_mapped, units_unmapped; /* mapped mode: the driver's map and unmap calls */
  device_cap_t *cap; /* charged before a reserve, credited after a release; NULL: none */
} addr_space_t;

/* Mapped mode's unit (--vmm), 0 for regions. */
static uint64_t vmm_unit;

/* 1 iff `bytes` more fit under the cap (and are now charged to it); always 1 with no cap. */
static int charge(device_cap_t *c, uint64_t bytes) {
  if (c == NULL) {
    return 1;
  }
  uint64_t used = atomic_load_explicit(&c->used, memory_order_relaxed);
  do {
    if (bytes > c->limit || used > c->limit - bytes) {
      return 0;
    }
  } while (!atomic_compare_exchange_weak_explicit(&c->used, &used, used + bytes,
                                                  memory_order_relaxed, memory_order_relaxed));
  return 1;
}

static void credit(device_cap_t *c, uint64_t bytes) {
  if (c != NULL) {
    atomic_fetch_sub_explicit(&c->used, bytes, memory_order_relaxed);
  }
}

static int as_reserve(void *ctx, uint64_t bytes, uint64_t *base) {
  addr_space_t *as = ctx;
  if (!charge(as->cap, bytes)) {
    return -ENOMEM; /* the pool backs off, as from a driver's refusal */
  }
  *base = as->next;
  as->next += (bytes + (2u << 20) + 0xfffff) & ~(uint64_t)0xfffff; /* keep regions apart */
  as->reserves++;
  return 0;
}

static int as_release(void *ctx, uint64_t base, uint64_t bytes) {
  addr_space_t *as = ctx;
  (void)base;
  credit(as->cap, bytes);
  as->releases++;
  return 0;
}

/* Mapped mode: the pool chooses the addresses; a unit is one map (or unmap) call. */
static int as_map(void *ctx, uint64_t bytes, uint64_t *base) {
  addr_space_t *as = ctx;
  (void)base;
  if (!charge(as->cap, bytes)) {
    return -ENOMEM;
  }
  as->reserves++;
  as->units_mapped += bytes / vmm_unit;
  return 0;
}

static int as_unmap(void *ctx, uint64_t base, uint64_t bytes) {
  addr_space_t *as = ctx;
  (void)base;
  credit(as->cap, bytes);
  as->releases++;
  as->units_unmapped += bytes / vmm_unit;
  return 0;
}

/* ---- parsing ------------------------------------------------------------------------------ */

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    return NULL;
  }
  size_t cap = 1 << 20, n = 0;
  char *buf = malloc(cap + 1);
  while (buf != NULL) {
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) {
      break;
    }
    cap *= 2;
    char *grown = realloc(buf, cap + 1);
    if (grown == NULL) {
      free(buf);
      buf = NULL;
    }
    buf = grown;
  }
  fclose(f);
  if (buf != NULL) {
    buf[n] = '\0';
    *len = n;
  }
  return buf;
}

static int push_event(trace_t *t, uint64_t *cap, ev_t e) {
  if (t->nev == *cap) {
    *cap = *cap ? 2 * *cap : 65536;
    ev_t *grown = realloc(t->ev, *cap * sizeof(*grown));
    if (grown == NULL) {
      return -ENOMEM;
    }
    t->ev = grown;
  }
  t->ev[t->nev++] = e;
  return 0;
}

/* The trace, read by the CLI's reader (scripts/tracecsv.h), as dense events: each logged
 * pointer becomes a slot number. Region rows and refusals are not replayed. */
static int parse(const char *path, trace_t *t) {
  size_t len = 0;
  char *text = read_file(path, &len);
  if (text == NULL) {
    fprintf(stderr, "gpucap-replay: error: %s: %s\n", path, strerror(errno));
    return -1;
  }
  tracecsv_event_t *tev = NULL;
  size_t ntev = 0;
  char err[256];
  int rc = tracecsv_parse(text, len, &tev, &ntev, NULL, err, sizeof err);
  free(text);
  if (rc != 0) {
    fprintf(stderr, "gpucap-replay: error: %s: %s\n", path, err);
    return -1;
  }
  memset(t, 0, sizeof(*t));
  addrmap_t ptrs;
  uint64_t evcap = 0, slotcap = 1024, nfree = 0, live = 0, live_rounded = 0, live_blocks = 0;
  uint64_t *slot_size = malloc(slotcap * sizeof(uint64_t));
  uint32_t *free_slots = malloc(slotcap * sizeof(uint32_t));
  if (slot_size == NULL || free_slots == NULL || addrmap_init(&ptrs, 1024) != 0) {
    return -1;
  }
  for (size_t i = 0; i < ntev; i++) {
    uint64_t ptr = tev[i].ptr, size = tev[i].size;
    if (tev[i].action == TRACECSV_FAILURE) {
      t->failures_skipped++;
    } else if (tev[i].action == TRACECSV_ALLOC) {
      if (ptr == ADDRMAP_EMPTY || size == 0 || addrmap_get(&ptrs, ptr) != NULL) {
        t->duplicate_allocs++;
      } else {
        uint64_t slot;
        if (nfree > 0) {
          slot = free_slots[--nfree];
        } else {
          slot = t->nslots++;
          if (t->nslots > slotcap) {
            slotcap *= 2;
            slot_size = realloc(slot_size, slotcap * sizeof(uint64_t));
            free_slots = realloc(free_slots, slotcap * sizeof(uint32_t));
            if (slot_size == NULL || free_slots == NULL) {
              return -1;
            }
          }
        }
        slot_size[slot] = size;
        if (addrmap_reserve(&ptrs, 1) != 0 ||
            push_event(t, &evcap, (ev_t){size, (uint32_t)slot, OP_ALLOC}) != 0) {
          return -1;
        }
        addrmap_put(&ptrs, ptr, (void *)(uintptr_t)(slot + 1));
        t->pairs++;
        live += size;
        live_rounded += bfc_round(size);
        live_blocks++;
        t->peak_live = live > t->peak_live ? live : t->peak_live;
        t->peak_live_rounded =
            live_rounded > t->peak_live_rounded ? live_rounded : t->peak_live_rounded;
        t->max_live_blocks = live_blocks > t->max_live_blocks ? live_blocks : t->max_live_blocks;
      }
    } else if (tev[i].action == TRACECSV_FREE) {
      void *v = ptr == ADDRMAP_EMPTY ? NULL : addrmap_take(&ptrs, ptr);
      if (v == NULL) {
        t->unmatched_frees++;
      } else {
        uint64_t slot = (uintptr_t)v - 1;
        if (push_event(t, &evcap, (ev_t){slot_size[slot], (uint32_t)slot, OP_FREE}) != 0) {
          return -1;
        }
        live -= slot_size[slot];
        live_rounded -= bfc_round(slot_size[slot]);
        live_blocks--;
        free_slots[nfree++] = (uint32_t)slot;
      }
    }
  }
  t->leaked = live_blocks;
  addrmap_fini(&ptrs);
  free(slot_size);
  free(free_slots);
  free(tev);
  return 0;
}

/* ---- replay passes ------------------------------------------------------------------------ */

typedef struct pass {
  uint64_t ns, failed, retires;
} pass_t;

/* One pass over the trace; leftovers are freed after the clock stops. */
static void replay(bfc_pool_t *p, const trace_t *t, uint64_t *addr, int deferred,
                   double retire_ratio, lock_t *lk, pass_t *r) {
  memset(r, 0, sizeof(*r));
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < t->nev; i++) {
    const ev_t *e = &t->ev[i];
    if (lk != NULL) {
      lock_take(lk);
    }
    if (e->op == OP_ALLOC) {
      uint64_t a = NONE;
      int rc = bfc_alloc(p, e->size, &a);
      while (rc == -EAGAIN) {
        bfc_retire(p); /* the shim synchronises the device here */
        r->retires++;
        rc = bfc_alloc(p, e->size, &a);
      }
      if (rc != 0) {
        r->failed++;
        a = NONE;
      }
      addr[e->slot] = a;
    } else if (addr[e->slot] != NONE) {
      if (deferred) {
        bfc_free_deferred(p, addr[e->slot]);
        if (retire_ratio > 0) {
          uint64_t pending = 0, avail = 0; /* proactive retire: the caller's policy */
          bfc_usage(p, NULL, &pending, &avail, NULL);
          if ((double)pending >= retire_ratio * (double)avail) {
            bfc_retire(p);
            r->retires++;
          }
        }
      } else {
        bfc_free(p, addr[e->slot]);
      }
      addr[e->slot] = NONE;
    }
    if (lk != NULL) {
      lock_drop(lk);
    }
  }
  r->ns = now_ns() - t0;
  if (lk != NULL) {
    lock_take(lk);
  }
  for (uint64_t s = 0; s < t->nslots; s++) {
    if (addr[s] != NONE) {
      bfc_free(p, addr[s]);
      addr[s] = NONE;
    }
  }
  bfc_retire(p);
  if (lk != NULL) {
    lock_drop(lk);
  }
}

/* No pool: each allocation is served directly (bump address) and tracked in a hash map. */
static uint64_t baseline(const trace_t *t, uint64_t *addr, addrmap_t *m, uint64_t *next) {
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < t->nev; i++) {
    const ev_t *e = &t->ev[i];
    if (e->op == OP_ALLOC) {
      uint64_t a = *next;
      *next += bfc_round(e->size);
      if (addrmap_reserve(m, 1) == 0) {
        addrmap_put(m, a, (void *)(uintptr_t)e->size);
      }
      addr[e->slot] = a;
    } else {
      addrmap_take(m, addr[e->slot]);
    }
  }
  return now_ns() - t0;
}

/* A pool of `limit` bytes over *as, its addresses from `base` up, its reserves charged to `cap`
 * (NULL: none) as well as held under its own limit. Exits when it cannot be made. */
static bfc_pool_t *make_pool_at(uint64_t limit, int growth, addr_space_t *as, uint64_t base,
                                device_cap_t *cap) {
  memset(as, 0, sizeof(*as));
  as->next = base;
  as->cap = cap;
  bfc_prim_t prim = {as, as_reserve, as_release, NULL};
  bfc_options_t opts = {.limit = limit, .allow_growth = growth};
  if (vmm_unit != 0) { /* twice the limit of address space, as the shim reserves */
    opts.unit = vmm_unit;
    opts.space_base = base;
    opts.space_bytes = 2 * ((limit + vmm_unit - 1) / vmm_unit * vmm_unit);
    prim = (bfc_prim_t){as, as_map, as_unmap, NULL};
  }
  bfc_pool_t *p = NULL;
  if (bfc_create(&opts, &prim, &p) != 0) {
    fprintf(stderr, "gpucap-replay: error: cannot create pool\n");
    exit(1);
  }
  return p;
}

static bfc_pool_t *make_pool(uint64_t limit, int growth, addr_space_t *as) {
  return make_pool_at(limit, growth, as, (uint64_t)1 << 40, NULL);
}

/* ---- threads ------------------------------------------------------------------------------ */

/* An arena as the shim keeps one (GPUCAP_ARENAS): a pool of its own behind a lock of its own,
 * its addresses apart from every other arena's, its growth charged to the one device cap. `open`
 * is set (release) once its pool exists; an arena not open has no pool and is skipped. On lines
 * of its own: a thread alone in its arena writes nothing another thread reads. */
typedef struct arena {
  _Alignas(64) lock_t lock;
  bfc_pool_t *pool;
  atomic_int open;
  addr_space_t as;
} arena_t;

/* How threads reach memory in threaded_setup(): one pool behind its one lock; arenas dealt out
 * (GPUCAP_ARENAS=N: thread k on arena k mod N, all N open); or arenas as GPUCAP_ARENAS=auto
 * opens them (one open at first, a thread moving on contention; see arena_enter()). */
typedef enum setup { SETUP_LOCK, SETUP_DEALT, SETUP_AUTO } setup_t;

typedef struct shared {
  bfc_pool_t *pool; /* SETUP_LOCK's; NULL with arenas */
  const trace_t *t;
  lock_t lock;
  int deferred;
  double retire_ratio;
  /* The timed pass starts once every thread has arrived: they spin (yielding) rather than sleep
   * in a pthread barrier, whose woken threads could start late: on a short trace (cupy-pipe,
   * about 3 ms a pass) two arenas measured 0.97-1.09x one thread's throughput behind a
   * pthread barrier and 1.72-1.78x after spinning. */
  atomic_int arrived;
  int nthreads;
  arena_t *arenas;          /* NULL: the single lock */
  int narenas;              /* the arenas' slots: N dealt out, or auto's most (arenas_max()) */
  int moving;               /* SETUP_AUTO: a thread that meets contention moves */
  uint64_t limit;           /* each arena pool's own limit: the whole cap */
  pthread_mutex_t registry; /* SETUP_AUTO: one arena opened at a time (the shim's registry) */
  /* SETUP_AUTO: the round robin of moves; its first value is 1, so the first move opens the
   * arena after the one every thread starts on. On a line of its own: each move writes it. */
  _Alignas(64) atomic_uint next;
  char pad[60];
  device_cap_t cap; /* arenas: the cap they all charge */
} shared_t;

typedef struct worker {
  _Alignas(64) shared_t *sh; /* each worker on lines of its own */
  uint64_t *addr;
  int arena; /* arenas: the thread's arena now */
  pass_t warmup, timed;
  uint64_t start, end;
} worker_t;

/* The most arenas GPUCAP_ARENAS=auto opens (the shim's rule): the online CPUs, 1 to 8; a
 * positive `override` (--arenas-max) instead. */
static int arenas_max(int override) {
  if (override > 0) {
    return override;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

static int arena_is_open(arena_t *ar) {
  return atomic_load_explicit(&ar->open, memory_order_acquire);
}

/* Opens arena k (a pool of the whole cap, always growing: a preallocated arena would take the
 * whole cap) unless it is open; under the registry mutex, as the shim opens one. Arena k's
 * addresses start at 2^40 + k x 2^48: never another's. Exits when the pool cannot be made. */
static void arena_open(shared_t *sh, int k) {
  arena_t *ar = &sh->arenas[k];
  if (arena_is_open(ar)) {
    return;
  }
  pthread_mutex_lock(&sh->registry);
  if (!atomic_load_explicit(&ar->open, memory_order_relaxed)) {
    uint64_t base = ((uint64_t)1 << 40) + ((uint64_t)k << 48);
    ar->pool = make_pool_at(sh->limit, 1, &ar->as, base, &sh->cap);
    atomic_store_explicit(&ar->open, 1, memory_order_release);
  }
  pthread_mutex_unlock(&sh->registry);
}

/* The thread's arena, locked. Dealt out: its lock, waited for. Auto: its lock if free (one
 * trylock); else the thread moves to the next arena of the round robin (any, its own included),
 * opens it if need be, waits for its lock and stays there until it meets contention again. */
static arena_t *arena_enter(shared_t *sh, worker_t *w) {
  arena_t *ar = &sh->arenas[w->arena];
  if (!sh->moving) {
    lock_take(&ar->lock);
    return ar;
  }
  if (lock_try(&ar->lock)) {
    return ar;
  }
  w->arena =
      (int)(atomic_fetch_add_explicit(&sh->next, 1, memory_order_relaxed) % (unsigned)sh->narenas);
  arena_open(sh, w->arena);
  ar = &sh->arenas[w->arena];
  lock_take(&ar->lock);
  return ar;
}

/* Frees addr into ar's pool iff that pool holds it (bfc_free's -ENOENT: not this pool's; the
 * shim finds a block's context the same way, the thread's own pool first, each under its lock:
 * shim/context/ctx.c ctx_owning_locked); 1 iff it did. */
static int free_if_owned(arena_t *ar, uint64_t addr) {
  lock_take(&ar->lock);
  int rc = bfc_free(ar->pool, addr);
  lock_drop(&ar->lock);
  return rc != -ENOENT;
}

/* A free goes to the arena whose pool holds the block: the thread's own first, then others. */
static void arena_free(shared_t *sh, arena_t *own, uint64_t addr) {
  if (free_if_owned(own, addr)) {
    return;
  }
  for (int k = 0; k < sh->narenas; k++) {
    arena_t *o = &sh->arenas[k];
    if (o != own && arena_is_open(o) && free_if_owned(o, addr)) {
      return;
    }
  }
}

/* An allocation from the thread's arena (arena_enter()). When the arena cannot serve it within
 * the cap (-ENOMEM: its own wholly free memory already went back), the other open arenas' wholly
 * free memory goes back too, each under its lock (never two locks held at once), and the arena
 * is asked once more; then each other arena lends the block, from a free chunk or by growing
 * (its free tail and the room under the cap may fit where the own arena's did not), as the shim
 * borrows before a refusal. Returns 0 or the own arena's refusal. */
static int arena_alloc(shared_t *sh, worker_t *w, uint64_t size, uint64_t *addr) {
  arena_t *own = arena_enter(sh, w);
  int rc = bfc_alloc(own->pool, size, addr);
  lock_drop(&own->lock);
  int others = 0;
  for (int k = 0; k < sh->narenas && rc == -ENOMEM; k++) {
    arena_t *o = &sh->arenas[k];
    if (o != own && arena_is_open(o)) {
      lock_take(&o->lock);
      bfc_trim(o->pool, NULL);
      lock_drop(&o->lock);
      others++;
    }
  }
  if (others > 0) {
    lock_take(&own->lock);
    rc = bfc_alloc(own->pool, size, addr);
    lock_drop(&own->lock);
    for (int k = 0; k < sh->narenas && rc == -ENOMEM; k++) {
      arena_t *o = &sh->arenas[k];
      if (o != own && arena_is_open(o)) {
        lock_take(&o->lock);
        rc = bfc_alloc(o->pool, size, addr) == 0 ? 0 : -ENOMEM;
        lock_drop(&o->lock);
      }
    }
  }
  return rc;
}

/* One pass over the trace from the thread's arena; frees are immediate. Leftovers are freed
 * after the clock stops. */
static void replay_arenas(shared_t *sh, worker_t *w, pass_t *r) {
  const trace_t *t = sh->t;
  memset(r, 0, sizeof(*r));
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < t->nev; i++) {
    const ev_t *e = &t->ev[i];
    if (e->op == OP_ALLOC) {
      uint64_t a = NONE;
      if (arena_alloc(sh, w, e->size, &a) != 0) {
        r->failed++;
        a = NONE;
      }
      w->addr[e->slot] = a;
    } else if (w->addr[e->slot] != NONE) {
      arena_free(sh, &sh->arenas[w->arena], w->addr[e->slot]);
      w->addr[e->slot] = NONE;
    }
  }
  r->ns = now_ns() - t0;
  for (uint64_t s = 0; s < t->nslots; s++) {
    if (w->addr[s] != NONE) {
      arena_free(sh, &sh->arenas[w->arena], w->addr[s]);
      w->addr[s] = NONE;
    }
  }
}

/* n arena slots under one cap of `limit` bytes (sh->cap), `open` of them opened now. Each pool's
 * own limit is the whole cap, so the shared count alone decides how far each may grow. */
static void arenas_open(shared_t *sh, int n, int open, uint64_t limit, int spin) {
  atomic_init(&sh->cap.used, 0);
  sh->cap.limit = limit;
  sh->limit = limit;
  sh->narenas = n;
  atomic_init(&sh->next, 1);
  pthread_mutex_init(&sh->registry, NULL);
  sh->arenas = aligned_alloc(64, (size_t)n * sizeof(arena_t));
  if (sh->arenas == NULL) {
    fprintf(stderr, "gpucap-replay: error: out of memory\n");
    exit(1);
  }
  for (int k = 0; k < n; k++) {
    lock_init(&sh->arenas[k].lock, spin);
    atomic_init(&sh->arenas[k].open, 0);
  }
  for (int k = 0; k < open; k++) {
    arena_open(sh, k);
  }
}

/* Closes the arenas; returns how many were open. */
static int arenas_close(shared_t *sh) {
  int open = 0;
  for (int k = 0; k < sh->narenas; k++) {
    if (arena_is_open(&sh->arenas[k])) {
      bfc_destroy(sh->arenas[k].pool);
      open++;
    }
    pthread_mutex_destroy(&sh->arenas[k].lock.mu);
  }
  pthread_mutex_destroy(&sh->registry);
  free(sh->arenas);
  return open;
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  shared_t *sh = w->sh;
  for (int pass = 0; pass < 2; pass++) { /* a warm-up pass, then the timed one */
    pass_t *r = pass == 0 ? &w->warmup : &w->timed;
    if (pass == 1) {
      atomic_fetch_add_explicit(&sh->arrived, 1, memory_order_acq_rel);
      while (atomic_load_explicit(&sh->arrived, memory_order_acquire) < sh->nthreads) {
        sched_yield();
      }
      w->start = now_ns();
    }
    if (sh->arenas) {
      replay_arenas(sh, w, r);
    } else {
      replay(sh->pool, sh->t, w->addr, sh->deferred, sh->retire_ratio, &sh->lock, r);
    }
  }
  w->end = now_ns();
  return NULL;
}

/* Aggregate ns per pair with o->threads threads under a cap of `limit` bytes, a warm-up pass and
 * a timed one each: on one pool behind its lock (SETUP_LOCK), from arenas dealt out one per
 * thread (SETUP_DEALT), or from arenas as auto opens them (SETUP_AUTO, at most
 * arenas_max(o->arenas_max)). *failed counts failed allocations; *open (may be NULL) the arenas
 * open at the end (1 for the lock). */
static double threaded_setup(const trace_t *t, const options_t *o, uint64_t limit, setup_t setup,
                             uint64_t *failed, int *open) {
  shared_t sh;
  addr_space_t as;
  sh.pool = setup == SETUP_LOCK ? make_pool(limit, !o->preallocate, &as) : NULL;
  sh.arenas = NULL;
  sh.moving = setup == SETUP_AUTO;
  if (setup == SETUP_DEALT) {
    arenas_open(&sh, o->threads, o->threads, limit, o->spin);
  } else if (setup == SETUP_AUTO) {
    arenas_open(&sh, arenas_max(o->arenas_max), 1, limit, o->spin);
  }
  sh.t = t;
  sh.deferred = o->deferred;
  sh.retire_ratio = o->retire_ratio;
  lock_init(&sh.lock, o->spin);
  atomic_init(&sh.arrived, 0);
  sh.nthreads = o->threads;
  worker_t w[MAX_THREADS];
  pthread_t tid[MAX_THREADS];
  for (int i = 0; i < o->threads; i++) {
    w[i].sh = &sh;
    w[i].arena = setup == SETUP_DEALT ? i % sh.narenas : 0;
    w[i].addr = malloc(t->nslots * sizeof(uint64_t));
    for (uint64_t s = 0; s < t->nslots; s++) {
      w[i].addr[s] = NONE;
    }
    pthread_create(&tid[i], NULL, worker_main, &w[i]);
  }
  uint64_t start = UINT64_MAX, end = 0;
  *failed = 0;
  for (int i = 0; i < o->threads; i++) {
    pthread_join(tid[i], NULL);
    start = w[i].start < start ? w[i].start : start;
    end = w[i].end > end ? w[i].end : end;
    *failed += w[i].warmup.failed + w[i].timed.failed;
    free(w[i].addr);
  }
  pthread_mutex_destroy(&sh.lock.mu);
  int n = 1;
  if (sh.pool) {
    bfc_destroy(sh.pool);
  } else {
    n = arenas_close(&sh);
  }
  if (open) {
    *open = n;
  }
  return (double)(end - start) / (double)(t->pairs * (uint64_t)o->threads);
}

static double threaded(const trace_t *t, const options_t *o, uint64_t limit, uint64_t *failed) {
  return threaded_setup(t, o, limit, SETUP_LOCK, failed, NULL);
}

/* ---- main --------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  s = s ? s + 1 : path;
  return s;
}

static void usage(void) {
  fprintf(stderr,
          "usage: gpucap-replay TRACE.csv [--runs N] [--cap-factor F] [--preallocate]\n"
          "         [--deferred [--retire-ratio R]] [--threads N] [--lock mutex|spin]\n"
          "         [--find-min-cap] [--driver [N]] [--vmm UNIT] [--scaling [--arenas-max N]]\n"
          "         [--count]\n"
          "  --cap-factor F  limit = F x peak live bytes of the trace (x threads); default none\n"
          "  --preallocate   no growth: one region of the whole limit (needs --cap-factor)\n"
          "  --deferred      free with bfc_free_deferred; retire on -EAGAIN (counts retires)\n"
          "  --retire-ratio R  also retire after a free once deferred >= R x free bytes\n"
          "  --threads N     also replay in N threads sharing one pool behind one lock\n"
          "  --scaling       1, 2 and 8 threads, each replaying the trace under one cap: on one\n"
          "                  pool behind its lock, and from arenas (pools with a lock each,\n"
          "                  borrowing before a refusal): with --vmm as GPUCAP_ARENAS=auto\n"
          "                  opens them, over regions one per thread (GPUCAP_ARENAS=threads)\n"
          "  --arenas-max N  --scaling --vmm: auto's most arenas (default: the online CPUs,\n"
          "                  1 to 8, as the shim)\n"
          "  --find-min-cap  min_cap_factor: smallest F (step 0.01) such that every factor\n"
          "                  from F to 2.00 completes; first_cap_factor: first F that does\n"
          "  --driver [N]    replay once through libcuda.so.1's cuMemAlloc_v2/cuMemFree_v2 on\n"
          "                  device 0 instead (only the first N events; 0: set up only)\n"
          "  --vmm UNIT      the mapped mode (VMM-backed pool) in units of UNIT bytes (a power\n"
          "                  of two); limit = F x peak live bytes + UNIT (needs --cap-factor)\n"
          "  --count         one cold and one warm pass only, the warm one in count_warm_pass()\n"
          "                  (for callgrind's --toggle-collect=count_warm_pass)\n");
}

static int parse_args(int argc, char **argv, options_t *o) {
  memset(o, 0, sizeof(*o));
  o->runs = 5;
  o->threads = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--runs") == 0 && v) {
      o->runs = atoi(v);
      i++;
    } else if (strcmp(a, "--cap-factor") == 0 && v) {
      o->cap_factor = strtod(v, NULL);
      i++;
    } else if (strcmp(a, "--retire-ratio") == 0 && v) {
      o->retire_ratio = strtod(v, NULL);
      i++;
    } else if (strcmp(a, "--threads") == 0 && v) {
      o->threads = atoi(v);
      i++;
    } else if (strcmp(a, "--lock") == 0 && v) {
      o->spin = strcmp(v, "spin") == 0;
      i++;
    } else if (strcmp(a, "--preallocate") == 0) {
      o->preallocate = 1;
    } else if (strcmp(a, "--deferred") == 0) {
      o->deferred = 1;
    } else if (strcmp(a, "--scaling") == 0) {
      o->scaling = 1;
    } else if (strcmp(a, "--count") == 0) {
      o->count = 1;
    } else if (strcmp(a, "--find-min-cap") == 0) {
      o->find_min_cap = 1;
    } else if (strcmp(a, "--driver") == 0) {
      o->driver = 1;
      o->driver_events = -1;
      if (v && v[0] >= '0' && v[0] <= '9') {
        o->driver_events = atol(v);
        i++;
      }
    } else if (strcmp(a, "--arenas-max") == 0 && v) {
      char *end;
      long n = strtol(v, &end, 10);
      if (*end != '\0' || n < 1 || n > MAX_THREADS) {
        return -1;
      }
      o->arenas_max = (int)n;
      i++;
    } else if (strcmp(a, "--vmm") == 0 && v) {
      o->vmm_unit = strtoull(v, NULL, 10);
      i++;
    } else if (a[0] != '-' && o->path == NULL) {
      o->path = a;
    } else {
      return -1;
    }
  }
  if (o->path == NULL || o->runs < 1 || o->runs > MAX_RUNS || o->threads < 1 ||
      o->threads > MAX_THREADS || o->cap_factor < 0 || (o->preallocate && o->cap_factor == 0) ||
      o->retire_ratio < 0 || (o->retire_ratio > 0 && !o->deferred) ||
      (o->vmm_unit != 0 &&
       (o->vmm_unit < 256 || (o->vmm_unit & (o->vmm_unit - 1)) != 0 || o->cap_factor == 0))) {
    return -1;
  }
  return 0;
}

static uint64_t limit_for(const trace_t *t, double factor, int threads) {
  if (factor == 0) {
    return (uint64_t)1 << 50;
  }
  return (uint64_t)((double)t->peak_live * factor * threads) + vmm_unit;
}

/* 1 iff one cold pass completes with limit = factor x peak live. */
static int completes(const trace_t *t, const options_t *o, uint64_t *addr, double factor) {
  addr_space_t as;
  bfc_pool_t *p = make_pool(limit_for(t, factor, 1), !o->preallocate, &as);
  pass_t r;
  replay(p, t, addr, o->deferred, o->retire_ratio, NULL, &r);
  bfc_destroy(p);
  return r.failed == 0;
}

/* The smallest cap factor F (0.01 steps) such that every factor from F up to 2.00 completes
 * (completion is not monotone in the limit: region sizes change with it); above 2.00, the
 * first factor in 0.05 steps up to 5.00 that completes. 0 when none does. */
static double min_cap(const trace_t *t, const options_t *o, uint64_t *addr) {
  if (!completes(t, o, addr, 2.0)) {
    for (int k = 205; k <= 500; k += 5) {
      if (completes(t, o, addr, k / 100.0)) {
        return k / 100.0;
      }
    }
    return 0;
  }
  int k = 200;
  while (k > 100 && completes(t, o, addr, (k - 1) / 100.0)) {
    k--;
  }
  return k / 100.0;
}

/* --driver: one pass of the trace through the driver API, in trace order on device 0's primary
 * context; a refused allocation is counted and its free skipped. Prints one JSON line. */
static int driver_replay(const trace_t *t, const options_t *o) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == NULL) {
    fprintf(stderr, "gpucap-replay: error: %s\n", dlerror());
    return 1;
  }
  CUresult (*init)(unsigned);
  CUresult (*retain)(CUcontext *, CUdevice);
  CUresult (*set)(CUcontext);
  CUresult (*alloc)(CUdeviceptr *, size_t);
  CUresult (*dfree)(CUdeviceptr);
  *(void **)&init = dlsym(lib, "cuInit");
  *(void **)&retain = dlsym(lib, "cuDevicePrimaryCtxRetain");
  *(void **)&set = dlsym(lib, "cuCtxSetCurrent");
  *(void **)&alloc = dlsym(lib, "cuMemAlloc_v2");
  *(void **)&dfree = dlsym(lib, "cuMemFree_v2");
  CUcontext ctx;
  if (!init || !retain || !set || !alloc || !dfree || init(0) != CUDA_SUCCESS ||
      retain(&ctx, 0) != CUDA_SUCCESS || set(ctx) != CUDA_SUCCESS) {
    fprintf(stderr, "gpucap-replay: error: cannot set up device 0 through libcuda.so.1\n");
    return 1;
  }
  CUdeviceptr *ptr = calloc(t->nslots, sizeof(*ptr));
  uint64_t n = o->driver_events < 0 || (uint64_t)o->driver_events > t->nev
                   ? t->nev
                   : (uint64_t)o->driver_events;
  uint64_t failed = 0, pairs = 0, start = now_ns();
  for (uint64_t i = 0; ptr != NULL && i < n; i++) {
    const ev_t *e = &t->ev[i];
    if (e->op == OP_ALLOC) {
      pairs++;
      if (alloc(&ptr[e->slot], e->size) != CUDA_SUCCESS) {
        ptr[e->slot] = 0;
        failed++;
      }
    } else if (ptr[e->slot] != 0) {
      dfree(ptr[e->slot]);
      ptr[e->slot] = 0;
    }
  }
  uint64_t ns = now_ns() - start;
  printf("{\"trace\":\"%s\",\"driver\":true,\"events\":%" PRIu64 ",\"pairs\":%" PRIu64
         ",\"failed_allocs\":%" PRIu64 ",\"completed\":%s,\"wall_ns_per_pair\":%.1f}\n",
         base_name(o->path), n, pairs, failed, failed == 0 ? "true" : "false",
         pairs ? (double)ns / (double)pairs : 0.0);
  free(ptr);
  return ptr == NULL && t->nslots > 0;
}

/* --scaling: aggregate ns per pair with 1, 2 and 8 threads, each replaying its own copy of the
 * trace under one cap (the cap factor x the peak x the threads): on one pool behind its one lock
 * (the shim with one arena), and from arenas. With --vmm, arenas as GPUCAP_ARENAS=auto opens
 * them (the default, which opens them only over VMM-backed pools): one at first, more as threads
 * meet contention, at most arenas_max(); over regions, as an explicit GPUCAP_ARENAS=N with N the
 * threads deals them out (auto keeps one pool there, which is the lock's row). Throughput ratios
 * are taken per run (the machine's speed drifts between runs) and their medians printed, with
 * the median of the arenas open at the end and the refusals of each thread count over all runs. */
/* Two copies of the trace in one thread, event by event in turn, copy 1 `lag` events behind
 * copy 0 (copy 0's event i, then copy 1's event i - lag): step(arg, k, e) for each. */
static void lagged(const trace_t *t, uint64_t lag, void (*step)(void *arg, int k, const ev_t *e),
                   void *arg) {
  for (uint64_t i = 0; i < t->nev + lag; i++) {
    if (i < t->nev) {
      step(arg, 0, &t->ev[i]);
    }
    if (i >= lag) {
      step(arg, 1, &t->ev[i - lag]);
    }
  }
}

/* lagged()'s live bytes of both copies and their peak. */
struct live {
  uint64_t *size[2]; /* each copy's live block per slot, 0 when none */
  uint64_t live, peak;
};

static void live_step(void *arg, int k, const ev_t *e) {
  struct live *l = arg;
  if (e->op == OP_ALLOC) {
    l->size[k][e->slot] = e->size;
    l->live += e->size;
    l->peak = l->live > l->peak ? l->live : l->peak;
  } else {
    l->live -= l->size[k][e->slot];
    l->size[k][e->slot] = 0;
  }
}

/* lagged()'s allocations and frees, copy k from its worker's arena; refusals counted. */
struct interleave {
  shared_t sh;
  worker_t w[2];
  uint64_t failed;
};

static void interleave_step(void *arg, int k, const ev_t *e) {
  struct interleave *x = arg;
  uint64_t *a = &x->w[k].addr[e->slot];
  if (e->op == OP_ALLOC) {
    if (arena_alloc(&x->sh, &x->w[k], e->size, a) != 0) {
      x->failed++;
      *a = NONE;
    }
  } else if (*a != NONE) {
    arena_free(&x->sh, &x->sh.arenas[x->w[k].arena], *a);
    *a = NONE;
  }
}

static uint64_t *slots_of(const trace_t *t, uint64_t fill) {
  uint64_t *v = malloc(t->nslots * sizeof(uint64_t));
  if (v == NULL) {
    fprintf(stderr, "gpucap-replay: error: out of memory\n");
    exit(1);
  }
  for (uint64_t s = 0; s < t->nslots; s++) {
    v[s] = fill;
  }
  return v;
}

/* Refusals of lagged()'s two copies under one cap of `factor` x their peak live bytes together
 * (+ a unit over VMM; no cap when factor is 0): from one pool (narenas 1) or copy k from arena k
 * (narenas 2), trimming and borrowing as the threads' arenas do. What splitting the memory over
 * arenas costs, the threads' timing taken out (two threads' peaks meet only as often as the threads
 * run at once, and arenas let them run at once, so the threaded runs cannot tell). */
static uint64_t interleaved_failed(const trace_t *t, double factor, int narenas, uint64_t lag) {
  struct live l = {{slots_of(t, 0), slots_of(t, 0)}, 0, 0};
  lagged(t, lag, live_step, &l);
  free(l.size[0]);
  free(l.size[1]);
  struct interleave x;
  memset(&x, 0, sizeof x);
  uint64_t limit = factor == 0 ? (uint64_t)1 << 50 : (uint64_t)((double)l.peak * factor) + vmm_unit;
  arenas_open(&x.sh, narenas, narenas, limit, 0);
  for (int k = 0; k < 2; k++) {
    x.w[k].sh = &x.sh;
    x.w[k].arena = k % narenas;
    x.w[k].addr = slots_of(t, NONE);
  }
  lagged(t, lag, interleave_step, &x);
  free(x.w[0].addr);
  free(x.w[1].addr);
  arenas_close(&x.sh);
  return x.failed;
}

static void scaling(const trace_t *t, const options_t *o) {
  enum { NC = 3 };
  static const int counts[NC] = {1, 2, 8};
  static double lk[NC][MAX_RUNS], ar[NC][MAX_RUNS], lup[NC][MAX_RUNS], aup[NC][MAX_RUNS],
      open[NC][MAX_RUNS], aone[MAX_RUNS];
  uint64_t lfailed[NC] = {0}, afailed[NC] = {0};
  setup_t setup = o->vmm_unit != 0 ? SETUP_AUTO : SETUP_DEALT;
  for (int run = 0; run < o->runs; run++) {
    for (int c = 0; c < NC; c++) {
      options_t on = *o;
      on.threads = counts[c];
      uint64_t lim = limit_for(t, o->cap_factor, counts[c]), f = 0;
      int n = 0;
      lk[c][run] = threaded_setup(t, &on, lim, SETUP_LOCK, &f, NULL);
      lfailed[c] += f;
      ar[c][run] = threaded_setup(t, &on, lim, setup, &f, &n);
      afailed[c] += f;
      open[c][run] = n;
    }
    for (int c = 0; c < NC; c++) {
      lup[c][run] = lk[0][run] / lk[c][run]; /* the lock: n threads over one thread */
      aup[c][run] = ar[0][run] / ar[c][run]; /* arenas: n threads over one thread */
    }
    aone[run] = lk[0][run] / ar[0][run]; /* arenas' throughput over the lock's, one thread */
  }
  printf(",\"arenas\":\"%s\",\"arenas_max\":%d", setup == SETUP_AUTO ? "auto" : "dealt",
         setup == SETUP_AUTO ? arenas_max(o->arenas_max) : counts[NC - 1]);
  uint64_t ltotal = 0, atotal = 0;
  for (int c = 0; c < NC; c++) {
    int n = counts[c];
    printf(",\"lock_ns_%d\":%.1f,\"lock_scaling_%d\":%.2f,\"lock_failed_%d\":%" PRIu64
           ",\"arenas_ns_%d\":%.1f,\"arenas_scaling_%d\":%.2f,\"arenas_failed_%d\":%" PRIu64
           ",\"arenas_open_%d\":%g",
           n, median(lk[c], o->runs), n, median(lup[c], o->runs), n, lfailed[c], n,
           median(ar[c], o->runs), n, median(aup[c], o->runs), n, afailed[c], n,
           median(open[c], o->runs));
    ltotal += lfailed[c];
    atotal += afailed[c];
  }
  printf(",\"arenas_vs_lock_1\":%.2f,\"lock_failed\":%" PRIu64 ",\"arenas_failed\":%" PRIu64,
         median(aone, o->runs), ltotal, atotal);
  /* Two copies interleaved: copy 1 in step, and half, a third and a quarter of the trace behind. */
  uint64_t pool = 0, split = 0;
  for (uint64_t d = 0; d < 4; d++) {
    uint64_t lag = d == 0 ? 0 : t->nev / (d + 1);
    pool += interleaved_failed(t, o->cap_factor, 1, lag);
    split += interleaved_failed(t, o->cap_factor, 2, lag);
  }
  printf(",\"interleaved_failed_pool\":%" PRIu64 ",\"interleaved_failed_arenas\":%" PRIu64, pool,
         split);
}

/* --count: the warm pass alone in a function of its own, so that callgrind's --toggle-collect
 * counts exactly its instructions (the pool's work and the loop over the events). */
static __attribute__((noinline)) void
count_warm_pass(bfc_pool_t *p, const trace_t *t, uint64_t *addr, const options_t *o, pass_t *r) {
  replay(p, t, addr, o->deferred, o->retire_ratio, NULL, r);
}

static int count_replay(const trace_t *t, const options_t *o, uint64_t *addr) {
  addr_space_t as;
  bfc_pool_t *p = make_pool(limit_for(t, o->cap_factor, 1), !o->preallocate, &as);
  pass_t cold, warm;
  replay(p, t, addr, o->deferred, o->retire_ratio, NULL, &cold);
  count_warm_pass(p, t, addr, o, &warm);
  bfc_destroy(p);
  printf("{\"trace\":\"%s\",\"count\":true,\"pairs\":%" PRIu64 ",\"completed\":%s}\n",
         base_name(o->path), t->pairs, cold.failed + warm.failed == 0 ? "true" : "false");
  return 0;
}

int main(int argc, char **argv) {
  options_t o;
  if (parse_args(argc, argv, &o) != 0) {
    usage();
    return 2;
  }
  vmm_unit = o.vmm_unit;
  trace_t t;
  if (parse(o.path, &t) != 0) {
    return 1;
  }
  if (t.pairs == 0) {
    fprintf(stderr, "gpucap-replay: error: %s: no allocations\n", o.path);
    return 1;
  }
  if (o.driver) {
    int rc = driver_replay(&t, &o);
    free(t.ev);
    return rc;
  }
  uint64_t *addr = malloc(t.nslots * sizeof(uint64_t));
  for (uint64_t s = 0; s < t.nslots; s++) {
    addr[s] = NONE;
  }
  if (o.count) {
    int rc = count_replay(&t, &o, addr);
    free(addr);
    free(t.ev);
    return rc;
  }
  uint64_t limit = limit_for(&t, o.cap_factor, 1);
  double cold[MAX_RUNS], warm[MAX_RUNS], locked[MAX_RUNS], base[MAX_RUNS];
  uint64_t failed = 0, retires = 0;
  bfc_stats_t st;
  memset(&st, 0, sizeof(st));
  uint64_t units_mapped = 0, units_unmapped = 0;
  for (int run = 0; run < o.runs; run++) {
    addr_space_t as;
    bfc_pool_t *p = make_pool(limit, !o.preallocate, &as);
    pass_t r;
    replay(p, &t, addr, o.deferred, o.retire_ratio, NULL, &r);
    cold[run] = (double)r.ns / (double)t.pairs;
    failed += r.failed;
    retires += r.retires;
    replay(p, &t, addr, o.deferred, o.retire_ratio, NULL, &r);
    warm[run] = (double)r.ns / (double)t.pairs;
    failed += r.failed;
    if (run == 0) {
      bfc_stats(p, &st);
      units_mapped = as.units_mapped; /* cold and warm pass */
      units_unmapped = as.units_unmapped;
    }
    lock_t lk;
    lock_init(&lk, o.spin);
    replay(p, &t, addr, o.deferred, o.retire_ratio, &lk, &r);
    locked[run] = (double)r.ns / (double)t.pairs;
    pthread_mutex_destroy(&lk.mu);
    bfc_destroy(p);

    addrmap_t m;
    uint64_t next = (uint64_t)1 << 40;
    addrmap_init(&m, 1024);
    baseline(&t, addr, &m, &next);
    base[run] = (double)baseline(&t, addr, &m, &next) / (double)t.pairs;
    addrmap_fini(&m);
  }
  double wmin = warm[0];
  for (int run = 1; run < o.runs; run++) {
    wmin = warm[run] < wmin ? warm[run] : wmin;
  }
  double w = median(warm, o.runs), c = median(cold, o.runs), l = median(locked, o.runs);
  double b = median(base, o.runs);

  printf("{\"trace\":\"%s\",\"events\":%" PRIu64 ",\"pairs\":%" PRIu64
         ",\"max_live_blocks\":%" PRIu64 ",\"peak_live_bytes\":%" PRIu64
         ",\"peak_live_rounded_bytes\":%" PRIu64 ",\"runs\":%d,\"mode\":\"%s\",\"free\":\"%s\"",
         base_name(o.path), t.nev, t.pairs, t.max_live_blocks, t.peak_live, t.peak_live_rounded,
         o.runs, o.preallocate ? "preallocate" : "growth", o.deferred ? "deferred" : "immediate");
  if (o.deferred) {
    printf(",\"retire_ratio\":%.2f", o.retire_ratio);
  }
  if (o.cap_factor > 0) {
    printf(",\"cap_factor\":%.2f,\"limit\":%" PRIu64, o.cap_factor, limit);
  } else {
    printf(",\"cap_factor\":null,\"limit\":null");
  }
  printf(",\"ns_per_pair_warm\":%.1f,\"ns_per_pair_warm_min\":%.1f,\"ns_per_pair_cold\":%.1f"
         ",\"cold_over_warm\":%.2f"
         ",\"ns_per_pair_warm_locked\":%.1f,\"baseline_ns_per_pair\":%.1f"
         ",\"ratio_vs_baseline\":%.2f",
         w, wmin, c, c / w, l, b, w / b);
  double over = (double)st.peak_pool_bytes / (double)t.peak_live;
  printf(",\"peak_pool_bytes\":%" PRIu64 ",\"pool_over_live\":%.3f,\"peak_bytes_in_use\":%" PRIu64
         ",\"driver_alloc_calls\":%" PRIu64 ",\"driver_free_calls\":%" PRIu64
         ",\"host_metadata_bytes\":%" PRIu64 ",\"failed_allocs\":%" PRIu64
         ",\"completed\":%s,\"retires\":%" PRIu64 ",\"skipped_failures\":%" PRIu64
         ",\"unmatched_frees\":%" PRIu64 ",\"leaked_at_end\":%" PRIu64,
         st.peak_pool_bytes, over, st.peak_bytes_in_use, st.driver_alloc_calls,
         st.driver_free_calls, st.host_metadata_bytes, failed, failed == 0 ? "true" : "false",
         retires / (uint64_t)o.runs, t.failures_skipped, t.unmatched_frees, t.leaked);
  printf(",\"backing\":\"%s\",\"unit\":%" PRIu64 ",\"map_calls\":%" PRIu64
         ",\"unmap_calls\":%" PRIu64,
         o.vmm_unit ? "vmm" : "regions", o.vmm_unit, units_mapped, units_unmapped);
  if (o.threads > 1) {
    /* Each run times one thread (warm, no lock) right before the threads, so the ratio is not
     * skewed by the machine's speed drifting between the two measurements. */
    double tv[MAX_RUNS], ratio[MAX_RUNS];
    uint64_t tfailed = 0;
    for (int run = 0; run < o.runs; run++) {
      addr_space_t as;
      bfc_pool_t *p = make_pool(limit, !o.preallocate, &as);
      pass_t r;
      replay(p, &t, addr, o.deferred, o.retire_ratio, NULL, &r);
      replay(p, &t, addr, o.deferred, o.retire_ratio, NULL, &r);
      bfc_destroy(p);
      uint64_t f = 0;
      tv[run] = threaded(&t, &o, limit_for(&t, o.cap_factor, o.threads), &f);
      ratio[run] = ((double)r.ns / (double)t.pairs) / tv[run];
      tfailed += f;
    }
    double tn = median(tv, o.runs);
    printf(",\"threads\":%d,\"lock\":\"%s\",\"threads_ns_per_pair\":%.1f"
           ",\"thread_scaling\":%.2f,\"threads_completed\":%s",
           o.threads, o.spin ? "spin" : "mutex", tn, median(ratio, o.runs),
           tfailed == 0 ? "true" : "false");
  }
  if (o.scaling) {
    scaling(&t, &o);
  }
  if (o.find_min_cap) {
    double mc = min_cap(&t, &o, addr);
    double first = 0;
    for (int k = 100; k <= 500 && first == 0; k += k < 200 ? 1 : 5) {
      first = completes(&t, &o, addr, k / 100.0) ? k / 100.0 : 0;
    }
    if (mc > 0) {
      printf(",\"min_cap_factor\":%.2f,\"first_cap_factor\":%.2f", mc, first);
    } else {
      printf(",\"min_cap_factor\":null,\"first_cap_factor\":null");
    }
  }
  printf("}\n");
  free(addr);
  free(t.ev);
  return 0;
}
