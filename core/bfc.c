/* bfc: best-fit-with-coalescing pool (contracts in bfc.h; design in docs/design.md, "Inside
 * the pool").
 *
 * Invariants: chunks tile each region in address order; no two adjacent chunks are free; every
 * free chunk is in the treap of its size class (ordered by size, then address) or is the one
 * designated victim (dv), which best fit compares against the bins' answer, so best fit stays
 * exact; in-use chunks are exactly the pointer map's values; deferred chunks are exactly the
 * deferred list. Not thread-safe: the caller serialises all calls on one pool.
 */
#include "core/bfc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(GPUCAP_DEBUG) && GPUCAP_DEBUG
#include <assert.h>
#define DEBUG_CHECK(p) assert(bfc_check(p) == 0)
#else
#define DEBUG_CHECK(p) ((void)0)
#endif

enum {
  SL_BITS = 5, /* 32 classes per power of two */
  SL_COUNT = 1 << SL_BITS,
  NCLASS = 1664, /* class_of(2^64 - 256) == 1663 */
  NWORDS = NCLASS / 64,
  SLAB_CHUNKS = 256,
  SPLIT_SHIFT = 7, /* split iff remainder >= 256 and >= rounded / 128 */
  STATE_SPARE = 0x7f
};

typedef struct chunk chunk_t;
typedef struct region region_t;

/* One cache line: a tree step or a neighbour check touches a single line. */
struct chunk {
  _Alignas(64) uint64_t addr;
  uint64_t size;
  uint64_t requested; /* bytes asked for while in use or deferred; 0 when free */
  chunk_t *prev;      /* address neighbours inside the region, NULL at its ends */
  chunk_t *next;
  union {
    struct {
      chunk_t *left; /* treap children while free; left also links the spare list */
      chunk_t *right;
    };
    struct {
      chunk_t *dnext;  /* deferred list, oldest first */
      uint64_t ticket; /* order of its bfc_free_deferred call (1, 2, ...) */
    };
  };
  uint32_t prio; /* treap priority (max-heap), fixed when the record is created */
  uint16_t mark; /* scan epoch of retire_would_fit */
  uint8_t state; /* enum bfc_chunk_state, or STATE_SPARE */
  uint8_t tag;   /* the caller's, given to bfc_alloc_tagged (in-use or deferred) */
};

_Static_assert(sizeof(struct chunk) == 64, "a chunk record is one cache line");

struct region {
  uint64_t base;
  uint64_t size;
  chunk_t *first;
  chunk_t *last;
};

struct slab {
  chunk_t chunks[SLAB_CHUNKS];
};

/* The pointer map: an in-use block's base -> its chunk record, in 8-byte slots (open addressing
 * as in core/addrmap.h: linear probing, backward-shift deletion, at most half full). A slot holds
 * the base's 256-byte unit truncated to 32 bits and the record's number (its slab's index x
 * SLAB_CHUNKS + its place + 1; 0: an empty slot). Two bases with the same truncated key (1 TiB
 * apart) are told apart by the record's own address, which the caller reads anyway. Half the
 * bytes of a slot with the whole key and a pointer: on the traces that keep thousands of blocks
 * live, the table is what misses the cache once per alloc and once per free. */
typedef uint64_t pmap_slot_t; /* ref << 32 | key; 0: empty */

static inline uint32_t slot_key(pmap_slot_t s) {
  return (uint32_t)s;
}

static inline uint32_t slot_ref(pmap_slot_t s) {
  return (uint32_t)(s >> 32);
}

typedef struct pmap {
  pmap_slot_t *slots; /* mask + 1 slots, a power of two */
  uint64_t mask;
  uint64_t count;
  unsigned shift; /* 64 - log2(slots) */
} pmap_t;

struct bfc_pool {
  bfc_prim_t prim;
  uint64_t limit;
  int growth;
  uint64_t next_region; /* TensorFlow's curr_region_allocation_bytes_ */
  uint64_t unit;        /* mapped mode (bfc_options_t): 0 in region mode */
  uint64_t space_base;
  uint64_t space_bytes;
  bfc_mapped_t mapped; /* mapped mode's life-time figures */

  chunk_t *bin[NCLASS];
  uint64_t bits[NWORDS]; /* bit c: bin[c] non-empty */
  uint64_t top;          /* bit w: bits[w] != 0 */
  chunk_t *dv;           /* the designated victim: free, in no bin; or NULL */

  pmap_t map; /* in-use block base -> chunk */
  chunk_t *spare;
  uint64_t nspare;
  struct slab **slabs; /* by index: a record's number names its slab and place */
  uint64_t nslabs;
  uint64_t slab_cap;
  chunk_t *deferred;      /* oldest deferred chunk */
  chunk_t *deferred_tail; /* newest */
  uint64_t defer_seq;     /* tickets handed out */

  region_t **regions; /* sorted by base */
  region_t *hint;     /* the region region_of found last, or NULL; cleared when one is freed */
  uint32_t nregions;
  uint32_t region_cap;
  uint16_t epoch;

  bfc_stats_t st; /* the counters bfc_stats() reports; those it computes stay 0 here */
};

/* ---- sizes and classes ---------------------------------------------------------------- */

uint64_t bfc_round(uint64_t bytes) {
  if (bytes > UINT64_MAX - (BFC_MIN_ALLOC - 1)) {
    return 0;
  }
  return (bytes + (BFC_MIN_ALLOC - 1)) & ~(uint64_t)(BFC_MIN_ALLOC - 1);
}

uint64_t bfc_min_system_memory(uint64_t free_bytes, int cc_major) {
  const uint64_t mib = (uint64_t)1 << 20;
  if (free_bytes < ((uint64_t)2 << 30)) {
    return 225 * mib;
  }
  if (cc_major <= 6) {
    return 500 * mib;
  }
  if (cc_major == 7) {
    return 1050 * mib;
  }
  if (cc_major == 8) {
    return 1536 * mib;
  }
  return 1800 * mib;
}

/* Monotone in size: every chunk of class c is smaller than every chunk of class c + 1. Units of
 * 256 bytes below 2 * SL_COUNT are their own class; above, with fl the top bit of u, class
 * (fl - SL_BITS) * SL_COUNT + (u >> (fl - SL_BITS)), the shifted value lying in [SL_COUNT,
 * 2 * SL_COUNT): one formula covers both (fl is at least SL_BITS), with no branch, which random
 * sizes mispredicted about once per pair. */
static inline unsigned class_of(uint64_t size) {
  uint64_t u = size >> 8;
  unsigned sh = 63u - (unsigned)__builtin_clzll(u | SL_COUNT) - SL_BITS;
  return sh * SL_COUNT + (unsigned)(u >> sh);
}

static inline void bit_set(bfc_pool_t *p, unsigned c) {
  p->bits[c >> 6] |= (uint64_t)1 << (c & 63);
  p->top |= (uint64_t)1 << (c >> 6);
}

static inline void bit_clear(bfc_pool_t *p, unsigned c) {
  p->bits[c >> 6] &= ~((uint64_t)1 << (c & 63));
  if (p->bits[c >> 6] == 0) {
    p->top &= ~((uint64_t)1 << (c >> 6));
  }
}

/* First non-empty class >= from, or NCLASS. */
static inline unsigned next_class(const bfc_pool_t *p, unsigned from) {
  if (from >= NCLASS) {
    return NCLASS;
  }
  unsigned w = from >> 6;
  uint64_t b = p->bits[w] & (~(uint64_t)0 << (from & 63));
  if (b != 0) {
    return w * 64 + (unsigned)__builtin_ctzll(b);
  }
  uint64_t t = p->top & (~(uint64_t)0 << (w + 1));
  if (t == 0) {
    return NCLASS;
  }
  w = (unsigned)__builtin_ctzll(t);
  return w * 64 + (unsigned)__builtin_ctzll(p->bits[w]);
}

/* ---- treaps keyed by (size, addr) ----------------------------------------------------- */

static inline int key_less(const chunk_t *a, const chunk_t *b) {
  return a->size < b->size || (a->size == b->size && a->addr < b->addr);
}

/* Joins two treaps where every key of a is below every key of b, storing the result in *link
 * (written directly: no temporary that the caller must reload). */
