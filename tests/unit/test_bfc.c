/* Unit tests for core/bfc: exact best fit, split and merge, TensorFlow growth and backoff,
 * preallocation, garbage collection, the limit, deferred frees and -EAGAIN, bad frees, lookups,
 * stats and fragmentation. Every scenario runs over the fake primitive in test_bfc_prim.h and
 * ends with bfc_check() == 0. Prints TAP.
 */
#include "core/bfc.h"
#include "tests/tap.h"
#include "tests/unit/test_bfc_prim.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

static fake_prim_t fake;

static bfc_pool_t *mk(uint64_t limit, int growth, uint64_t gap) {
  bfc_prim_t prim = fake_init(&fake, gap);
  bfc_options_t opts = {.limit = limit, .allow_growth = growth};
  bfc_pool_t *p = NULL;
  if (bfc_create(&opts, &prim, &p) != 0) {
    tap_ok(0, "bfc_create");
  }
  return p;
}

static uint64_t must(bfc_pool_t *p, uint64_t bytes) {
  uint64_t a = 0;
  int rc = bfc_alloc(p, bytes, &a);
  if (rc != 0) {
    tap_ok(0, "alloc %llu failed with %d", (unsigned long long)bytes, rc);
    return UINT64_MAX;
  }
  return a;
}

static uint64_t chunk_size(bfc_pool_t *p, uint64_t a) {
  uint64_t s = 0;
  return bfc_lookup(p, a, NULL, &s, NULL) == 0 ? s : 0;
}

static bfc_stats_t stats(bfc_pool_t *p) {
  bfc_stats_t s;
  bfc_stats(p, &s);
  return s;
}

static void done(bfc_pool_t *p, const char *what) {
  TAP_EQ(bfc_check(p), 0, "%s: bfc_check", what);
  bfc_destroy(p);
  TAP_EQ(fake.outstanding, 0, "%s: destroy released every region", what);
  TAP_EQ(fake.bad_releases, 0, "%s: releases matched reserves", what);
}

static void test_args(void) {
  fake_prim_t f;
  bfc_prim_t prim = fake_init(&f, 0);
  bfc_options_t opts = {.limit = MiB, .allow_growth = 1};
  bfc_pool_t *p = NULL;
  TAP_EQ(bfc_create(NULL, &prim, &p), -EINVAL, "create: NULL options");
  TAP_EQ(bfc_create(&opts, NULL, &p), -EINVAL, "create: NULL primitive");
  TAP_EQ(bfc_create(&opts, &prim, NULL), -EINVAL, "create: NULL out");
  bfc_options_t zero = {.limit = 0, .allow_growth = 1};
  TAP_EQ(bfc_create(&zero, &prim, &p), -EINVAL, "create: zero limit");
  bfc_prim_t broken = prim;
  broken.release = NULL;
  TAP_EQ(bfc_create(&opts, &broken, &p), -EINVAL, "create: NULL release");

  p = mk(MiB, 1, 0);
  uint64_t a = 0;
  TAP_EQ(fake.reserve_calls, 0, "create reserves nothing");
  TAP_EQ(bfc_alloc(p, 0, &a), -EINVAL, "alloc of 0 bytes is -EINVAL");
  TAP_EQ(bfc_alloc(p, 1, NULL), -EINVAL, "alloc with NULL out is -EINVAL");
  TAP_EQ(bfc_alloc(NULL, 1, &a), -EINVAL, "alloc with NULL pool is -EINVAL");
  TAP_EQ(bfc_alloc(p, UINT64_MAX, &a), -ENOMEM, "alloc of UINT64_MAX is -ENOMEM");
  TAP_EQ(bfc_alloc(p, MiB + 1, &a), -ENOMEM, "alloc above the limit is -ENOMEM");
  TAP_EQ(stats(p).num_ooms, 2, "both counted as OOMs");
  TAP_EQ(stats(p).num_allocs, 0, "no successful alloc counted");
  TAP_EQ(fake.reserve_calls, 0, "impossible requests never reach the primitive");

  TAP_EQ(bfc_round(0), 0, "round(0)");
  TAP_EQ(bfc_round(1), 256, "round(1)");
  TAP_EQ(bfc_round(256), 256, "round(256)");
  TAP_EQ(bfc_round(257), 512, "round(257)");
  TAP_EQ(bfc_round(UINT64_MAX - 255), UINT64_MAX - 255, "round(max aligned)");
  TAP_EQ(bfc_round(UINT64_MAX - 254), 0, "round overflow gives 0");

  a = must(p, 1);
  TAP_EQ(chunk_size(p, a), 256, "1 byte takes a 256-byte chunk");
  TAP_EQ(a % 256, 0, "addresses are 256-aligned");
  uint64_t b = must(p, 257);
  TAP_EQ(chunk_size(p, b), 512, "257 bytes take 512");
  TAP_EQ(b, a + 256, "second block follows the first");
  done(p, "args");
}

