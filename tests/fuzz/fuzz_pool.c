/* fuzz_pool: core/bfc driven by an operation byte stream and checked against a reference model.
 *
 * The input's first bytes choose the pool's shape (limit, growth, gaps between regions); the
 * rest is a sequence of operations: allocations of many scales (zero and SIZE_MAX included),
 * frees, deferred frees, retire, retire up to a mark, trim, lookups, ownership queries, bad
 * frees (interior, double, deferred, foreign) and primitive faults (refusals, errors,
 * misaligned ranges). The model keeps every in-use and deferred block; after each operation
 * bfc_check() must be 0, a walk of the chunks must tile every region and match the model block
 * for block (so no two blocks overlap), and every counter must equal the model's. Best fit, the
 * split rule and every documented error code are checked as they happen. A failed check
 * aborts (libFuzzer records the input). Single-threaded, as the pool requires.
 */
#include "core/bfc.h"
#include "tests/unit/test_bfc_prim.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((uint64_t)1 << 20)
enum { MAXBLK = 256, MAXCHUNKS = 8192 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct blk {
  uint64_t addr, size, req, ticket;
} blk_t;

typedef struct model {
  blk_t live[MAXBLK];
  int nlive;
  blk_t def[MAXBLK]; /* oldest first */
  int ndef;
  uint64_t in_use, requested, deferred, allocs, ooms, eagains, retired, seq, mark;
  uint64_t freed[64]; /* addresses freed earlier, for stale frees */
  unsigned nfreed;
} model_t;

typedef struct input {
  const uint8_t *p;
  size_t n;
} input_t;

static model_t m;
static fake_prim_t fake;
static uint64_t limit;
static bfc_chunk_info_t chunks[MAXCHUNKS];
static int nchunks;

#define require(cond, ...)                                                                         \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_pool: check failed at line %d: %s: ", __LINE__, #cond);                \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

static unsigned byte(input_t *in) {
  if (in->n == 0) {
    return 0;
  }
  in->n--;
  return *in->p++;
}

static uint64_t bytes_le(input_t *in, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) {
    v |= (uint64_t)byte(in) << (8 * i);
  }
  return v;
}

static int walk_collect(void *ctx, const bfc_chunk_info_t *c) {
  (void)ctx;
  require(nchunks < MAXCHUNKS, "too many chunks");
  chunks[nchunks++] = *c;
  return 0;
}

static int region_index(uint64_t addr) {
  for (unsigned i = 0; i < fake.nlive; i++) {
    if (addr >= fake.live[i].base && addr - fake.live[i].base < fake.live[i].size) {
      return (int)i;
    }
  }
  return -1;
}

static int find_live(uint64_t addr) {
  for (int i = 0; i < m.nlive; i++) {
    if (m.live[i].addr == addr) {
      return i;
    }
  }
  return -1;
}

static int find_def(uint64_t addr) {
  for (int i = 0; i < m.ndef; i++) {
    if (m.def[i].addr == addr) {
      return i;
    }
  }
  return -1;
}

/* The in-use block containing addr, or -1. */
static int live_containing(uint64_t addr) {
  for (int i = 0; i < m.nlive; i++) {
    if (addr >= m.live[i].addr && addr - m.live[i].addr < m.live[i].size) {
      return i;
    }
  }
  return -1;
}

/* What bfc_free must answer for addr, by the model (0 for the base of an in-use block). */
static int expected_free_rc(uint64_t addr) {
  if (region_index(addr) < 0) {
    return -ENOENT;
  }
  int i = live_containing(addr);
  if (i < 0) {
    return -EALREADY;
  }
  return m.live[i].addr == addr ? 0 : -EINVAL;
}

