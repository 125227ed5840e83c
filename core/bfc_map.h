/* bfc_map: open-addressing hash map from a device address to a host pointer.
 *
 * Linear probing, Fibonacci hashing of addr >> 8, backward-shift deletion (no tombstones), so
 * probe lengths stay short after any mix of puts and takes. The table doubles when a reserve
 * would pass 50% load and never shrinks; lookups never allocate. Key UINT64_MAX is reserved
 * (it marks an empty slot; no 256-aligned address equals it). Not thread-safe: caller locks.
 */
#ifndef GPUCAP_CORE_BFC_MAP_H
#define GPUCAP_CORE_BFC_MAP_H

#include <stddef.h>
#include <stdint.h>

#define BFC_MAP_EMPTY UINT64_MAX

typedef struct bfc_map_slot {
  uint64_t key;
  void *val;
} bfc_map_slot_t;

typedef struct bfc_map {
  bfc_map_slot_t *slots; /* 1 << (64 - shift) slots */
  uint64_t mask;
  uint64_t count;
  unsigned shift;
} bfc_map_t;

/* Makes an empty map with room for at least min_entries. Fails with -ENOMEM iff host memory
 * runs out. O(capacity). */
int bfc_map_init(bfc_map_t *map, uint64_t min_entries);

/* Frees the table. O(1). */
void bfc_map_fini(bfc_map_t *map);

/* Ensures count + extra entries fit under 50% load, growing (rehashing) if needed. Fails with
 * -ENOMEM iff host memory runs out (the map is then unchanged). O(1), or O(capacity) when it
 * grows. */
int bfc_map_reserve(bfc_map_t *map, uint64_t extra);

/* Host bytes held by the table. O(1). */
size_t bfc_map_bytes(const bfc_map_t *map);

static inline uint64_t bfc_map_home(const bfc_map_t *map, uint64_t key) {
  return ((key >> 8) * 0x9E3779B97F4A7C15ull) >> map->shift;
}

/* Returns the value stored for key, or NULL. O(1) expected. */
static inline void *bfc_map_get(const bfc_map_t *map, uint64_t key) {
  uint64_t i = bfc_map_home(map, key);
  for (;;) {
    const bfc_map_slot_t *s = &map->slots[i];
    if (s->key == key) {
      return s->val;
    }
    if (s->key == BFC_MAP_EMPTY) {
      return NULL;
    }
    i = (i + 1) & map->mask;
  }
}

/* Inserts key -> val. Requires: key absent, key != BFC_MAP_EMPTY, and room reserved with
 * bfc_map_reserve (so it cannot fail). O(1) expected. */
static inline void bfc_map_put(bfc_map_t *map, uint64_t key, void *val) {
  uint64_t i = bfc_map_home(map, key);
  while (map->slots[i].key != BFC_MAP_EMPTY) {
    i = (i + 1) & map->mask;
  }
  map->slots[i].key = key;
  map->slots[i].val = val;
  map->count++;
}

/* Removes key and returns its value, or returns NULL when absent. O(1) expected. */
static inline void *bfc_map_take(bfc_map_t *map, uint64_t key) {
  uint64_t i = bfc_map_home(map, key);
  for (;;) {
    if (map->slots[i].key == key) {
      break;
    }
    if (map->slots[i].key == BFC_MAP_EMPTY) {
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
    if (k == BFC_MAP_EMPTY) {
      break;
    }
    uint64_t h = bfc_map_home(map, k);
    int stays = (i <= j) ? (i < h && h <= j) : (i < h || h <= j);
    if (!stays) {
      map->slots[i] = map->slots[j];
      i = j;
    }
  }
  map->slots[i].key = BFC_MAP_EMPTY;
  map->slots[i].val = NULL;
  map->count--;
  return val;
}

#endif