static inline void treap_merge(chunk_t **link, chunk_t *a, chunk_t *b) {
  while (a != NULL && b != NULL) {
    if (a->prio > b->prio) {
      *link = a;
      link = &a->right;
      a = a->right;
    } else {
      *link = b;
      link = &b->left;
      b = b->left;
    }
  }
  *link = (a != NULL) ? a : b;
}

/* Splits t into keys below x (*lo) and above x (*hi). */
static void treap_split(chunk_t *t, const chunk_t *x, chunk_t **lo, chunk_t **hi) {
  while (t != NULL) {
    if (key_less(t, x)) {
      *lo = t;
      lo = &t->right;
      t = t->right;
    } else {
      *hi = t;
      hi = &t->left;
      t = t->left;
    }
  }
  *lo = NULL;
  *hi = NULL;
}

static void bin_insert(bfc_pool_t *p, chunk_t *x) {
  unsigned c = class_of(x->size);
  chunk_t **link = &p->bin[c];
  if (*link == NULL) { /* an empty class: the only one whose bitmap bit changes */
    x->left = NULL;
    x->right = NULL;
    *link = x;
    bit_set(p, c);
    return;
  }
  while (*link != NULL && (*link)->prio > x->prio) {
    link = key_less(x, *link) ? &(*link)->left : &(*link)->right;
  }
  treap_split(*link, x, &x->left, &x->right);
  *link = x;
}

static void bin_remove(bfc_pool_t *p, chunk_t *x) {
  unsigned c = class_of(x->size);
  chunk_t **link = &p->bin[c];
  while (*link != x) {
    link = key_less(x, *link) ? &(*link)->left : &(*link)->right;
  }
  treap_merge(link, x->left, x->right);
  if (p->bin[c] == NULL) {
    bit_clear(p, c);
  }
}

/* Removes and returns the smallest free chunk >= rounded (lowest address on ties), or NULL.
 * The bins' best candidate is found read-only and compared with the dv before anything moves. */
static chunk_t *take_best(bfc_pool_t *p, uint64_t rounded) {
  unsigned c = class_of(rounded);
  chunk_t **best = NULL;
  chunk_t *dv = p->dv;
  if (p->bits[c >> 6] & ((uint64_t)1 << (c & 63))) {
    chunk_t **link = &p->bin[c];
    while (*link != NULL) {
      if ((*link)->size >= rounded) {
        best = link;
        link = &(*link)->left;
      } else {
        link = &(*link)->right;
      }
    }
  }
  if (best == NULL) {
    c = next_class(p, c + 1);
    if (c != NCLASS) {
      best = &p->bin[c];
      while ((*best)->left != NULL) {
        best = &(*best)->left;
      }
    }
  }
  if (dv != NULL && dv->size >= rounded && (best == NULL || key_less(dv, *best))) {
    p->dv = NULL;
    return dv;
  }
  if (best == NULL) {
    return NULL;
  }
  chunk_t *x = *best;
  treap_merge(best, x->left, x->right); /* also empties the root when x was alone */
  if (p->bin[c] == NULL) {
    bit_clear(p, c);
  }
  return x;
}

static uint64_t largest_free(const bfc_pool_t *p) {
  uint64_t dv = p->dv != NULL ? p->dv->size : 0;
  if (p->top == 0) {
    return dv;
  }
  unsigned w = 63u - (unsigned)__builtin_clzll(p->top);
  unsigned c = w * 64 + 63u - (unsigned)__builtin_clzll(p->bits[w]);
  const chunk_t *x = p->bin[c];
  while (x->right != NULL) {
    x = x->right;
  }
  return x->size > dv ? x->size : dv;
}

/* Makes x the designated victim; the previous one goes to its bin. */
static inline void set_dv(bfc_pool_t *p, chunk_t *x) {
  if (p->dv != NULL) {
    bin_insert(p, p->dv);
  }
  p->dv = x;
}

/* Takes a free chunk out of the free index (its bin, or the dv slot). */
static inline void unindex(bfc_pool_t *p, chunk_t *x) {
  if (x == p->dv) {
    p->dv = NULL;
  } else {
    bin_remove(p, x);
  }
}

/* ---- chunk records -------------------------------------------------------------------- */

/* A record's treap priority is its number times an odd constant (Fibonacci hashing), so the
 * number comes back from it with one multiply by the inverse and needs no field of its own (the
 * record is one full cache line). All priorities differ, and they spread like random ones:
 * treaps of 256 to 10^6 keys ordered as the numbers, or as every 7th number, averaged 0.8 to 1.6
 * x log2 n deep, where random priorities give about 1.4 x. */
#define PRIO_MUL 0x9E3779B1u
#define PRIO_INV 0x0E8B2F51u
_Static_assert(1u == PRIO_MUL * PRIO_INV, "PRIO_INV is PRIO_MUL's inverse modulo 2^32");

static inline uint32_t prio_of_ref(uint32_t ref) {
  return ref * PRIO_MUL;
}

static inline uint32_t ref_of(const chunk_t *c) {
  return c->prio * PRIO_INV;
}

static inline chunk_t *rec_of(const bfc_pool_t *p, uint32_t ref) {
  uint32_t i = ref - 1;
  return &p->slabs[i / SLAB_CHUNKS]->chunks[i % SLAB_CHUNKS];
}

static int add_slab(bfc_pool_t *p) {
  if (p->nslabs >= (UINT32_MAX / SLAB_CHUNKS)) {
    return -ENOMEM; /* record numbers are 32 bits */
  }
  if (p->nslabs == p->slab_cap) {
    uint64_t cap = p->slab_cap ? 2 * p->slab_cap : 16;
    struct slab **grown = realloc(p->slabs, cap * sizeof(*grown));
    if (grown == NULL) {
      return -ENOMEM;
    }
    p->slabs = grown;
    p->slab_cap = cap;
  }
  struct slab *s = aligned_alloc(_Alignof(struct slab), sizeof(*s));
  if (s == NULL) {
    return -ENOMEM;
  }
  memset(s, 0, sizeof(*s));
  uint32_t first = (uint32_t)(p->nslabs * SLAB_CHUNKS) + 1;
  p->slabs[p->nslabs++] = s;
  for (int i = SLAB_CHUNKS - 1; i >= 0; i--) {
    chunk_t *c = &s->chunks[i];
    c->prio = prio_of_ref(first + (uint32_t)i);
    c->state = STATE_SPARE;
    c->left = p->spare;
    p->spare = c;
  }
  p->nspare += SLAB_CHUNKS;
  return 0;
}

/* ---- the pointer map ------------------------------------------------------------------ */

static inline uint32_t pmap_key(uint64_t addr) {
  return (uint32_t)(addr >> 8);
}

static inline uint64_t pmap_home(const pmap_t *m, uint32_t key) {
  return ((uint64_t)key * 0x9E3779B97F4A7C15ull) >> m->shift;
}

static int pmap_alloc(pmap_t *m, unsigned bits) {
  pmap_slot_t *slots = calloc((size_t)1 << bits, sizeof(*slots)); /* all empty: ref 0 */
  if (slots == NULL) {
    return -ENOMEM;
  }
  m->slots = slots;
  m->mask = ((uint64_t)1 << bits) - 1;
  m->shift = 64 - bits;
  m->count = 0;
  return 0;
}

static inline void pmap_insert(pmap_t *m, pmap_slot_t s) {
  uint64_t i = pmap_home(m, slot_key(s));
  while (m->slots[i] != 0) {
    i = (i + 1) & m->mask;
  }
  m->slots[i] = s;
  m->count++;
}

/* Room for count + extra entries at no more than half load, growing (rehashing) if needed; 0 or
 * -ENOMEM (the map unchanged). */
static int pmap_reserve(pmap_t *m, uint64_t extra) {
  uint64_t want = m->count + extra;
  if (2 * want <= m->mask + 1) {
    return 0;
  }
  unsigned bits = 4;
  while (bits < 40 && ((uint64_t)1 << bits) < 2 * want) {
    bits++;
  }
  pmap_t bigger;
  if (pmap_alloc(&bigger, bits) != 0) {
    return -ENOMEM;
  }
  for (uint64_t i = 0; i <= m->mask; i++) {
    if (m->slots[i] != 0) {
      pmap_insert(&bigger, m->slots[i]);
    }
  }
  free(m->slots);
  *m = bigger;
  return 0;
}

