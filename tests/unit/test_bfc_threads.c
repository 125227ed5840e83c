/* Threaded test of core/bfc's locking contract (run under TSan by `make test`).
 *
 * Two threads each drive a private pool with no lock (core must hold no shared mutable state),
 * then two threads share one pool behind the caller's mutex, as the shim does. Each phase ends
 * with bfc_check() == 0 and counters that add up. Prints TAP.
 */
#include "core/bfc.h"
#include "tests/tap.h"
#include "tests/unit/test_bfc_prim.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#define MiB ((uint64_t)1 << 20)
enum { OPS = 20000, SLOTS = 128 };

typedef struct worker {
  bfc_pool_t *pool;
  pthread_mutex_t *lock; /* NULL: private pool */
  uint64_t seed;
  uint64_t allocs;
  int errors;
} worker_t;

static void lock(worker_t *w) {
  if (w->lock != NULL) {
    pthread_mutex_lock(w->lock);
  }
}

static void unlock(worker_t *w) {
  if (w->lock != NULL) {
    pthread_mutex_unlock(w->lock);
  }
}

static void *work(void *arg) {
  worker_t *w = arg;
  uint64_t slot[SLOTS] = {0};
  uint64_t s = w->seed;
  for (int i = 0; i < OPS; i++) {
    unsigned k = (unsigned)(fake_rand(&s) % SLOTS);
    lock(w);
    if (slot[k] == 0) {
      uint64_t a = 0;
      uint64_t bytes = 1 + fake_rand(&s) % (256 * 1024);
      int rc = bfc_alloc(w->pool, bytes, &a);
      while (rc == -EAGAIN) {
        /* The shim's protocol: synchronise without the lock, retire what that covered. */
        uint64_t mark = bfc_defer_mark(w->pool);
        unlock(w);
        sched_yield();
        lock(w);
        bfc_retire_upto(w->pool, mark);
        rc = bfc_alloc(w->pool, bytes, &a);
      }
      if (rc == 0) {
        slot[k] = a;
        w->allocs++;
      } else if (rc != -ENOMEM) {
        w->errors++;
      }
    } else {
      int rc = (i & 1) ? bfc_free(w->pool, slot[k]) : bfc_free_deferred(w->pool, slot[k]);
      w->errors += rc != 0;
      slot[k] = 0;
    }
    unlock(w);
  }
  lock(w);
  for (unsigned k = 0; k < SLOTS; k++) {
    if (slot[k] != 0) {
      w->errors += bfc_free(w->pool, slot[k]) != 0;
    }
  }
  bfc_retire(w->pool);
  unlock(w);
  return NULL;
}

static bfc_pool_t *mk(fake_prim_t *f) {
  bfc_prim_t prim = fake_init(f, MiB);
  bfc_options_t opts = {.limit = 256 * MiB, .allow_growth = 1};
  bfc_pool_t *p = NULL;
  bfc_create(&opts, &prim, &p);
  return p;
}

int main(void) {
  fake_prim_t fa, fb, fs;
  worker_t w[2] = {{mk(&fa), NULL, 1, 0, 0}, {mk(&fb), NULL, 2, 0, 0}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  for (int i = 0; i < 2; i++) {
    pthread_join(t[i], NULL);
  }
  for (int i = 0; i < 2; i++) {
    bfc_stats_t s;
    bfc_stats(w[i].pool, &s);
    TAP_EQ(w[i].errors, 0, "private pool %d: no errors", i);
    TAP_EQ(bfc_check(w[i].pool), 0, "private pool %d: bfc_check", i);
    TAP_EQ(s.num_allocs, w[i].allocs, "private pool %d: num_allocs", i);
    TAP_EQ(s.bytes_in_use, 0, "private pool %d: all freed", i);
    bfc_destroy(w[i].pool);
  }

  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  bfc_pool_t *shared = mk(&fs);
  worker_t v[2] = {{shared, &mu, 3, 0, 0}, {shared, &mu, 4, 0, 0}};
  for (int i = 0; i < 2; i++) {
    pthread_create(&t[i], NULL, work, &v[i]);
  }
  for (int i = 0; i < 2; i++) {
    pthread_join(t[i], NULL);
  }
  bfc_stats_t s;
  bfc_stats(shared, &s);
  TAP_EQ(v[0].errors + v[1].errors, 0, "shared pool: no errors");
  TAP_EQ(bfc_check(shared), 0, "shared pool: bfc_check");
  TAP_EQ(s.num_allocs, v[0].allocs + v[1].allocs, "shared pool: num_allocs adds up");
  TAP_EQ(s.bytes_in_use, 0, "shared pool: all freed");
  bfc_destroy(shared);
  TAP_EQ(fs.outstanding, 0, "shared pool: regions released");
  return tap_done();
}
