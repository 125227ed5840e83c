/* Randomized test of core/bfc against a reference model.
 *
 * The model keeps every in-use and deferred block in an address-sorted interval array, so each
 * new block is checked against its neighbours for overlap (live blocks never overlap, deferred
 * blocks are never handed out), and it recomputes every counter; after every step the pool's
 * stats must equal the model's exactly. Best fit is verified against a walk of the free chunks.
 * Short runs check bfc_check() and best fit after every step; long runs (200k ops per seed)
 * every few steps. Seeds, pool shapes and primitive refusals vary per run. Prints TAP.
 */
#include "core/bfc.h"
#include "tests/tap.h"
#include "tests/unit/test_bfc_prim.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((uint64_t)1 << 20)
enum { MAXLIVE = 4096 };

typedef struct blk {
  uint64_t addr, size, req, ticket;
} blk_t;

typedef struct model {
  blk_t live[MAXLIVE];
  int nlive;
  blk_t def[MAXLIVE];
  int ndef;
  blk_t occ[2 * MAXLIVE]; /* live and deferred, sorted by addr */
  int nocc;
  uint64_t in_use, requested, deferred, allocs, ooms, eagains, seq;
} model_t;

static model_t m;
static fake_prim_t fake;
static uint64_t rng;
static int failures;
static char why[256];

static uint64_t rnd(void) {
  return fake_rand(&rng);
}

static void fail(const char *msg, long long a, long long b) {
  if (failures++ == 0) {
    snprintf(why, sizeof(why), "%s (%lld vs %lld)", msg, a, b);
  }
}

