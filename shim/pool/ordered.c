/* The driver's stream-ordered pools and their charges (see shim/pool/ordered.h). A table of the
 * pools gpucap has met, one slot each: handle and device (set when the slot is taken, never
 * changed), the bytes charged for what the pool holds, and the hold's mutex. A destroyed pool's
 * slot is closed for good, so a slot never changes pools under a holder; a program that makes
 * more than MAX_POOLS pools has the rest charged block by block. */
#include "shim/pool/ordered.h"

#include "shim/accounting/cap.h"
#include "shim/base/fork.h"
#include "shim/base/log.h"
#include "shim/base/real.h"

#include <pthread.h>
#include <stdatomic.h>

#define MAX_POOLS 256

struct ordered_pool {
  pthread_mutex_t lock; /* the hold: an allocation, a read, a trim */
  CUmemoryPool pool;
  int dev;          /* an ordinal, or ORDERED_HOST */
  bool closed;      /* destroyed (or replaced): never held again; under lock and table */
  uint64_t charged; /* bytes charged to dev for what the pool holds; under lock */
};

static pthread_mutex_t table = PTHREAD_MUTEX_INITIALIZER; /* which slots are open, and taking one */
static struct ordered_pool slots[MAX_POOLS];
static atomic_int nslots; /* slots taken; each one's pool and dev are set before it counts */

/* The open slot of pool, or NULL. Table lock held. */
static struct ordered_pool *find(CUmemoryPool pool) {
  int n = atomic_load_explicit(&nslots, memory_order_relaxed);
  for (int i = 0; i < n; i++) {
    if (slots[i].pool == pool && !slots[i].closed) {
      return &slots[i];
    }
  }
  return NULL;
}

/* Closes slot p: its charge returns. */
static void close_slot(struct ordered_pool *p) {
  pthread_mutex_lock(&p->lock);
  pthread_mutex_lock(&table);
  p->closed = true;
  pthread_mutex_unlock(&table);
  if (p->dev >= 0 && p->charged > 0) {
    cap_credit(p->dev, p->charged);
  }
  p->charged = 0;
  pthread_mutex_unlock(&p->lock);
}

/* Records pool -> dev. An open slot of the handle on the same device stays as it is when
 * `keep`; otherwise it is closed (the handle names another pool now) and a new one taken. */
static void record(CUmemoryPool pool, int dev, bool keep) {
  pthread_mutex_lock(&table);
  struct ordered_pool *old = find(pool);
  pthread_mutex_unlock(&table);
  if (old && keep && old->dev == dev) {
    return;
  }
  if (old) {
    close_slot(old);
  }
  pthread_mutex_lock(&table);
  int n = atomic_load_explicit(&nslots, memory_order_relaxed);
  if (!find(pool) && n < MAX_POOLS) {
    struct ordered_pool *p = &slots[n];
    pthread_mutex_init(&p->lock, NULL);
    p->pool = pool;
    p->dev = dev;
    p->closed = false;
    p->charged = 0;
    atomic_store_explicit(&nslots, n + 1, memory_order_release);
  } /* else: recorded meanwhile, or the table is full (that pool is charged block by block) */
  pthread_mutex_unlock(&table);
}

void ordered_learn(CUmemoryPool pool, int dev) {
  record(pool, dev, false);
}

int ordered_device(CUmemoryPool pool) {
  pthread_mutex_lock(&table);
  const struct ordered_pool *p = find(pool);
  int dev = p ? p->dev : ORDERED_UNKNOWN, count = 0;
  pthread_mutex_unlock(&table);
  if (dev != ORDERED_UNKNOWN || !real.cuDeviceGetCount ||
      real.cuDeviceGetCount(&count) != CUDA_SUCCESS) {
    return dev;
  }
  for (int d = 0; d < count && d < GPUCAP_MAX_DEVICES && dev == ORDERED_UNKNOWN; d++) {
    CUmemoryPool a = NULL, b = NULL;
    if ((real.cuDeviceGetDefaultMemPool && real.cuDeviceGetDefaultMemPool(&a, d) == CUDA_SUCCESS &&
         a == pool) ||
        (real.cuDeviceGetMemPool && real.cuDeviceGetMemPool(&b, d) == CUDA_SUCCESS && b == pool)) {
      dev = d;
    }
  }
  if (dev != ORDERED_UNKNOWN) {
    record(pool, dev, true);
  }
  return dev;
}

CUmemoryPool ordered_current(int dev) {
  CUmemoryPool pool = NULL;
  if (!real.cuDeviceGetMemPool || real.cuDeviceGetMemPool(&pool, dev) != CUDA_SUCCESS) {
    return NULL;
  }
  record(pool, dev, true);
  return pool;
}

/* Locks slot p iff it is still open; false (unlocked) otherwise. */
static bool hold(struct ordered_pool *p) {
  pthread_mutex_lock(&p->lock);
  pthread_mutex_lock(&table);
  bool open = !p->closed;
  pthread_mutex_unlock(&table);
  if (!open) {
    pthread_mutex_unlock(&p->lock);
  }
  return open;
}

