/* Charged blocks and handles: core/addrmap behind a mutex, with (device, bytes) packed into
 * the value as device << 56 | bytes. An entry's value is never 0 since bytes > 0.
 */
#include "shim/charges.h"

#define DEV_SHIFT 56
#define BYTES_MASK ((1ull << DEV_SHIFT) - 1)

bool charges_put(charges_t *c, uint64_t key, int dev, uint64_t bytes) {
  uintptr_t packed = ((uintptr_t)dev << DEV_SHIFT) | (bytes & BYTES_MASK);
  pthread_mutex_lock(&c->lock);
  int rc = c->map.slots ? 0 : addrmap_init(&c->map, 64);
  if (rc == 0) {
    rc = addrmap_reserve(&c->map, 1);
  }
  if (rc == 0) {
    addrmap_put(&c->map, key, (void *)packed);
  }
  pthread_mutex_unlock(&c->lock);
  return rc == 0;
}

bool charges_take(charges_t *c, uint64_t key, int *dev, uint64_t *bytes) {
  pthread_mutex_lock(&c->lock);
  uintptr_t packed = c->map.slots ? (uintptr_t)addrmap_take(&c->map, key) : 0;
  pthread_mutex_unlock(&c->lock);
  if (!packed) {
    return false;
  }
  *dev = (int)(packed >> DEV_SHIFT);
  *bytes = packed & BYTES_MASK;
  return true;
}

void charges_fork_prepare(charges_t *c) {
  pthread_mutex_lock(&c->lock);
}

void charges_fork_parent(charges_t *c) {
  pthread_mutex_unlock(&c->lock);
}

void charges_fork_child(charges_t *c) {
  pthread_mutex_init(&c->lock, NULL);
  addrmap_fini(&c->map);
}
