/* The context object's insides, shared by the two files of the module: shim/context/ctx.c (the
 * table of objects and their lifecycle) and shim/context/ctx_alloc.c (the allocation path). Nothing
 * outside the module includes this header.
 */
#ifndef GPUCAP_SHIM_CTX_IMPL_H
#define GPUCAP_SHIM_CTX_IMPL_H

#include "shim/context/ctx.h"
#include "shim/pool/pool.h"

#include <pthread.h>
#include <stdatomic.h>

/* Laid out for the fronts' fast paths (shim/context/ctx_front.c), which read handle, dev, dying,
 * pressure, epoch and the sync counters on every call from every thread but write none of
 * them: those share a cache line that stays in every core's cache, while the lock, written by
 * every call through the pool, has a line of its own. */
struct ctx {
  _Alignas(64) _Atomic(CUcontext) handle; /* set once ready; NULL when free or dropped */
  int dev;                                /* the device its pool charges */
  int index;                              /* among the contexts seen on dev */
  /* Which of its context's pools (GPUCAP_ARENAS): set before handle is published; read with no
   * lock by look-ups, which may meet a slot being made again. */
  atomic_int arena;
  /* The driver is destroying the context: it may free the regions and hand their addresses
   * out again before gpucap learns the outcome, so other threads leave this object alone. */
  atomic_bool dying;
  atomic_int pressure; /* threads in the pool's slow path: frees bypass the fronts (below) */
  /* Per-thread fronts (shim/context/ctx_front.c). epoch: bumped (lock held) when the object is made
   * or dropped, so a front bound to an earlier life of this slot is known stale. The two sync
   * counters stamp cached blocks: a synchronisation gpucap makes of the context takes a ticket
   * from sync_started before it begins and raises sync_done to it once it succeeded, so a block
   * freed while sync_started was S is safe to hand out again once sync_done > S. pressure
   * (above): threads in the pool's slow path (growth or refusal). */
  atomic_uint_least64_t epoch;
  atomic_uint_least64_t sync_started, sync_done;
  uint64_t front_budget; /* bytes one thread's front may keep for this context */
  /* Guards pool, ooms_taken_back, and dev, index and front_budget when a slot is made. */
  _Alignas(64) pthread_mutex_t lock;
  /* Allocations the fronts served (the report's): each front counts its own and adds them here
   * when it is flushed or unloaded, so no hit writes a line that every call reads. */
  atomic_uint_least64_t front_allocs;
  pool_t pool;
  /* The pool's refusals (its num_ooms) that the program did not see: the call served the
   * request after all (other pools' regions given back, another arena's chunk), or counted one
   * refusal more than once. The report takes them out. */
  uint64_t ooms_taken_back;
};

/* ctx_owning's scan of the table (the fronts are not asked), returning the context whose pool
 * holds addr with its lock held; NULL when none (no lock held). */
struct ctx *ctx_owning_locked(uint64_t addr);

/* ---- per-thread fronts (shim/context/ctx_front.c)
 * -------------------------------------------------- A front has no lock: its owner goes in by a
 * flag of its own, another thread (a visitor, under the registry lock) asks and waits until the
 * owner is out (shim/context/ctx_front.c). Order: a context's lock, then the fronts' registry, then
 * a visit; an owner inside its front takes no lock and waits for nothing but a visit to end. */

/* True iff GPUCAP_FRONTS is on (read once). Inline: with fronts off, the hot paths ask it
 * instead of calling into the fronts (ctx_fronts_setting: -1 until read, then 0 or 1). */
extern atomic_int ctx_fronts_setting;
bool ctx_fronts_read(void);
static inline bool ctx_fronts_on(void) {
  int v = atomic_load_explicit(&ctx_fronts_setting, memory_order_relaxed);
  return v < 0 ? ctx_fronts_read() : v > 0;
}

/* The per-thread fast paths, no context lock taken: an allocation of `bytes` for library lib
 * served from the calling thread's front (true, with *addr and *held; its trace row and ledger
 * entry made), and the free of ptr into it: 1 with *rc set; 0, a block the thread does not
 * know: the caller frees it through the pool, after ctx_fronts_cached(c, ptr, true); -1, a
 * block the thread knew as live (so in no front's cache), now forgotten: through the pool. */
bool ctx_front_take(struct ctx *c, uint64_t bytes, int lib, uint64_t *addr, uint64_t *held);
int ctx_front_free(struct ctx *c, uint64_t ptr, CUresult *rc);

/* Notes a block the pool just handed this thread (no lock held), so that its free can take the
 * fast path. */
void ctx_front_track(struct ctx *c, uint64_t addr, uint64_t held, uint64_t requested, int lib);

/* The context whose block the calling thread's front knows addr to be (live or cached), or
 * NULL. Takes the thread's own front lock only. */
struct ctx *ctx_front_owner(uint64_t addr);

/* c's lock held. Whether a front keeps addr as a cached block (freed by the program); with
 * `claim`, a front that tracks it as live forgets it (the free goes through the pool). */
bool ctx_fronts_cached(struct ctx *c, uint64_t addr, bool claim);

/* c's lock held: up to FRONT_PUT_ROOM of the calling thread's cached blocks of c (the largest
 * first) go back into c's pool; returns their number (0: none left). bytes > 0: only those of
 * the class of a request of that size and above, which the pool's best fit could choose for it
 * (front_drain_from; one not yet safe goes back as the deferred free it would be there), so that
 * a miss is placed, and the pool retires, as with no front. */
size_t ctx_front_spill(struct ctx *c, uint64_t bytes);

/* c's lock held: every front's cached blocks of c go back into c's pool: freed at once when a
 * completed synchronisation covers their stamp, else deferred. `bounded`: the exit path's,
 * the registry taken with exit_lock and each front's owner waited for with exit_wait; false
 * when one stayed busy (that front keeps its blocks and the count of what it served). */
bool ctx_fronts_flush(struct ctx *c, bool bounded);

/* c's lock held, its pool about to go: flushes c's fronts and unbinds them. */
void ctx_fronts_unbind(struct ctx *c);

/* A synchronisation of c's context that gpucap makes: a ticket before, its end after. */
uint64_t ctx_sync_begin(struct ctx *c);
void ctx_sync_end(struct ctx *c, uint64_t ticket);

/* The current context's object; or NULL with *rc = CUDA_SUCCESS when there is no usable
 * current context (the driver must answer the call itself), *rc = CUDA_ERROR_OUT_OF_MEMORY
 * when gpucap refuses (no object or pool can be made, or the device is beyond what gpucap can
 * cap), or the driver's error when a context query failed otherwise. Creates the object on
 * first use (registry lock); the steady state is a thread-local hit. */
ctx_t *ctx_current(CUresult *rc);

/* The number of slots ever used (objects to look at, some of them dropped), and slot i. */
int ctx_count(void);
ctx_t *ctx_slot(int i);

#endif
