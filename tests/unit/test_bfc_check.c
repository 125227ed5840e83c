/* White-box test of bfc_check(): it must notice each kind of corruption.
 *
 * Includes core/bfc.c directly (o1heap's tests do the same) so it can break one invariant at a
 * time inside a healthy pool, expect a nonzero violation count, repair it and expect 0 again.
 * Links addrmap.o and bfc_dump.o but not bfc.o. Prints TAP.
 */
#include "core/bfc.c"
#include "tests/tap.h"
#include "tests/unit/test_bfc_prim.h"

#define MiB ((uint64_t)1 << 20)

static chunk_t *chunk_of(bfc_pool_t *p, uint64_t addr) {
  return chunk_at(region_find(p, addr), addr);
}

int main(void) {
  fake_prim_t fake;
  bfc_prim_t prim = fake_init(&fake, MiB);
  bfc_options_t opts = {64 * MiB, 1};
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

  A->size += 256;
  tap_ok(bfc_check(p) > 0, "chunk size breaks the tiling");
  A->size -= 256;

  C->prev = A;
  tap_ok(bfc_check(p) > 0, "broken prev link");
  C->prev = B;

  A->requested = 0;
  tap_ok(bfc_check(p) > 0, "in-use chunk without a requested size");
  A->requested = 1024;

  p->bytes_in_use++;
  tap_ok(bfc_check(p) > 0, "bytes_in_use off by one");
  p->bytes_in_use--;

  p->requested_in_use--;
  tap_ok(bfc_check(p) > 0, "bytes_requested_in_use off by one");
  p->requested_in_use++;

  p->num_free++;
  tap_ok(bfc_check(p) > 0, "num_free_chunks off by one");
  p->num_free--;

  bit_clear(p, class_of(T->size));
  tap_ok(bfc_check(p) > 0, "bitmap bit of a non-empty bin cleared");
  bit_set(p, class_of(T->size));

  bin_remove(p, T);
  tap_ok(bfc_check(p) > 0, "free chunk missing from its bin");
  bin_insert(p, T);

  T->state = BFC_IN_USE;
  tap_ok(bfc_check(p) > 0, "binned chunk marked in use");
  T->state = BFC_FREE;

  bin_insert(p, B);
  tap_ok(bfc_check(p) > 0, "the dv also in a bin");
  bin_remove(p, B);

  p->dv = NULL;
  tap_ok(bfc_check(p) > 0, "a free chunk neither binned nor the dv");
  p->dv = A;
  tap_ok(bfc_check(p) > 0, "the dv points to an in-use chunk");
  p->dv = B;

  addrmap_take(&p->map, a);
  tap_ok(bfc_check(p) > 0, "in-use chunk missing from the map");
  addrmap_put(&p->map, a, A);

  /* C becomes free next to free B without being merged: exactly one violation. */
  addrmap_take(&p->map, c);
  C->state = BFC_FREE;
  C->requested = 0;
  p->num_in_use--;
  p->bytes_in_use -= C->size;
  p->requested_in_use -= 4096;
  p->num_free++;
  bin_insert(p, C);
  TAP_EQ(bfc_check(p), 1, "two adjacent free chunks: exactly one violation");
  bin_remove(p, C);
  C->state = BFC_IN_USE;
  C->requested = 4096;
  p->num_in_use++;
  p->bytes_in_use += C->size;
  p->requested_in_use += 4096;
  p->num_free--;
  addrmap_put(&p->map, c, C);

  chunk_t *D = p->deferred;
  p->deferred = NULL;
  tap_ok(bfc_check(p) > 0, "deferred chunk missing from the deferred list");
  p->deferred = D;

  uint64_t limit = p->limit;
  p->limit = p->pool_bytes - 256;
  tap_ok(bfc_check(p) > 0, "pool_bytes above the limit");
  p->limit = limit;

  region_t *r0 = p->regions[0];
  p->regions[0] = p->regions[1];
  p->regions[1] = r0;
  tap_ok(bfc_check(p) > 0, "regions out of address order");
  p->regions[1] = p->regions[0];
  p->regions[0] = r0;

  p->nspare++;
  tap_ok(bfc_check(p) > 0, "spare count off by one");
  p->nspare--;

  TAP_EQ(bfc_check(p), 0, "repaired pool: 0 violations");
  (void)e;
  bfc_destroy(p);
  TAP_EQ(fake.outstanding, 0, "destroy released everything");
  return tap_done();
}
