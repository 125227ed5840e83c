/* Charged blocks and handles: core/addrmap behind a mutex, each value a heap copy of the
 * entry (one small allocation per tracked block; the pooled path tracks none).
 */
#include "shim/charges.h"

#include <stdlib.h>

bool charges_put(charges_t *c, uint64_t key, const charge_t *e) {
  charge_t *copy = malloc(sizeof *copy);
  if (!copy) {
    return false;
  }
  *copy = *e;
  pthread_mutex_lock(&c->lock);
  int rc = c->map.slots ? 0 : addrmap_init(&c->map, 64);
  if (rc == 0) {
    rc = addrmap_reserve(&c->map, 1);
  }
  if (rc == 0) {
    addrmap_put(&c->map, key, copy);
  }
  pthread_mutex_unlock(&c->lock);
  if (rc != 0) {
    free(copy);
  }
  return rc == 0;
}

bool charges_take(charges_t *c, uint64_t key, charge_t *e) {
  pthread_mutex_lock(&c->lock);
  charge_t *found = c->map.slots ? addrmap_take(&c->map, key) : NULL;
  pthread_mutex_unlock(&c->lock);
  if (!found) {
    return false;
  }
  *e = *found;
  free(found);
  return true;
}

void charges_drop_context(charges_t *c, CUcontext ctx,
                          void (*fn)(uint64_t key, const charge_t *e)) {
  for (;;) {
    /* Take the entries of ctx in batches, calling fn with the lock released. */
    uint64_t keys[64];
    charge_t taken[64];
    int n = 0;
    pthread_mutex_lock(&c->lock);
    for (uint64_t i = 0; c->map.slots && i <= c->map.mask && n < 64; i++) {
      addrmap_slot_t *s = &c->map.slots[i];
      if (s->key != ADDRMAP_EMPTY && ((charge_t *)s->val)->ctx == ctx) {
        keys[n++] = s->key;
      }
    }
    for (int k = 0; k < n; k++) {
      charge_t *e = addrmap_take(&c->map, keys[k]);
      taken[k] = *e;
      free(e);
    }
    pthread_mutex_unlock(&c->lock);
    for (int k = 0; k < n; k++) {
      fn(keys[k], &taken[k]);
    }
    if (n < 64 || !ctx) {
      return;
    }
  }
}

void charges_fork_prepare(charges_t *c) {
  pthread_mutex_lock(&c->lock);
}

void charges_fork_parent(charges_t *c) {
  pthread_mutex_unlock(&c->lock);
}

void charges_fork_child(charges_t *c) {
  pthread_mutex_init(&c->lock, NULL);
  for (uint64_t i = 0; c->map.slots && i <= c->map.mask; i++) {
    if (c->map.slots[i].key != ADDRMAP_EMPTY) {
      free(c->map.slots[i].val);
    }
  }
  addrmap_fini(&c->map);
}
