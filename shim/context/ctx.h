/* The context object: one per CUDA context gpucap served (and the device it is on), holding
 * its lock, its pool (shim/pool/pool.h) and its out-of-memory streak; the pass-through blocks and
 * arrays made in it are recorded with its handle (shim/pool/passthru.h) and go with it.
 *
 * Lifecycle: created on the first pooled allocation in the context (ctx_alloc), marked dying
 * while the driver destroys it (ctx_dying), dropped when the driver did (ctx_destroyed: on
 * cuCtxDestroy, cuDevicePrimaryCtxReset and the last cuDevicePrimaryCtxRelease), started over
 * in a fork child, and listed at exit (ctx_each). A hook looks its context up through these
 * functions, which answer in CUresult terms.
 *
 * Arenas (GPUCAP_ARENAS=N, docs/design.md "Arenas"): a context has up to N objects, one per
 * arena, each with its own lock and pool, all charged to the one device cap; a thread allocates
 * from the arena it was given at its first look-up (round-robin), and a block is freed into the
 * pool that holds it, whichever thread frees it. Before a refusal, the other arenas' wholly free
 * regions are given back as other contexts' are (ctx_alloc). A preallocating pool reserves the
 * whole cap, so a context whose pool preallocates has one arena.
 *
 * Locking: a registry mutex guards creation and dropping and the list of destroyed contexts'
 * figures; each object's own mutex guards its pool, held across driver calls only on growth
 * and trims, never on the steady-state path and never across a context synchronize. Objects
 * live in a fixed table of CTX_MAX slots, reused after a drop, so a pointer to one stays valid.
 */
#ifndef GPUCAP_SHIM_CTX_H
#define GPUCAP_SHIM_CTX_H

#include "core/bfc.h"
#include "shim/base/cudadefs.h"
#include "shim/pool/pool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CTX_MAX 64

typedef struct ctx ctx_t;

/* True iff allocations are served from the contexts' pools (GPUCAP_POOL, read at the first
 * call). */
bool ctx_pooling(void);

/* Serves `bytes` from the current context's pool (the context object and its pool created on
 * first use). Returns CUDA_SUCCESS with *dptr set; CUDA_ERROR_OUT_OF_MEMORY when the request
 * cannot fit under the cap (printing a memory-state report once per burst of failures); the
 * driver's own answer when there is no usable current context or the driver failed otherwise.
 * `dptr` non-NULL and bytes > 0 are the caller's to check. */
CUresult ctx_alloc(CUdeviceptr *dptr, size_t bytes);

/* cuMemAllocPitch from the current context's pool: pitch = WidthInBytes rounded up to the
 * device's texture alignment (what the driver uses), block = pitch x Height. Invalid arguments
 * get the driver's own error code. */
CUresult ctx_alloc_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                         unsigned int element_size);

/* Charges `bytes` of memory the pools do not serve (pass-through, stream-ordered, managed, VMM,
 * arrays, graphs) to dev iff that stays within the cap, as passthru_admit does, and, before
 * giving up, gives back the idle memory of dev (ctx_relieve): the program freed that memory,
 * and this allocation must not fail for want of it. Returns true iff charged; false for
 * dev < 0. The caller holds no context's lock. */
bool ctx_admit(int dev, uint64_t bytes);

/* Gives back device dev's idle memory of every kind gpucap can reach: the wholly free regions
 * (or units) of every pool on dev, their deferred frees settled first; the charges of
 * stream-ordered frees the streams have reached (waited for); what the driver's stream-ordered
 * pools hold unused (shim/pool/ordered.h). The caller holds no context's lock. */
void ctx_relieve(int dev);

/* After the driver answered rc to an allocation on device dev: true iff rc is
 * CUDA_ERROR_OUT_OF_MEMORY, after giving idle memory back (ctx_relieve), so that the caller asks
 * the driver once more (the cap did not refuse, the device did: memory gpucap or the driver's
 * pools hold idle must not make the program's allocation fail; another thread's relief counts
 * too). The caller holds no context's lock. */
bool ctx_retry(int dev, CUresult rc);

/* Moves a charge of `admitted` bytes on dev to `exact` once the driver said what it used:
 * admits the difference (as ctx_admit) or returns it. Returns false, with the whole charge
 * returned, iff the larger charge does not fit under the cap (the caller frees what the driver
 * made and refuses). */
bool ctx_recharge(int dev, uint64_t admitted, uint64_t exact);

