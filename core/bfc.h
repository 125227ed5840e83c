/* bfc: a best-fit-with-coalescing pool over an abstract device address space.
 *
 * Serves 256-byte-granular blocks out of regions reserved through a device primitive
 * (bfc_prim_t), following TensorFlow's BFC allocator (growth, backoff, garbage collection,
 * stats, OOM report) with O(log n) operations and no per-byte metadata. Device memory is never
 * touched: all metadata lives in host memory. Nothing here locks, reads the environment or does
 * I/O: every function is not thread-safe and the caller serialises all calls on one pool.
 */
#ifndef GPUCAP_CORE_BFC_H
#define GPUCAP_CORE_BFC_H

#include <stddef.h>
#include <stdint.h>

/* Granularity of every block and region: requests round up to a multiple of this. */
#define BFC_MIN_ALLOC 256u
/* First region size when growth is allowed (TensorFlow: 2 MiB, doubling). */
#define BFC_INITIAL_REGION (2u << 20)

typedef struct bfc_pool bfc_pool_t;

/* Device primitive (modelled on mimalloc's prim.h). Both calls return 0 or a negative errno.
 * reserve: obtain `bytes` (a multiple of 256) of device address space at a 256-aligned *base;
 *   -ENOMEM means "the device refuses this size" (the pool then backs off); any other error
 *   stops the attempt and is passed up to the caller of bfc_alloc.
 * release: give back exactly a range that reserve returned. A failed release leaves the region
 *   in the pool (it stays counted in pool_bytes).
 * room (optional, NULL: no limit but the pool's): the most bytes reserve could obtain now (the
 *   device's free memory, which other processes share), asked before every growth with the
 *   rounded request that needs it; regions are sized to fit it, and a request above it fails
 *   with -ENOMEM without a reserve. */
typedef struct bfc_prim {
  void *ctx;
  int (*reserve)(void *ctx, uint64_t bytes, uint64_t *base);
  int (*release)(void *ctx, uint64_t base, uint64_t bytes);
  uint64_t (*room)(void *ctx, uint64_t need);
} bfc_prim_t;

typedef struct bfc_options {
  uint64_t limit;   /* cap on bytes reserved from the primitive (pool_bytes <= limit); > 0 */
  int allow_growth; /* 1: regions of 2, 4, 8 MiB...; 0: one region of the whole limit */
  /* Mapped mode, when unit > 0: the pool owns one address range [space_base, space_base +
   * space_bytes) and backs parts of it in units (a power of two, a multiple of 256;
   * space_base and space_bytes multiples of it). The primitive then maps and unmaps at
   * addresses the pool chooses: reserve(bytes, base) maps [*base, *base + bytes) (*base is
   * the pool's input, unit-aligned, bytes a multiple of unit, unmapped until now); release
   * unmaps whole units, [base, base + bytes), that earlier reserves mapped (not necessarily
   * one reserve's range). Regions are then the maximal mapped runs: a growth next to a region
   * joins it (a free chunk at its end merges with the new units), and a trim unmaps every
   * whole unit inside a free chunk, splitting its region, so free memory costs address
   * space, not backing. pool_bytes counts mapped bytes; growth maps what the request needs
   * beyond the free chunk it extends (no doubling); without growth the first allocation maps
   * the limit (rounded down to units). */
  uint64_t unit;
  uint64_t space_base;
  uint64_t space_bytes;
} bfc_options_t;

/* Counters; field names follow TensorFlow's AllocatorStats where one exists. core/stats.def
 * lists them, once, with what each one counts. */
typedef struct bfc_stats {
#define STAT(type, name, scope, tf, tf_label) type name;
#include "core/stats.def"
#undef STAT
} bfc_stats_t;

/* States reported by bfc_walk. */
enum bfc_chunk_state { BFC_FREE = 0, BFC_IN_USE = 1, BFC_DEFERRED = 2 };

typedef struct bfc_chunk_info {
  uint64_t addr;      /* 256-aligned */
  uint64_t size;      /* multiple of 256 */
  uint64_t requested; /* bytes asked for (in-use or deferred); 0 when free */
  unsigned tag;       /* bfc_alloc_tagged's tag (in-use or deferred); 0 when free */
  uint32_t region;    /* index of the region in address order */
  int state;          /* enum bfc_chunk_state */
  int region_start;   /* 1 iff this chunk is the first of its region */
} bfc_chunk_info_t;

