/* addrmap: open-addressing hash map from a device address to a host pointer.
 *
 * Linear probing, Fibonacci hashing of addr >> 8, backward-shift deletion (no tombstones), so
 * probe lengths stay short after any mix of puts and takes. The table doubles when a reserve
 * would pass 50% load and never shrinks; lookups never allocate. Key UINT64_MAX is reserved
 * (it marks an empty slot; no 256-aligned address equals it). Not thread-safe: caller locks.
 */
#ifndef GPUCAP_CORE_ADDRMAP_H
#define GPUCAP_CORE_ADDRMAP_H

#include <stddef.h>
#include <stdint.h>

#define ADDRMAP_EMPTY UINT64_MAX

typedef struct addrmap_slot {
  uint64_t key;
  void *val;
} addrmap_slot_t;

typedef struct addrmap {
  addrmap_slot_t *slots; /* 1 << (64 - shift) slots */
  uint64_t mask;
  uint64_t count;
  unsigned shift;
} addrmap_t;

/* Makes an empty map with room for at least min_entries. Fails with -ENOMEM iff host memory
 * runs out. O(capacity). */
int addrmap_init(addrmap_t *map, uint64_t min_entries);

/* Frees the table. O(1). */
void addrmap_fini(addrmap_t *map);

/* Ensures count + extra entries fit under 50% load, growing (rehashing) if needed. Fails with
 * -ENOMEM iff host memory runs out (the map is then unchanged). O(1), or O(capacity) when it
 * grows. */
int addrmap_reserve(addrmap_t *map, uint64_t extra);

/* Host bytes held by the table. O(1). */
size_t addrmap_bytes(const addrmap_t *map);

static inline uint64_t addrmap_home(const addrmap_t *map, uint64_t key) {
  return ((key >> 8) * 0x9E3779B97F4A7C15ull) >> map->shift;
}

/* Returns the value stored for key, or NULL. O(1) expected. */
static inline void *addrmap_get(const addrmap_t *map, uint64_t key) {
  uint64_t i = addrmap_home(map, key);
  for (;;) {
    const addrmap_slot_t *s = &map->slots[i];
    if (s->key == key) {
      return s->val;
    }
    if (s->key == ADDRMAP_EMPTY) {
      return NULL;
    }
    i = (i + 1) & map->mask;
  }
}

/* Inserts key -> val. Requires: key absent, key != ADDRMAP_EMPTY, and room reserved with
 * addrmap_reserve (so it cannot fail). O(1) expected. */
static inline void addrmap_put(addrmap_t *map, uint64_t key, void *val) {
  uint64_t i = addrmap_home(map, key);
  while (map->slots[i].key != ADDRMAP_EMPTY) {
    i = (i + 1) & map->mask;
  }
  map->slots[i].key = key;
  map->slots[i].val = val;
  map->count++;
}

/* Removes key and returns its value, or returns NULL when absent. O(1) expected. */
static inline void *addrmap_take(addrmap_t *map, uint64_t key) {
  uint64_t i = addrmap_home(map, key);
  for (;;) {
    if (map->slots[i].key == key) {
      break;
    }
    if (map->slots[i].key == ADDRMAP_EMPTY) {
      return NULL;
    }
    i = (i + 1) & map->mask;
  }
  void *val = map->slots[i].val;
  /* Backward shift: move later entries of the probe run into the hole unless their home lies
   * cyclically in (hole, j]. */
  uint64_t j = i;
  for (;;) {
    j = (j + 1) & map->mask;
    uint64_t k = map->slots[j].key;
    if (k == ADDRMAP_EMPTY) {
      break;
    }
    uint64_t h = addrmap_home(map, k);
    int stays = (i <= j) ? (i < h && h <= j) : (i < h || h <= j);
    if (!stays) {
      map->slots[i] = map->slots[j];
      i = j;
    }
  }
  map->slots[i].key = ADDRMAP_EMPTY;
  map->slots[i].val = NULL;
  map->count--;
  return val;
}

#endif