ordered_pool_t *ordered_hold(CUmemoryPool pool, int dev) {
  pthread_mutex_lock(&table);
  struct ordered_pool *p = find(pool);
  pthread_mutex_unlock(&table);
  return p && dev >= 0 && p->dev == dev && hold(p) ? p : NULL;
}

void ordered_drop(ordered_pool_t *p) {
  pthread_mutex_unlock(&p->lock);
}

/* What p's pool holds (reserved) in *bytes; false when the driver does not say. Held. */
static bool reserved(const struct ordered_pool *p, uint64_t *bytes) {
  cuuint64_t v = 0;
  if (!real.cuMemPoolGetAttribute ||
      real.cuMemPoolGetAttribute(p->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) !=
          CUDA_SUCCESS) {
    return false;
  }
  *bytes = v;
  return true;
}

uint64_t ordered_spare(ordered_pool_t *p) {
  uint64_t held = 0;
  cuuint64_t used = 0;
  if (!reserved(p, &held) || !real.cuMemPoolGetAttribute ||
      real.cuMemPoolGetAttribute(p->pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) !=
          CUDA_SUCCESS) {
    return 0;
  }
  return held > used ? held - used : 0;
}

/* Sets p's charge to what its pool holds now and adds the bytes whose charge came back to
 * *back; false (the charge kept) when the driver does not say. Held. */
static bool reread(struct ordered_pool *p, uint64_t *back) {
  uint64_t now = 0, was = p->charged;
  if (!reserved(p, &now)) {
    return false;
  }
  p->charged = now;
  if (now > was) {
    cap_add(p->dev, now - was);
  } else {
    cap_credit(p->dev, was - now);
    *back += was - now;
  }
  return true;
}

bool ordered_settle(ordered_pool_t *p, uint64_t admitted) {
  uint64_t now = 0, was = p->charged;
  bool within = true;
  if (!reserved(p, &now)) {
    p->charged += admitted; /* unread: the admission stays with the pool */
  } else if (now < was || now - was <= admitted) {
    p->charged = now; /* what the admission did not cover is returned, with what was released */
    cap_credit(p->dev, admitted + was - now);
  } else {
    /* The pool grew by more than was admitted (the driver's rounding): the rest is charged if
     * the cap and the budget hold it; it is already the driver's, so it counts either way. */
    p->charged = now;
    within = cap_charge(p->dev, now - was - admitted);
    if (!within) {
      cap_add(p->dev, now - was - admitted);
    }
  }
  pthread_mutex_unlock(&p->lock);
  return within;
}

/* Brings every open pool of dev to what it holds (after trimming it, when `trim`), each held in
 * turn; returns the bytes whose charge came back. */
static uint64_t each_of(int dev, bool trim) {
  uint64_t back = 0;
  int n = atomic_load_explicit(&nslots, memory_order_acquire);
  for (int i = 0; i < n; i++) {
    struct ordered_pool *p = &slots[i];
    if (p->dev != dev || !hold(p)) {
      continue;
    }
    if (trim && real.cuMemPoolTrimTo) {
      real.cuMemPoolTrimTo(p->pool, 0);
    }
    reread(p, &back);
    pthread_mutex_unlock(&p->lock);
  }
  return back;
}

uint64_t ordered_relieve(int dev) {
  uint64_t back = each_of(dev, true);
  if (back > 0) {
    log_msg(LOG_DEBUG, "device %d: %llu bytes of stream-ordered pool memory given back", dev,
            (unsigned long long)back);
  }
  return back;
}

void ordered_refresh(int dev) {
  each_of(dev, false);
}

void ordered_forget(CUmemoryPool pool) {
  pthread_mutex_lock(&table);
  struct ordered_pool *p = find(pool);
  pthread_mutex_unlock(&table);
  if (p) {
    close_slot(p);
  }
}

void ordered_reset(int dev) {
  int n = atomic_load_explicit(&nslots, memory_order_acquire);
  for (int i = 0; i < n; i++) {
    struct ordered_pool *p = &slots[i];
    if (p->dev == dev && hold(p)) {
      cap_credit(dev, p->charged);
      p->charged = 0;
      pthread_mutex_unlock(&p->lock);
    }
  }
}

/* In a fork child: no pool of the parent's is the child's. No lock was held across fork (an
 * allocation's hold may have been), so the slots start over with fresh locks. */
static void fork_child(void) {
  pthread_mutex_init(&table, NULL);
  int n = atomic_load_explicit(&nslots, memory_order_relaxed);
  for (int i = 0; i < n; i++) {
    pthread_mutex_init(&slots[i].lock, NULL);
  }
  atomic_store_explicit(&nslots, 0, memory_order_relaxed);
}
FORK_CHILD(fork_child)
