/* front: a small cache of recently freed blocks by size class, kept by one thread in front of a
 * shared pool (docs/design.md, "Per-thread fronts").
 *
 * A freed block whose size class has room is kept here instead of going back to the pool; an
 * allocation of the same class takes it back without touching the pool. The front never owns
 * memory: each block is still an in-use block of its pool, which the caller returns with
 * bfc_free/bfc_free_deferred when the front gives it up (eviction, drain). The bytes it keeps
 * are bounded by a budget the caller chooses. Each block carries a stamp the caller chooses (the
 * shim: the synchronisation epoch of its free); front_take hands out only blocks whose stamp is
 * below the `safe` bound it is given, so the reuse rules of the pool behind stay the caller's.
 * Nothing here locks, allocates or does I/O: one front belongs to one caller at a time.
 */
#ifndef GPUCAP_CORE_FRONT_H
#define GPUCAP_CORE_FRONT_H

#include <stddef.h>
#include <stdint.h>

/* Size classes: 8 per power of two from 256 bytes up to FRONT_MAX_BLOCK; larger blocks are never
 * kept. A request takes only a block first asked for with exactly its size and tag, so the
 * pool's record of the block (its size asked for, its tag) stays true when the front hands it
 * out again, and a front never makes the blocks in use larger than the pool would. */
#define FRONT_SUBCLASSES 8u
#define FRONT_MAX_BLOCK ((uint64_t)16 << 20)
#define FRONT_CLASSES 112u /* front_class(FRONT_MAX_BLOCK) + 1 */
/* Blocks kept per class: a put into a full class gives up that class's older half. */
#define FRONT_DEPTH 8u

typedef struct front_block {
  uint64_t addr;      /* the block's base in its pool */
  uint64_t size;      /* its chunk size (what the pool holds for it), a multiple of 256 */
  uint64_t requested; /* the size it was asked for (the pool's record) */
  uint64_t stamp;     /* the caller's: the block may be handed out once stamp < safe */
  uint8_t tag;        /* the caller's (the shim: the library that asked for it) */
} front_block_t;

typedef struct front {
  uint64_t bytes;  /* chunk bytes kept now */
  uint64_t budget; /* most chunk bytes kept at once */
  uint64_t hits, misses, puts, evictions;
  uint64_t nonempty[(FRONT_CLASSES + 63) / 64];    /* bit k: class k keeps a block */
  uint8_t count[FRONT_CLASSES];                    /* blocks kept per class */
  front_block_t block[FRONT_CLASSES][FRONT_DEPTH]; /* per class, oldest first */
} front_t;

/* Makes f an empty front keeping at most budget bytes (0: keeps nothing). O(classes). */
void front_init(front_t *f, uint64_t budget);

/* The class of a block or request of `size` bytes (rounded up to 256 first); -1 when larger than
 * FRONT_MAX_BLOCK or 0. O(1), pure. */
int front_class(uint64_t size);

/* Takes a kept block for a request of `bytes` (> 0) with `tag`: the newest block of the
 * request's class asked for with exactly that size and tag, whose stamp is below `safe`. Returns
 * 1 with *out filled and the block forgotten, else 0 (counted as a miss). O(FRONT_DEPTH). */
int front_take(front_t *f, uint64_t bytes, uint8_t tag, uint64_t safe, front_block_t *out);

/* The most blocks one front_put gives up: the size of its out[] array. */
#define FRONT_PUT_ROOM 16u

/* Keeps block b (b->size a multiple of 256) in the class of b->requested, where a request of
 * that size looks. The blocks the front gives up to make room (the older half of b's class when
 * it is full, then the oldest of the largest classes while over budget, at most
 * FRONT_PUT_ROOM - 1 of them), and b itself when it still cannot be kept (larger than
 * FRONT_MAX_BLOCK or the budget allows), are stored in
 * out[FRONT_PUT_ROOM] and their number returned: the caller gives them back to the pool.
 * O(FRONT_DEPTH + classes). */
size_t front_put(front_t *f, const front_block_t *b, front_block_t *out);

/* Removes up to `room` kept blocks, oldest of the largest classes first, into out[]; returns
 * their number (0 once empty). O(classes + room). */
size_t front_drain(front_t *f, front_block_t *out, size_t room);

/* Like front_drain, but only blocks of the class of a request of `bytes` and of larger classes
 * (largest class first, oldest first in each): those the pool's best fit could have chosen for
 * that request had they been freed into it (a block not yet safe, which the caller gives back as
 * a deferred free, counts in the pool's deferred bytes and so in when it retires them). A miss
 * gives them back before it asks the pool, so that the pool places the request where it would
 * with no front: no placement drift around blocks held apart. 0 when bytes > FRONT_MAX_BLOCK.
 * O(classes + room). */
size_t front_drain_from(front_t *f, uint64_t bytes, front_block_t *out, size_t room);

#endif