/* Visitor for bfc_walk: return 0 to continue, anything else to stop the walk. */
typedef int (*bfc_walk_fn)(void *ctx, const bfc_chunk_info_t *chunk);

/* Creates an empty pool: no device memory is reserved until the first bfc_alloc.
 * The pool keeps a copy of *prim and *opts. Fails with -EINVAL iff an argument is NULL, a
 * primitive function is NULL or opts->limit == 0; with -ENOMEM iff host memory runs out.
 * O(1). Touches no shared state: pools may be created from any thread. */
int bfc_create(const bfc_options_t *opts, const bfc_prim_t *prim, bfc_pool_t **out);

/* Releases every region through the primitive (live blocks included: they become invalid) and
 * frees all host memory. NULL is a no-op. O(regions + chunks). Not thread-safe: the caller locks.
 */
void bfc_destroy(bfc_pool_t *pool);

/* Allocates a block of at least `bytes` (rounded up to 256) and stores its address in *addr.
 * Policy, in order (each step only if the previous one did not serve the request):
 *   1. best fit among free chunks: the smallest that fits, lowest address on ties;
 *   2. -EAGAIN if deferred chunks exist and retiring them would create a free run (a deferred
 *      chunk merged with its free and deferred address neighbours) of at least the rounded
 *      size: the caller should synchronise the device, call bfc_retire and call again;
 *   3. grow (TensorFlow's Extend: next region of 2 MiB doubling, or for a larger request a
 *      region of exactly its size, after which the doubling resumes from 4 x that size;
 *      clipped to the headroom under the limit and to the primitive's room; backing off
 *      by 10% while the primitive says -ENOMEM, down to exactly the rounded size) and serve
 *      from the new region;
 *   4. -EAGAIN if any deferred bytes remain (retiring may free whole regions for step 5);
 *   5. garbage collection: if releasing every fully free region would leave room, release
 *      them all, then grow as in 3;
 *   6. -ENOMEM (counted in num_ooms).
 * So -ENOMEM is only returned while no deferred chunk exists, and after bfc_retire the next
 * call cannot return -EAGAIN unless bfc_free_deferred ran in between. Protocol for a caller
 * that must not hold its lock while synchronising: m = bfc_defer_mark(); unlock; synchronise;
 * lock; bfc_retire_upto(m); call again (another -EAGAIN means newer deferred frees exist).
 * The block takes the low end of the chosen chunk, which is split when the remainder is at
 * least 256 bytes and at least 1/128 of the rounded size; otherwise the remainder stays with
 * the block (waste < max(256 B, 0.8%), where TensorFlow's rule allows up to 2x or 128 MiB).
 * Fails with -EINVAL iff pool or addr is NULL or bytes == 0; -EAGAIN as above; -ENOMEM iff
 * the request cannot be met under the limit or host memory for metadata runs out; -EFAULT
 * iff the primitive returned a misaligned, wrapping or overlapping range (released again); or
 * a primitive error other than -ENOMEM, passed through. On failure the pool is unchanged
 * except for regions released by step 5 and the counters. Step 1 is O(log n) for n free
 * chunks plus the amortised growth of the pointer map; steps 2 and 4 are O(deferred chunks +
 * their neighbours); steps 3 and 5 add primitive calls and O(regions). Not thread-safe: the caller
 * locks. */
int bfc_alloc(bfc_pool_t *pool, uint64_t bytes, uint64_t *addr);

/* bfc_alloc that also stores `tag` with the block (bfc_lookup_tagged and bfc_walk report it; the
 * shim keeps the library that asked for the block there) and, on success, the block's chunk
 * size in *held (may be NULL). Same errors and cost. */
int bfc_alloc_tagged(bfc_pool_t *pool, uint64_t bytes, uint8_t tag, uint64_t *addr, uint64_t *held);

/* bfc_alloc_tagged for a caller that cannot synchronise the device now (the shim, while a CUDA
 * graph is being captured): the deferred chunks stay deferred, so steps 2 and 4 are skipped and
 * the request is served by best fit, growth or garbage collection (a region holding a deferred
 * chunk is not fully free), else refused with -ENOMEM (counted), deferred chunks or not. Never
 * -EAGAIN. Same other errors and cost as bfc_alloc_tagged. Not thread-safe: the caller locks. */