/* The full comparison of pool and model, run after every operation. */
static void check_all(bfc_pool_t *p) {
  require(bfc_check(p) == 0, "bfc_check reports %d violations", bfc_check(p));
  nchunks = 0;
  require(bfc_walk(p, walk_collect, NULL) == 0, "walk");
  int in_use = 0, deferred = 0;
  uint64_t regions_bytes = 0;
  for (int i = 0; i < nchunks; i++) {
    const bfc_chunk_info_t *c = &chunks[i];
    require(c->addr % BFC_MIN_ALLOC == 0 && c->size % BFC_MIN_ALLOC == 0 && c->size > 0,
            "chunk %#llx+%llu misaligned", (unsigned long long)c->addr,
            (unsigned long long)c->size);
    int r = region_index(c->addr);
    require(r >= 0 && c->addr + c->size - fake.live[r].base <= fake.live[r].size,
            "chunk %#llx outside every reserved range", (unsigned long long)c->addr);
    if (c->region_start) {
      require(c->addr == fake.live[r].base, "region start");
      regions_bytes += fake.live[r].size;
    } else {
      require(i > 0 && chunks[i - 1].addr + chunks[i - 1].size == c->addr,
              "chunks do not tile the region at %#llx", (unsigned long long)c->addr);
      require(!(c->state == BFC_FREE && chunks[i - 1].state == BFC_FREE), "two free neighbours");
    }
    if (c->state == BFC_IN_USE) {
      int k = find_live(c->addr);
      require(k >= 0 && m.live[k].size == c->size && m.live[k].req == c->requested,
              "in-use chunk %#llx unknown to the model", (unsigned long long)c->addr);
      in_use++;
    } else if (c->state == BFC_DEFERRED) {
      int k = find_def(c->addr);
      require(k >= 0 && m.def[k].size == c->size, "deferred chunk %#llx unknown",
              (unsigned long long)c->addr);
      deferred++;
    } else {
      require(c->state == BFC_FREE && c->requested == 0, "free chunk state");
    }
  }
  require(in_use == m.nlive && deferred == m.ndef,
          "walk found %d in use, %d deferred; model %d, %d", in_use, deferred, m.nlive, m.ndef);
  bfc_stats_t s;
  bfc_stats(p, &s);
  require(s.pool_bytes == fake.outstanding && s.pool_bytes == regions_bytes,
          "pool_bytes %llu, primitive %llu, regions %llu", (unsigned long long)s.pool_bytes,
          (unsigned long long)fake.outstanding, (unsigned long long)regions_bytes);
  require(s.pool_bytes <= limit && s.bytes_limit == limit, "pool above its limit");
  require(s.bytes_in_use == m.in_use && s.bytes_requested_in_use == m.requested &&
              s.num_in_use == (uint64_t)m.nlive,
          "in use %llu vs %llu", (unsigned long long)s.bytes_in_use, (unsigned long long)m.in_use);
  require(s.deferred_bytes == m.deferred && s.num_deferred == (uint64_t)m.ndef, "deferred");
  require(s.num_allocs == m.allocs && s.num_ooms == m.ooms && s.num_eagain == m.eagains &&
              s.num_retired == m.retired,
          "counters");
  require(s.free_bytes == s.pool_bytes - s.bytes_in_use - s.deferred_bytes &&
              s.largest_free_block_bytes <= s.free_bytes,
          "free bytes");
  require(s.peak_bytes_in_use >= s.bytes_in_use && s.peak_pool_bytes >= s.pool_bytes, "peaks");
  uint64_t u = 0, d = 0, f = 0, r = 0;
  bfc_usage(p, &u, &d, &f, &r);
  require(u == s.bytes_in_use && d == s.deferred_bytes && f == s.free_bytes && r == s.pool_bytes,
          "bfc_usage disagrees with bfc_stats");
  require(bfc_defer_mark(p) == m.seq, "defer mark %llu vs %llu",
          (unsigned long long)bfc_defer_mark(p), (unsigned long long)m.seq);
}