/* Frees ptr if a context's pool holds it (deferred: reusable once the device has finished the
 * work issued before it), calling forget(ptr) first when not NULL (the entry layer withdraws
 * the block's IPC export there, before the block can be handed out again). Returns true with
 * *rc set when the free is answered here: CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE for an
 * interior pointer or a double free (the pool is left intact), or, when need_context and the
 * thread has no usable current context, the driver's error for that (the block is kept, as the
 * driver keeps it, and forget is not called); false when no pool holds ptr (the caller passes
 * the free on to the driver). The owner is found and the block freed under one hold of its lock. */
bool ctx_free(uint64_t ptr, bool need_context, void (*forget)(uint64_t ptr), CUresult *rc);

/* Where an address lies: outside every pool, inside a pool region but in no block the program
 * holds, or inside a block the program holds. */
enum ctx_where { CTX_OUTSIDE, CTX_NOT_HELD, CTX_BLOCK };

/* Classifies addr; for CTX_BLOCK stores the block's base and the size the program asked for
 * (an address in the block's chunk past that size is CTX_NOT_HELD, as the driver knows no
 * memory there). Takes each object's lock briefly; O(contexts x log regions). */
enum ctx_where ctx_block(uint64_t addr, uint64_t *base, uint64_t *size);

/* The pool holding addr: stores the driver's handle of its context and, for a pool backed by
 * virtual memory management (its blocks are VMM memory to the driver: no legacy IPC), its unit
 * (the device's allocation granularity; 0 for a region pool), and returns true; false when no
 * pool holds addr. Takes each object's lock briefly. */
bool ctx_pool_of(uint64_t addr, CUcontext *owner, uint64_t *unit);

/* Bytes the pools of device dev hold from the driver that the program does not hold: free and
 * deferred chunks, and a wholly idle region pool's rounding (its regions go back whole). Takes
 * each object's lock briefly. */
uint64_t ctx_idle_bytes(int dev);

/* Retires the deferred frees of every pool that has some, synchronising its context once
 * (skipped while a capture is counted: shim/context/capture.h). Called just before a capture
 * begins, the last moment a synchronisation is allowed, so that the capture's allocations can reuse
 * what the program freed before it. Takes each object's lock in turn; the caller holds none. */
void ctx_settle_all(void);

/* Gives back the idle memory of device dev's VMM-backed pools whose GPUCAP_RELEASE_AFTER
 * window has passed (see ctx_alloc): called where a program looks at free memory. Takes each
 * object's lock in turn; the caller holds none. */
void ctx_release_idle(int dev);

/* Marks the object of handle as dying (the driver is about to destroy the context) or, with
 * dying false, alive again (the driver kept it). While dying, other threads never trim or
 * synchronise it, and its addresses are the driver's to answer for. Lock-free; O(contexts). */
void ctx_dying(CUcontext handle, bool dying);

/* The driver destroyed the context `handle` and freed its memory: drops its object (its pool's
 * figures kept for the exit report) and returns the charges of everything made in it: the
 * pool's regions, its pass-through blocks and arrays; its streams' pending frees are credited.
 * Stream-ordered memory belongs to no context and stays; graph memory is shim/entry/graph.c's. No
 * driver call. */
void ctx_destroyed(CUcontext handle);

/* The driver freed every stream-ordered allocation of device dev (its primary context was reset
 * or released for the last time), whatever context it was allocated in: their charges return,
 * their pending frees are dropped. No driver call. */
void ctx_device_reset(int dev);

/* A context's pool as the exit report sees it. */
struct ctx_report {
  int dev;                  /* its device */
  int index;                /* among the contexts gpucap saw on that device, in that order */
  int arena;                /* which of the context's pools (GPUCAP_ARENAS), from 0 */
  bool destroyed;           /* the driver destroyed the context before exit began (exit.h): the
                             * figures of that moment */
  bfc_stats_t stats;        /* a snapshot of its pool's counters */
  uint64_t largest_request; /* the largest single request it could serve (docs/report.md) */
  pool_backing_t backing;   /* what backs it */
};

/* For the exit report: settles every deferred free into free chunks (no block will be handed
 * out again; bookkeeping only) and calls fn for every context whose pool served or refused at
 * least one allocation (at most CTX_MAX destroyed ones are kept), and busy for one whose lock
 * stayed busy at exit (with dev and index -1 for the list of destroyed contexts). Takes each
 * lock with exit_lock (never waits longer than EXIT_WAIT_MS in all); makes no CUDA call;
 * O(contexts + chunks). */
void ctx_each(void (*fn)(void *arg, const struct ctx_report *r),
              void (*busy)(void *arg, int dev, int index), void *arg);

#endif
