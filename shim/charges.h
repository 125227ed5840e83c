/* A map from a key (a block address or an allocation handle) to the device and the bytes it
 * was charged, behind its own mutex, which is never held across a driver call.
 * The device and bytes are packed into the pointer-sized value (64-bit hosts only).
 */
#ifndef GPUCAP_SHIM_CHARGES_H
#define GPUCAP_SHIM_CHARGES_H

#include "core/addrmap.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct charges {
  pthread_mutex_t lock;
  addrmap_t map; /* slots == NULL until the first put */
} charges_t;

#define CHARGES_INIT {PTHREAD_MUTEX_INITIALIZER, {0}}

/* Records key -> (dev, bytes); bytes must be in (0, 2^56) and key not UINT64_MAX. Returns
 * false iff host memory ran out (nothing recorded). O(1) expected. */
bool charges_put(charges_t *c, uint64_t key, int dev, uint64_t bytes);

/* Removes key, storing its device and bytes; returns false (outputs untouched) when absent.
 * O(1) expected. */
bool charges_take(charges_t *c, uint64_t key, int *dev, uint64_t *bytes);

/* fork() support: hold the lock across fork (prepare), release it in the parent, and in the
 * child forget every entry (the child holds no device memory) with a fresh lock. */
void charges_fork_prepare(charges_t *c);
void charges_fork_parent(charges_t *c);
void charges_fork_child(charges_t *c);

#endif
