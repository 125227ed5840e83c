/* Unit tests of core/front: size classes, take/put, the reuse stamp, the per-class depth, the
 * byte budget and the drain; then a random sequence checked against a model (every block put is
 * either kept, handed back by a take, or given up by a put or drain, exactly once). Prints TAP.
 */
#include "core/bfc.h"
#include "core/front.h"
#include "tests/tap.h"
#include "tests/unit/test_bfc_prim.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)

static front_t f; /* 32 KiB: not on the stack */

/* A block to put: at addr, of size bytes, stamped (tag 3). */
#define BLK(a, s, st)                                                                              \
  (&(front_block_t){.addr = (a), .size = (s), .requested = (s), .stamp = (st), .tag = 3})

static void test_classes(void) {
  int ok = front_class(0) == -1 && front_class(1) == 0 && front_class(256) == 0 &&
           front_class(257) == 1 && front_class(2048) == 7 && front_class(2049) == 8 &&
           front_class(FRONT_MAX_BLOCK) == (int)FRONT_CLASSES - 1 &&
           front_class(FRONT_MAX_BLOCK + 1) == -1;
  tap_ok(ok, "classes: exact below 2 KiB, the last at FRONT_MAX_BLOCK, none above");
  int mono = 1, narrow = 1;
  uint64_t lo = 256; /* smallest size of the current class */
  for (uint64_t s = 512; s <= FRONT_MAX_BLOCK; s += 256) {
    int a = front_class(s - 256), b = front_class(s);
    mono &= b == a || b == a + 1;
    if (b != a) {
      lo = s;
    }
    narrow &= (s - lo) * 8 <= lo; /* a class spans at most 1/8 of its smallest size */
  }
  tap_ok(mono, "classes grow by one at a time with the size");
  tap_ok(narrow, "a class spans at most 1/8 of its smallest size");
}

static void test_take_put(void) {
  front_block_t out[FRONT_PUT_ROOM], got;
  front_init(&f, 1 * MiB);
  tap_ok(front_take(&f, 1000, 3, 1, &got) == 0 && f.misses == 1, "an empty front misses");
  tap_ok(front_put(&f, BLK(0x10000, 1024, 0), out) == 0 && f.bytes == 1024,
         "a put keeps the block and counts its bytes");
  tap_ok(front_take(&f, 2048, 3, 1, &got) == 0, "a larger request of another class misses");
  tap_ok(front_take(&f, 1000, 3, 1, &got) == 0, "a request of another size of its class misses");
  tap_ok(front_take(&f, 1024, 3, 1, &got) == 1 && got.addr == 0x10000 && f.bytes == 0,
         "a request of its size takes it back");
  /* Only the size first asked for, and the tag, are matched. */
  front_put(&f, BLK(0x20000, 38 * KiB, 0), out);
  tap_ok(front_class(38 * KiB) == front_class(39 * KiB) &&
             front_take(&f, 39 * KiB, 3, 1, &got) == 0,
         "a larger request of its class misses");
  tap_ok(front_take(&f, 38 * KiB - 300, 3, 1, &got) == 0, "a smaller request of its class misses");
  tap_ok(front_take(&f, 38 * KiB, 4, 1, &got) == 0, "its size with another tag misses");
  tap_ok(front_take(&f, 38 * KiB, 3, 1, &got) == 1 && got.size == 38 * KiB &&
             got.requested == 38 * KiB,
         "its size and tag take it");
  /* The stamp: only blocks below `safe`. */
  front_put(&f, BLK(0x30000, 4096, 5), out);
  tap_ok(front_take(&f, 4096, 3, 5, &got) == 0, "a block stamped 5 is not handed out below safe 6");
  tap_ok(front_take(&f, 4096, 3, 6, &got) == 1 && got.stamp == 5 && got.tag == 3,
         "... and is at safe 6, tag kept");
  /* Newest first. */
  front_put(&f, BLK(0x40000, 4096, 0), out);
  front_put(&f, BLK(0x50000, 4096, 0), out);
  tap_ok(front_take(&f, 4096, 3, 1, &got) == 1 && got.addr == 0x50000, "the newest block first");
  front_take(&f, 4096, 3, 1, &got);
  tap_ok(f.bytes == 0, "empty again");
  /* A chunk larger than the class of its request (the pool did not split off a remainder too
   * small to keep) is filed by its request, where a request of that size looks. */
  front_put(&f, &(front_block_t){.addr = 0x60000, .size = 1280, .requested = 1000, .tag = 3}, out);
  tap_ok(front_class(1280) != front_class(1000) && front_take(&f, 1000, 3, 1, &got) == 1 &&
             got.addr == 0x60000 && got.size == 1280 && f.bytes == 0,
         "a chunk larger than its request's class is taken by a request of its size");
}

