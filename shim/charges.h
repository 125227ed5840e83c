/* A map from a key (a block address or an allocation handle) to what it was charged: the
 * device, the bytes, and the context it was made in (NULL when it belongs to no context),
 * behind its own mutex, which is never held across a driver call.
 */
#ifndef GPUCAP_SHIM_CHARGES_H
#define GPUCAP_SHIM_CHARGES_H

#include "core/addrmap.h"
#include "shim/cudadefs.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct charges {
  pthread_mutex_t lock;
  addrmap_t map; /* slots == NULL until the first put; values are struct charge * */
} charges_t;

/* One entry. */
typedef struct charge {
  uint64_t bytes;
  CUcontext ctx;
  int dev;
} charge_t;

#define CHARGES_INIT {PTHREAD_MUTEX_INITIALIZER, {0}}

/* Records key -> e (copied); key must not be UINT64_MAX. Returns false iff host memory ran
 * out (nothing recorded). O(1) expected. */
bool charges_put(charges_t *c, uint64_t key, const charge_t *e);

/* Removes key, storing its entry in *e; returns false (e untouched) when absent. O(1). */
bool charges_take(charges_t *c, uint64_t key, charge_t *e);

/* Removes every entry made in ctx (ctx not NULL) and calls fn with each key and entry,
 * outside the lock. O(entries). */
void charges_drop_context(charges_t *c, CUcontext ctx,
                          void (*fn)(uint64_t key, const charge_t *e));

/* fork() support: hold the lock across fork (prepare), release it in the parent, and in the
 * child forget every entry (the child holds no device memory) with a fresh lock. */
void charges_fork_prepare(charges_t *c);
void charges_fork_parent(charges_t *c);
void charges_fork_child(charges_t *c);

#endif