static void test_min_system_memory(void) {
  TAP_EQ(bfc_min_system_memory(GiB, 9), 225 * MiB, "min sys mem: <2GiB free -> 225MiB");
  TAP_EQ(bfc_min_system_memory(2 * GiB - 1, 6), 225 * MiB, "min sys mem: just under 2GiB");
  TAP_EQ(bfc_min_system_memory(2 * GiB, 6), 500 * MiB, "min sys mem: cc 6 -> 500MiB");
  TAP_EQ(bfc_min_system_memory(80 * GiB, 3), 500 * MiB, "min sys mem: cc 3 -> 500MiB");
  TAP_EQ(bfc_min_system_memory(80 * GiB, 7), 1050 * MiB, "min sys mem: cc 7 -> 1050MiB");
  TAP_EQ(bfc_min_system_memory(80 * GiB, 8), 1536 * MiB, "min sys mem: cc 8 -> 1536MiB");
  TAP_EQ(bfc_min_system_memory(80 * GiB, 9), 1800 * MiB, "min sys mem: cc 9 -> 1800MiB");
  TAP_EQ(bfc_min_system_memory(80 * GiB, 12), 1800 * MiB, "min sys mem: cc 12 -> 1800MiB");
}

static void test_growth(void) {
  bfc_pool_t *p = mk(GiB, 1, MiB);
  must(p, MiB);
  must(p, MiB);
  must(p, MiB);
  must(p, 3 * MiB);
  must(p, MiB);
  TAP_EQ(fake.nok, 3, "growth: three regions");
  TAP_EQ(fake.ok_sizes[0], 2 * MiB, "growth: first region 2MiB");
  TAP_EQ(fake.ok_sizes[1], 4 * MiB, "growth: then 4MiB");
  TAP_EQ(fake.ok_sizes[2], 8 * MiB, "growth: then 8MiB");
  TAP_EQ(stats(p).pool_bytes, 14 * MiB, "growth: pool_bytes sums regions");
  TAP_EQ(stats(p).driver_alloc_calls, 3, "growth: driver_alloc_calls");
  done(p, "growth");

  p = mk(GiB, 1, MiB);
  must(p, 2 * MiB);
  must(p, 20 * MiB);
  must(p, 13 * MiB);
  must(p, 70 * MiB);
  must(p, 40 * MiB);
  TAP_EQ(fake.nok, 4, "jump: four regions");
  TAP_EQ(fake.ok_sizes[0], 2 * MiB, "jump: 2MiB");
  TAP_EQ(fake.ok_sizes[1], 20 * MiB, "jump: a 20MiB request gets a region of its own size");
  TAP_EQ(fake.ok_sizes[2], 80 * MiB, "jump: then the doubling resumes from 4 x 20MiB");
  TAP_EQ(fake.ok_sizes[3], 160 * MiB, "jump: and doubles");
  done(p, "jump");

  /* Three 300 MiB blocks under 1 GiB: the jump to 512 MiB stranded 212 MiB (issue 13). */
  p = mk(GiB, 1, MiB);
  must(p, 300 * MiB);
  must(p, 300 * MiB);
  must(p, 300 * MiB);
  TAP_EQ(fake.ok_sizes[0], 300 * MiB, "300MiB: the first region is the request");
  TAP_EQ(fake.ok_sizes[1], 724 * MiB, "300MiB: the next, 1200MiB, clipped to the headroom");
  done(p, "300MiB");

  p = mk(10 * MiB, 1, MiB);
  must(p, 2 * MiB);
  must(p, 4 * MiB);
  must(p, 3 * MiB);
  TAP_EQ(fake.ok_sizes[2], 4 * MiB, "clip: third region clipped to the 4MiB headroom");
  TAP_EQ(stats(p).pool_bytes, 10 * MiB, "clip: pool reaches the limit exactly");
  must(p, MiB);
  uint64_t a = 0;
  TAP_EQ(bfc_alloc(p, 256, &a), -ENOMEM, "clip: full pool at the limit is -ENOMEM");
  TAP_EQ(stats(p).num_ooms, 1, "clip: num_ooms");
  TAP_EQ(fake.reserve_calls, 3, "clip: no reserve tried without headroom");
  done(p, "clip");

  p = mk(10 * MiB + 100, 1, MiB);
  must(p, 2 * MiB);
  must(p, 4 * MiB);
  must(p, 3 * MiB);
  TAP_EQ(fake.ok_sizes[2], 4 * MiB, "odd limit: headroom rounds down to 256");
  done(p, "odd limit");

  p = mk(3 * MiB, 1, MiB);
  must(p, 256);
  TAP_EQ(stats(p).pool_bytes, 2 * MiB, "limit: 256 bytes in use reserve 2MiB");
  TAP_EQ(bfc_alloc(p, 2 * MiB, &a), -ENOMEM,
         "limit counts reserved bytes: 256 in use + 2MiB < 3MiB limit still fails");
  must(p, 2 * MiB - 512);
  must(p, MiB);
  TAP_EQ(stats(p).pool_bytes, 3 * MiB, "limit: last region is the 1MiB headroom");
  done(p, "limit");
}

static uint64_t backoff(uint64_t bytes) {
  uint64_t b = (uint64_t)((double)bytes * 0.9);
  return (b + 255) & ~(uint64_t)255;
}

