/* Test-only hooks of the fake CUDA driver (build/fakecuda/libcuda.so.1).
 *
 * A real driver has none of these: a test that calls them must be linked against (or dlsym them
 * from) the fake. Every hook takes the fake's one lock; none blocks. See tests/fakecuda/README.md
 * for what the fake models.
 */
#ifndef GPUCAP_TESTS_FAKECUDA_FAKECUDA_H
#define GPUCAP_TESTS_FAKECUDA_FAKECUDA_H

#include <stddef.h>

#include "shim/base/cudadefs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueues one item of pending device work on hStream that touches [dptr, dptr + bytes), as a
 * kernel would. hStream follows the legacy-default-stream convention (NULL and CU_STREAM_LEGACY
 * name the legacy stream, CU_STREAM_PER_THREAD the calling thread's per-thread stream). The
 * range is not validated. The item stays pending until a sync point completes it (see README).
 * Returns CUDA_SUCCESS, or CUDA_ERROR_NOT_INITIALIZED before cuInit, CUDA_ERROR_INVALID_CONTEXT
 * for a default stream with no current context, CUDA_ERROR_INVALID_HANDLE for a bad stream,
 * CUDA_ERROR_INVALID_VALUE when bytes is 0. O(1) plus the stream look-up. */
CUresult fakecudaEnqueueWork(CUstream hStream, CUdeviceptr dptr, size_t bytes);

/* To be called by a test when it receives a block [dptr, dptr + bytes) from an allocator:
 * returns how many pending work items still touch that range. A non-zero answer is a hazard
 * (the new owner's work could race the old owner's) and is added to the "hazards" counter of
 * the stats report. Never fails; 0 before cuInit. O(pending work). */
int fakecudaClaim(CUdeviceptr dptr, size_t bytes);

/* Number of pending work items in the process (copies, memsets, stream-ordered frees and
 * fakecudaEnqueueWork items not yet completed). O(pending work). */
int fakecudaPendingWork(void);

/* Hazards counted so far by fakecudaClaim. */
unsigned long long fakecudaHazards(void);

/* How many times the exported entry point `name` has been called (0 for an unknown name). */
unsigned long long fakecudaCalls(const char *name);

/* What this process holds on device `dev`, for the fake NVML (tests/fakecuda/nvml) in the same
 * process: *used is the device memory this process holds as cuMemGetInfo_v2 counts it (the
 * program's allocations, arrays, VMM and pool memory, and the driver's own module variables:
 * total - free when the process has the device to itself, without FAKECUDA_MACHINE) and
 * *contexts the number of live contexts on the device (created and not destroyed, or primary and
 * retained). Returns CUDA_SUCCESS; CUDA_ERROR_NOT_INITIALIZED before cuInit (or in a forked
 * child), CUDA_ERROR_DEINITIALIZED after unload, CUDA_ERROR_INVALID_DEVICE for a bad ordinal,
 * CUDA_ERROR_INVALID_VALUE for a NULL pointer; nothing is written on failure. Not counted as a
 * call. O(contexts). */
CUresult fakecudaDeviceUsage(int dev, size_t *used, int *contexts);

/* Device dev's peak of device memory held (the report's peak_bytes) since the driver was
 * initialised or the last restart; with restart non-zero the peak starts again from what the
 * device holds now. 0 before cuInit or for a bad ordinal. */
unsigned long long fakecudaPeakBytes(int dev, int restart);

/* Managed memory on a device (README.md, "Managed memory"): bytes of managed pages resident there
 * now (part of what cuMemGetInfo_v2 counts as used, and of peak_bytes) and at most, and the
 * bytes migrated there and back to the host (evicted or prefetched) so far. */
typedef struct fakecuda_managed {
  unsigned long long resident, peak, migrated_in, migrated_out;
} fakecuda_managed_t;

/* Device dev's managed figures in *out. Returns CUDA_SUCCESS; CUDA_ERROR_NOT_INITIALIZED before
 * cuInit (or in a forked child, or after unload), CUDA_ERROR_INVALID_DEVICE for a bad ordinal,
 * CUDA_ERROR_INVALID_VALUE for NULL. Not counted as a call. O(1). */
CUresult fakecudaManagedUsage(int dev, fakecuda_managed_t *out);

#ifdef __cplusplus
}
#endif

#endif
