/* Stream capture (see shim/capture.h): the capture status of a stream, and a count of the
 * captures begun and not ended, kept by hooks on cuStreamBeginCapture (every ABI),
 * cuStreamBeginCaptureToGraph and cuStreamEndCapture. A capture counts from just before its
 * begin (dropped again if the begin fails) to an end that ends it (success, or the capture
 * reported invalidated), and a begin waits for gpucap's own synchronisations under way
 * (capture_sync_enter). Lock-free.
 */
#include "shim/capture.h"

#include "shim/export.h"
#include "shim/fork.h"
#include "shim/init.h"
#include "shim/real.h"

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

/* Before a capture begins: lets the pools retire what they can (their last chance to
 * synchronise until the capture ends), counts it, then waits for gpucap's synchronisations
 * under way. */
static void announce(void) {
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

/* After the driver's answer to a begin that announce() counted. */
static CUresult began(CUresult rc) {
  if (rc != CUDA_SUCCESS) {
    drop();
  }
  return rc;
}

static CUresult ended(CUresult rc) {
  if (rc == CUDA_SUCCESS || rc == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) {
    drop();
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuStreamBeginCapture(CUstream hStream) {
  if (!init_ready(NULL) || !real.cuStreamBeginCapture) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  announce();
  return began(real.cuStreamBeginCapture(hStream));
}

GPUCAP_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  if (!init_ready(NULL) || !real.cuStreamBeginCapture_ptsz) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  announce();
  return began(real.cuStreamBeginCapture_ptsz(hStream));
}

GPUCAP_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  if (!init_ready(NULL) || !real.cuStreamBeginCapture_v2) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  announce();
  return began(real.cuStreamBeginCapture_v2(hStream, mode));
}

GPUCAP_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  if (!init_ready(NULL) || !real.cuStreamBeginCapture_v2_ptsz) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  announce();
  return began(real.cuStreamBeginCapture_v2_ptsz(hStream, mode));
}

GPUCAP_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                   const CUgraphNode *dependencies,
                                                   const CUgraphEdgeData *dependencyData,
                                                   size_t numDependencies,
                                                   CUstreamCaptureMode mode) {
  if (!init_ready(NULL) || !real.cuStreamBeginCaptureToGraph) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  announce();
  return began(real.cuStreamBeginCaptureToGraph(hStream, hGraph, dependencies, dependencyData,
                                                numDependencies, mode));
}

GPUCAP_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                        const CUgraphNode *dependencies,
                                                        const CUgraphEdgeData *dependencyData,
                                                        size_t numDependencies,
                                                        CUstreamCaptureMode mode) {
  if (!init_ready(NULL) || !real.cuStreamBeginCaptureToGraph_ptsz) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  announce();
  return began(real.cuStreamBeginCaptureToGraph_ptsz(hStream, hGraph, dependencies, dependencyData,
                                                     numDependencies, mode));
}

GPUCAP_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
  if (!init_ready(NULL) || !real.cuStreamEndCapture) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return ended(real.cuStreamEndCapture(hStream, phGraph));
}

GPUCAP_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
  if (!init_ready(NULL) || !real.cuStreamEndCapture_ptsz) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return ended(real.cuStreamEndCapture_ptsz(hStream, phGraph));
}