static void test_backoff(void) {
  bfc_pool_t *p = mk(100 * MiB, 0, MiB);
  fake.refuse_above = 80 * MiB;
  must(p, KiB);
  uint64_t want = 100 * MiB;
  int same = fake.ntried == 4;
  for (unsigned i = 0; i < fake.ntried && same; i++) {
    same = fake.tried[i] == want;
    want = backoff(want);
  }
  tap_ok(same, "prealloc backoff: 100MiB, 90MiB, 81MiB, 72.9MiB (RoundedBytes(x*0.9))");
  TAP_EQ(fake.nok, 1, "prealloc backoff: one region");
  TAP_EQ(stats(p).pool_bytes, fake.tried[3], "prealloc backoff: pool is the accepted size");
  TAP_EQ(stats(p).driver_alloc_failures, 3, "prealloc backoff: three refusals counted");
  done(p, "prealloc backoff");

  p = mk(GiB, 1, MiB);
  fake.refuse_above = 5 * MiB;
  must(p, 2 * MiB);
  must(p, 4 * MiB);
  must(p, 5 * MiB);
  want = 8 * MiB;
  same = 1;
  unsigned i = 2;
  while (want > 5 * MiB && backoff(want) >= 5 * MiB) {
    same = same && fake.tried[i++] == want;
    want = backoff(want);
  }
  same = same && fake.tried[i++] == want && fake.tried[i++] == 5 * MiB && i == fake.ntried;
  tap_ok(same, "growth backoff: 8MiB down by 10%% steps, last try exactly the request");
  TAP_EQ(fake.ok_sizes[2], 5 * MiB, "growth backoff: region of exactly the request");
  done(p, "growth backoff");

  p = mk(GiB, 1, MiB);
  fake.refuse_above = MiB;
  uint64_t a = 0;
  TAP_EQ(bfc_alloc(p, 2 * MiB, &a), -ENOMEM, "refused growth is -ENOMEM");
  TAP_EQ(fake.ntried, 1, "refused growth: the request size is tried once, no backoff below it");
  TAP_EQ(stats(p).pool_bytes, 0, "refused growth: pool unchanged");
  fake.refuse_above = 0;
  must(p, 2 * MiB);
  done(p, "refused");

  p = mk(GiB, 1, MiB);
  fake.fail_once = -EIO;
  TAP_EQ(bfc_alloc(p, KiB, &a), -EIO, "a primitive error other than -ENOMEM passes through");
  TAP_EQ(fake.ntried, 1, "no backoff after -EIO");
  TAP_EQ(stats(p).num_ooms, 0, "-EIO is not counted as OOM");
  must(p, KiB);
  fake.misalign_once = 16;
  TAP_EQ(bfc_alloc(p, 4 * MiB, &a), -EFAULT, "a misaligned region is refused with -EFAULT");
  TAP_EQ(fake.nlive, 1, "the misaligned region was released");
  TAP_EQ(stats(p).num_regions, 1, "the pool kept one region");
  done(p, "prim errors");
}

static void test_prealloc(void) {
  bfc_pool_t *p = mk(64 * MiB, 0, MiB);
  TAP_EQ(fake.reserve_calls, 0, "prealloc: nothing before the first alloc");
  uint64_t a = must(p, KiB);
  TAP_EQ(fake.nok, 1, "prealloc: one region");
  TAP_EQ(fake.ok_sizes[0], 64 * MiB, "prealloc: of the whole limit");
  for (int i = 0; i < 63; i++) {
    must(p, MiB);
  }
  TAP_EQ(fake.reserve_calls, 1, "prealloc: 64 allocations, one reserve");
  TAP_EQ(bfc_alloc(p, MiB, &a), -ENOMEM, "prealloc: full");
  done(p, "prealloc");
}

static void test_best_fit(void) {
  bfc_pool_t *p = mk(MiB, 0, 0);
  uint64_t A = must(p, 4 * KiB);
  must(p, KiB);
  uint64_t C = must(p, 8 * KiB);
  must(p, KiB);
  uint64_t E = must(p, 4 * KiB);
  must(p, KiB);
  uint64_t G = must(p, 6 * KiB);
  must(p, KiB);
  bfc_free(p, A);
  bfc_free(p, C);
  bfc_free(p, E);
  bfc_free(p, G);
  TAP_EQ(stats(p).num_free_chunks, 5, "best fit: four holes and the tail");
  TAP_EQ(must(p, 3 * KiB), A, "best fit: 3K -> 4K hole at the lowest address (tie A/E)");
  TAP_EQ(chunk_size(p, A), 3 * KiB, "best fit: the 4K hole was split");
  TAP_EQ(must(p, 4 * KiB), E, "best fit: 4K -> the other 4K hole, not the 1K remainder");
  TAP_EQ(must(p, 5 * KiB), G, "best fit: 5K -> 6K hole");
  TAP_EQ(must(p, 7 * KiB), C, "best fit: 7K -> 8K hole");
  TAP_EQ(must(p, KiB), A + 3 * KiB, "best fit: 1K -> lowest of the two 1K remainders");
  TAP_EQ(must(p, KiB), C + 7 * KiB, "best fit: 1K -> the next-lowest remainder");
  done(p, "best fit");

  /* Within one size class (1MiB + 256 and 1MiB + 512 share a class) the order is exact. */
  p = mk(8 * MiB, 0, 0);
  uint64_t x1 = must(p, MiB + 512);
  must(p, 256);
  uint64_t x2 = must(p, MiB + 256);
  must(p, 256);
  uint64_t x3 = must(p, MiB + 256);
  must(p, 256);
  bfc_free(p, x1);
  bfc_free(p, x3);
  bfc_free(p, x2);
  TAP_EQ(must(p, MiB + 1), x2, "class: smallest size wins over lower address");
  TAP_EQ(must(p, MiB + 256), x3, "class: then the equal-size chunk");
  TAP_EQ(must(p, MiB + 257), x1, "class: then the larger chunk");
  uint64_t tail = must(p, MiB + 300);
  tap_ok(tail > x3, "class: none left in the class -> next class (the tail)");
  done(p, "class");
}