/* front_drain_from: the blocks of a request's class and of larger classes, largest first. */
static void test_drain_from(void) {
  front_block_t out[FRONT_PUT_ROOM], got;
  front_init(&f, 64 * MiB);
  front_put(&f, BLK(0x100000, 4 * KiB, 0), out);
  front_put(&f, BLK(0x200000, 64 * KiB, 0), out);
  front_put(&f, BLK(0x300000, 60 * KiB, 0), out);
  front_put(&f, BLK(0x400000, 1 * MiB, 0), out);
  size_t n = front_drain_from(&f, 62 * KiB, out, FRONT_PUT_ROOM);
  tap_ok(front_class(62 * KiB) == front_class(64 * KiB) &&
             front_class(60 * KiB) < front_class(62 * KiB) && n == 2 && out[0].addr == 0x400000 &&
             out[1].addr == 0x200000 && f.bytes == 64 * KiB,
         "a drain from 62 KiB gives up its class and the larger ones, largest first");
  tap_ok(front_take(&f, 60 * KiB, 3, 1, &got) == 1 && front_take(&f, 4 * KiB, 3, 1, &got) == 1,
         "... and keeps the smaller classes");
  front_put(&f, BLK(0x500000, 8 * MiB, 0), out);
  tap_ok(front_drain_from(&f, FRONT_MAX_BLOCK + 1, out, FRONT_PUT_ROOM) == 0 &&
             front_drain_from(&f, 1, out, 0) == 0 && f.bytes == 8 * MiB,
         "nothing for a request larger than any kept block, nor with no room");
  front_put(&f, BLK(0x600000, 8 * MiB, 7), out);
  n = front_drain_from(&f, 1, out, FRONT_PUT_ROOM);
  tap_ok(n == 2 && out[0].addr == 0x500000 && out[1].addr == 0x600000 && f.bytes == 0,
         "a drain from the smallest size gives up everything, whatever the stamps, oldest first");
}

static void test_limits(void) {
  front_block_t out[FRONT_PUT_ROOM], got;
  front_init(&f, 1 * MiB);
  size_t n = 0;
  for (unsigned i = 0; i < FRONT_DEPTH; i++) {
    n += front_put(&f, BLK(0x100000 + i * 0x1000, 4096, 0), out);
  }
  tap_ok(n == 0 && f.count[front_class(4096)] == FRONT_DEPTH, "a class keeps FRONT_DEPTH blocks");
  n = front_put(&f, BLK(0x900000, 4096, 0), out);
  tap_ok(n == FRONT_DEPTH / 2 && out[0].addr == 0x100000 && out[1].addr == 0x101000 &&
             f.bytes == (FRONT_DEPTH / 2 + 1) * 4096,
         "one more gives up the older half of its class, oldest first");
  n = front_put(&f, BLK(0x1000000, 2 * MiB, 0), out);
  tap_ok(n == 1 && out[0].addr == 0x1000000, "a block over the whole budget is given back");
  n = front_put(&f, BLK(0x2000000, FRONT_MAX_BLOCK + 256, 0), out);
  front_init(&f, 1ull << 40);
  n += front_put(&f, BLK(0x2000000, FRONT_MAX_BLOCK + 256, 0), out);
  tap_ok(n == 2 && f.bytes == 0, "a block above FRONT_MAX_BLOCK is never kept");
  /* Budget: filling with 256 KiB blocks, then one of 600 KiB gives up the largest first. */
  front_init(&f, 1 * MiB);
  front_put(&f, BLK(0xa00000, 256 * KiB, 0), out);
  front_put(&f, BLK(0xb00000, 512 * KiB, 0), out);
  front_put(&f, BLK(0xc00000, 64 * KiB, 0), out);
  n = front_put(&f, BLK(0xd00000, 600 * KiB, 0), out);
  tap_ok(n == 1 && out[0].addr == 0xb00000 && f.bytes == (256 + 64 + 600) * KiB,
         "over budget, the largest class is given up first, no more than needed");
  tap_ok(f.bytes <= f.budget, "bytes kept stay within the budget");
  size_t d = front_drain(&f, out, FRONT_PUT_ROOM);
  tap_ok(d == 3 && f.bytes == 0 && front_drain(&f, out, FRONT_PUT_ROOM) == 0 &&
             front_take(&f, 64 * KiB, 3, 1, &got) == 0,
         "a drain gives up every block, and the front is empty after");
  front_init(&f, 0);
  tap_ok(front_put(&f, BLK(0xe00000, 256, 0), out) == 1, "a budget of 0 keeps nothing");
}