/* The slot of the in-use chunk at addr, or the empty slot that ends its probe run. */
static inline uint64_t pmap_find(const bfc_pool_t *p, uint64_t addr) {
  const pmap_t *m = &p->map;
  uint32_t key = pmap_key(addr);
  uint64_t i = pmap_home(m, key);
  for (;;) {
    pmap_slot_t s = m->slots[i];
    if (s == 0 || (slot_key(s) == key && rec_of(p, slot_ref(s))->addr == addr)) {
      return i;
    }
    i = (i + 1) & m->mask;
  }
}

/* The in-use chunk at addr, or NULL. */
static inline chunk_t *map_get(const bfc_pool_t *p, uint64_t addr) {
  uint32_t ref = slot_ref(p->map.slots[pmap_find(p, addr)]);
  return ref != 0 ? rec_of(p, ref) : NULL;
}

/* Adds the in-use chunk c; room was reserved (reserve_meta). */
static inline void map_put(bfc_pool_t *p, const chunk_t *c) {
  pmap_insert(&p->map, (pmap_slot_t)ref_of(c) << 32 | pmap_key(c->addr));
}

/* Removes and returns the in-use chunk at addr, or NULL. */
static inline chunk_t *map_take(bfc_pool_t *p, uint64_t addr) {
  pmap_t *m = &p->map;
  uint32_t key = pmap_key(addr);
  uint64_t i = pmap_home(m, key);
  chunk_t *c;
  for (;;) {
    pmap_slot_t s = m->slots[i];
    if (s == 0) {
      return NULL;
    }
    if (slot_key(s) == key) {
      c = rec_of(p, slot_ref(s));
      if (c->addr == addr) {
        break;
      }
    }
    i = (i + 1) & m->mask;
  }
  /* Backward shift: move later entries of the probe run into the hole unless their home lies
   * cyclically in (hole, j]. */
  uint64_t j = i;
  for (;;) {
    j = (j + 1) & m->mask;
    pmap_slot_t s = m->slots[j];
    if (s == 0) {
      break;
    }
    uint64_t h = pmap_home(m, slot_key(s));
    int stays = (i <= j) ? (i < h && h <= j) : (i < h || h <= j);
    if (!stays) {
      m->slots[i] = s;
      i = j;
    }
  }
  m->slots[i] = 0;
  m->count--;
  return c;
}

/* Host metadata for one operation: two chunk records (new region + split) and a map slot. */
static int reserve_meta(bfc_pool_t *p) {
  if (p->nspare < 2 && add_slab(p) != 0) {
    return -ENOMEM;
  }
  return pmap_reserve(&p->map, 1);
}

static inline chunk_t *chunk_new(bfc_pool_t *p) {
  chunk_t *c = p->spare;
  p->spare = c->left;
  p->nspare--;
  c->mark = 0; /* never equal to a live epoch */
  return c;
}

static inline void chunk_put(bfc_pool_t *p, chunk_t *c) {
  c->state = STATE_SPARE;
  c->left = p->spare;
  p->spare = c;
  p->nspare++;
}

/* ---- regions -------------------------------------------------------------------------- */

static region_t *region_find(const bfc_pool_t *p, uint64_t addr) {
  uint32_t lo = 0;
  uint32_t hi = p->nregions;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    region_t *r = p->regions[mid];
    if (addr < r->base) {
      hi = mid;
    } else if (addr - r->base >= r->size) {
      lo = mid + 1;
    } else {
      return r;
    }
  }
  return NULL;
}

/* The region holding addr, which one must: the one found last when it still does (a split or
 * merge at a region's end, the common case, finds the same region again and again), else by
 * region_find. */
static inline region_t *region_of(bfc_pool_t *p, uint64_t addr) {
  region_t *r = p->hint;
  if (r == NULL || addr - r->base >= r->size) {
    r = region_find(p, addr);
    p->hint = r;
  }
  return r;
}

