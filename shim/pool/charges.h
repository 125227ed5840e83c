/* A map from a key (a block address, an allocation handle or a mapping's address) to what it
 * was charged: the device, the bytes, the context it was made in (NULL when it belongs to no
 * context) and a kind, behind its own mutex, which is never held across a driver call.
 *
 * A free races other frees of the same key (a program bug, but the driver answers it: one call
 * succeeds, the others fail). So an entry is never taken out before the driver's answer: the
 * freeing thread *holds* it (charges_hold), calls the driver, and *settles* (charges_settle):
 * whichever call the driver let succeed removes the entry it held, if that entry is still the
 * one stored, and credits it; a failed call only lets go. A key put again while an entry is
 * stored means the driver handed the key out again, so the old entry's memory is gone: the put
 * replaces it and hands it back to be credited.
 */
#ifndef GPUCAP_SHIM_CHARGES_H
#define GPUCAP_SHIM_CHARGES_H

#include "core/addrmap.h"
#include "shim/base/cudadefs.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct charges {
  pthread_mutex_t lock;
  addrmap_t map; /* slots == NULL until the first put; values are struct charge_entry * */
} charges_t;

/* One entry. */
typedef struct charge {
  uint64_t bytes;
  uint64_t spill; /* of bytes, those charged to the spill budget, not the cap
                     (shim/accounting/spill.h) */
  uint64_t aux;   /* the owner's: a VMM mapping's handle, a spilled block's range */
  CUcontext ctx;
  int dev;
  int kind;     /* the owner's */
  int lib;      /* the library charged in the ledger (shim/accounting/ledger.h) */
  bool managed; /* managed memory: on the device only where touched (cap_managed) */
} charge_t;

/* An entry held across a driver call (opaque). */
typedef struct charge_entry charge_hold_t;

#define CHARGES_INIT                                                                               \
  {                                                                                                \
    PTHREAD_MUTEX_INITIALIZER, {                                                                   \
      0                                                                                            \
    }                                                                                              \
  }

/* Records key -> e (copied); key must not be UINT64_MAX. Returns -1 iff host memory ran out
 * (nothing recorded), 1 when an entry stored under key was replaced (copied to *old, to be
 * credited by the caller), else 0. O(1) expected. */
int charges_put(charges_t *c, uint64_t key, const charge_t *e, charge_t *old);

/* Removes key, storing its entry in *e; returns false (e untouched) when absent. O(1). */
bool charges_take(charges_t *c, uint64_t key, charge_t *e);

/* Copies key's entry to *e without removing it; false when absent. O(1). */
bool charges_get(charges_t *c, uint64_t key, charge_t *e);

/* Holds key's entry across a driver call that may free it; NULL when absent. Every non-NULL
 * hold must be passed to charges_settle exactly once. O(1). */
charge_hold_t *charges_hold(charges_t *c, uint64_t key);

/* Ends a hold after the driver's answer. freed: the driver freed what key names. Returns true,
 * with the entry removed and copied to *e (the caller credits it), iff freed and the held entry
 * is still the one stored under key; false otherwise (another call freed it first, or the
 * driver refused: the entry stays). A NULL hold returns false. O(1). */
bool charges_settle(charges_t *c, uint64_t key, charge_hold_t *h, bool freed, charge_t *e);

/* Removes every entry for which match(entry, arg) is true and calls fn with each key and entry,
 * outside the lock. O(entries). */
void charges_drop(charges_t *c, bool (*match)(const charge_t *e, const void *arg), const void *arg,
                  void (*fn)(uint64_t key, const charge_t *e));

/* charges_drop of the entries made in ctx (ctx not NULL). */
void charges_drop_context(charges_t *c, CUcontext ctx, void (*fn)(uint64_t key, const charge_t *e));

/* Calls fn(entry, arg) for every entry under the lock; fn may change the entry's fields in place
 * (a hold in progress settles with what it finds then) and must not call back into c or the
 * driver. O(entries). */
void charges_update(charges_t *c, void (*fn)(charge_t *e, void *arg), void *arg);

/* fork() support, in the child only: forget every entry (the child holds no device memory)
 * with a fresh lock. Nothing is held across fork, so another thread of the parent may have
 * been changing the map: it is abandoned unread (its host memory stays with the child). */
void charges_fork_child(charges_t *c);

#endif