static void test_split_merge(void) {
  bfc_pool_t *p = mk(4 * MiB, 0, 0);
  uint64_t a = must(p, MiB + 4 * KiB);
  must(p, 256);
  bfc_free(p, a);
  uint64_t b = must(p, MiB);
  TAP_EQ(b, a, "split: the hole is reused");
  TAP_EQ(chunk_size(p, b), MiB + 4 * KiB, "split: 4K remainder < 1/128 stays with the block");
  TAP_EQ(stats(p).bytes_in_use, MiB + 4 * KiB + 256, "split: bytes_in_use counts chunk size");
  TAP_EQ(stats(p).bytes_requested_in_use, MiB + 256, "split: requested bytes");
  done(p, "no split");

  p = mk(4 * MiB, 0, 0);
  a = must(p, MiB + 8 * KiB);
  must(p, 256);
  bfc_free(p, a);
  b = must(p, MiB);
  TAP_EQ(chunk_size(p, b), MiB, "split: 8K remainder = 1/128 is split off");
  TAP_EQ(stats(p).num_free_chunks, 2, "split: remainder is a free chunk");
  done(p, "split");

  p = mk(3 * KiB, 0, 0);
  uint64_t x = must(p, KiB), y = must(p, KiB), z = must(p, KiB);
  TAP_EQ(y, x + KiB, "merge: adjacent");
  TAP_EQ(stats(p).num_free_chunks, 0, "merge: region exactly full");
  TAP_EQ(stats(p).fragmentation, 0.0, "fragmentation 0 when nothing is free (0/0 guard)");
  TAP_EQ(stats(p).largest_free_block_bytes, 0, "no free block");
  bfc_free(p, y);
  bfc_free(p, x);
  TAP_EQ(stats(p).num_free_chunks, 1, "merge: with the next chunk");
  bfc_free(p, z);
  TAP_EQ(stats(p).num_free_chunks, 1, "merge: with the previous chunk");
  TAP_EQ(stats(p).largest_free_block_bytes, 3 * KiB, "merge: one 3K chunk");
  x = must(p, KiB);
  y = must(p, KiB);
  z = must(p, KiB);
  bfc_free(p, x);
  bfc_free(p, z);
  TAP_EQ(stats(p).num_free_chunks, 2, "merge: two separate holes");
  bfc_free(p, y);
  TAP_EQ(stats(p).num_free_chunks, 1, "merge: both sides at once");
  done(p, "merge");

  p = mk(GiB, 1, 0);
  uint64_t r1 = must(p, 2 * MiB);
  uint64_t r2 = must(p, 4 * MiB);
  TAP_EQ(r2, r1 + 2 * MiB, "regions: the fake made them adjacent");
  bfc_free(p, r1);
  bfc_free(p, r2);
  TAP_EQ(stats(p).num_free_chunks, 2, "regions: free chunks never merge across regions");
  TAP_EQ(stats(p).largest_free_block_bytes, 4 * MiB, "regions: largest is one region");
  uint64_t r3 = must(p, 6 * MiB);
  tap_ok(r3 >= r2 + 4 * MiB, "regions: 6MiB needs a new region");
  done(p, "regions");
}

static void test_gc(void) {
  bfc_pool_t *p = mk(8 * MiB, 1, MiB);
  uint64_t a = must(p, 2 * MiB), b = must(p, 4 * MiB);
  bfc_free(p, a);
  bfc_free(p, b);
  uint64_t c = must(p, 7 * MiB);
  (void)c;
  TAP_EQ(stats(p).driver_free_calls, 2, "gc: both free regions released");
  TAP_EQ(stats(p).num_regions, 1, "gc: one region left");
  TAP_EQ(fake.ok_sizes[2], 8 * MiB, "gc: then one 8MiB region");
  TAP_EQ(stats(p).pool_bytes, 8 * MiB, "gc: pool at the limit");
  TAP_EQ(stats(p).peak_pool_bytes, 8 * MiB, "gc: peak pool");
  done(p, "gc");

  p = mk(8 * MiB, 1, MiB);
  a = must(p, 2 * MiB);
  b = must(p, 4 * MiB);
  bfc_free(p, a);
  TAP_EQ(bfc_alloc(p, 7 * MiB, &c), -ENOMEM, "gc: useless collection is skipped");
  TAP_EQ(stats(p).driver_free_calls, 0, "gc: nothing released");
  TAP_EQ(stats(p).num_regions, 2, "gc: regions kept");
  done(p, "gc skip");

  p = mk(GiB, 1, MiB);
  a = must(p, 2 * MiB);
  b = must(p, 4 * MiB);
  bfc_free(p, b);
  uint64_t rel = 0;
  TAP_EQ(bfc_trim(p, &rel), 0, "trim: ok");
  TAP_EQ(rel, 4 * MiB, "trim: released the free region");
  TAP_EQ(stats(p).num_regions, 1, "trim: busy region kept");
  bfc_free(p, a);
  bfc_trim(p, &rel);
  TAP_EQ(stats(p).pool_bytes, 0, "trim: pool empty");
  TAP_EQ(fake.outstanding, 0, "trim: primitive has nothing outstanding");
  must(p, MiB);
  TAP_EQ(fake.ok_sizes[2], 8 * MiB, "trim: growth continues doubling");
  done(p, "trim");
}

