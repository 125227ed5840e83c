/* addrmap: an open-addressing hash map from a nonzero 64-bit address to a 64-bit value.
 *
 * Linear probing with backward-shift deletion (no tombstones), so lookups stay short after
 * any mix of inserts and removals; the table doubles at 50% load. Cost is O(1) expected per
 * operation and does not depend on the sizes the addresses stand for. Not thread-safe: the
 * caller locks. Allocates only when it grows.
 */
#ifndef GPUCAP_CORE_ADDRMAP_H
#define GPUCAP_CORE_ADDRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct addrmap {
  struct addrmap_slot *slots; /* capacity entries; key 0 marks an empty slot */
  size_t capacity;            /* a power of two, or 0 before the first insert */
  size_t count;
} addrmap_t;

/* An empty map; no allocation until the first insert. */
#define ADDRMAP_INIT {NULL, 0, 0}

/* Inserts or replaces key -> value. Fails with -EINVAL iff key is 0, -ENOMEM iff growing the
 * table failed (the map is then unchanged). */
int addrmap_put(addrmap_t *map, uint64_t key, uint64_t value);

/* Stores key's value in *value and returns 0, or returns -ENOENT. */
int addrmap_get(const addrmap_t *map, uint64_t key, uint64_t *value);

/* Removes key, storing its value in *value when value is non-NULL; returns 0 or -ENOENT. */
int addrmap_del(addrmap_t *map, uint64_t key, uint64_t *value);

/* Host bytes the table occupies. */
size_t addrmap_bytes(const addrmap_t *map);

/* Frees the table; the map is empty and reusable afterwards. */
void addrmap_clear(addrmap_t *map);

#endif
