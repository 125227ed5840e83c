/* Stream-ordered frees still pending on their stream. cuMemFreeAsync returns at once, but the
 * driver frees the memory only when the stream reaches the free: until then the block is still
 * the device's, so its charge stays. Each pending free records an event on its stream right
 * after the free; the charge is credited once that event has completed, found out lazily
 * (a few events polled at each new free, all of a device's at get-info) and, before gpucap
 * refuses an allocation at the cap, by waiting for them (a refusal is the last resort).
 * Thread-safe: one mutex, never held across a driver call; an event being waited on by one
 * thread is never reused or destroyed by another.
 */
#ifndef GPUCAP_SHIM_PENDING_H
#define GPUCAP_SHIM_PENDING_H

#include "shim/base/cudadefs.h"

#include <stdbool.h>
#include <stdint.h>

/* The driver accepted a stream-ordered free of `bytes` charged to dev on `stream` (ptsz: the
 * stream handle follows the per-thread-default-stream convention, NULL being the calling
 * thread's per-thread stream); ordered: the block was stream-ordered memory (freed with the
 * device's primary context), else memory of a context. The charge is returned once the stream
 * reaches the free. If no event can be recorded there, the stream is synchronised and the
 * charge returned now (if even that fails the charge stays: never credited early). */
void pending_add(int dev, uint64_t bytes, bool ordered, CUstream stream, bool ptsz);

/* Credits the pending frees of dev (every device when dev < 0) whose events have completed,
 * without waiting. O(pending frees of dev) event queries. */
void pending_poll(int dev);

/* Waits for every pending free of dev that was pending when called and credits them. Returns
 * true iff any charge came back. Called before a refusal at the cap. */
bool pending_wait(int dev);

/* The driver destroyed ctx: the frees pending on its streams completed with it (their events
 * are gone: never used again). No driver call. */
void pending_drop_context(CUcontext ctx);

/* The driver freed every stream-ordered allocation of dev (a primary-context reset): the
 * frees of stream-ordered blocks pending there have nothing left to free; their charges
 * return now (pending frees of other memory wait for their streams as before). */
void pending_drop_device(int dev);

#endif