static void test_deferred(void) {
  bfc_pool_t *p = mk(MiB, 0, 0);
  uint64_t a = must(p, 512 * KiB);
  must(p, 512 * KiB);
  TAP_EQ(bfc_free_deferred(p, a), 0, "deferred: free_deferred");
  bfc_stats_t s = stats(p);
  TAP_EQ(s.bytes_in_use, 512 * KiB, "deferred: left the in-use bytes");
  TAP_EQ(s.deferred_bytes, 512 * KiB, "deferred: counted as deferred");
  TAP_EQ(s.num_deferred, 1, "deferred: one chunk");
  TAP_EQ(s.free_bytes, 0, "deferred: not free");
  TAP_EQ(bfc_lookup(p, a, NULL, NULL, NULL), -ENOENT, "deferred: not found by lookup");
  TAP_EQ(bfc_free(p, a), -EALREADY, "deferred: free again is -EALREADY");
  TAP_EQ(bfc_free_deferred(p, a), -EALREADY, "deferred: defer again is -EALREADY");
  uint64_t x = 0;
  TAP_EQ(bfc_alloc(p, 256 * KiB, &x), -EAGAIN, "deferred: retiring would fit -> -EAGAIN");
  TAP_EQ(stats(p).num_eagain, 1, "deferred: num_eagain");
  TAP_EQ(stats(p).num_ooms, 0, "deferred: not an OOM");
  uint64_t u_use = 0, u_def = 0, u_free = 1, u_res = 0;
  bfc_usage(p, &u_use, &u_def, &u_free, &u_res);
  tap_ok(u_use == 512 * KiB && u_def == 512 * KiB && u_free == 0 && u_res == MiB,
         "usage: in use, deferred, free, reserved");
  bfc_usage(p, NULL, NULL, NULL, NULL);
  TAP_EQ(bfc_retire(p), 1, "deferred: retire returns the count");
  TAP_EQ(bfc_retire(p), 0, "deferred: second retire finds nothing");
  TAP_EQ(must(p, 256 * KiB), a, "deferred: reused after retire");
  TAP_EQ(stats(p).num_retired, 1, "deferred: num_retired");
  done(p, "deferred");

  p = mk(4 * MiB, 0, 0);
  a = must(p, MiB);
  bfc_free_deferred(p, a);
  int never = 1;
  for (int i = 0; i < 3; i++) {
    never = never && must(p, MiB) != a;
  }
  tap_ok(never, "deferred: never handed out while other space exists");
  TAP_EQ(bfc_alloc(p, MiB, &x), -EAGAIN, "deferred: only it is left -> -EAGAIN");
  bfc_retire(p);
  TAP_EQ(must(p, MiB), a, "deferred: then reused");
  done(p, "deferred reuse");

  p = mk(2 * MiB, 1, 0);
  a = must(p, MiB);
  must(p, MiB);
  bfc_free_deferred(p, a);
  TAP_EQ(bfc_alloc(p, MiB + MiB / 2, &x), -EAGAIN,
         "deferred: growth impossible and deferred bytes exist -> -EAGAIN, not -ENOMEM");
  bfc_retire(p);
  TAP_EQ(bfc_alloc(p, MiB + MiB / 2, &x), -ENOMEM, "deferred: after retire -> -ENOMEM");
  TAP_EQ(stats(p).num_ooms, 1, "deferred: one OOM");
  done(p, "deferred oom");

  p = mk(2 * MiB, 0, 0);
  a = must(p, 512 * KiB);
  uint64_t b = must(p, 512 * KiB);
  must(p, MiB);
  bfc_free(p, b);
  bfc_free_deferred(p, a);
  TAP_EQ(bfc_alloc(p, MiB, &x), -EAGAIN, "deferred: run with a free neighbour fits -> -EAGAIN");
  bfc_retire(p);
  TAP_EQ(stats(p).num_free_chunks, 1, "deferred: retired chunk merged with its neighbour");
  TAP_EQ(must(p, MiB), a, "deferred: merged run reused");
  done(p, "deferred run");

  p = mk(GiB, 1, 0);
  a = must(p, MiB);
  must(p, MiB);
  bfc_free_deferred(p, a);
  must(p, 2 * MiB);
  TAP_EQ(stats(p).driver_alloc_calls, 2, "deferred: too small to help -> pool grows instead");
  TAP_EQ(stats(p).num_deferred, 1, "deferred: still deferred");
  TAP_EQ(stats(p).num_eagain, 0, "deferred: no -EAGAIN");
  done(p, "deferred grow");

  p = mk(3 * KiB, 0, 0);
  a = must(p, KiB);
  b = must(p, KiB);
  uint64_t c = must(p, KiB);
  bfc_free_deferred(p, b);
  bfc_free_deferred(p, a);
  bfc_free_deferred(p, c);
  TAP_EQ(bfc_retire(p), 3, "deferred: three retired");
  TAP_EQ(stats(p).num_free_chunks, 1, "deferred: adjacent deferred chunks coalesce");
  TAP_EQ(stats(p).largest_free_block_bytes, 3 * KiB, "deferred: into the whole region");
  done(p, "deferred coalesce");
}

