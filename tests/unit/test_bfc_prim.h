/* A fake device primitive for the bfc unit tests: hands out address ranges, never memory.
 *
 * Bases come from a bump pointer with a configurable gap (0 makes regions adjacent, to prove
 * that chunks never coalesce across regions). It can refuse sizes above a threshold, refuse at
 * random, fail once with a chosen code or return a misaligned base once, and it records every
 * size tried and every outstanding range so tests can check releases match reserves exactly.
 * Single-threaded per instance.
 */
#ifndef GPUCAP_TESTS_TEST_BFC_PRIM_H
#define GPUCAP_TESTS_TEST_BFC_PRIM_H

#include "core/bfc.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { FAKE_MAX_LIVE = 4096, FAKE_MAX_TRIED = 512 };

typedef struct fake_prim {
  uint64_t next;            /* next base handed out */
  uint64_t gap;             /* bytes skipped after each region */
  uint64_t refuse_above;    /* reserve of more than this fails with -ENOMEM; 0 = never */
  int fail_once;            /* nonzero: the next reserve returns this code */
  uint64_t misalign_once;   /* nonzero: the next base is offset by this much */
  uint32_t refuse_permille; /* random refusals per 1000 reserve calls */
  uint64_t rng;
  uint64_t reserve_calls, reserve_ok, release_calls, bad_releases;
  uint64_t outstanding; /* bytes reserved and not yet released */
  uint64_t tried[FAKE_MAX_TRIED];
  unsigned ntried;
  uint64_t ok_sizes[FAKE_MAX_TRIED];
  unsigned nok;
  struct {
    uint64_t base, size;
  } live[FAKE_MAX_LIVE];
  unsigned nlive;
  /* Mapped mode (fake_init_mapped): the units of [space_base, space_base + space_bytes)
   * mapped now, one byte each. */
  uint64_t unit, space_base, space_bytes;
  unsigned char *units;
} fake_prim_t;

static uint64_t fake_rand(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

static int fake_reserve(void *ctx, uint64_t bytes, uint64_t *base) {
  fake_prim_t *f = ctx;
  f->reserve_calls++;
  if (f->ntried < FAKE_MAX_TRIED) {
    f->tried[f->ntried++] = bytes;
  }
  if (f->fail_once != 0) {
    int rc = f->fail_once;
    f->fail_once = 0;
    return rc;
  }
  if (f->refuse_above != 0 && bytes > f->refuse_above) {
    return -ENOMEM;
  }
  if (f->refuse_permille != 0 && fake_rand(&f->rng) % 1000 < f->refuse_permille) {
    return -ENOMEM;
  }
  if (f->nlive == FAKE_MAX_LIVE) {
    return -ENOMEM;
  }
  *base = f->next + f->misalign_once;
  f->live[f->nlive].base = *base;
  f->live[f->nlive].size = bytes;
  f->nlive++;
  f->misalign_once = 0;
  f->next += bytes + f->gap;
  f->next = (f->next + 255) & ~(uint64_t)255;
  f->outstanding += bytes;
  f->reserve_ok++;
  if (f->nok < FAKE_MAX_TRIED) {
    f->ok_sizes[f->nok++] = bytes;
  }
  return 0;
}

static int fake_release(void *ctx, uint64_t base, uint64_t bytes) {
  fake_prim_t *f = ctx;
  f->release_calls++;
  for (unsigned i = 0; i < f->nlive; i++) {
    if (f->live[i].base == base) {
      if (f->live[i].size != bytes) {
        f->bad_releases++;
        return -EINVAL;
      }
      f->live[i] = f->live[--f->nlive];
      f->outstanding -= bytes;
      return 0;
    }
  }
  f->bad_releases++;
  return -EINVAL;
}

/* Resets f and returns a primitive bound to it. */
static bfc_prim_t fake_init(fake_prim_t *f, uint64_t gap) {
  memset(f, 0, sizeof(*f));
  f->next = (uint64_t)1 << 32;
  f->gap = gap;
  f->rng = 0x1234567887654321ull;
  bfc_prim_t prim = {f, fake_reserve, fake_release, NULL};
  return prim;
}

/* Mapped mode: reserve maps [*base, *base + bytes) (unit-aligned, inside the space, every unit
 * unmapped), release unmaps whole mapped units; anything else is a bad call, refused. */
static inline int fake_range_ok(const fake_prim_t *f, uint64_t base, uint64_t bytes,
                                unsigned char want) {
  if (bytes == 0 || base % f->unit != 0 || bytes % f->unit != 0 || base < f->space_base ||
      base + bytes > f->space_base + f->space_bytes) {
    return 0;
  }
  for (uint64_t u = (base - f->space_base) / f->unit; u < (base + bytes - f->space_base) / f->unit;
       u++) {
    if (f->units[u] != want) {
      return 0;
    }
  }
  return 1;
}

static inline void fake_range_set(fake_prim_t *f, uint64_t base, uint64_t bytes, unsigned char to) {
  memset(&f->units[(base - f->space_base) / f->unit], to, bytes / f->unit);
}

static inline int fake_map(void *ctx, uint64_t bytes, uint64_t *base) {
  fake_prim_t *f = ctx;
  f->reserve_calls++;
  if (f->refuse_permille != 0 && fake_rand(&f->rng) % 1000 < f->refuse_permille) {
    return -ENOMEM;
  }
  if (!fake_range_ok(f, *base, bytes, 0)) {
    f->bad_releases++;
    return -EINVAL;
  }
  fake_range_set(f, *base, bytes, 1);
  f->outstanding += bytes;
  f->reserve_ok++;
  return 0;
}

static inline int fake_unmap(void *ctx, uint64_t base, uint64_t bytes) {
  fake_prim_t *f = ctx;
  f->release_calls++;
  if (!fake_range_ok(f, base, bytes, 1)) {
    f->bad_releases++;
    return -EINVAL;
  }
  fake_range_set(f, base, bytes, 0);
  f->outstanding -= bytes;
  return 0;
}

/* Resets f for mapped mode over a space of `space` bytes in units of `unit`; the options to
 * pass to bfc_create get the same space. f->units must be freed with fake_fini. */
static inline bfc_prim_t fake_init_mapped(fake_prim_t *f, uint64_t unit, uint64_t space,
                                          bfc_options_t *opts) {
  fake_init(f, 0);
  f->unit = unit;
  f->space_base = (uint64_t)1 << 36;
  f->space_bytes = space;
  f->units = calloc(space / unit, 1);
  opts->unit = unit;
  opts->space_base = f->space_base;
  opts->space_bytes = space;
  bfc_prim_t prim = {f, fake_map, fake_unmap, NULL};
  return prim;
}

static inline void fake_fini(fake_prim_t *f) {
  free(f->units);
  f->units = NULL;
}

#endif
