/* Charged blocks and handles: core/addrmap behind a mutex, each value a heap entry (one small
 * allocation per tracked block; the pooled path tracks none). An entry held across a driver
 * call (charges_hold) stays allocated until its last hold is settled, even once removed.
 */
#include "shim/pool/charges.h"

#include <stdlib.h>

struct charge_entry {
  charge_t c;
  unsigned holds; /* charges_hold calls not yet settled */
  bool stored;    /* still in the map */
};

/* Frees e once it is neither stored nor held. Lock held. */
static void release_entry(struct charge_entry *e) {
  if (!e->stored && e->holds == 0) {
    free(e);
  }
}

/* Removes the entry stored under key (present). Lock held. */
static struct charge_entry *unstore(charges_t *c, uint64_t key) {
  struct charge_entry *e = addrmap_take(&c->map, key);
  e->stored = false;
  return e;
}

int charges_put(charges_t *c, uint64_t key, const charge_t *e, charge_t *old) {
  struct charge_entry *copy = malloc(sizeof *copy);
  if (!copy) {
    return -1;
  }
  *copy = (struct charge_entry){.c = *e, .holds = 0, .stored = true};
  int replaced = 0;
  pthread_mutex_lock(&c->lock);
  int rc = c->map.slots ? 0 : addrmap_init(&c->map, 64);
  if (rc == 0) {
    rc = addrmap_reserve(&c->map, 1);
  }
  if (rc == 0) {
    struct charge_entry *prev = addrmap_get(&c->map, key);
    if (prev) {
      unstore(c, key);
      *old = prev->c;
      replaced = 1;
      release_entry(prev);
    }
    addrmap_put(&c->map, key, copy);
  }
  pthread_mutex_unlock(&c->lock);
  if (rc != 0) {
    free(copy);
    return -1;
  }
  return replaced;
}

bool charges_take(charges_t *c, uint64_t key, charge_t *e) {
  bool found = false;
  pthread_mutex_lock(&c->lock);
  if (c->map.slots && addrmap_get(&c->map, key)) {
    struct charge_entry *x = unstore(c, key);
    *e = x->c;
    found = true;
    release_entry(x);
  }
  pthread_mutex_unlock(&c->lock);
  return found;
}

bool charges_get(charges_t *c, uint64_t key, charge_t *e) {
  pthread_mutex_lock(&c->lock);
  struct charge_entry *x = c->map.slots ? addrmap_get(&c->map, key) : NULL;
  if (x) {
    *e = x->c;
  }
  pthread_mutex_unlock(&c->lock);
  return x != NULL;
}

charge_hold_t *charges_hold(charges_t *c, uint64_t key) {
  pthread_mutex_lock(&c->lock);
  struct charge_entry *x = c->map.slots ? addrmap_get(&c->map, key) : NULL;
  if (x) {
    x->holds++;
  }
  pthread_mutex_unlock(&c->lock);
  return x;
}

bool charges_settle(charges_t *c, uint64_t key, charge_hold_t *h, bool freed, charge_t *e) {
  bool credit = false;
  if (!h) {
    return false;
  }
  pthread_mutex_lock(&c->lock);
  if (freed && h->stored && addrmap_get(&c->map, key) == h) {
    unstore(c, key);
    *e = h->c;
    credit = true;
  }
  h->holds--;
  release_entry(h);
  pthread_mutex_unlock(&c->lock);
  return credit;
}

void charges_drop(charges_t *c, bool (*match)(const charge_t *e, const void *arg), const void *arg,
                  void (*fn)(uint64_t key, const charge_t *e)) {
  for (;;) {
    /* Take the matching entries in batches, calling fn with the lock released. */
    uint64_t keys[64];
    charge_t taken[64];
    int n = 0;
    pthread_mutex_lock(&c->lock);
    for (uint64_t i = 0; c->map.slots && i <= c->map.mask && n < 64; i++) {
      addrmap_slot_t *s = &c->map.slots[i];
      if (s->key != ADDRMAP_EMPTY && match(&((struct charge_entry *)s->val)->c, arg)) {
        keys[n++] = s->key;
      }
    }
    for (int k = 0; k < n; k++) {
      struct charge_entry *x = unstore(c, keys[k]);
      taken[k] = x->c;
      release_entry(x);
    }
    pthread_mutex_unlock(&c->lock);
    for (int k = 0; k < n; k++) {
      fn(keys[k], &taken[k]);
    }
    if (n < 64) {
      return;
    }
  }
}

static bool made_in(const charge_t *e, const void *ctx) {
  return e->ctx == ctx;
}

void charges_drop_context(charges_t *c, CUcontext ctx,
                          void (*fn)(uint64_t key, const charge_t *e)) {
  if (ctx) {
    charges_drop(c, made_in, ctx, fn);
  }
}

void charges_update(charges_t *c, void (*fn)(charge_t *e, void *arg), void *arg) {
  pthread_mutex_lock(&c->lock);
  for (uint64_t i = 0; c->map.slots && i <= c->map.mask; i++) {
    addrmap_slot_t *s = &c->map.slots[i];
    if (s->key != ADDRMAP_EMPTY) {
      fn(&((struct charge_entry *)s->val)->c, arg);
    }
  }
  pthread_mutex_unlock(&c->lock);
}

/* A fork child's maps as the parent left them: kept, not freed (volatile, so the stores stay),
 * so that leak checkers see them reachable. */
static volatile addrmap_t inherited[8];
static int ninherited;

void charges_fork_child(charges_t *c) {
  pthread_mutex_init(&c->lock, NULL);
  if (ninherited < 8) {
    inherited[ninherited++] = c->map;
  }
  c->map = (addrmap_t){0}; /* abandoned unread: it may have been mid-update at the fork */
}
