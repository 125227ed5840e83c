/* addrmap: linear probing keyed by a multiplicative hash of the address, backward-shift
 * deletion. Invariant: every key sits in the probe run that starts at its home slot, with no
 * empty slot between home and position.
 */
#include "core/addrmap.h"

#include <errno.h>
#include <stdlib.h>

struct addrmap_slot {
  uint64_t key;
  uint64_t value;
};

static size_t home(uint64_t key, size_t mask) {
  /* Device addresses are 256-aligned or more: fold the high bits down before masking. */
  uint64_t h = key * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 17) & mask;
}

static int grow(addrmap_t *map) {
  size_t cap = map->capacity ? map->capacity * 2 : 64;
  struct addrmap_slot *slots = calloc(cap, sizeof *slots);
  if (!slots) {
    return -ENOMEM;
  }
  for (size_t i = 0; i < map->capacity; i++) {
    struct addrmap_slot s = map->slots[i];
    if (s.key) {
      size_t j = home(s.key, cap - 1);
      while (slots[j].key) {
        j = (j + 1) & (cap - 1);
      }
      slots[j] = s;
    }
  }
  free(map->slots);
  map->slots = slots;
  map->capacity = cap;
  return 0;
}

static struct addrmap_slot *find(const addrmap_t *map, uint64_t key) {
  if (!map->capacity || !key) {
    return NULL;
  }
  size_t mask = map->capacity - 1;
  for (size_t i = home(key, mask);; i = (i + 1) & mask) {
    if (map->slots[i].key == key) {
      return &map->slots[i];
    }
    if (!map->slots[i].key) {
      return NULL;
    }
  }
}

int addrmap_put(addrmap_t *map, uint64_t key, uint64_t value) {
  if (!key) {
    return -EINVAL;
  }
  struct addrmap_slot *s = find(map, key);
  if (s) {
    s->value = value;
    return 0;
  }
  if ((map->count + 1) * 2 > map->capacity) {
    int rc = grow(map);
    if (rc) {
      return rc;
    }
  }
  size_t mask = map->capacity - 1;
  size_t i = home(key, mask);
  while (map->slots[i].key) {
    i = (i + 1) & mask;
  }
  map->slots[i].key = key;
  map->slots[i].value = value;
  map->count++;
  return 0;
}

int addrmap_get(const addrmap_t *map, uint64_t key, uint64_t *value) {
  const struct addrmap_slot *s = find(map, key);
  if (!s) {
    return -ENOENT;
  }
  *value = s->value;
  return 0;
}

int addrmap_del(addrmap_t *map, uint64_t key, uint64_t *value) {
  struct addrmap_slot *s = find(map, key);
  if (!s) {
    return -ENOENT;
  }
  if (value) {
    *value = s->value;
  }
  size_t mask = map->capacity - 1;
  size_t hole = (size_t)(s - map->slots);
  /* Shift later members of the run back so no lookup ever meets a false empty slot. */
  for (size_t i = (hole + 1) & mask; map->slots[i].key; i = (i + 1) & mask) {
    size_t h = home(map->slots[i].key, mask);
    if (((i - h) & mask) >= ((i - hole) & mask)) {
      map->slots[hole] = map->slots[i];
      hole = i;
    }
  }
  map->slots[hole].key = 0;
  map->count--;
  return 0;
}

size_t addrmap_bytes(const addrmap_t *map) {
  return map->capacity * sizeof(struct addrmap_slot);
}

void addrmap_clear(addrmap_t *map) {
  free(map->slots);
  map->slots = NULL;
  map->capacity = 0;
  map->count = 0;
}
