/* front: a per-thread cache of freed blocks by size class (see core/front.h). */
#include "core/front.h"

#include <string.h>

void front_init(front_t *f, uint64_t budget) {
  memset(f, 0, sizeof(*f));
  f->budget = budget;
}

int front_class(uint64_t size) {
  if (size == 0 || size > FRONT_MAX_BLOCK) {
    return -1;
  }
  uint64_t u = (size + 255) / 256; /* 256-byte units, 1 .. 2^18 */
  if (u <= FRONT_SUBCLASSES) {
    return (int)(u - 1); /* exact below 2 KiB */
  }
  uint64_t v = u - 1; /* >= 8: 8 classes per power of two, each 1/8 to 1/16 wide */
  int e = 63 - __builtin_clzll(v);
  return (int)(FRONT_SUBCLASSES + (uint64_t)(e - 3) * FRONT_SUBCLASSES + ((v >> (e - 3)) & 7));
}

/* Removes block i of class k, keeping the others in age order. */
static inline __attribute__((always_inline)) front_block_t take_at(front_t *f, int k, unsigned i) {
  front_block_t b = f->block[k][i];
  unsigned n = f->count[k];
  if (i + 1 < n) { /* the newest (a take's usual find) needs no move */
    memmove(&f->block[k][i], &f->block[k][i + 1], (n - i - 1) * sizeof(front_block_t));
  }
  f->count[k] = (uint8_t)(n - 1);
  if (n == 1) {
    f->nonempty[k / 64] &= ~((uint64_t)1 << (k % 64));
  }
  f->bytes -= b.size;
  return b;
}

int front_take(front_t *f, uint64_t bytes, uint8_t tag, uint64_t safe, front_block_t *out) {
  int k = front_class(bytes);
  if (k >= 0) {
    for (unsigned i = f->count[k]; i-- > 0;) { /* newest first: the warmest */
      const front_block_t *b = &f->block[k][i];
      if (b->requested == bytes && b->tag == tag && b->stamp < safe) {
        *out = take_at(f, k, i);
        f->hits++;
        return 1;
      }
    }
  }
  f->misses++;
  return 0;
}

/* The largest class holding a block, or -1. */
static int largest(const front_t *f) {
  for (int w = (int)(sizeof f->nonempty / sizeof f->nonempty[0]) - 1; w >= 0; w--) {
    if (f->nonempty[w]) {
      return w * 64 + 63 - __builtin_clzll(f->nonempty[w]);
    }
  }
  return -1;
}

size_t front_put(front_t *f, const front_block_t *b, front_block_t *out) {
  int k = front_class(b->requested); /* the class a request of its size looks in */
  size_t n = 0;
  f->puts++;
  if (k < 0 || b->size > FRONT_MAX_BLOCK || b->size > f->budget) {
    out[n++] = *b;
    return n;
  }
  if (f->count[k] == FRONT_DEPTH) { /* half the class at once: one trip to the pool's lock */
    enum { HALF = FRONT_DEPTH / 2 };
    for (unsigned i = 0; i < HALF; i++) {
      out[n++] = f->block[k][i];
      f->bytes -= f->block[k][i].size;
    }
    memmove(&f->block[k][0], &f->block[k][HALF], (FRONT_DEPTH - HALF) * sizeof(front_block_t));
    f->count[k] = FRONT_DEPTH - HALF;
  }
  int big;
  while (f->bytes + b->size > f->budget && n < FRONT_PUT_ROOM - 1 && (big = largest(f)) >= 0) {
    out[n++] = take_at(f, big, 0);
  }
  f->evictions += n;
  if (f->bytes + b->size > f->budget) {
    out[n++] = *b;
    return n;
  }
  f->block[k][f->count[k]++] = *b;
  f->nonempty[k / 64] |= (uint64_t)1 << (k % 64);
  f->bytes += b->size;
  return n;
}

size_t front_drain(front_t *f, front_block_t *out, size_t room) {
  size_t n = 0;
  int k;
  while (n < room && (k = largest(f)) >= 0) {
    out[n++] = take_at(f, k, 0);
  }
  return n;
}

size_t front_drain_from(front_t *f, uint64_t bytes, front_block_t *out, size_t room) {
  if (f->bytes == 0) {
    return 0;
  }
  int from = front_class(bytes);
  size_t n = 0;
  if (from < 0) {
    return 0;
  }
  for (int w = (int)(sizeof f->nonempty / sizeof f->nonempty[0]) - 1; w >= from / 64; w--) {
    uint64_t bits = f->nonempty[w];
    if (w == from / 64) {
      bits &= ~(uint64_t)0 << (from % 64);
    }
    while (bits && n < room) {
      int k = w * 64 + 63 - __builtin_clzll(bits);
      while (f->count[k] > 0 && n < room) { /* oldest first */
        out[n++] = take_at(f, k, 0);
      }
      bits &= ~((uint64_t)1 << (k % 64));
    }
  }
  return n;
}
