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

/* Each object starts a cache line of its own: the arenas of a context sit in neighbouring
 * slots, and a thread working in one must not write a line another arena's thread uses. */
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
  /* GPUCAP_ARENAS=auto may open another arena beside this one (a VMM-backed pool that grows). */
  atomic_bool spreads;
  /* Guards pool, ooms_taken_back, and dev and index when a slot is made. */
  pthread_mutex_t lock;
  pool_t pool;
  /* The pool's refusals (its num_ooms) that the program did not see: the call served the
   * request after all (other pools' regions given back, another arena's chunk), or counted one
   * refusal more than once. The report takes them out. */
  uint64_t ooms_taken_back;
};

/* The context whose pool holds addr, among those the driver is not destroying (the driver may
 * already have freed a dying context's regions and handed their addresses out again: such an
 * address is the driver's to answer for), returned with its lock held; NULL when none (no lock
 * held). The thread's own object is asked first; each other's lock is taken briefly. */
struct ctx *ctx_owning_locked(uint64_t addr);

/* c's lock taken, c returned; or, when another thread holds it and c spreads, the calling
 * thread moved to its context's next arena in turn (made if it is not yet), whose lock is taken
 * and which is returned (docs/design.md, "Arenas"). The allocation path's one way into a pool:
 * where a per-thread cache would go. */
struct ctx *ctx_lock_arena(struct ctx *c);

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