/* The free that reports the block: what the allocation recorded, and nothing on failure. */
static void test_free_deferred_tagged(void) {
  bfc_pool_t *p = mk(MiB, 0, 0);
  uint64_t a = 0, b = 0, held = 0;
  TAP_EQ(bfc_alloc_tagged(p, 1000, 7, &a, &held), 0, "deferred tagged: allocate 1000 bytes");
  TAP_EQ(held, 1024, "deferred tagged: the chunk holds 1024");
  TAP_EQ(bfc_alloc_tagged(p, 5000, 3, &b, NULL), 0, "deferred tagged: a second block");
  uint64_t h = 1, r = 1;
  uint8_t t = 1;
  TAP_EQ(bfc_free_deferred_tagged(p, a + 256, &h, &r, &t), -EINVAL,
         "deferred tagged: an interior pointer is -EINVAL");
  tap_ok(h == 1 && r == 1 && t == 1, "deferred tagged: ... and reports nothing");
  TAP_EQ(bfc_free_deferred_tagged(p, a, &h, &r, &t), 0, "deferred tagged: frees");
  tap_ok(h == 1024 && r == 1000 && t == 7, "deferred tagged: held %llu, requested %llu, tag %u",
         (unsigned long long)h, (unsigned long long)r, (unsigned)t);
  TAP_EQ(stats(p).deferred_bytes, 1024, "deferred tagged: the block is deferred");
  h = r = t = 1;
  TAP_EQ(bfc_free_deferred_tagged(p, a, &h, &r, &t), -EALREADY,
         "deferred tagged: again is -EALREADY");
  tap_ok(h == 1 && r == 1 && t == 1, "deferred tagged: ... and reports nothing");
  TAP_EQ(bfc_free_deferred_tagged(p, b, NULL, NULL, NULL), 0, "deferred tagged: NULL outputs");
  TAP_EQ(stats(p).num_deferred, 2, "deferred tagged: two chunks deferred");
  done(p, "deferred tagged");
}

static void test_retire_upto(void) {
  bfc_pool_t *p = mk(4 * KiB, 0, 0);
  uint64_t a = must(p, KiB), b = must(p, KiB), c = must(p, KiB), d = must(p, KiB);
  TAP_EQ(bfc_defer_mark(p), 0, "mark: 0 before any deferred free");
  bfc_free_deferred(p, a);
  uint64_t m = bfc_defer_mark(p);
  TAP_EQ(m, 1, "mark: counts deferred frees");
  bfc_free_deferred(p, c);
  TAP_EQ(bfc_retire_upto(p, m), 1, "retire_upto: only chunks deferred up to the mark");
  TAP_EQ(stats(p).num_deferred, 1, "retire_upto: the later one stays deferred");
  uint64_t x = 0;
  TAP_EQ(bfc_alloc(p, KiB, &x), 0, "retire_upto: the retired chunk is reusable");
  TAP_EQ(x, a, "retire_upto: and it is the one reused");
  TAP_EQ(bfc_alloc(p, KiB, &x), -EAGAIN, "retire_upto: the newer deferred chunk still blocks");
  TAP_EQ(bfc_retire_upto(p, m), 0, "retire_upto: nothing more up to the old mark");
  m = bfc_defer_mark(p);
  TAP_EQ(bfc_retire_upto(p, m), 1, "retire_upto: the new mark covers it");
  TAP_EQ(must(p, KiB), c, "retire_upto: reused");
  bfc_free_deferred(p, b);
  bfc_free_deferred(p, d);
  TAP_EQ(bfc_retire(p), 2, "retire: everything");
  TAP_EQ(bfc_defer_mark(p), 4, "mark: never goes back");
  done(p, "retire_upto");
}

/* bfc_alloc_nosync: no synchronisation possible (a capture going on), so the deferred chunks
 * are never asked for; the pool grows past them, collects whole free regions, and refuses
 * (an out-of-memory) only when neither helps. */
static void test_nosync(void) {
  bfc_pool_t *p = mk(4 * MiB, 1, 0);
  uint64_t a = must(p, MiB), x = 0, held = 0;
  must(p, MiB);
  bfc_free_deferred(p, a);
  TAP_EQ(bfc_alloc(p, MiB, &x), -EAGAIN, "nosync: the full call would ask to retire");
  TAP_EQ(bfc_alloc_nosync(p, MiB, 5, &x, &held), 0, "nosync: grows instead");
  tap_ok(x != a && held == MiB, "nosync: a new block, not the deferred one");
  TAP_EQ(stats(p).num_deferred, 1, "nosync: the deferred chunk stays deferred");
  TAP_EQ(bfc_alloc_nosync(p, 2 * MiB, 5, &x, &held), -ENOMEM,
         "nosync: past the limit with only deferred bytes left -> -ENOMEM, never -EAGAIN");
  TAP_EQ(stats(p).num_ooms, 1, "nosync: counted as an out-of-memory");
  TAP_EQ(bfc_retire(p), 1, "nosync: retire after the capture");
  TAP_EQ(must(p, MiB), a, "nosync: then the deferred block is reused");
  done(p, "nosync");

  p = mk(4 * MiB, 1, 0);
  a = must(p, 2 * MiB);
  uint64_t b = must(p, 2 * MiB);
  bfc_free_deferred(p, a);
  bfc_free(p, b);
  TAP_EQ(bfc_alloc_nosync(p, 2 * MiB + 256 * KiB, 0, &x, &held), -ENOMEM,
         "nosync: a region holding a deferred chunk is never collected to make room");
  tap_ok(stats(p).pool_bytes == 4 * MiB && stats(p).num_deferred == 1,
         "nosync: both regions kept, the deferred chunk with its region");
  done(p, "nosync collect");
}

