/* Unit tests for core/addrmap: against a brute-force array model through many random puts
 * and takes (exercising backward-shift deletion across wrap-around), plus growth. */
#include "core/addrmap.h"
#include "tests/tap.h"

#include <stdint.h>

#define KEYS 3000

static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

int main(void) {
  addrmap_t map;
  static uint64_t keys[KEYS];
  static uintptr_t vals[KEYS];
  static int present[KEYS];

  TAP_EQ(addrmap_init(&map, 1), 0, "init");
  tap_ok(addrmap_get(&map, 4096) == NULL, "empty map finds nothing");
  tap_ok(addrmap_take(&map, 4096) == NULL, "empty map removes nothing");
  for (int i = 0; i < KEYS; i++) {
    /* 256-aligned addresses clustered like a device's, so probe runs collide. */
    keys[i] = 0x7f0000000000ull + 256 * (3 * (uint64_t)i + (uint64_t)(i % 3));
  }
  int mismatches = 0, count = 0;
  for (int step = 0; step < 200000; step++) {
    int i = (int)(next_rand() % KEYS);
    if (!present[i] && next_rand() % 3) {
      vals[i] = (uintptr_t)(next_rand() | 1);
      mismatches += addrmap_reserve(&map, 1) != 0;
      addrmap_put(&map, keys[i], (void *)vals[i]);
      present[i] = 1;
      count++;
    } else {
      uintptr_t v = (uintptr_t)addrmap_take(&map, keys[i]);
      mismatches += present[i] ? v != vals[i] : v != 0;
      count -= present[i];
      present[i] = 0;
    }
    if (step % 997 == 0) {
      for (int k = 0; k < KEYS; k++) {
        uintptr_t v = (uintptr_t)addrmap_get(&map, keys[k]);
        mismatches += present[k] ? v != vals[k] : v != 0;
      }
      mismatches += map.count != (uint64_t)count;
    }
  }
  TAP_EQ(mismatches, 0, "200k random operations agree with the model");
  tap_ok(map.count * 2 <= map.mask + 1, "load stays at or under 50%% (%llu in %llu)",
         (unsigned long long)map.count, (unsigned long long)(map.mask + 1));
  tap_ok(addrmap_bytes(&map) == (map.mask + 1) * sizeof(addrmap_slot_t),
         "addrmap_bytes counts the table");
  addrmap_fini(&map);
  TAP_EQ(addrmap_bytes(&map), 0, "fini frees the table");
  return tap_done();
}