/* Random puts, takes and drains against a model: each block is out (with the program) or in
 * the front or back in the pool; every transition must be one the front reported. */
enum { NB = 512 };
static void test_model(void) {
  static int where[NB]; /* 0: with the program, 1: kept, 2: given back to the pool */
  static uint64_t size[NB];
  uint64_t s = 12345, kept = 0;
  int bad = 0;
  front_init(&f, 4 * MiB);
  for (int i = 0; i < NB; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    size[i] = ((s >> 33) % (512 * KiB) + 256) / 256 * 256;
    where[i] = 0;
  }
  for (int step = 0; step < 200000 && !bad; step++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int i = (int)((s >> 33) % NB), op = (int)((s >> 20) % 16);
    front_block_t out[FRONT_PUT_ROOM], got;
    size_t n = 0;
    if (op == 0) {
      n = front_drain(&f, out, 7);
    } else if (where[i] == 0) {
      n = front_put(&f, BLK((uint64_t)i * MiB, size[i], 0), out);
      where[i] = 1;
      kept += size[i];
    } else if (where[i] == 2) {
      where[i] = 0; /* the pool hands it out again */
    } else {
      if (front_take(&f, size[i], 3, 1, &got)) {
        int j = (int)(got.addr / MiB);
        bad |= where[j] != 1 || size[j] != size[i];
        where[j] = 0;
        kept -= size[j];
      }
    }
    for (size_t k = 0; k < n; k++) { /* given up: back to the pool */
      int j = (int)(out[k].addr / MiB);
      bad |= where[j] != 1;
      where[j] = 2;
      kept -= size[j];
    }
    bad |= kept != f.bytes || f.bytes > f.budget;
  }
  tap_ok(!bad, "200000 random steps: every block accounted once, bytes within budget");
}

/* bfc_alloc_fit: best fit only; -ENOSPC, not counted as a refusal, where bfc_alloc would grow. */
static void test_alloc_fit(void) {
  fake_prim_t fp;
  bfc_prim_t prim = fake_init(&fp, 0);
  bfc_options_t opts = {.limit = 64 * MiB, .allow_growth = 1};
  bfc_pool_t *p = NULL;
  uint64_t a = 0, b = 0, held = 0;
  bfc_stats_t st;
  tap_ok(bfc_create(&opts, &prim, &p) == 0, "pool made");
  tap_ok(bfc_alloc_fit(p, 1000, 5, &a, &held) == -ENOSPC, "an empty pool: -ENOSPC, no growth");
  bfc_stats(p, &st);
  tap_ok(st.num_regions == 0 && st.num_ooms == 0, "... no region made, no refusal counted");
  tap_ok(bfc_alloc(p, 1000, &a) == 0 && bfc_free(p, a) == 0, "a region made by bfc_alloc");
  tap_ok(bfc_alloc_fit(p, 1000, 5, &b, &held) == 0 && b == a && held == 1024,
         "a free chunk that fits is handed out, with its size");
  uint8_t tag = 0;
  tap_ok(bfc_lookup_tagged(p, b, NULL, NULL, NULL, &tag) == 0 && tag == 5, "... and its tag");
  tap_ok(bfc_alloc_fit(p, 4 * MiB, 0, &a, &held) == -ENOSPC,
         "larger than every free chunk: -ENOSPC");
  bfc_stats(p, &st);
  tap_ok(st.num_regions == 1 && st.num_ooms == 0 && bfc_check(p) == 0,
         "... the pool neither grew nor counted a refusal, and is intact");
  tap_ok(bfc_alloc_fit(p, 0, 0, &a, &held) == -EINVAL, "0 bytes: -EINVAL");
  tap_ok(bfc_alloc_fit(p, UINT64_MAX, 0, &a, &held) == -ENOSPC,
         "too large to round: -ENOSPC (the full call refuses it)");
  bfc_destroy(p);
  fake_fini(&fp);
}

int main(void) {
  test_alloc_fit();
  test_classes();
  test_take_put();
  test_limits();
  test_drain_from();
  test_model();
  return tap_done();
}