typedef struct live {
  uint64_t addr, size, requested;
} live_t;

static int live_intact(bfc_pool_t *p, const live_t *l, int n) {
  for (int i = 0; i < n; i++) {
    uint64_t base = 0, size = 0, req = 0;
    if (bfc_lookup(p, l[i].addr, &base, &size, &req) != 0 || base != l[i].addr ||
        size != l[i].size || req != l[i].requested) {
      return 0;
    }
  }
  return 1;
}

static void test_bad_frees(void) {
  bfc_pool_t *p = mk(MiB, 0, 0);
  live_t l[3];
  uint64_t a = must(p, 1000);
  uint64_t b = must(p, 4 * KiB);
  uint64_t c = must(p, 10 * KiB);
  l[0] = (live_t){a, KiB, 1000};
  l[1] = (live_t){c, 10 * KiB, 10 * KiB};
  bfc_free(p, b);
  l[2] = (live_t){must(p, 300), 512, 300};
  bfc_stats_t before = stats(p);
  uint64_t base = a;
  struct {
    uint64_t addr;
    int want;
    const char *what;
  } cases[] = {
      {0, -ENOENT, "NULL"},
      {base - 256, -ENOENT, "below the region"},
      {base + MiB, -ENOENT, "one past the region"},
      {UINT64_MAX, -ENOENT, "UINT64_MAX"},
      {UINT64_MAX - 255, -ENOENT, "top aligned address"},
      {a + 256, -EINVAL, "interior, aligned"},
      {a + 1, -EINVAL, "interior, unaligned"},
      {c + 10 * KiB - 1, -EINVAL, "last byte of a block"},
      {b + 512, -EALREADY, "inside a free hole"},
      {c + 10 * KiB, -EALREADY, "inside the free tail"},
      {c + 10 * KiB + 1, -EALREADY, "unaligned inside the free tail"},
  };
  int intact = 1;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    TAP_EQ(bfc_free(p, cases[i].addr), cases[i].want, "bad free: %s", cases[i].what);
    TAP_EQ(bfc_free_deferred(p, cases[i].addr), cases[i].want, "bad deferred free: %s",
           cases[i].what);
    bfc_stats_t after = stats(p);
    intact = intact && bfc_check(p) == 0 && live_intact(p, l, 3) &&
             memcmp(&before, &after, sizeof(before)) == 0;
  }
  tap_ok(intact, "bad frees: pool intact, stats unchanged, live blocks valid");
  TAP_EQ(bfc_free(p, l[2].addr), 0, "bad frees: a real free still works");
  TAP_EQ(bfc_free(p, l[2].addr), -EALREADY, "double free is -EALREADY");
  tap_ok(live_intact(p, l, 2), "double free: others intact");
  done(p, "bad frees");
}

static void test_lookup(void) {
  bfc_pool_t *p = mk(MiB, 0, 0);
  uint64_t a = must(p, 1000);
  uint64_t b = must(p, 4 * KiB);
  uint64_t c = must(p, 10 * KiB);
  bfc_free(p, b);
  uint64_t base = 0, size = 0, req = 0;
  TAP_EQ(bfc_lookup(p, a, &base, &size, &req), 0, "lookup: base");
  tap_ok(base == a && size == KiB && req == 1000, "lookup: base, chunk size, requested");
  TAP_EQ(bfc_lookup(p, a + 1023, &base, NULL, NULL), 0, "lookup: last byte");
  TAP_EQ(base, a, "lookup: interior maps to the base");
  TAP_EQ(bfc_lookup(p, a + KiB, &base, NULL, NULL), -ENOENT, "lookup: free chunk is -ENOENT");
  TAP_EQ(bfc_lookup(p, c + 5, &base, &size, NULL), 0, "lookup: interior of the third");
  tap_ok(base == c && size == 10 * KiB, "lookup: right block");
  TAP_EQ(bfc_lookup(p, a + MiB, &base, NULL, NULL), -ENOENT, "lookup: outside");
  TAP_EQ(bfc_owns(p, a), 1, "owns: block");
  TAP_EQ(bfc_owns(p, b), 1, "owns: free chunk");
  TAP_EQ(bfc_owns(p, a + MiB - 1), 1, "owns: last byte of the region");
  TAP_EQ(bfc_owns(p, a + MiB), 0, "owns: past the region");
  TAP_EQ(bfc_owns(p, a - 1), 0, "owns: before the region");
  done(p, "lookup");
}