/* Best fit by the walk: the smallest free chunk >= rounded, lowest address on ties. */
static int best_fit(uint64_t rounded, uint64_t *addr) {
  int found = 0;
  uint64_t best = 0;
  for (int i = 0; i < nchunks; i++) {
    const bfc_chunk_info_t *c = &chunks[i];
    if (c->state == BFC_FREE && c->size >= rounded &&
        (!found || c->size < best || (c->size == best && c->addr < *addr))) {
      found = 1;
      best = c->size;
      *addr = c->addr;
    }
  }
  return found;
}

static uint64_t pick_size(input_t *in) {
  unsigned sel = byte(in);
  switch (sel % 8) {
  case 0:
    return 1 + bytes_le(in, 1);
  case 1:
  case 2:
    return 1 + bytes_le(in, 2);
  case 3:
    return 1 + bytes_le(in, 3);
  case 4:
    return 1 + bytes_le(in, 4) % (limit + limit / 4);
  case 5:
    return (uint64_t)(bytes_le(in, 1) % 8 + 1) * BFC_MIN_ALLOC; /* exact multiples */
  case 6:
    return UINT64_MAX - bytes_le(in, 2); /* rounding overflows or exceeds any limit */
  default:
    return sel >= 128 ? 0 : limit; /* zero (-EINVAL) or the whole limit */
  }
}

static void note_freed(uint64_t addr) {
  m.freed[m.nfreed++ % 64] = addr;
}

static void retire_upto(bfc_pool_t *p, uint64_t mark) {
  int k = 0;
  while (k < m.ndef && m.def[k].ticket <= mark) {
    k++;
  }
  uint64_t n = mark == UINT64_MAX ? bfc_retire(p) : bfc_retire_upto(p, mark);
  require(n == (uint64_t)k, "retired %llu, model %d", (unsigned long long)n, k);
  for (int i = 0; i < k; i++) {
    m.deferred -= m.def[i].size;
    note_freed(m.def[i].addr);
  }
  memmove(&m.def[0], &m.def[k], (size_t)(m.ndef - k) * sizeof(blk_t));
  m.ndef -= k;
  m.retired += (uint64_t)k;
}

static void do_alloc(bfc_pool_t *p, input_t *in) {
  uint64_t bytes = pick_size(in);
  uint64_t rounded = bfc_round(bytes);
  uint64_t fit_addr = 0;
  int fits = rounded != 0 && best_fit(rounded, &fit_addr);
  int fail_armed = fake.fail_once, misalign_armed = fake.misalign_once != 0;
  uint64_t calls = fake.reserve_calls;
  uint64_t a = 0;
  if (m.nlive == MAXBLK) {
    return;
  }
  int rc = bfc_alloc(p, bytes, &a);
  if (rc == -EAGAIN) {
    m.eagains++;
    require(m.ndef > 0, "-EAGAIN without deferred chunks");
    require(!fits, "-EAGAIN although a free chunk fits");
    check_all(p);
    retire_upto(p, UINT64_MAX);
    check_all(p);
    fits = rounded != 0 && best_fit(rounded, &fit_addr);
    fail_armed = fake.fail_once;
    misalign_armed = fake.misalign_once != 0;
    calls = fake.reserve_calls;
    rc = bfc_alloc(p, bytes, &a);
    require(rc != -EAGAIN, "-EAGAIN right after a full retire");
  }
  switch (rc) {
  case 0:
    break;
  case -EINVAL:
    require(bytes == 0, "-EINVAL for %llu bytes", (unsigned long long)bytes);
    return;
  case -ENOMEM:
    m.ooms++;
    /* bfc.h: -ENOMEM only while nothing is deferred; a size whose rounding overflows is
     * refused at once (retiring could not help), which the contract's wording misses. */
    require(m.ndef == 0 || rounded == 0,
            "-ENOMEM for %llu bytes (limit %llu) while %d chunks are deferred",
            (unsigned long long)bytes, (unsigned long long)limit, m.ndef);
    require(!fits, "-ENOMEM although a free chunk of %llu fits", (unsigned long long)rounded);
    return;
  case -EFAULT:
    require(misalign_armed && fake.reserve_calls > calls, "-EFAULT without a bad range");
    return;
  default:
    require(fail_armed == rc && fake.fail_once == 0, "unexpected error %d", rc);
    return;
  }
  require(bytes != 0 && rounded != 0, "allocated %llu bytes", (unsigned long long)bytes);
  require(a % BFC_MIN_ALLOC == 0, "misaligned block");
  if (fits) {
    require(a == fit_addr, "not the best fit: %#llx, want %#llx", (unsigned long long)a,
            (unsigned long long)fit_addr);
  }
  uint64_t base = 0, size = 0, req = 0;
  require(bfc_lookup(p, a, &base, &size, &req) == 0 && base == a && req == bytes, "lookup");
  uint64_t keep = rounded >> 7 > 256 ? rounded >> 7 : 256;
  require(size >= rounded && size - rounded < keep, "split rule: %llu for %llu",
          (unsigned long long)size, (unsigned long long)rounded);
  require(find_def(a) < 0 && live_containing(a) < 0 && live_containing(a + size - 1) < 0,
          "new block overlaps a live block");
  blk_t b = {a, size, bytes, 0};
  m.live[m.nlive++] = b;
  m.in_use += size;
  m.requested += bytes;
  m.allocs++;
}

