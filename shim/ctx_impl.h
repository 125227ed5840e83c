/* The context object's insides, shared by the two files of the module: shim/ctx.c (the table
 * of objects and their lifecycle) and shim/ctx_alloc.c (the allocation path). Nothing outside
 * the module includes this header.
 */
#ifndef GPUCAP_SHIM_CTX_IMPL_H
#define GPUCAP_SHIM_CTX_IMPL_H

#include "shim/ctx.h"
#include "shim/pool.h"

#include <pthread.h>
#include <stdatomic.h>

struct ctx {
  _Atomic(CUcontext) handle; /* set once the object is ready; NULL when free or dropped */
  int dev;                   /* the device its pool charges */
  int index;                 /* among the contexts seen on dev */
  pthread_mutex_t lock;      /* guards everything below and pool */
  /* The driver is destroying the context: it may free the regions and hand their addresses
   * out again before gpucap learns the outcome, so other threads leave this object alone. */
  atomic_bool dying;
  pool_t pool;
};

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