/* Index of the first region whose base is >= base. */
static uint32_t region_slot(const bfc_pool_t *p, uint64_t base) {
  uint32_t lo = 0;
  uint32_t hi = p->nregions;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (p->regions[mid]->base < base) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

/* 1 iff [base, base + bytes) is aligned, does not wrap and overlaps no region. */
static int placement_ok(const bfc_pool_t *p, uint64_t base, uint64_t bytes) {
  if ((base & (BFC_MIN_ALLOC - 1)) != 0 || base > UINT64_MAX - bytes) {
    return 0;
  }
  uint32_t i = region_slot(p, base);
  if (i < p->nregions && p->regions[i]->base < base + bytes) {
    return 0;
  }
  if (i > 0) {
    const region_t *r = p->regions[i - 1];
    if (r->base + r->size > base) {
      return 0;
    }
  }
  return 1;
}

static chunk_t *chunk_at(const region_t *r, uint64_t addr) {
  chunk_t *c = r->first;
  while (addr - c->addr >= c->size) {
    c = c->next;
  }
  return c;
}

static int region_fully_free(const region_t *r) {
  return r->first->state == BFC_FREE && r->first->size == r->size;
}

static void double_next_region(bfc_pool_t *p) {
  if (p->next_region <= UINT64_MAX / 2) {
    p->next_region *= 2;
  }
}

/* The size of the next region for a request of `rounded` bytes, `avail` (>= rounded) bytes of
 * headroom left: TensorFlow's next size of the doubling (2, 4, 8 MiB...; without growth the
 * whole limit), clipped to the headroom, except that a request larger than that size gets a
 * region of exactly its own size. TensorFlow jumps to the next power of two instead, which
 * strands up to half of it: a 300 MiB block took a 512 MiB region, so three of them did not
 * fit under 1 GiB. Taking a request-sized region near the limit, instead of the headroom, was
 * measured too and needs looser caps (docs/design.md, "Regions never strand"). */
static uint64_t region_bytes(const bfc_pool_t *p, uint64_t rounded, uint64_t avail) {
  uint64_t bytes = p->growth && rounded > p->next_region ? rounded : p->next_region;
  return bytes < avail ? bytes : avail;
}

/* After a region of `bytes` for a request larger than the doubling's next size: the doubling
 * resumes from four times it, so the pool still grows geometrically (1x and 2x needed caps up
 * to 0.25 x peak looser on the bench's traces). */
static void jump_next_region(bfc_pool_t *p, uint64_t bytes) {
  p->next_region = bytes <= UINT64_MAX / 4 ? 4 * bytes : UINT64_MAX;
}

/* Room for one more region in the array; 0 or -ENOMEM. */
static int region_room(bfc_pool_t *p) {
  if (p->nregions < p->region_cap) {
    return 0;
  }
  uint32_t cap = p->region_cap ? 2 * p->region_cap : 16;
  region_t **grown = realloc(p->regions, cap * sizeof(*grown));
  if (grown == NULL) {
    return -ENOMEM;
  }
  p->regions = grown;
  p->region_cap = cap;
  return 0;
}

static int map_extend(bfc_pool_t *p, uint64_t rounded);

/* TensorFlow's Extend: reserve the next region and add it as one free chunk. */
static int extend(bfc_pool_t *p, uint64_t rounded) {
  if (p->unit != 0) {
    return map_extend(p, rounded);
  }
  uint64_t avail = p->limit - p->st.pool_bytes;
  if (p->prim.room != NULL && rounded <= avail) {
    uint64_t room = p->prim.room(p->prim.ctx, rounded);
    avail = room < avail ? room : avail;
  }
  avail &= ~(uint64_t)(BFC_MIN_ALLOC - 1);
  if (rounded > avail) {
    return -ENOMEM;
  }
  if (region_room(p) != 0) {
    return -ENOMEM;
  }
  region_t *r = malloc(sizeof(*r));
  if (r == NULL) {
    return -ENOMEM;
  }
  uint64_t bytes = region_bytes(p, rounded, avail);
  int jumped = p->growth && rounded > p->next_region;
  uint64_t base = 0;
  for (;;) {
    int rc = p->prim.reserve(p->prim.ctx, bytes, &base);
    if (rc == 0) {
      break;
    }
    p->st.driver_alloc_failures++;
    if (rc != -ENOMEM || bytes == rounded) {
      free(r);
      return rc < 0 ? rc : -EIO;
    }
    /* RoundedBytes(bytes * 0.9) without overflow, never below the request, always shrinking. */
    uint64_t next = bfc_round(bytes / 10 * 9 + bytes % 10 * 9 / 10);
    if (next < rounded || next >= bytes) {
      next = rounded;
    }
    bytes = next;
  }
  if (!placement_ok(p, base, bytes)) {
    if (p->prim.release(p->prim.ctx, base, bytes) == 0) {
      p->st.driver_free_calls++;
    } else {
      p->st.driver_free_failures++;
    }
    free(r);
    return -EFAULT;
  }
  p->st.driver_alloc_calls++;
  if (jumped) {
    jump_next_region(p, bytes);
  } else {
    double_next_region(p);
  }
  chunk_t *c = chunk_new(p);
  c->addr = base;
  c->size = bytes;
  c->requested = 0;
  c->prev = NULL;
  c->next = NULL;
  c->state = BFC_FREE;
  r->base = base;
  r->size = bytes;
  r->first = c;
  r->last = c;
  uint32_t i = region_slot(p, base);
  memmove(&p->regions[i + 1], &p->regions[i], (p->nregions - i) * sizeof(*p->regions));
  p->regions[i] = r;
  p->nregions++;
  p->st.pool_bytes += bytes;
  if (p->st.pool_bytes > p->st.peak_pool_bytes) {
    p->st.peak_pool_bytes = p->st.pool_bytes;
  }
  bin_insert(p, c);
  p->st.num_free_chunks++;
  return 0;
}

/* Releases every fully free region; returns the first release error or 0. */
static int release_free_regions(bfc_pool_t *p, uint64_t keep, uint64_t *released) {
  int first_err = 0;
  uint64_t total = 0;
  uint32_t i = 0;
  while (i < p->nregions && p->st.pool_bytes > keep) {
    region_t *r = p->regions[i];
    if (!region_fully_free(r)) {
      i++;
      continue;
    }
    int rc = p->prim.release(p->prim.ctx, r->base, r->size);
    if (rc != 0) {
      p->st.driver_free_failures++;
      if (first_err == 0) {
        first_err = rc < 0 ? rc : -EIO;
      }
      i++;
      continue;
    }
    p->st.driver_free_calls++;
    unindex(p, r->first);
    p->st.num_free_chunks--;
    chunk_put(p, r->first);
    p->st.pool_bytes -= r->size;
    total += r->size;
    memmove(&p->regions[i], &p->regions[i + 1], (p->nregions - i - 1) * sizeof(*p->regions));
    p->nregions--;
    p->hint = p->hint == r ? NULL : p->hint;
    free(r);
  }
  if (released != NULL) {
    *released = total;
  }
  return first_err;
}

static int unmap_free(bfc_pool_t *p, uint64_t keep, uint64_t *released);
static uint64_t unit_up(const bfc_pool_t *p, uint64_t bytes);

/* TensorFlow's DeallocateFreeRegions: 1 iff regions were released to make room. */
static int collect(bfc_pool_t *p, uint64_t rounded) {
  if (p->unit != 0) {
    /* Whole free units, when that leaves room, and only as many as the request needs: growth
     * maps them again, and unmapping more would make the next request map them back. */
    uint64_t whole = 0, released = 0;
    for (uint32_t i = 0; i < p->nregions; i++) {
      for (const chunk_t *c = p->regions[i]->first; c != NULL; c = c->next) {
        uint64_t a = unit_up(p, c->addr), b = (c->addr + c->size) & ~(p->unit - 1);
        whole += c->state == BFC_FREE && b > a ? b - a : 0;
      }
    }
    uint64_t need = unit_up(p, rounded);
    if (whole == 0 || need > p->limit - p->st.pool_bytes + whole) {
      return 0;
    }
    unmap_free(p, p->limit > need ? (p->limit - need) & ~(p->unit - 1) : 0, &released);
    return released > 0;
  }
  uint64_t free_region_bytes = 0;
  for (uint32_t i = 0; i < p->nregions; i++) {
    if (region_fully_free(p->regions[i])) {
      free_region_bytes += p->regions[i]->size;
    }
  }
  if (free_region_bytes == 0 || rounded > p->limit - p->st.pool_bytes + free_region_bytes) {
    return 0;
  }
  uint64_t released = 0;
  release_free_regions(p, 0, &released);
  return released > 0;
}

/* ---- mapped mode (bfc_options_t.unit > 0) --------------------------------------------- */

static uint64_t unit_up(const bfc_pool_t *p, uint64_t bytes) {
  return (bytes + p->unit - 1) & ~(p->unit - 1);
}

static void region_insert_at(bfc_pool_t *p, uint32_t i, region_t *r) {
  memmove(&p->regions[i + 1], &p->regions[i], (p->nregions - i) * sizeof(*p->regions));
  p->regions[i] = r;
  p->nregions++;
}

static void region_remove_at(bfc_pool_t *p, uint32_t i) {
  p->hint = p->hint == p->regions[i] ? NULL : p->hint;
  free(p->regions[i]);
  memmove(&p->regions[i], &p->regions[i + 1], (p->nregions - i - 1) * sizeof(*p->regions));
  p->nregions--;
}

/* Where to map for a request of rounded bytes: the placement that maps the fewest bytes, a
 * free chunk at a region's end or start counting towards the request; *cost bytes at *base.
 * 0, or -ENOMEM when no hole of the address space can hold it. O(regions). */
static int map_place(const bfc_pool_t *p, uint64_t rounded, uint64_t *base, uint64_t *cost) {
  uint64_t best = UINT64_MAX, at = 0, end = p->space_base + p->space_bytes;
  if (rounded > p->space_bytes) {
    return -ENOMEM; /* more than the whole space (and no unit rounding may overflow below) */
  }
  for (uint32_t i = 0; i <= p->nregions; i++) {
    const region_t *l = i > 0 ? p->regions[i - 1] : NULL;
    const region_t *r = i < p->nregions ? p->regions[i] : NULL;
    uint64_t lo = l != NULL ? l->base + l->size : p->space_base;
    uint64_t hi = r != NULL ? r->base : end;
    if (hi <= lo) {
      continue;
    }
    uint64_t h = hi - lo;
    uint64_t tail = l != NULL && l->last->state == BFC_FREE ? l->last->size : 0;
    uint64_t head = r != NULL && r->first->state == BFC_FREE ? r->first->size : 0;
    uint64_t need = rounded > tail ? unit_up(p, rounded - tail) : p->unit;
    if (need <= h && need < best) {
      best = need; /* after l (or alone, when l has no free end) */
      at = lo;
    }
    need = rounded > head ? unit_up(p, rounded - head) : p->unit;
    if (need <= h && need < best) {
      best = need; /* before r */
      at = hi - need;
    }
    if (tail + h + head >= rounded && h < best) {
      best = h; /* the whole hole, joining l and r */
      at = lo;
    }
  }
  if (best == UINT64_MAX) {
    return -ENOMEM;
  }
  if (!p->growth && p->mapped.mapped_total == 0) {
    /* Preallocation: the first mapping is the limit, from the start of the space. */
    uint64_t all = p->limit & ~(p->unit - 1);
    all = all < p->space_bytes ? all : p->space_bytes;
    if (all > best) {
      best = all;
      at = p->space_base;
    }
  }
  *base = at;
  *cost = best;
  return 0;
}

/* Maps what a request of rounded bytes needs and adds it as free memory, joining the regions
 * it touches (a free chunk at their ends merges with it). */
static int map_extend(bfc_pool_t *p, uint64_t rounded) {
  uint64_t base = 0, cost = 0;
  uint64_t avail = (p->limit - p->st.pool_bytes) & ~(p->unit - 1);
  if (map_place(p, rounded, &base, &cost) != 0 || cost > avail) {
    return -ENOMEM;
  }
  if (p->prim.room != NULL && cost > (p->prim.room(p->prim.ctx, cost) & ~(p->unit - 1))) {
    return -ENOMEM; /* the device has not that much left (other processes share it) */
  }
  region_t *fresh = malloc(sizeof(*fresh));
  /* Two chunk records: the new units' and the split of the block served from them (a collect
   * before may have used the ones bfc_alloc set aside). */
  if (fresh == NULL || region_room(p) != 0 || (p->nspare < 2 && add_slab(p) != 0)) {
    free(fresh);
    return -ENOMEM;
  }
  uint64_t at = base;
  int rc = p->prim.reserve(p->prim.ctx, cost, &at);
  if (rc != 0 || at != base) {
    if (rc == 0) { /* a primitive that mapped elsewhere: give it back */
      p->prim.release(p->prim.ctx, at, cost);
      rc = -EFAULT;
    }
    p->st.driver_alloc_failures++;
    free(fresh);
    return rc < 0 ? rc : -EIO;
  }
  p->st.driver_alloc_calls++;
  p->mapped.map_calls++;
  p->mapped.mapped_total += cost;
  p->st.pool_bytes += cost;
  if (p->st.pool_bytes > p->st.peak_pool_bytes) {
    p->st.peak_pool_bytes = p->st.pool_bytes;
  }
  uint64_t hi = base + cost;
  uint32_t i = region_slot(p, base);
  region_t *l =
      i > 0 && p->regions[i - 1]->base + p->regions[i - 1]->size == base ? p->regions[i - 1] : NULL;
  region_t *r = i < p->nregions && p->regions[i]->base == hi ? p->regions[i] : NULL;
  chunk_t *c;
  if (l != NULL && l->last->state == BFC_FREE) {
    c = l->last;
    unindex(p, c);
    p->st.num_free_chunks--;
    c->size += cost;
  } else {
    c = chunk_new(p);
    c->addr = base;
    c->size = cost;
    c->requested = 0;
    c->state = BFC_FREE;
    c->prev = l != NULL ? l->last : NULL;
    c->next = NULL;
    if (l != NULL) {
      l->last->next = c;
    }
  }
  if (l != NULL) {
    l->size += cost;
    l->last = c;
  }
  if (r != NULL) {
    chunk_t *f = r->first;
    chunk_t *last = r->last;
    if (f->state == BFC_FREE) {
      unindex(p, f);
      p->st.num_free_chunks--;
      c->size += f->size;
      c->next = f->next;
      if (f->next != NULL) {
        f->next->prev = c;
      }
      last = last == f ? c : last;
      chunk_put(p, f);
    } else {
      c->next = f;
      f->prev = c;
    }
    if (l != NULL) {
      l->size += r->size;
      l->last = last;
      region_remove_at(p, i);
    } else {
      r->base = base;
      r->size += cost;
      r->first = c;
      r->last = last;
    }
  }
  if (l == NULL && r == NULL) {
    fresh->base = base;
    fresh->size = cost;
    fresh->first = c;
    fresh->last = c;
    region_insert_at(p, i, fresh);
    fresh = NULL;
  }
  free(fresh);
  bin_insert(p, c);
  p->st.num_free_chunks++;
  return 0;
}

/* Unmapped [a, b) inside the free chunk c of region i: c keeps what lies below a, a new chunk
 * what lies above b, and the region splits there (nr: a record for its upper part, freed when
 * not needed). Returns the index of the region to scan next, from its start. */
static uint32_t split_at(bfc_pool_t *p, uint32_t i, chunk_t *c, uint64_t a, uint64_t b,
                         region_t *nr) {
  region_t *r = p->regions[i];
  uint64_t cend = c->addr + c->size, rend = r->base + r->size;
  chunk_t *prev = c->prev, *next = c->next;
  unindex(p, c);
  p->st.num_free_chunks--;
  chunk_t *left = a > c->addr ? c : NULL;
  chunk_t *right = NULL;
  if (left != NULL) {
    left->size = a - c->addr;
    left->next = NULL;
    bin_insert(p, left);
    p->st.num_free_chunks++;
  } else if (prev != NULL) {
    prev->next = NULL;
  }
  if (cend > b) {
    right = left != NULL ? chunk_new(p) : c;
    right->addr = b;
    right->size = cend - b;
    right->requested = 0;
    right->state = BFC_FREE;
    right->prev = NULL;
    right->next = next;
    if (next != NULL) {
      next->prev = right;
    }
    bin_insert(p, right);
    p->st.num_free_chunks++;
  } else if (next != NULL) {
    next->prev = NULL;
  }
  if (left == NULL && right == NULL) {
    chunk_put(p, c);
  }
  chunk_t *last_a = left != NULL ? left : prev;
  chunk_t *first_b = right != NULL ? right : next;
  chunk_t *last_b = r->last == c ? right : r->last;
  if (last_a != NULL) {
    r->size = a - r->base;
    r->last = last_a;
    if (first_b != NULL) {
      *nr = (region_t){.base = b, .size = rend - b, .first = first_b, .last = last_b};
      region_insert_at(p, i + 1, nr);
      return i + 1;
    }
    free(nr);
    return i + 1;
  }
  free(nr);
  if (first_b != NULL) {
    *r = (region_t){.base = b, .size = rend - b, .first = first_b, .last = last_b};
  } else {
    region_remove_at(p, i);
  }
  return i;
}

/* Unmaps the whole units inside free chunks while more than keep bytes are mapped (the upper
 * units of a chunk first); the bytes unmapped in *released. 0 or the first release error. */
static int unmap_free(bfc_pool_t *p, uint64_t keep, uint64_t *released) {
  int first_err = 0;
  uint64_t total = 0;
  uint32_t i = 0;
  while (i < p->nregions && p->st.pool_bytes > keep) {
    uint32_t next_i = i + 1;
    for (chunk_t *c = p->regions[i]->first; c != NULL; c = c->next) {
      uint64_t want = (p->st.pool_bytes - keep) & ~(p->unit - 1);
      if (want == 0) {
        break;
      }
      uint64_t a = unit_up(p, c->addr), b = (c->addr + c->size) & ~(p->unit - 1);
      if (c->state != BFC_FREE || b <= a) {
        continue;
      }
      a = b - a > want ? b - want : a;
      region_t *nr = malloc(sizeof(*nr));
      if (nr == NULL || region_room(p) != 0 || (p->nspare < 1 && add_slab(p) != 0)) {
        free(nr);
        first_err = first_err != 0 ? first_err : -ENOMEM;
        break;
      }
      int rc = p->prim.release(p->prim.ctx, a, b - a);
      if (rc != 0) {
        free(nr);
        p->st.driver_free_failures++;
        first_err = first_err != 0 ? first_err : rc < 0 ? rc : -EIO;
        continue;
      }
      p->st.driver_free_calls++;
      p->mapped.unmap_calls++;
      p->mapped.released_total += b - a;
      p->st.pool_bytes -= b - a;
      total += b - a;
      next_i = split_at(p, i, c, a, b, nr);
      break;
    }
    i = next_i;
  }
  if (released != NULL) {
    *released = total;
  }
  return first_err;
}

/* ---- allocation and free -------------------------------------------------------------- */

/* 1 iff retiring the deferred chunks would create a free run of at least rounded bytes. */
static int retire_would_fit(bfc_pool_t *p, uint64_t rounded) {
  if (++p->epoch == 0) {
    for (uint32_t i = 0; i < p->nregions; i++) {
      for (chunk_t *c = p->regions[i]->first; c != NULL; c = c->next) {
        c->mark = 0;
      }
    }
    p->epoch = 1;
  }
  for (chunk_t *d = p->deferred; d != NULL; d = d->dnext) {
    if (d->mark == p->epoch) {
      continue;
    }
    chunk_t *s = d;
    while (s->prev != NULL && s->prev->state != BFC_IN_USE) {
      s = s->prev;
    }
    uint64_t run = 0;
    for (chunk_t *x = s; x != NULL && x->state != BFC_IN_USE; x = x->next) {
      x->mark = p->epoch;
      run += x->size;
    }
    if (run >= rounded) {
      return 1;
    }
  }
  return 0;
}

/* Steps 2-6 of bfc_alloc_tagged; `retire` false (bfc_alloc_nosync): the deferred chunks stay
 * as they are, and steps 2 and 4 are skipped. */
static int alloc_slow(bfc_pool_t *p, uint64_t rounded, bool retire, chunk_t **out) {
  if (retire && p->st.num_deferred > 0 && retire_would_fit(p, rounded)) {
    return -EAGAIN;
  }
  int rc = extend(p, rounded);
  if (rc == 0) {
    *out = take_best(p, rounded);
    return 0;
  }
  if (rc != -ENOMEM) {
    return rc;
  }
  if (retire && p->st.num_deferred > 0) {
    return -EAGAIN;
  }
  if (collect(p, rounded)) {
    rc = extend(p, rounded);
    if (rc == 0) {
      *out = take_best(p, rounded);
    }
  }
  return rc;
}

static void use_chunk(bfc_pool_t *p, chunk_t *c, uint64_t rounded, uint64_t bytes) {
  uint64_t rest = c->size - rounded;
  if (rest >= BFC_MIN_ALLOC && rest >= (rounded >> SPLIT_SHIFT)) {
    chunk_t *r = chunk_new(p);
    r->addr = c->addr + rounded;
    r->size = rest;
    r->requested = 0;
    r->state = BFC_FREE;
    r->prev = c;
    r->next = c->next;
    if (c->next != NULL) {
      c->next->prev = r;
    } else {
      region_of(p, c->addr)->last = r;
    }
    c->next = r;
    c->size = rounded;
    set_dv(p, r);
  } else {
    p->st.num_free_chunks--;
  }
  c->state = BFC_IN_USE;
  c->requested = bytes;
  map_put(p, c);
  p->st.num_allocs++;
  p->st.num_in_use++;
  p->st.bytes_in_use += c->size;
  p->st.bytes_requested_in_use += bytes;
  if (p->st.bytes_in_use > p->st.peak_bytes_in_use) {
    p->st.peak_bytes_in_use = p->st.bytes_in_use;
  }
  if (p->st.bytes_requested_in_use > p->st.peak_bytes_requested_in_use) {
    p->st.peak_bytes_requested_in_use = p->st.bytes_requested_in_use;
  }
  if (c->size > p->st.largest_alloc_size) {
    p->st.largest_alloc_size = c->size;
  }
}

int bfc_alloc(bfc_pool_t *pool, uint64_t bytes, uint64_t *addr) {
  return bfc_alloc_tagged(pool, bytes, 0, addr, NULL);
}

static int alloc_tagged(bfc_pool_t *pool, uint64_t bytes, uint8_t tag, bool retire, uint64_t *addr,
                        uint64_t *held) {
  if (pool == NULL || addr == NULL || bytes == 0) {
    return -EINVAL;
  }
  uint64_t rounded = bfc_round(bytes);
  if (rounded == 0) {
    pool->st.num_ooms++;
    return -ENOMEM;
  }
  if (pool->nspare < 2 || 2 * (pool->map.count + 1) > pool->map.mask + 1) {
    if (reserve_meta(pool) != 0) {
      pool->st.num_ooms++;
      return -ENOMEM;
    }
  }
  chunk_t *c = take_best(pool, rounded);
  if (c == NULL) {
    int rc = alloc_slow(pool, rounded, retire, &c);
    if (rc != 0) {
      if (rc == -ENOMEM) {
        pool->st.num_ooms++;
      } else if (rc == -EAGAIN) {
        pool->st.num_eagain++;
      }
      DEBUG_CHECK(pool);
      return rc;
    }
  }
  use_chunk(pool, c, rounded, bytes);
  c->tag = tag;
  *addr = c->addr;
  if (held != NULL) {
    *held = c->size;
  }
  DEBUG_CHECK(pool);
  return 0;
}

int bfc_alloc_tagged(bfc_pool_t *pool, uint64_t bytes, uint8_t tag, uint64_t *addr,
                     uint64_t *held) {
  return alloc_tagged(pool, bytes, tag, true, addr, held);
}

int bfc_alloc_nosync(bfc_pool_t *pool, uint64_t bytes, uint8_t tag, uint64_t *addr,
                     uint64_t *held) {
  return alloc_tagged(pool, bytes, tag, false, addr, held);
}

/* Makes c free and coalesces it with free address neighbours; the result becomes the dv.
 * Inlined into its two callers: as a call it cost each free 8 instructions (callgrind). */
static inline __attribute__((always_inline)) void make_free(bfc_pool_t *p, chunk_t *c) {
  c->state = BFC_FREE;
  c->requested = 0;
  chunk_t *n = c->next;
  if (n != NULL && n->state == BFC_FREE) {
    unindex(p, n);
    c->size += n->size;
    c->next = n->next;
    if (n->next != NULL) {
      n->next->prev = c;
    } else {
      region_of(p, c->addr)->last = c;
    }
    chunk_put(p, n);
    p->st.num_free_chunks--;
  }
  chunk_t *pv = c->prev;
  if (pv != NULL && pv->state == BFC_FREE) {
    unindex(p, pv);
    pv->size += c->size;
    pv->next = c->next;
    if (c->next != NULL) {
      c->next->prev = pv;
    } else {
      region_of(p, pv->addr)->last = pv;
    }
    chunk_put(p, c);
    p->st.num_free_chunks--;
    c = pv;
  }
  set_dv(p, c);
  p->st.num_free_chunks++;
}

/* Error for an address that is not the base of an in-use block. */
static int bad_address(const bfc_pool_t *p, uint64_t addr) {
  const region_t *r = region_find(p, addr);
  if (r == NULL) {
    return -ENOENT;
  }
  return chunk_at(r, addr)->state == BFC_IN_USE ? -EINVAL : -EALREADY;
}

/* Inline: as a call of its own it cost each free 13 instructions (callgrind, make bench). */
static inline chunk_t *take_in_use(bfc_pool_t *p, uint64_t addr) {
  if ((addr & (BFC_MIN_ALLOC - 1)) != 0) {
    return NULL; /* not a block base */
  }
  chunk_t *c = map_take(p, addr);
  if (c != NULL) {
    p->st.num_in_use--;
    p->st.bytes_in_use -= c->size;
    p->st.bytes_requested_in_use -= c->requested;
  }
  return c;
}

int bfc_free(bfc_pool_t *pool, uint64_t addr) {
  if (pool == NULL) {
    return -EINVAL;
  }
  chunk_t *c = take_in_use(pool, addr);
  if (c == NULL) {
    return bad_address(pool, addr);
  }
  make_free(pool, c);
  DEBUG_CHECK(pool);
  return 0;
}

int bfc_free_deferred(bfc_pool_t *pool, uint64_t addr) {
  return bfc_free_deferred_tagged(pool, addr, NULL, NULL, NULL);
}

int bfc_free_deferred_tagged(bfc_pool_t *pool, uint64_t addr, uint64_t *held, uint64_t *requested,
                             uint8_t *tag) {
  if (pool == NULL) {
    return -EINVAL;
  }
  chunk_t *c = take_in_use(pool, addr);
  if (c == NULL) {
    return bad_address(pool, addr);
  }
  if (held != NULL) {
    *held = c->size;
  }
  if (requested != NULL) {
    *requested = c->requested;
  }
  if (tag != NULL) {
    *tag = c->tag;
  }
  c->state = BFC_DEFERRED;
  c->dnext = NULL;
  c->ticket = ++pool->defer_seq;
  if (pool->deferred_tail != NULL) {
    pool->deferred_tail->dnext = c;
  } else {
    pool->deferred = c;
  }
  pool->deferred_tail = c;
  pool->st.deferred_bytes += c->size;
  pool->st.num_deferred++;
  DEBUG_CHECK(pool);
  return 0;
}

uint64_t bfc_defer_mark(const bfc_pool_t *pool) {
  return pool == NULL ? 0 : pool->defer_seq;
}

uint64_t bfc_retire_upto(bfc_pool_t *pool, uint64_t mark) {
  if (pool == NULL) {
    return 0;
  }
  uint64_t n = 0;
  chunk_t *d = pool->deferred;
  while (d != NULL && d->ticket <= mark) {
    chunk_t *next = d->dnext; /* make_free may recycle d */
    pool->st.deferred_bytes -= d->size;
    pool->st.num_deferred--;
    make_free(pool, d);
    n++;
    d = next;
  }
  pool->deferred = d;
  if (d == NULL) {
    pool->deferred_tail = NULL;
  }
  pool->st.num_retired += n;
  DEBUG_CHECK(pool);
  return n;
}

uint64_t bfc_retire(bfc_pool_t *pool) {
  return bfc_retire_upto(pool, UINT64_MAX);
}

int bfc_trim(bfc_pool_t *pool, uint64_t *released) {
  return bfc_trim_to(pool, 0, released);
}

int bfc_trim_to(bfc_pool_t *pool, uint64_t keep, uint64_t *released) {
  if (pool == NULL) {
    return -EINVAL;
  }
  int rc = pool->unit != 0 ? unmap_free(pool, keep, released)
                           : release_free_regions(pool, keep, released);
  DEBUG_CHECK(pool);
  return rc;
}

void bfc_mapped_stats(const bfc_pool_t *pool, bfc_mapped_t *out) {
  memset(out, 0, sizeof(*out));
  if (pool != NULL && pool->unit != 0) {
    *out = pool->mapped;
    out->space_bytes = pool->space_bytes;
    out->unit = pool->unit;
  }
}

/* ---- queries -------------------------------------------------------------------------- */

int bfc_owns(const bfc_pool_t *pool, uint64_t addr) {
  return pool != NULL && region_find(pool, addr) != NULL;
}

int bfc_lookup(const bfc_pool_t *pool, uint64_t addr, uint64_t *base, uint64_t *size,
               uint64_t *requested) {
  return bfc_lookup_tagged(pool, addr, base, size, requested, NULL);
}

int bfc_lookup_tagged(const bfc_pool_t *pool, uint64_t addr, uint64_t *base, uint64_t *size,
                      uint64_t *requested, uint8_t *tag) {
  if (pool == NULL) {
    return -ENOENT;
  }
  const chunk_t *c = NULL;
  if ((addr & (BFC_MIN_ALLOC - 1)) == 0) {
    c = map_get(pool, addr);
  }
  if (c == NULL) {
    const region_t *r = region_find(pool, addr);
    if (r == NULL) {
      return -ENOENT;
    }
    c = chunk_at(r, addr);
    if (c->state != BFC_IN_USE) {
      return -ENOENT;
    }
  }
  if (base != NULL) {
    *base = c->addr;
  }
  if (size != NULL) {
    *size = c->size;
  }
  if (requested != NULL) {
    *requested = c->requested;
  }
  if (tag != NULL) {
    *tag = c->tag;
  }
  return 0;
}

void bfc_usage(const bfc_pool_t *pool, uint64_t *in_use, uint64_t *deferred, uint64_t *free_bytes,
               uint64_t *reserved) {
  uint64_t use = 0, def = 0, res = 0;
  if (pool != NULL) {
    use = pool->st.bytes_in_use;
    def = pool->st.deferred_bytes;
    res = pool->st.pool_bytes;
  }
  if (in_use != NULL) {
    *in_use = use;
  }
  if (deferred != NULL) {
    *deferred = def;
  }
  if (free_bytes != NULL) {
    *free_bytes = res - use - def;
  }
  if (reserved != NULL) {
    *reserved = res;
  }
}

static size_t metadata_bytes(const bfc_pool_t *p) {
  return sizeof(*p) + p->nslabs * sizeof(struct slab) + p->slab_cap * sizeof(*p->slabs) +
         (p->map.mask + 1) * sizeof(pmap_slot_t) + p->region_cap * sizeof(*p->regions) +
         p->nregions * sizeof(region_t);
}

void bfc_stats(const bfc_pool_t *pool, bfc_stats_t *out) {
  memset(out, 0, sizeof(*out));
  if (pool == NULL) {
    return;
  }
  const bfc_pool_t *p = pool;
  *out = p->st; /* what the pool counts as it goes; then what is computed from its state: */
  out->bytes_limit = p->limit;
  out->largest_free_block_bytes = largest_free(p);
  out->free_bytes = p->st.pool_bytes - p->st.bytes_in_use - p->st.deferred_bytes;
  out->fragmentation =
      out->free_bytes == 0
          ? 0.0
          : (double)(out->free_bytes - out->largest_free_block_bytes) / (double)out->free_bytes;
  out->num_regions = p->nregions;
  out->host_metadata_bytes = metadata_bytes(p);
}

int bfc_walk(const bfc_pool_t *pool, bfc_walk_fn fn, void *ctx) {
  if (pool == NULL) {
    return 0;
  }
  for (uint32_t i = 0; i < pool->nregions; i++) {
    for (const chunk_t *c = pool->regions[i]->first; c != NULL; c = c->next) {
      bfc_chunk_info_t info = {.addr = c->addr,
                               .size = c->size,
                               .requested = c->requested,
                               .tag = c->state == BFC_FREE ? 0 : c->tag,
                               .region = i,
                               .state = c->state,
                               .region_start = c == pool->regions[i]->first};
      int rc = fn(ctx, &info);
      if (rc != 0) {
        return rc;
      }
    }
  }
  return 0;
}

/* ---- lifecycle ------------------------------------------------------------------------ */

int bfc_create(const bfc_options_t *opts, const bfc_prim_t *prim, bfc_pool_t **out) {
  if (opts == NULL || prim == NULL || out == NULL || prim->reserve == NULL ||
      prim->release == NULL || opts->limit == 0) {
    return -EINVAL;
  }
  bfc_pool_t *p = calloc(1, sizeof(*p));
  if (p == NULL) {
    return -ENOMEM;
  }
  if (opts->unit != 0 &&
      ((opts->unit & (opts->unit - 1)) != 0 || opts->unit % BFC_MIN_ALLOC != 0 ||
       opts->space_base % opts->unit != 0 || opts->space_bytes % opts->unit != 0 ||
       opts->space_bytes == 0 || opts->space_base > UINT64_MAX - opts->space_bytes)) {
    free(p);
    return -EINVAL;
  }
  p->unit = opts->unit;
  p->space_base = opts->space_base;
  p->space_bytes = opts->space_bytes;
  p->prim = *prim;
  p->limit = opts->limit;
  p->growth = opts->allow_growth != 0;
  uint64_t first = opts->limit;
  if (p->growth && first > BFC_INITIAL_REGION) {
    first = BFC_INITIAL_REGION;
  }
  p->next_region = bfc_round(first);
  if (p->next_region == 0) {
    p->next_region = first & ~(uint64_t)(BFC_MIN_ALLOC - 1);
  }
  if (pmap_alloc(&p->map, 7) != 0 || add_slab(p) != 0) {
    free(p->map.slots);
    free(p->slabs);
    free(p);
    return -ENOMEM;
  }
  *out = p;
  return 0;
}

void bfc_destroy(bfc_pool_t *pool) {
  if (pool == NULL) {
    return;
  }
  for (uint32_t i = 0; i < pool->nregions; i++) {
    region_t *r = pool->regions[i];
    pool->prim.release(pool->prim.ctx, r->base, r->size);
    free(r);
  }
  free(pool->regions);
  for (uint64_t i = 0; i < pool->nslabs; i++) {
    free(pool->slabs[i]);
  }
  free(pool->slabs);
  free(pool->map.slots);
  free(pool);
}

/* ---- invariant checker ---------------------------------------------------------------- */

typedef struct check_ctx {
  const bfc_pool_t *p;
  int bad;
  uint64_t budget; /* chunk records that exist: bounds every walk against cycles */
} check_ctx_t;

static void expect(check_ctx_t *k, int cond) {
  if (!cond) {
    k->bad++;
  }
}

/* In-order walk of one bin: keys strictly increasing, heap order, class and state right. */
static uint64_t check_tree(check_ctx_t *k, const chunk_t *n, unsigned cls, const chunk_t **last,
                           uint64_t depth) {
  if (n == NULL) {
    return 0;
  }
  if (depth > k->budget) {
    k->bad++;
    return 0;
  }
  uint64_t count = 0;
  if (n->left != NULL) {
    expect(k, n->left->prio <= n->prio);
    count += check_tree(k, n->left, cls, last, depth + 1);
  }
  expect(k, n->state == BFC_FREE);
  expect(k, class_of(n->size) == cls);
  expect(k, *last == NULL || key_less(*last, n));
  *last = n;
  count++;
  if (n->right != NULL) {
    expect(k, n->right->prio <= n->prio);
    count += check_tree(k, n->right, cls, last, depth + 1);
  }
  return count;
}

/* 1 iff x is reachable in its bin by key search. */
static int in_bin(const bfc_pool_t *p, const chunk_t *x, uint64_t budget) {
  const chunk_t *n = p->bin[class_of(x->size)];
  while (n != NULL && n != x && budget-- > 0) {
    n = key_less(x, n) ? n->left : n->right;
  }
  return n == x;
}

int bfc_check(const bfc_pool_t *pool) {
  if (pool == NULL) {
    return 1;
  }
  const bfc_pool_t *p = pool;
  check_ctx_t k = {p, 0, p->nslabs * SLAB_CHUNKS + 1};
  uint64_t pool_bytes = 0, used = 0, used_bytes = 0, req_bytes = 0, nfree = 0;
  uint64_t ndeferred = 0, deferred_bytes = 0, records = 0;
  int hint_found = p->hint == NULL;
  int refs_ok = 1; /* every map slot names a record: map_get may follow them */
  for (uint64_t i = 0; i <= p->map.mask; i++) {
    refs_ok &= slot_ref(p->map.slots[i]) <= p->nslabs * SLAB_CHUNKS;
  }

  for (uint32_t i = 0; i < p->nregions; i++) {
    const region_t *r = p->regions[i];
    hint_found |= r == p->hint;
    expect(&k, r->size > 0 && (r->base % BFC_MIN_ALLOC) == 0 && (r->size % BFC_MIN_ALLOC) == 0);
    expect(&k, r->base <= UINT64_MAX - r->size);
    if (i > 0) {
      const region_t *q = p->regions[i - 1];
      expect(&k, q->base + q->size <= r->base);
    }
    pool_bytes += r->size;
    uint64_t cursor = r->base;
    const chunk_t *prev = NULL;
    for (const chunk_t *c = r->first; c != NULL; c = c->next) {
      if (++records > k.budget) {
        k.bad++;
        break;
      }
      expect(&k, c->prev == prev && c->addr == cursor);
      expect(&k, c->size > 0 && (c->size % BFC_MIN_ALLOC) == 0);
      cursor += c->size;
      switch (c->state) {
      case BFC_FREE:
        nfree++;
        expect(&k, c->requested == 0);
        expect(&k, prev == NULL || prev->state != BFC_FREE);
        expect(&k, in_bin(p, c, k.budget) == (c != p->dv));
        break;
      case BFC_IN_USE:
        used++;
        used_bytes += c->size;
        req_bytes += c->requested;
        expect(&k, c->requested > 0 && bfc_round(c->requested) <= c->size);
        expect(&k, refs_ok && map_get(p, c->addr) == c);
        break;
      case BFC_DEFERRED:
        ndeferred++;
        deferred_bytes += c->size;
        expect(&k, c->requested > 0 && bfc_round(c->requested) <= c->size);
        expect(&k, refs_ok && map_get(p, c->addr) == NULL);
        break;
      default:
        k.bad++;
        break;
      }
      prev = c;
    }
    expect(&k, cursor == r->base + r->size);
    expect(&k, r->last == prev);
    if (p->unit != 0) {
      expect(&k, r->base % p->unit == 0 && r->size % p->unit == 0);
      expect(&k, r->base >= p->space_base && r->base + r->size <= p->space_base + p->space_bytes);
      expect(&k, i == 0 || p->regions[i - 1]->base + p->regions[i - 1]->size < r->base);
    }
  }

  expect(&k, hint_found); /* region_of's hint is one of the pool's regions */

  /* Bins: every binned chunk is free and correctly keyed; the count equals the free chunks
   * found in regions, each of which was found in its bin above, so the sets are equal. */
  uint64_t binned = 0;
  uint64_t top = 0;
  for (unsigned c = 0; c < NCLASS; c++) {
    const chunk_t *last = NULL;
    int bit = (p->bits[c >> 6] >> (c & 63)) & 1;
    expect(&k, bit == (p->bin[c] != NULL));
    if (p->bin[c] != NULL) {
      top |= (uint64_t)1 << (c >> 6);
      binned += check_tree(&k, p->bin[c], c, &last, 0);
    }
  }
  expect(&k, top == p->top);
  expect(&k, binned + (p->dv != NULL) == nfree);
  expect(&k, p->dv == NULL || p->dv->state == BFC_FREE);

  /* Map: exactly the in-use chunks, each under its own address. */
  uint64_t mapped = 0;
  for (uint64_t i = 0; i <= p->map.mask; i++) {
    uint32_t key = slot_key(p->map.slots[i]), ref = slot_ref(p->map.slots[i]);
    if (p->map.slots[i] == 0) {
      continue;
    }
    mapped++;
    if (ref == 0 || ref > p->nslabs * SLAB_CHUNKS) {
      k.bad++;
      continue;
    }
    const chunk_t *c = rec_of(p, ref);
    expect(&k, c->state == BFC_IN_USE && pmap_key(c->addr) == key && ref_of(c) == ref);
  }
  expect(&k, mapped == p->map.count && mapped == used);

  /* Deferred list: exactly the deferred chunks, oldest first, tickets increasing. */
  uint64_t listed = 0, listed_bytes = 0, last_ticket = 0;
  const chunk_t *last = NULL;
  for (const chunk_t *d = p->deferred; d != NULL; d = d->dnext) {
    if (++listed > k.budget) {
      k.bad++;
      break;
    }
    expect(&k, d->state == BFC_DEFERRED && d->ticket > last_ticket && d->ticket <= p->defer_seq);
    last_ticket = d->ticket;
    listed_bytes += d->size;
    last = d;
  }
  expect(&k, listed == ndeferred && listed_bytes == deferred_bytes && last == p->deferred_tail);

  uint64_t spares = 0;
  for (const chunk_t *s = p->spare; s != NULL; s = s->left) {
    if (++spares > k.budget) {
      k.bad++;
      break;
    }
    expect(&k, s->state == STATE_SPARE);
  }
  expect(&k, spares == p->nspare);
  expect(&k, records + spares == p->nslabs * SLAB_CHUNKS);

  /* Counters against the recount. */
  expect(&k, pool_bytes == p->st.pool_bytes && p->st.pool_bytes <= p->limit);
  expect(&k, p->st.peak_pool_bytes >= p->st.pool_bytes);
  expect(&k, used == p->st.num_in_use && used_bytes == p->st.bytes_in_use);
  expect(&k, req_bytes == p->st.bytes_requested_in_use);
  expect(&k, p->st.peak_bytes_in_use >= p->st.bytes_in_use);
  expect(&k, p->st.peak_bytes_requested_in_use >= p->st.bytes_requested_in_use);
  expect(&k, nfree == p->st.num_free_chunks);
  expect(&k, ndeferred == p->st.num_deferred && deferred_bytes == p->st.deferred_bytes);
  expect(&k, p->unit != 0 || p->st.driver_alloc_calls >= p->nregions); /* a trim splits runs */
  return k.bad;
}

/* bfc_alloc_fit: step 1 of bfc_alloc_tagged alone (kept apart from it so that the policy of the
 * full call stays in one place: the fronts of core/front.h use this one). */
int bfc_alloc_fit(bfc_pool_t *pool, uint64_t bytes, uint8_t tag, uint64_t *addr, uint64_t *held) {
  if (pool == NULL || addr == NULL || held == NULL || bytes == 0) {
    return -EINVAL;
  }
  uint64_t rounded = bfc_round(bytes);
  if (rounded == 0) {
    return -ENOSPC; /* too large to round: the full call refuses it */
  }
  if ((pool->nspare < 2 || 2 * (pool->map.count + 1) > pool->map.mask + 1) &&
      reserve_meta(pool) != 0) {
    return -ENOMEM;
  }
  chunk_t *c = take_best(pool, rounded);
  if (c == NULL) {
    return -ENOSPC;
  }
  use_chunk(pool, c, rounded, bytes);
  c->tag = tag;
  *addr = c->addr;
  *held = c->size;
  DEBUG_CHECK(pool);
  return 0;
}