static void do_free(bfc_pool_t *p, input_t *in, int deferred) {
  if (m.nlive == 0) {
    return;
  }
  int i = (int)(byte(in) % (unsigned)m.nlive);
  blk_t b = m.live[i];
  int rc = deferred ? bfc_free_deferred(p, b.addr) : bfc_free(p, b.addr);
  require(rc == 0, "free of a live block: %d", rc);
  m.live[i] = m.live[--m.nlive];
  m.in_use -= b.size;
  m.requested -= b.req;
  if (deferred) {
    require(m.ndef < MAXBLK, "deferred list full");
    b.ticket = ++m.seq;
    m.def[m.ndef++] = b;
    m.deferred += b.size;
  } else {
    note_freed(b.addr);
  }
}

/* An address for the bad-free and lookup operations. */
static uint64_t pick_addr(input_t *in) {
  unsigned sel = byte(in) % 6;
  uint64_t off = bytes_le(in, 2);
  if (sel == 0 && m.nlive > 0) {
    blk_t b = m.live[off % (unsigned)m.nlive];
    return b.addr + 1 + bytes_le(in, 3) % (b.size - 1);
  }
  if (sel == 1 && m.ndef > 0) {
    return m.def[off % (unsigned)m.ndef].addr + (byte(in) & 1 ? 256 : 0);
  }
  if (sel == 2 && m.nfreed > 0) {
    return m.freed[off % (m.nfreed < 64 ? m.nfreed : 64)];
  }
  if (sel == 3 && fake.nlive > 0) {
    unsigned r = (unsigned)(off % fake.nlive);
    return fake.live[r].base + (bytes_le(in, 3) % (fake.live[r].size + 512));
  }
  if (sel == 4) {
    return bytes_le(in, 8);
  }
  return 0;
}

static void do_bad_free(bfc_pool_t *p, input_t *in) {
  uint64_t addr = pick_addr(in);
  int want = expected_free_rc(addr);
  if (want == 0) {
    return; /* a real free, not a bad one */
  }
  int deferred = byte(in) & 1;
  int rc = deferred ? bfc_free_deferred(p, addr) : bfc_free(p, addr);
  require(rc == want, "free(%#llx) = %d, want %d", (unsigned long long)addr, rc, want);
}

static void do_lookup(bfc_pool_t *p, input_t *in) {
  uint64_t addr = pick_addr(in);
  uint64_t base = 1, size = 1, req = 1;
  int rc = bfc_lookup(p, addr, &base, &size, &req);
  int i = live_containing(addr);
  if (i < 0) {
    require(rc == -ENOENT, "lookup(%#llx) = %d, want -ENOENT", (unsigned long long)addr, rc);
  } else {
    require(rc == 0 && base == m.live[i].addr && size == m.live[i].size && req == m.live[i].req,
            "lookup(%#llx) = %d", (unsigned long long)addr, rc);
  }
  require(bfc_owns(p, addr) == (region_index(addr) >= 0), "bfc_owns(%#llx)",
          (unsigned long long)addr);
}