int bfc_alloc_nosync(bfc_pool_t *pool, uint64_t bytes, uint8_t tag, uint64_t *addr, uint64_t *held);

/* bfc_alloc_tagged's step 1 alone: best fit among the free chunks, with no retire, growth or
 * garbage collection; -ENOSPC (not counted as an out-of-memory) when no free chunk fits. A
 * front (core/front.h) asks this first and flushes before the full call, so the pool grows and
 * refuses only as it would with no front (a request too large to round is -ENOSPC too). Fails
 * with -EINVAL iff pool, addr or held is NULL or bytes == 0; -ENOMEM iff host memory for
 * metadata runs out. Not thread-safe. */
int bfc_alloc_fit(bfc_pool_t *pool, uint64_t bytes, uint8_t tag, uint64_t *addr, uint64_t *held);

/* Frees the in-use block starting at addr for immediate reuse, coalescing it with free
 * address neighbours (never across regions). Fails with -ENOENT iff addr lies in no region of
 * the pool (not ours: the caller may pass it on); -EINVAL iff addr lies strictly inside an
 * in-use block (interior pointer); -EALREADY iff addr lies in a free or deferred chunk (a
 * double free or a stale pointer). A failed call changes nothing. O(log n) expected for a block
 * base; the error cases cost O(log regions + chunks in that region). Not thread-safe: the caller
 * locks. */
int bfc_free(bfc_pool_t *pool, uint64_t addr);

/* Like bfc_free, but the block only leaves the in-use set: it is neither reusable nor
 * coalesced until bfc_retire (a real cuMemFree waits for device work still using the block).
 * Same error codes as bfc_free. O(1) expected. Not thread-safe: the caller locks. */
int bfc_free_deferred(bfc_pool_t *pool, uint64_t addr);

/* bfc_free_deferred that also reports, on success, what bfc_lookup_tagged would have: the
 * block's chunk size in *held, the bytes asked for in *requested and its tag in *tag (each may
 * be NULL). Same errors and cost: one lookup where a lookup and a free would take two. */
int bfc_free_deferred_tagged(bfc_pool_t *pool, uint64_t addr, uint64_t *held, uint64_t *requested,
                             uint8_t *tag);

/* Returns the mark of the deferred frees made so far: a caller that takes the mark, drops its
 * lock, synchronises the device and relocks can retire exactly the chunks that the
 * synchronisation covers with bfc_retire_upto(pool, mark), even if other threads deferred
 * more frees meanwhile. Marks only grow. O(1). Not thread-safe: the caller locks. */
uint64_t bfc_defer_mark(const bfc_pool_t *pool);

/* The device work issued before the mark was taken is done: makes the chunks deferred up to
 * that mark free, coalescing them; later ones stay deferred. Returns the number retired.
 * Never fails. O(k log n) for k chunks retired. Not thread-safe: the caller locks. */
uint64_t bfc_retire_upto(bfc_pool_t *pool, uint64_t mark);

/* bfc_retire_upto(pool, UINT64_MAX): the caller has synchronised the device with the pool
 * locked throughout, so every deferred chunk becomes free. Not thread-safe: the caller locks. */
uint64_t bfc_retire(bfc_pool_t *pool);

/* Releases every fully free region to the primitive and stores the bytes released in
 * *released (may be NULL). Returns 0, or the first release error (the other regions are still
 * tried; a region whose release failed stays in the pool). O(regions). Not thread-safe: the caller
 * locks. */
int bfc_trim(bfc_pool_t *pool, uint64_t *released);

/* Like bfc_trim, but stops once pool_bytes <= keep: releases fully free regions (mapped mode:
 * whole free units, highest addresses of a free chunk first) only while more than keep bytes
 * are reserved. Returns 0 or the first release error. O(regions + chunks). Not thread-safe. */
int bfc_trim_to(bfc_pool_t *pool, uint64_t keep, uint64_t *released);

/* Mapped mode's figures (all 0 in region mode): the address space, the bytes mapped and
 * released over the pool's life, and its unit. O(1). Not thread-safe: the caller locks. */
