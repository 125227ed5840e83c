/* Stream capture (see shim/context/capture.h): the capture status of a stream, and a count of the
 * captures begun and not ended, kept by the hooks on cuStreamBeginCapture (every ABI),
 * cuStreamBeginCaptureToGraph and cuStreamEndCapture (shim/entry/stream.c). A capture counts
 * from just before its begin (dropped again if the begin fails) to an end that ends it (success,
 * or the capture reported invalidated), and a begin waits for gpucap's own synchronisations
 * under way (capture_sync_enter). Lock-free.
 */
#include "shim/context/capture.h"

#include "shim/base/fork.h"
#include "shim/base/real.h"

#include <sched.h>
#include <stdatomic.h>

static atomic_long active;   /* captures announced (about to begin) or begun, not ended */
static atomic_long syncing;  /* gpucap's own context synchronisations under way */
static void (*before)(void); /* capture_before_begin's */

void capture_before_begin(void (*fn)(void)) {
  before = fn;
}

bool capture_any(void) {
  return atomic_load_explicit(&active, memory_order_acquire) > 0;
}

/* The two sides order themselves through `active` and `syncing` (sequentially consistent): a
 * synchroniser that counts itself and then sees no capture knows that any capture announced
 * later waits for it; a capture announced first makes the synchroniser give up. */
bool capture_sync_enter(void) {
  atomic_fetch_add(&syncing, 1);
  if (atomic_load(&active) > 0) {
    atomic_fetch_sub(&syncing, 1);
    return false;
  }
  return true;
}

void capture_sync_leave(void) {
  atomic_fetch_sub(&syncing, 1);
}

void capture_announce(void) {
  if (before) {
    before();
  }
  atomic_fetch_add(&active, 1);
  while (atomic_load(&syncing) > 0) {
    sched_yield();
  }
}

bool capture_stream(CUstream stream, bool ptsz) {
  if (!capture_any()) {
    return false; /* no capture begun: the driver need not be asked */
  }
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  __typeof__(real.cuStreamIsCapturing) fn =
      ptsz ? real.cuStreamIsCapturing_ptsz : real.cuStreamIsCapturing;
  return fn && fn(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* In a fork child: no capture. */
static void fork_child(void) {
  atomic_store_explicit(&active, 0, memory_order_relaxed);
  atomic_store_explicit(&syncing, 0, memory_order_relaxed);
}
FORK_CHILD(fork_child)

/* One capture fewer (never below zero: a fork child restarts the count at zero). */
static void drop(void) {
  long n = atomic_load_explicit(&active, memory_order_relaxed);
  while (n > 0 && !atomic_compare_exchange_weak_explicit(&active, &n, n - 1, memory_order_acq_rel,
                                                         memory_order_relaxed)) {
  }
}

CUresult capture_began(CUresult rc) {
  if (rc != CUDA_SUCCESS) {
    drop();
  }
  return rc;
}

CUresult capture_ended(CUresult rc) {
  if (rc == CUDA_SUCCESS || rc == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) {
    drop();
  }
  return rc;
}