static void do_trim(bfc_pool_t *p) {
  uint64_t before = fake.outstanding, released = 0;
  int rc = bfc_trim(p, &released);
  require(rc == 0, "trim with a healthy primitive: %d", rc);
  require(before - fake.outstanding == released, "trim released %llu, primitive saw %llu",
          (unsigned long long)released, (unsigned long long)(before - fake.outstanding));
}

static void do_report(bfc_pool_t *p, input_t *in) {
  static char buf[16384];
  size_t cap = bytes_le(in, 2) % sizeof buf;
  uint64_t request = byte(in) & 1 ? pick_size(in) : 0;
  memset(buf, 0x5a, sizeof buf);
  size_t n = bfc_format_report(p, request, cap ? buf : NULL, cap);
  if (cap > 0) {
    size_t len = strnlen(buf, cap);
    require(len < cap && len == (n < cap ? n : cap - 1), "report length %zu of %zu (cap %zu)", len,
            n, cap);
  }
  require((unsigned char)buf[cap] == 0x5a, "report wrote past its buffer");
}

static void do_fault(input_t *in) {
  switch (byte(in) % 5) {
  case 0:
    fake.fail_once = -EIO;
    break;
  case 1:
    fake.fail_once = -ENOMEM;
    break;
  case 2:
    fake.misalign_once = 64 + 64 * (byte(in) % 3);
    break;
  case 3:
    fake.refuse_above = fake.refuse_above ? 0 : (uint64_t)(byte(in) + 1) * MiB / 4;
    break;
  default:
    fake.refuse_permille = fake.refuse_permille ? 0 : 300;
    break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const uint64_t limits[] = {256,     1000,           4096,       1 * MiB,
                                    4 * MiB, 64 * MiB + 768, 1024 * MiB, ((uint64_t)1 << 40)};
  input_t in = {data, size};
  memset(&m, 0, sizeof m);
  unsigned shape = byte(&in);
  limit = limits[shape % 8];
  bfc_prim_t prim = fake_init(&fake, (shape >> 3) & 1 ? MiB : 0);
  fake.rng = 0x9e3779b97f4a7c15ull ^ bytes_le(&in, 2);
  bfc_options_t opts = {.limit = limit, .allow_growth = (shape >> 4) % 4 != 0};
  bfc_pool_t *p = NULL;
  require(bfc_create(&opts, &prim, &p) == 0 && p != NULL, "create");
  check_all(p);
  for (int ops = 0; in.n > 0 && ops < 512; ops++) {
    unsigned op = byte(&in);
    switch (op % 16) {
    case 0:
    case 1:
    case 2:
    case 3:
      do_alloc(p, &in);
      break;
    case 4:
    case 5:
      do_free(p, &in, 0);
      break;
    case 6:
    case 7:
      do_free(p, &in, 1);
      break;
    case 8:
      retire_upto(p, UINT64_MAX);
      break;
    case 9:
      m.mark = bfc_defer_mark(p);
      break;
    case 10:
      retire_upto(p, m.mark);
      break;
    case 11:
      do_trim(p);
      break;
    case 12:
      do_lookup(p, &in);
      break;
    case 13:
      do_bad_free(p, &in);
      break;
    case 14:
      do_fault(&in);
      break;
    default:
      do_report(p, &in);
      break;
    }
    check_all(p);
  }
  bfc_destroy(p);
  require(fake.outstanding == 0 && fake.nlive == 0, "destroy left %llu bytes reserved",
          (unsigned long long)fake.outstanding);
  require(fake.bad_releases == 0, "%llu releases of ranges never reserved",
          (unsigned long long)fake.bad_releases);
  return 0;
}