static int occ_find(uint64_t addr) {
  int lo = 0, hi = m.nocc;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (m.occ[mid].addr < addr) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

static void occ_add(blk_t b) {
  int i = occ_find(b.addr);
  if (i < m.nocc && m.occ[i].addr < b.addr + b.size) {
    fail("overlap with the next block", (long long)b.addr, (long long)m.occ[i].addr);
  }
  if (i > 0 && m.occ[i - 1].addr + m.occ[i - 1].size > b.addr) {
    fail("overlap with the previous block", (long long)b.addr, (long long)m.occ[i - 1].addr);
  }
  memmove(&m.occ[i + 1], &m.occ[i], (size_t)(m.nocc - i) * sizeof(blk_t));
  m.occ[i] = b;
  m.nocc++;
}

static void occ_del(uint64_t addr) {
  int i = occ_find(addr);
  if (i == m.nocc || m.occ[i].addr != addr) {
    fail("model lost a block", (long long)addr, 0);
    return;
  }
  memmove(&m.occ[i], &m.occ[i + 1], (size_t)(m.nocc - i - 1) * sizeof(blk_t));
  m.nocc--;
}

typedef struct fit {
  uint64_t rounded, addr, size;
  int found;
} fit_t;

static int fit_visit(void *ctx, const bfc_chunk_info_t *c) {
  fit_t *f = ctx;
  if (c->state == BFC_FREE && c->size >= f->rounded &&
      (!f->found || c->size < f->size || (c->size == f->size && c->addr < f->addr))) {
    f->found = 1;
    f->addr = c->addr;
    f->size = c->size;
  }
  return 0;
}

static void compare_stats(bfc_pool_t *p, uint64_t limit) {
  bfc_stats_t s;
  bfc_stats(p, &s);
  if (s.num_in_use != (uint64_t)m.nlive || s.bytes_in_use != m.in_use ||
      s.bytes_requested_in_use != m.requested || s.num_deferred != (uint64_t)m.ndef ||
      s.deferred_bytes != m.deferred || s.num_allocs != m.allocs || s.num_ooms != m.ooms ||
      s.num_eagain != m.eagains) {
    fail("stats differ from the model", (long long)s.bytes_in_use, (long long)m.in_use);
  }
  if (s.pool_bytes != fake.outstanding || s.pool_bytes > limit) {
    fail("pool_bytes", (long long)s.pool_bytes, (long long)fake.outstanding);
  }
  if (s.free_bytes != s.pool_bytes - s.bytes_in_use - s.deferred_bytes ||
      s.largest_free_block_bytes > s.free_bytes) {
    fail("free bytes", (long long)s.free_bytes, (long long)s.largest_free_block_bytes);
  }
}

static void full_check(bfc_pool_t *p) {
  int bad = bfc_check(p);
  if (bad != 0) {
    fail("bfc_check", bad, 0);
  }
  for (int i = 0; i < m.nlive; i++) {
    uint64_t base = 0, size = 0, req = 0;
    if (bfc_lookup(p, m.live[i].addr, &base, &size, &req) != 0 || base != m.live[i].addr ||
        size != m.live[i].size || req != m.live[i].req) {
      fail("live block lookup", (long long)m.live[i].addr, (long long)base);
    }
  }
}

static uint64_t pick_size(uint64_t limit) {
  unsigned maxbits = 0;
  while (((uint64_t)2 << maxbits) <= limit / 6) {
    maxbits++;
  }
  unsigned bits = (unsigned)(rnd() % (maxbits + 1));
  return 1 + rnd() % ((uint64_t)1 << bits);
}

/* Retires the deferred blocks up to def[upto - 1] (the list is oldest first). */
static void retire_prefix(bfc_pool_t *p, int upto) {
  if (bfc_defer_mark(p) != m.seq) {
    fail("defer mark", (long long)bfc_defer_mark(p), (long long)m.seq);
  }
  uint64_t n =
      upto == m.ndef ? bfc_retire(p) : bfc_retire_upto(p, upto == 0 ? 0 : m.def[upto - 1].ticket);
  if (n != (uint64_t)upto) {
    fail("retire count", (long long)n, upto);
  }
  for (int i = 0; i < upto; i++) {
    occ_del(m.def[i].addr);
    m.deferred -= m.def[i].size;
  }
  memmove(&m.def[0], &m.def[upto], (size_t)(m.ndef - upto) * sizeof(blk_t));
  m.ndef -= upto;
}

static void retire_all(bfc_pool_t *p) {
  retire_prefix(p, m.ndef);
}

static void do_alloc(bfc_pool_t *p, uint64_t limit, int verify_fit) {
  uint64_t bytes = pick_size(limit);
  uint64_t rounded = bfc_round(bytes);
  fit_t f = {rounded, 0, 0, 0};
  if (verify_fit) {
    bfc_walk(p, fit_visit, &f);
  }
  uint64_t a = 0;
  int rc = bfc_alloc(p, bytes, &a);
  if (rc == -EAGAIN) {
    m.eagains++;
    if (m.ndef == 0) {
      fail("-EAGAIN without deferred chunks", 0, 0);
    }
    retire_all(p);
    if (verify_fit) {
      f.found = 0;
      bfc_walk(p, fit_visit, &f);
    }
    rc = bfc_alloc(p, bytes, &a);
    if (rc == -EAGAIN) {
      fail("-EAGAIN right after retire", 0, 0);
    }
  }
  if (rc == -ENOMEM) {
    m.ooms++;
    if (m.ndef != 0) {
      fail("-ENOMEM while deferred chunks exist", m.ndef, 0);
    }
    if (verify_fit && f.found) {
      fail("-ENOMEM although a free chunk fits", (long long)f.size, (long long)rounded);
    }
    return;
  }
  if (rc != 0) {
    fail("unexpected alloc error", rc, 0);
    return;
  }
  if (verify_fit && f.found && a != f.addr) {
    fail("not the best fit", (long long)a, (long long)f.addr);
  }
  uint64_t base = 0, size = 0, req = 0;
  if (bfc_lookup(p, a, &base, &size, &req) != 0 || base != a || req != bytes) {
    fail("lookup of a new block", (long long)a, (long long)base);
  }
  uint64_t rest = size - rounded;
  uint64_t keep = rounded >> 7 > 256 ? rounded >> 7 : 256;
  if (size < rounded || (a & 255) != 0 || rest >= keep) {
    fail("chunk size breaks the split rule", (long long)size, (long long)rounded);
  }
  if (!bfc_owns(p, a) || !bfc_owns(p, a + size - 1)) {
    fail("block outside the regions", (long long)a, (long long)size);
  }
  blk_t b = {a, size, bytes, 0};
  occ_add(b);
  if (m.nlive == MAXLIVE) {
    fail("model full", 0, 0);
    return;
  }
  m.live[m.nlive++] = b;
  m.in_use += size;
  m.requested += bytes;
  m.allocs++;
}

static void do_free(bfc_pool_t *p, int deferred) {
  if (m.nlive == 0) {
    return;
  }
  int i = (int)(rnd() % (uint64_t)m.nlive);
  blk_t b = m.live[i];
  int rc = deferred ? bfc_free_deferred(p, b.addr) : bfc_free(p, b.addr);
  if (rc != 0) {
    fail("free of a live block", rc, 0);
    return;
  }
  m.live[i] = m.live[--m.nlive];
  m.in_use -= b.size;
  m.requested -= b.req;
  if (deferred) {
    b.ticket = ++m.seq;
    m.def[m.ndef++] = b;
    m.deferred += b.size;
  } else {
    occ_del(b.addr);
  }
}

static void do_bad(bfc_pool_t *p) {
  switch (rnd() % 4) {
  case 0:
    if (m.nlive > 0) {
      blk_t b = m.live[rnd() % (uint64_t)m.nlive];
      uint64_t off = 1 + rnd() % (b.size - 1);
      if (bfc_free(p, b.addr + off) != -EINVAL) {
        fail("interior free not -EINVAL", (long long)off, 0);
      }
      uint64_t base = 0;
      if (bfc_lookup(p, b.addr + off, &base, NULL, NULL) != 0 || base != b.addr) {
        fail("interior lookup", (long long)base, (long long)b.addr);
      }
    }
    break;
  case 1:
    if (m.ndef > 0) {
      blk_t b = m.def[rnd() % (uint64_t)m.ndef];
      if (bfc_free(p, b.addr) != -EALREADY || bfc_free_deferred(p, b.addr) != -EALREADY) {
        fail("free of a deferred block not -EALREADY", 0, 0);
      }
    }
    break;
  case 2:
    if (bfc_free(p, 256 + (rnd() % 1000) * 256) != -ENOENT) {
      fail("free of a foreign pointer not -ENOENT", 0, 0);
    }
    break;
  default:
    if (bfc_free(p, 0) != -ENOENT) {
      fail("free of 0 not -ENOENT", 0, 0);
    }
    break;
  }
}

static void run(uint64_t seed, long ops, int check_every, int fit_every, int mapped) {
  memset(&m, 0, sizeof(m));
  failures = 0;
  why[0] = '\0';
  rng = seed * 0x9E3779B97F4A7C15ull + 1;
  static const uint64_t limits[] = {4 * MiB, 64 * MiB, 1024 * MiB, 64 * MiB + 4096 + 768};
  uint64_t limit = limits[rnd() % 4];
  int growth = (int)(rnd() % 4 != 0);
  bfc_prim_t prim = fake_init(&fake, rnd() % 2 ? MiB : 0);
  fake.refuse_permille = (uint32_t)(rnd() % 2 ? 100 : 0);
  fake.rng = seed + 7;
  bfc_options_t opts = {.limit = limit, .allow_growth = growth};
  if (mapped) {
    /* Units of 64 KiB over twice the limit: fragmentation may need more address space. */
    uint64_t unit = (uint64_t)64 << 10;
    prim = fake_init_mapped(&fake, unit, (2 * limit + unit - 1) / unit * unit, &opts);
    fake.refuse_permille = (uint32_t)(rnd() % 2 ? 50 : 0);
  }
  bfc_pool_t *p = NULL;
  if (bfc_create(&opts, &prim, &p) != 0) {
    tap_ok(0, "create");
    return;
  }
  int target = 20 + (int)(rnd() % 600);
  for (long step = 0; step < ops && failures == 0; step++) {
    unsigned r = (unsigned)(rnd() % 1000);
    int pressure = m.nlive > target;
    if (r < (pressure ? 380u : 560u)) {
      do_alloc(p, limit, step % fit_every == 0);
    } else if (r < 900) {
      do_free(p, rnd() % 10 < 3);
    } else if (r < 930) {
      if (rnd() % 2 == 0 || m.ndef == 0) {
        retire_all(p);
      } else {
        retire_prefix(p, (int)(rnd() % (uint64_t)m.ndef));
      }
    } else if (r < 934) {
      uint64_t released = 0;
      if (rnd() % 2 == 0) {
        bfc_trim(p, &released);
      } else {
        bfc_trim_to(p, rnd() % (limit + 1), &released);
      }
    } else if (r < 936 && rnd() % 8 == 0) {
      while (m.nlive > 0) {
        do_free(p, rnd() % 10 < 3);
      }
    } else {
      do_bad(p);
    }
    compare_stats(p, limit);
    if (step % check_every == 0) {
      full_check(p);
    }
    if (step % 50000 == 0) {
      target = 20 + (int)(rnd() % 600);
    }
  }
  full_check(p);
  bfc_stats_t s;
  bfc_stats(p, &s);
  tap_ok(failures == 0, "seed %llu%s: %ld ops, limit %llu, growth %d: %s", (unsigned long long)seed,
         mapped ? " (mapped)" : "", ops, (unsigned long long)limit, growth,
         failures ? why : "model agrees");
  tap_diag("  allocs %llu, ooms %llu, eagain %llu, reserves %llu, releases %llu, refusals %llu",
           (unsigned long long)s.num_allocs, (unsigned long long)s.num_ooms,
           (unsigned long long)s.num_eagain, (unsigned long long)s.driver_alloc_calls,
           (unsigned long long)s.driver_free_calls, (unsigned long long)s.driver_alloc_failures);
  bfc_destroy(p);
  tap_ok(fake.outstanding == 0 && fake.bad_releases == 0,
         "seed %llu: every region released exactly once", (unsigned long long)seed);
  fake_fini(&fake);
}

int main(int argc, char **argv) {
  long scale = argc > 1 ? atol(argv[1]) : 1;
#if defined(GPUCAP_DEBUG) && GPUCAP_DEBUG
  long long_ops = 20000 * scale; /* every operation already runs bfc_check */
#else
  long long_ops = 200000 * scale;
#endif
  for (int mapped = 0; mapped <= 1; mapped++) {
    for (uint64_t seed = 1; seed <= 6; seed++) {
      run(seed, 20000, 1, 1, mapped);
    }
    for (uint64_t seed = 101; seed <= 104; seed++) {
      run(seed, long_ops, 256, 4, mapped);
    }
  }
  return tap_done();
}
