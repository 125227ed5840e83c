/* The stream-capture hooks: cuStreamBeginCapture (every ABI), cuStreamBeginCaptureToGraph and
 * cuStreamEndCapture, each with its per-thread-stream (_ptsz) variant. Each calls the driver
 * unchanged and keeps the count of captures under way (shim/context/capture.h) that tells the
 * context layer when it must not synchronise. No lock of its own.
 */
#include "shim/context/capture.h"
#include "shim/entry/prologue.h"

GPUCAP_EXPORT CUresult cuStreamBeginCapture(CUstream hStream) {
  HOOK_PROLOGUE(real.cuStreamBeginCapture);
  capture_announce();
  return capture_began(real.cuStreamBeginCapture(hStream));
}

GPUCAP_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  HOOK_PROLOGUE(real.cuStreamBeginCapture_ptsz);
  capture_announce();
  return capture_began(real.cuStreamBeginCapture_ptsz(hStream));
}

GPUCAP_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  HOOK_PROLOGUE(real.cuStreamBeginCapture_v2);
  capture_announce();
  return capture_began(real.cuStreamBeginCapture_v2(hStream, mode));
}

GPUCAP_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  HOOK_PROLOGUE(real.cuStreamBeginCapture_v2_ptsz);
  capture_announce();
  return capture_began(real.cuStreamBeginCapture_v2_ptsz(hStream, mode));
}

GPUCAP_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                   const CUgraphNode *dependencies,
                                                   const CUgraphEdgeData *dependencyData,
                                                   size_t numDependencies,
                                                   CUstreamCaptureMode mode) {
  HOOK_PROLOGUE(real.cuStreamBeginCaptureToGraph);
  capture_announce();
  return capture_began(real.cuStreamBeginCaptureToGraph(hStream, hGraph, dependencies,
                                                        dependencyData, numDependencies, mode));
}

GPUCAP_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                        const CUgraphNode *dependencies,
                                                        const CUgraphEdgeData *dependencyData,
                                                        size_t numDependencies,
                                                        CUstreamCaptureMode mode) {
  HOOK_PROLOGUE(real.cuStreamBeginCaptureToGraph_ptsz);
  capture_announce();
  return capture_began(real.cuStreamBeginCaptureToGraph_ptsz(
      hStream, hGraph, dependencies, dependencyData, numDependencies, mode));
}

GPUCAP_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
  HOOK_PROLOGUE(real.cuStreamEndCapture);
  return capture_ended(real.cuStreamEndCapture(hStream, phGraph));
}

GPUCAP_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
  HOOK_PROLOGUE(real.cuStreamEndCapture_ptsz);
  return capture_ended(real.cuStreamEndCapture_ptsz(hStream, phGraph));
}
