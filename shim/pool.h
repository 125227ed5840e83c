/* The device-memory pools: one core/bfc pool per CUDA context, growing by regions that are
 * charged to the context's device cap, with frees deferred until the device has finished the
 * work issued before them (a real cuMemFree waits for that work).
 * Thread-safe: a registry mutex guards pool creation, and each pool has its own mutex, held
 * across driver calls only on growth and garbage collection, never on the steady-state path.
 */
#ifndef GPUCAP_SHIM_POOL_H
#define GPUCAP_SHIM_POOL_H

#include "core/bfc.h"
#include "shim/cudadefs.h"

#include <stdbool.h>

#define POOL_MAX 64

/* True iff pooling is on (GPUCAP_POOL, read at the first call). */
bool pool_enabled(void);

/* Serves `bytes` from the current context's pool (created on first use). Returns
 * CUDA_SUCCESS with *dptr set; CUDA_ERROR_OUT_OF_MEMORY when the request cannot fit under the
 * cap (printing a memory-state report once per burst of failures); the driver's own error when
 * there is no usable current context or the driver failed otherwise. `dptr` non-NULL and
 * bytes > 0 are the caller's to check. */
CUresult pool_alloc(CUdeviceptr *dptr, size_t bytes);

/* cuMemAllocPitch from the pool: pitch = WidthInBytes rounded up to the device's texture
 * alignment (what the driver uses), block = pitch x Height. Invalid arguments get the
 * driver's own error code. */
CUresult pool_alloc_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                          unsigned int element_size);

/* Frees a pooled block (deferred: reusable after the device has synchronised). Returns true
 * iff some pool owns `ptr`, with *rc set to CUDA_SUCCESS, or CUDA_ERROR_INVALID_VALUE for an
 * interior pointer or a double free (the pool is left intact), or, when need_context and the
 * thread has no usable current context, the driver's error for that (the block is kept, as the
 * driver keeps it); false when no pool owns it (the caller passes it on to the driver). */
bool pool_free(CUdeviceptr ptr, bool need_context, CUresult *rc);

/* Where an address lies: outside every pool, inside a pool region but in no block the program
 * holds, or inside a block the program holds. */
enum pool_where { POOL_OUTSIDE, POOL_NOT_HELD, POOL_BLOCK };

/* Classifies addr; for POOL_BLOCK stores the block's base and the size the program asked for
 * (an address in the block's chunk past that size is POOL_NOT_HELD, as the driver knows no
 * memory there). Takes each pool's lock briefly; O(pools x log regions). */
enum pool_where pool_block(uint64_t addr, uint64_t *base, uint64_t *size);

/* Marks ctx's pool as dying (the driver is about to destroy ctx) or, with dying false, alive
 * again (the driver kept the context). While dying, the driver may free its regions and give
 * their addresses to other allocations before gpucap hears of it: other threads never trim or
 * synchronise it, and its addresses are the driver's to answer for (frees, pointer queries).
 * O(pools), lock-free. */
void pool_dying(CUcontext ctx, bool dying);

/* The driver destroyed `ctx` (and freed its memory): forgets its pool and returns the pool's
 * charges, with no driver call. */
void pool_drop_context(CUcontext ctx);

/* Releases the wholly free regions of every pool on device dev to the driver (after settling
 * their deferred frees), for an allocation of another kind that would not fit under the cap
 * otherwise; returns the bytes released. The caller holds no pool lock. */
uint64_t pool_trim(int dev);

/* Bytes the pools of device dev hold from the driver that the program does not hold: free and
 * deferred chunks. Takes each pool's lock briefly. */
uint64_t pool_idle_bytes(int dev);

/* A pool as the exit report sees it. */
struct pool_report {
  int dev;                  /* its device */
  int index;                /* among the contexts gpucap saw on that device, in that order */
  bool destroyed;           /* the driver destroyed its context: the figures of that moment */
  bfc_stats_t stats;        /* a snapshot of its counters */
  uint64_t largest_request; /* the largest single request it could serve (docs/report.md) */
};

/* For the exit report: settles every deferred free into free chunks (no block will be handed
 * out again; bookkeeping only) and calls fn for every pool that served or refused at least one
 * allocation (at most POOL_MAX pools of destroyed contexts are kept), and busy for a pool
 * whose lock stayed busy at exit (with dev and index -1 for the list of destroyed contexts'
 * pools). Takes each lock with exit_lock (never waits longer than EXIT_WAIT_MS in all); makes
 * no CUDA call; O(pools + chunks). */
void pool_each(void (*fn)(void *arg, const struct pool_report *r),
               void (*busy)(void *arg, int dev, int index), void *arg);

#endif