typedef struct bfc_mapped {
  uint64_t space_bytes, unit, mapped_total, released_total, map_calls, unmap_calls;
} bfc_mapped_t;
void bfc_mapped_stats(const bfc_pool_t *pool, bfc_mapped_t *out);

/* Returns 1 iff addr lies inside one of the pool's regions (any state), else 0.
 * O(log regions). Not thread-safe: the caller locks. */
int bfc_owns(const bfc_pool_t *pool, uint64_t addr);

/* Finds the in-use block containing addr: stores its base, its chunk size (the block spans
 * [base, base + size)) and the size asked for (any out pointer may be NULL). Fails with
 * -ENOENT iff no in-use block contains addr. O(1) expected when addr is a block base;
 * O(log regions + chunks in that region) for interior addresses. Not thread-safe: the caller
 * locks. */
int bfc_lookup(const bfc_pool_t *pool, uint64_t addr, uint64_t *base, uint64_t *size,
               uint64_t *requested);

/* bfc_lookup that also stores the block's tag (bfc_alloc_tagged) in *tag (may be NULL). */
int bfc_lookup_tagged(const bfc_pool_t *pool, uint64_t addr, uint64_t *base, uint64_t *size,
                      uint64_t *requested, uint8_t *tag);

/* O(1) snapshot of the byte counters a caller's retire or cuMemGetInfo logic needs: chunk
 * bytes in use, deferred, free (pool - in use - deferred) and reserved (pool_bytes). Any out
 * pointer may be NULL; a NULL pool reads as empty. Not thread-safe: the caller locks. */
void bfc_usage(const bfc_pool_t *pool, uint64_t *in_use, uint64_t *deferred, uint64_t *free_bytes,
               uint64_t *reserved);

/* Fills *out with the current counters (zeros for a NULL pool). O(log n). Not thread-safe: the
 * caller locks. */
void bfc_stats(const bfc_pool_t *pool, bfc_stats_t *out);

/* Calls fn for every chunk in address order (regions in address order). Returns the first
 * nonzero value fn returned, or 0. The pool must not be modified from fn. O(chunks). Not
 * thread-safe: the caller locks. */
int bfc_walk(const bfc_pool_t *pool, bfc_walk_fn fn, void *ctx);

/* Verifies every invariant: chunks tile each region exactly, address links are consistent, no
 * two adjacent chunks are free, the bins and their bitmap hold exactly the free chunks with
 * correct order and keys, the pointer map holds exactly the in-use chunks, the deferred list
 * holds exactly the deferred chunks, regions are sorted and disjoint, pool_bytes <= limit and
 * every counter equals a recount. Returns the number of violations (0 = healthy).
 * O(chunks + map capacity). Builds with GPUCAP_DEBUG=1 assert it is 0 after every mutating
 * call. Not thread-safe: the caller locks. */
int bfc_check(const bfc_pool_t *pool);

/* Writes a memory-state report into buf (NUL-terminated, truncated to cap) and returns the
 * length the full report has (snprintf semantics). With request > 0 it is an out-of-memory
 * report for that request (TensorFlow's DumpMemoryLog: request and rounded size, limit, in
 * use, pool, largest free block, fragmentation, a per-bin summary over TensorFlow's 21 bins,
 * the Stats block and a 100-cell occupancy map: `_` free, `*` requested bytes in use, `x`
 * internal waste, `d` deferred, `|` between regions). Allocates nothing, does no I/O.
 * O(chunks). Not thread-safe: the caller locks. */
size_t bfc_format_report(const bfc_pool_t *pool, uint64_t request, char *buf, size_t cap);

/* TensorFlow's MinSystemMemory: bytes to leave for the system when no cap is given.
 * free_bytes < 2 GiB -> 225 MiB; otherwise by compute capability major: <= 6 -> 500 MiB,
 * 7 -> 1050 MiB, 8 -> 1536 MiB, >= 9 -> 1800 MiB. O(1), pure, thread-safe. */
uint64_t bfc_min_system_memory(uint64_t free_bytes, int cc_major);

/* Rounds bytes up to a multiple of BFC_MIN_ALLOC; 0 when that overflows. O(1), pure,
 * thread-safe. */
uint64_t bfc_round(uint64_t bytes);

#endif
