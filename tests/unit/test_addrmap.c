/* Unit tests for core/addrmap: against a brute-force array model through many random inserts,
 * replacements and removals (exercising backward-shift deletion across wrap-around). */
#include "core/addrmap.h"
#include "tests/tap.h"

#include <errno.h>
#include <stdlib.h>

#define KEYS 3000

static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

int main(void) {
  addrmap_t map = ADDRMAP_INIT;
  static uint64_t keys[KEYS], vals[KEYS];
  static int present[KEYS];
  uint64_t v = 0;

  TAP_EQ(addrmap_put(&map, 0, 1), -EINVAL, "key 0 is refused");
  TAP_EQ(addrmap_get(&map, 42, &v), -ENOENT, "empty map finds nothing");
  TAP_EQ(addrmap_del(&map, 42, NULL), -ENOENT, "empty map removes nothing");
  for (int i = 0; i < KEYS; i++) {
    /* 256-aligned addresses clustered like a device's, so probe runs collide. */
    keys[i] = 0x7f0000000000ull + 256 * (3 * (uint64_t)i + (uint64_t)(i % 3));
  }
  int mismatches = 0, count = 0;
  for (int step = 0; step < 200000; step++) {
    int i = (int)(next_rand() % KEYS);
    if (next_rand() % 3) {
      vals[i] = next_rand();
      count += !present[i];
      present[i] = 1;
      mismatches += addrmap_put(&map, keys[i], vals[i]) != 0;
    } else {
      int rc = addrmap_del(&map, keys[i], &v);
      mismatches += present[i] ? (rc != 0 || v != vals[i]) : rc != -ENOENT;
      count -= present[i];
      present[i] = 0;
    }
    if (step % 997 == 0) {
      for (int k = 0; k < KEYS; k++) {
        int rc = addrmap_get(&map, keys[k], &v);
        mismatches += present[k] ? (rc != 0 || v != vals[k]) : rc != -ENOENT;
      }
      mismatches += map.count != (size_t)count;
    }
  }
  TAP_EQ(mismatches, 0, "200k random operations agree with the model");
  tap_ok(map.count * 2 <= map.capacity, "load stays at or under 50%% (%zu in %zu)", map.count,
         map.capacity);
  tap_ok(addrmap_bytes(&map) == map.capacity * 16, "addrmap_bytes counts the table");
  addrmap_clear(&map);
  TAP_EQ(map.count, 0, "clear empties the map");
  TAP_EQ(addrmap_get(&map, keys[0], &v), -ENOENT, "cleared map finds nothing");
  return tap_done();
}
