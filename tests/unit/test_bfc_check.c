/* White-box test of bfc_check(): it must notice each kind of corruption.
 *
 * Includes core/bfc.c directly (o1heap's tests do the same) so it can break one invariant at a
 * time inside a healthy pool, expect a nonzero violation count, repair it and expect 0 again.
 * Links addrmap.o, bfc_dump.o and strbuf.o but not bfc.o. Prints TAP.
 */
#include "core/bfc.c"
#include "tests/tap.h"
#include "tests/unit/test_bfc_prim.h"

#define MiB ((uint64_t)1 << 20)

/* Breaks one invariant of pool p, expects bfc_check() to count a violation, repairs it. */
#define BREAKS(what, breakage, repair)                                                             \
  do {                                                                                             \
    breakage;                                                                                      \
    tap_ok(bfc_check(p) > 0, what);                                                                \
    repair;                                                                                        \
  } while (0)

static chunk_t *chunk_of(bfc_pool_t *p, uint64_t addr) {
  return chunk_at(region_find(p, addr), addr);
}

static void swap_regions(bfc_pool_t *p) {
  region_t *r0 = p->regions[0];
  p->regions[0] = p->regions[1];
  p->regions[1] = r0;
}

int main(void) {
  fake_prim_t fake;
  bfc_prim_t prim = fake_init(&fake, MiB);
  bfc_options_t opts = {.limit = 64 * MiB, .allow_growth = 1};
  bfc_pool_t *p = NULL;
  bfc_create(&opts, &prim, &p);
  uint64_t a, b, c, d, e;
  bfc_alloc(p, 1024, &a);
  bfc_alloc(p, 2048, &b);
  bfc_alloc(p, 4096, &c);
  bfc_alloc(p, 8192, &d);
  bfc_alloc(p, 3 * MiB, &e);
  bfc_free(p, b);
  bfc_free_deferred(p, d);
  TAP_EQ(bfc_check(p), 0, "healthy pool: 0 violations");
  chunk_t *A = chunk_of(p, a), *B = chunk_of(p, b), *C = chunk_of(p, c);
  chunk_t *T = chunk_of(p, d)->next; /* the region's free tail: binned, while B is the dv */
  TAP_EQ(p->dv == B && T->state == BFC_FREE, 1, "freed chunk is the dv, the tail is binned");

  BREAKS("chunk size breaks the tiling", A->size += 256, A->size -= 256);
  BREAKS("broken prev link", C->prev = A, C->prev = B);
  BREAKS("in-use chunk without a requested size", A->requested = 0, A->requested = 1024);
  BREAKS("bytes_in_use off by one", p->st.bytes_in_use++, p->st.bytes_in_use--);
  BREAKS("bytes_requested_in_use off by one", p->st.bytes_requested_in_use--,
         p->st.bytes_requested_in_use++);
  BREAKS("num_free_chunks off by one", p->st.num_free_chunks++, p->st.num_free_chunks--);
  BREAKS("bitmap bit of a non-empty bin cleared", bit_clear(p, class_of(T->size)),
         bit_set(p, class_of(T->size)));
  BREAKS("free chunk missing from its bin", bin_remove(p, T), bin_insert(p, T));
  BREAKS("binned chunk marked in use", T->state = BFC_IN_USE, T->state = BFC_FREE);
  BREAKS("the dv also in a bin", bin_insert(p, B), bin_remove(p, B));
  BREAKS("a free chunk neither binned nor the dv", p->dv = NULL, p->dv = B);
  BREAKS("the dv points to an in-use chunk", p->dv = A, p->dv = B);
  BREAKS("in-use chunk missing from the map", map_take(p, a), map_put(p, A));

  /* C becomes free next to free B without being merged: exactly one violation. */
  map_take(p, c);
  C->state = BFC_FREE;
  C->requested = 0;
  p->st.num_in_use--;
  p->st.bytes_in_use -= C->size;
  p->st.bytes_requested_in_use -= 4096;
  p->st.num_free_chunks++;
  bin_insert(p, C);
  TAP_EQ(bfc_check(p), 1, "two adjacent free chunks: exactly one violation");
  bin_remove(p, C);
  C->state = BFC_IN_USE;
  C->requested = 4096;
  p->st.num_in_use++;
  p->st.bytes_in_use += C->size;
  p->st.bytes_requested_in_use += 4096;
  p->st.num_free_chunks--;
  map_put(p, C);

  chunk_t *D = p->deferred;
  BREAKS("deferred chunk missing from the deferred list", p->deferred = NULL, p->deferred = D);
  uint64_t limit = p->limit;
  BREAKS("pool_bytes above the limit", p->limit = p->st.pool_bytes - 256, p->limit = limit);
  BREAKS("regions out of address order", swap_regions(p), swap_regions(p));
  BREAKS("spare count off by one", p->nspare++, p->nspare--);

  TAP_EQ(bfc_check(p), 0, "repaired pool: 0 violations");
  (void)e;
  bfc_destroy(p);
  TAP_EQ(fake.outstanding, 0, "destroy released everything");
  return tap_done();
}
