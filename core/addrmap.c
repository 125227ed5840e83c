/* addrmap: table allocation and growth for the address -> pointer map (see addrmap.h).
 *
 * Only init, reserve and fini allocate; the probe functions are inline in the header so the
 * pool's hot path has no call. The capacity is a power of two, at least 16, and at most half
 * full after every reserve. Not thread-safe: the caller locks.
 */
#include "core/addrmap.h"

#include <errno.h>
#include <stdlib.h>

static int map_alloc(addrmap_t *map, unsigned bits) {
  uint64_t cap = (uint64_t)1 << bits;
  addrmap_slot_t *slots = malloc(cap * sizeof(*slots));
  if (slots == NULL) {
    return -ENOMEM;
  }
  for (uint64_t i = 0; i < cap; i++) {
    slots[i].key = ADDRMAP_EMPTY;
    slots[i].val = NULL;
  }
  map->slots = slots;
  map->mask = cap - 1;
  map->shift = 64 - bits;
  map->count = 0;
  return 0;
}

static unsigned bits_for(uint64_t entries) {
  unsigned bits = 4;
  while (bits < 62 && ((uint64_t)1 << bits) < 2 * entries) {
    bits++;
  }
  return bits;
}

int addrmap_init(addrmap_t *map, uint64_t min_entries) {
  return map_alloc(map, bits_for(min_entries));
}

void addrmap_fini(addrmap_t *map) {
  free(map->slots);
  map->slots = NULL;
  map->mask = 0;
  map->count = 0;
}

int addrmap_reserve(addrmap_t *map, uint64_t extra) {
  uint64_t want = map->count + extra;
  if (2 * want <= map->mask + 1) {
    return 0;
  }
  addrmap_t bigger;
  if (map_alloc(&bigger, bits_for(want)) != 0) {
    return -ENOMEM;
  }
  for (uint64_t i = 0; i <= map->mask; i++) {
    if (map->slots[i].key != ADDRMAP_EMPTY) {
      addrmap_put(&bigger, map->slots[i].key, map->slots[i].val);
    }
  }
  free(map->slots);
  *map = bigger;
  return 0;
}

size_t addrmap_bytes(const addrmap_t *map) {
  return map->slots == NULL ? 0 : (size_t)(map->mask + 1) * sizeof(addrmap_slot_t);
}