/* The pointer map keys a block by its 256-byte unit truncated to 32 bits: two blocks 1 TiB apart
 * share a key (and a probe run) and must still be told apart, whichever of them goes first. */
static void test_map_aliases(void) {
  const uint64_t tib = (uint64_t)1 << 40;
  bfc_pool_t *p =
      mk(64 * MiB, 1, tib - 2 * MiB); /* the second region starts 1 TiB after the first */
  uint64_t a = must(p, 2 * MiB);
  uint64_t b = must(p, 3 * MiB);
  TAP_EQ(b - a, tib, "aliases: two blocks 1 TiB apart");
  uint64_t base = 0, size = 0, req = 0;
  TAP_EQ(bfc_lookup(p, a, &base, &size, &req), 0, "aliases: the first is found");
  tap_ok(base == a && size == 2 * MiB && req == 2 * MiB, "aliases: as itself");
  TAP_EQ(bfc_lookup(p, b, &base, &size, &req), 0, "aliases: the second is found");
  tap_ok(base == b && size == 3 * MiB && req == 3 * MiB, "aliases: as itself");
  TAP_EQ(bfc_free(p, a), 0, "aliases: the first freed");
  TAP_EQ(bfc_lookup(p, a, NULL, NULL, NULL), -ENOENT, "aliases: the first is gone");
  TAP_EQ(bfc_free(p, a), -EALREADY, "aliases: freeing it again is a double free");
  TAP_EQ(bfc_lookup(p, b, &base, &size, NULL), 0, "aliases: the second stays");
  tap_ok(base == b && size == 3 * MiB, "aliases: unchanged");
  TAP_EQ(must(p, 2 * MiB - 256), a, "aliases: the first's place reused");
  TAP_EQ(bfc_free(p, b), 0, "aliases: the second freed while the first's place is in use");
  TAP_EQ(bfc_free(p, b), -EALREADY, "aliases: the second's double free");
  TAP_EQ(bfc_lookup(p, a, &base, &size, &req), 0, "aliases: the new block stays");
  tap_ok(base == a && req == 2 * MiB - 256, "aliases: as itself");
  done(p, "aliases");
}

static void test_stats(void) {
  bfc_pool_t *p = mk(MiB, 0, 0);
  must(p, 1000);
  uint64_t b = must(p, 5000);
  must(p, 100000);
  bfc_stats_t s = stats(p);
  TAP_EQ(s.num_allocs, 3, "stats: num_allocs");
  TAP_EQ(s.bytes_in_use, 1024 + 5120 + 100096, "stats: bytes_in_use");
  TAP_EQ(s.bytes_requested_in_use, 106000, "stats: bytes_requested_in_use");
  TAP_EQ(s.largest_alloc_size, 100096, "stats: largest_alloc_size (chunk)");
  TAP_EQ(s.pool_bytes, MiB, "stats: pool_bytes");
  TAP_EQ(s.bytes_limit, MiB, "stats: bytes_limit");
  TAP_EQ(s.largest_free_block_bytes, MiB - 106240, "stats: largest_free_block_bytes");
  TAP_EQ(s.free_bytes, MiB - 106240, "stats: free_bytes");
  TAP_EQ(s.fragmentation, 0.0, "stats: one free chunk -> fragmentation 0");
  TAP_EQ(s.num_in_use, 3, "stats: num_in_use");
  TAP_EQ(s.num_regions, 1, "stats: num_regions");
  bfc_free(p, b);
  s = stats(p);
  TAP_EQ(s.bytes_in_use, 1024 + 100096, "stats: after free");
  TAP_EQ(s.peak_bytes_in_use, 106240, "stats: peak kept");
  TAP_EQ(s.peak_bytes_requested_in_use, 106000, "stats: requested peak kept");
  TAP_EQ(s.num_free_chunks, 2, "stats: two free chunks");
  double want = (double)5120 / (double)(MiB - 106240 + 5120);
  tap_ok(s.fragmentation == want, "stats: fragmentation = (free - largest) / free");
  done(p, "stats");

  p = mk(5 * KiB, 0, 0);
  uint64_t x = must(p, KiB);
  must(p, KiB);
  uint64_t z = must(p, 3 * KiB);
  bfc_free(p, x);
  bfc_free(p, z);
  tap_ok(stats(p).fragmentation == 0.25, "fragmentation: 1K + 3K free -> 0.25");
  done(p, "fragmentation");

  /* Host metadata depends on chunk count, not on pool bytes. */
  uint64_t meta[2];
  uint64_t limits[2] = {MiB, (uint64_t)1 << 40};
  for (int k = 0; k < 2; k++) {
    p = mk(limits[k], 0, 0);
    for (int i = 0; i < 100; i++) {
      must(p, 7 * 256);
    }
    meta[k] = stats(p).host_metadata_bytes;
    done(p, "metadata");
  }
  TAP_EQ(meta[1], meta[0], "host metadata is the same for a 1MiB and a 1TiB pool");
}

int main(void) {
  test_args();
  test_min_system_memory();
  test_growth();
  test_backoff();
  test_prealloc();
  test_best_fit();
  test_split_merge();
  test_gc();
  test_deferred();
  test_free_deferred_tagged();
  test_retire_upto();
  test_nosync();
  test_bad_frees();
  test_lookup();
  test_map_aliases();
  test_stats();
  return tap_done();
}
