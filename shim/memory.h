/* What the device-memory hooks (shim/memory.c) share with the stream-ordered ones
 * (shim/async.c).
 */
#ifndef GPUCAP_SHIM_MEMORY_H
#define GPUCAP_SHIM_MEMORY_H

#include "shim/cudadefs.h"

#include <stdbool.h>
#include <stdint.h>

/* Frees ptr if a context's pool holds it: withdraws its IPC export (before the block can be
 * handed out again) and frees it into the pool (shim/ctx.h). Returns true with *rc set when
 * the free is answered here: CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE (an interior pointer or a
 * double free), or, when need_context and the thread has no usable current context, the
 * driver's error for that (the block is kept, as the driver keeps it); false when no pool holds
 * ptr (the caller passes the free on to the driver). */
bool memory_free_pooled(uint64_t ptr, bool need_context, CUresult *rc);

#endif
