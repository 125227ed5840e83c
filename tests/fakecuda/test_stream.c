/* TAP test of the fake driver's streams, events and pending-work model with host backing:
 * asynchronous work stays pending (its data effect invisible) until a sync point completes it;
 * queries complete it on the second poll; the legacy default stream's implicit barriers; the
 * per-thread default stream; the host-synchronisation rules of copies and memsets; bounds
 * checks; hazards counted by fakecudaClaim.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/tap.h"

#define CK(call) TAP_EQ((call), CUDA_SUCCESS, "%s", #call)
#define N 4096

static CUcontext ctx;

static unsigned char byte_at(CUdeviceptr p) {
  return *(volatile unsigned char *)(uintptr_t)p; /* FAKECUDA_BACKING=1 */
}

static void streams(void) {
  CUstream s;
  TAP_EQ(cuStreamCreate(NULL, 0), CUDA_ERROR_INVALID_VALUE, "cuStreamCreate(NULL)");
  TAP_EQ(cuStreamCreate(&s, 2), CUDA_ERROR_INVALID_VALUE, "cuStreamCreate flags 2");
  CK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -10));
  int prio = 1;
  unsigned flags = 9;
  CK(cuStreamGetPriority(s, &prio));
  TAP_EQ(prio, -5, "priority -10 is clamped to -5");
  CK(cuStreamGetFlags(s, &flags));
  TAP_EQ(flags, CU_STREAM_NON_BLOCKING, "cuStreamGetFlags");
  CUcontext c = NULL;
  CK(cuStreamGetCtx(s, &c));
  tap_ok(c == ctx, "cuStreamGetCtx");
  CUgreenCtx green = (CUgreenCtx)&green;
  CK(cuStreamGetGreenCtx(s, &green));
  tap_ok(green == NULL, "cuStreamGetGreenCtx: a regular context's stream has no green context");
  green = (CUgreenCtx)&green;
  CK(cuStreamGetCtx_v2(CU_STREAM_LEGACY, &c, &green));
  tap_ok(c == ctx && green == NULL, "cuStreamGetCtx_v2 of the legacy stream");
  CK(cuStreamQuery(s));
  CK(cuStreamDestroy_v2(s));
  TAP_EQ(cuStreamGetGreenCtx(s, &green), CUDA_ERROR_INVALID_HANDLE,
         "cuStreamGetGreenCtx of a destroyed stream");
  TAP_EQ(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE, "a destroyed stream: INVALID_HANDLE");
  TAP_EQ(cuStreamDestroy_v2(NULL), CUDA_ERROR_INVALID_HANDLE, "destroy the NULL stream");
  TAP_EQ(cuStreamDestroy_v2(CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_HANDLE,
         "destroy the per-thread stream");
  CK(cuStreamSynchronize(NULL));
  CK(cuStreamSynchronize(CU_STREAM_LEGACY));
  CK(cuStreamSynchronize_ptsz(NULL));
  CK(cuStreamGetPriority(CU_STREAM_PER_THREAD, &prio));
}

static void pending_and_polls(void) {
  CUdeviceptr d;
  CUstream s;
  CK(cuMemAlloc_v2(&d, N));
  CK(cuStreamCreate(&s, 0));
  CK(cuMemsetD8Async(d, 0xab, N, s));
  TAP_EQ(fakecudaPendingWork(), 1, "an async memset is pending");
  TAP_EQ(byte_at(d), 0, "... and its bytes are not written yet");
  TAP_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY, "first poll: NOT_READY");
  TAP_EQ(byte_at(d + N - 1), 0, "... still not written");
  CK(cuStreamQuery(s));
  TAP_EQ(byte_at(d + N - 1), 0xab, "the second poll completed it");
  TAP_EQ(fakecudaPendingWork(), 0, "nothing pending");

  CK(cuMemsetD32Async(d, 0x01020304, N / 4, s));
  CK(cuStreamSynchronize(s));
  TAP_EQ(byte_at(d), 0x04, "cuStreamSynchronize completes (little-endian D32 pattern)");

  /* An event completes the work recorded before it, not the work after. */
  CUevent e, never;
  TAP_EQ(cuEventCreate(&e, 0x10), CUDA_ERROR_INVALID_VALUE, "event flags 0x10");
  TAP_EQ(cuEventCreate(&e, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE,
         "INTERPROCESS without DISABLE_TIMING");
  CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  CK(cuEventCreate(&never, 0));
  CK(cuEventQuery(never));
  CK(cuEventSynchronize(never));
  CK(cuMemsetD8Async(d, 0x11, 16, s));
  CK(cuEventRecord(e, s));
  CK(cuMemsetD8Async(d + 16, 0x22, 16, s));
  TAP_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY, "event query: NOT_READY");
  CK(cuEventSynchronize(e));
  TAP_EQ(byte_at(d), 0x11, "cuEventSynchronize completed the work before the record");
  TAP_EQ(byte_at(d + 16), 0x04, "... but not the work after it");
  TAP_EQ(fakecudaPendingWork(), 1, "one item still pending");
  CK(cuEventQuery(e));
  CK(cuCtxSynchronize());
  TAP_EQ(byte_at(d + 16), 0x22, "cuCtxSynchronize completes everything");

  /* Event queries complete on the second poll too. */
  CK(cuMemsetD8Async(d, 0x33, 1, s));
  CK(cuEventRecord(e, s));
  TAP_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY, "event poll 1: NOT_READY");
  CK(cuEventQuery(e));
  TAP_EQ(byte_at(d), 0x33, "event poll 2 completed the work");

  /* cuStreamWaitEvent: s2's work waits for what e covers on s. */
  CUstream s2;
  CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CK(cuMemsetD8Async(d, 0x44, 1, s));
  CK(cuEventRecord(e, s));
  TAP_EQ(cuStreamWaitEvent(s2, e, 1), CUDA_ERROR_INVALID_VALUE,
         "wait flags EXTERNAL outside capture");
  CK(cuStreamWaitEvent(s2, e, 0));
  CK(cuMemsetD8Async(d + 1, 0x55, 1, s2));
  CK(cuStreamSynchronize(s2));
  tap_ok(byte_at(d) == 0x44 && byte_at(d + 1) == 0x55,
         "syncing s2 completed the awaited work on s");
  CK(cuEventDestroy_v2(e));
  TAP_EQ(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE, "destroyed event: INVALID_HANDLE");
  TAP_EQ(cuEventRecord(e, s), CUDA_ERROR_INVALID_HANDLE, "record a destroyed event");
  CK(cuEventDestroy_v2(never));

  /* A destroyed stream's work stays pending until a wider sync point. */
  CK(cuMemsetD8Async(d, 0x66, 1, s2));
  CK(cuStreamDestroy_v2(s2));
  TAP_EQ(fakecudaPendingWork(), 1, "work of a destroyed stream still pending");
  CK(cuCtxSynchronize());
  TAP_EQ(byte_at(d), 0x66, "... completed by cuCtxSynchronize");

  /* cuMemFree_v2 completes all pending work of the device first. */
  CUdeviceptr other;
  CK(cuMemAlloc_v2(&other, 512));
  CK(cuMemsetD8Async(d, 0x77, 1, s));
  CK(cuMemFree_v2(other));
  TAP_EQ(fakecudaPendingWork(), 0, "cuMemFree_v2 completed the device's pending work");
  TAP_EQ(byte_at(d), 0x77, "... with its effect");
  CK(cuStreamDestroy_v2(s));
  CK(cuMemFree_v2(d));
}

static void legacy_rules(void) {
  CUdeviceptr d;
  CUstream blocking, nonblocking;
  CK(cuMemAlloc_v2(&d, N));
  CK(cuStreamCreate(&blocking, 0));
  CK(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING));
  unsigned char host[16];
  CK(cuMemsetD8Async(d, 0x10, 1, blocking));
  CK(cuMemsetD8Async(d + 1, 0x20, 1, nonblocking));
  CK(cuMemcpyDtoH_v2(host, d, 2));
  TAP_EQ(host[0], 0x10, "a sync copy on the legacy stream waits for blocking streams");
  TAP_EQ(host[1], 0, "... but not for non-blocking ones");
  TAP_EQ(fakecudaPendingWork(), 1, "the non-blocking stream's memset is still pending");
  CK(cuStreamSynchronize(nonblocking));

  CK(cuMemsetD8_v2(d, 0x30, N));
  TAP_EQ(fakecudaPendingWork(), 1,
         "a synchronous memset of device memory is asynchronous to the host");
  TAP_EQ(byte_at(d), 0x10, "... not yet visible");
  CK(cuMemsetD8Async(d + 2, 0x40, 1, blocking));
  CK(cuStreamSynchronize(blocking));
  tap_ok(byte_at(d) == 0x30 && byte_at(d + 2) == 0x40,
         "a blocking stream's work waits for earlier legacy-stream work");

  CUdeviceptr d2;
  CK(cuMemAlloc_v2(&d2, N));
  CK(cuMemcpyDtoD_v2(d2, d, N));
  TAP_EQ(fakecudaPendingWork(), 1, "a device-to-device cuMemcpyDtoD_v2 does not block the host");
  memset(host, 0, sizeof host);
  CK(cuMemcpy((CUdeviceptr)(uintptr_t)host, d2, 4));
  TAP_EQ(host[2], 0x40, "cuMemcpy (unified) device-to-host completes the legacy stream first");
  unsigned char src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  CK(cuMemcpyHtoD_v2(d2, src, 8));
  TAP_EQ(fakecudaPendingWork(), 0, "cuMemcpyHtoD_v2 is synchronous");
  TAP_EQ(byte_at(d2 + 7), 8, "... and done on return");
  CK(cuMemcpy(d2 + 8, d2, 8));
  CK(cuMemcpyDtoH_v2_ptds(host, d2 + 8, 8));
  TAP_EQ(host[7], 8, "_ptds copies on the per-thread stream wait for legacy work");

  /* Asynchronous copies: a pageable source is staged at the call, a pinned one read later. */
  CUstream s = nonblocking;
  unsigned char pageable[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  CK(cuMemcpyHtoDAsync_v2(d, pageable, 8, s));
  memset(pageable, 0, sizeof pageable);
  CK(cuStreamSynchronize(s));
  TAP_EQ(byte_at(d), 9, "async copy from pageable memory: the source was staged at the call");
  unsigned char *pinned;
  CK(cuMemHostAlloc((void **)&pinned, 64, 0));
  memset(pinned, 5, 64);
  CK(cuMemcpyHtoDAsync_v2(d, pinned, 8, s));
  memset(pinned, 6, 64);
  CK(cuStreamSynchronize(s));
  TAP_EQ(byte_at(d), 6, "async copy from pinned memory reads the source when it executes");
  CK(cuMemcpyDtoHAsync_v2(pinned, d2, 8, s));
  TAP_EQ(pinned[0], 6, "async copy to pinned memory: not written before completion");
  CK(cuStreamSynchronize(s));
  TAP_EQ(pinned[0], 1, "... written at completion");
  memset(host, 0, sizeof host);
  CK(cuMemcpyDtoHAsync_v2(host, d2, 8, s));
  TAP_EQ(host[1], 2, "async copy to pageable memory is synchronous");
  CK(cuMemsetD8_v2((CUdeviceptr)(uintptr_t)pinned, 0x7f, 64));
  TAP_EQ(pinned[63], 0x7f, "a synchronous memset of pinned memory completes at once");
  CK(cuMemcpyAsync(d2, d, 8, s));
  CK(cuMemcpyDtoDAsync_v2(d2 + 8, d, 8, s));
  CK(cuMemcpyAsync_ptsz((CUdeviceptr)(uintptr_t)pinned, d2, 8, s));
  CK(cuStreamSynchronize(s));
  TAP_EQ(pinned[0], 6, "cuMemcpyAsync chain executes in stream order");
  CK(cuMemFreeHost(pinned));

  /* Bounds and alignment. */
  TAP_EQ(cuMemsetD8Async(d + N - 1, 0, 2, s), CUDA_ERROR_INVALID_VALUE, "memset past the end");
  TAP_EQ(cuMemcpyHtoD_v2(d + 1, src, N), CUDA_ERROR_INVALID_VALUE, "copy past the end");
  TAP_EQ(cuMemcpyDtoH_v2(host, 0x1000, 1), CUDA_ERROR_INVALID_VALUE,
         "copy from an unknown address");
  TAP_EQ(cuMemcpyDtoD_v2(d, (CUdeviceptr)(uintptr_t)host, 1), CUDA_ERROR_INVALID_VALUE,
         "cuMemcpyDtoD_v2 from pageable host memory");
  TAP_EQ(cuMemsetD16_v2(d + 1, 0, 1), CUDA_ERROR_INVALID_VALUE, "D16 memset at an odd address");
  TAP_EQ(cuMemsetD32_v2(d + 2, 0, 1), CUDA_ERROR_INVALID_VALUE,
         "D32 memset at a 2-aligned address");
  TAP_EQ(cuMemsetD8_v2((CUdeviceptr)(uintptr_t)host, 0, 1), CUDA_ERROR_INVALID_VALUE,
         "memset of pageable host memory");
  CK(cuMemsetD8_v2(d, 0, 0));
  CK(cuMemcpyHtoD_v2(d, NULL, 0));
  CK(cuMemsetD16_v2(d, 0xbeef, 2));
  CK(cuCtxSynchronize());
  tap_ok(byte_at(d) == 0xef && byte_at(d + 1) == 0xbe, "D16 pattern");
  CK(cuStreamDestroy_v2(blocking));
  CK(cuStreamDestroy_v2(nonblocking));
  CK(cuMemFree_v2(d));
  CK(cuMemFree_v2(d2));
}

static CUdeviceptr thread_dst;
static CUresult thread_rc[3];
static int thread_pending;

static void *other_thread(void *arg) {
  (void)arg;
  thread_rc[0] = cuCtxSetCurrent(ctx);
  thread_rc[1] = cuStreamSynchronize(CU_STREAM_PER_THREAD); /* its own per-thread stream */
  thread_pending = fakecudaPendingWork();
  thread_rc[2] = cuMemsetD8Async_ptsz(thread_dst + 1, 0x99, 1, NULL);
  return NULL;
}

static void per_thread(void) {
  CK(cuMemAlloc_v2(&thread_dst, N));
  CK(cuMemsetD8Async_ptsz(thread_dst, 0x88, 1, NULL));
  pthread_t t;
  pthread_create(&t, NULL, other_thread, NULL);
  pthread_join(t, NULL);
  tap_ok(thread_rc[0] == CUDA_SUCCESS && thread_rc[1] == CUDA_SUCCESS &&
             thread_rc[2] == CUDA_SUCCESS,
         "another thread's calls succeed");
  TAP_EQ(thread_pending, 1, "another thread's per-thread stream is a different stream");
  CK(cuStreamSynchronize_ptsz(NULL));
  tap_ok(byte_at(thread_dst) == 0x88 && byte_at(thread_dst + 1) == 0,
         "syncing this thread's per-thread stream leaves the other thread's work");
  CK(cuStreamSynchronize(CU_STREAM_LEGACY));
  TAP_EQ(byte_at(thread_dst + 1), 0x99, "the legacy stream waits for every per-thread stream");
  CK(cuMemFree_v2(thread_dst));
}

static void hazards(void) {
  CUdeviceptr a, b;
  CUstream s;
  CK(cuMemAlloc_v2(&a, N));
  CK(cuMemAlloc_v2(&b, N));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  unsigned long long before = fakecudaHazards();
  TAP_EQ(fakecudaEnqueueWork(s, a, 0), CUDA_ERROR_INVALID_VALUE, "fakecudaEnqueueWork of 0 bytes");
  TAP_EQ(fakecudaEnqueueWork((CUstream)0x999, a, 1), CUDA_ERROR_INVALID_HANDLE,
         "fakecudaEnqueueWork on a bad stream");
  CK(fakecudaEnqueueWork(s, a + 100, 200));
  TAP_EQ(fakecudaPendingWork(), 1, "hook work is pending");
  TAP_EQ(fakecudaClaim(b, N), 0, "claiming an untouched block: no hazard");
  TAP_EQ(fakecudaClaim(a, 100), 0, "claiming the bytes just before the work: no hazard");
  TAP_EQ(fakecudaClaim(a, 101), 1, "claiming a block pending work still touches: a hazard");
  CK(cuMemcpyDtoDAsync_v2(b, a, 8, s));
  TAP_EQ(fakecudaClaim(b + 4, 1), 1, "a pending copy touches its destination");
  TAP_EQ(fakecudaClaim(a, 128), 2, "... and its source (here with the hook work)");
  TAP_EQ(fakecudaHazards(), before + 3, "every claim that found pending work counted one hazard");
  CK(cuStreamSynchronize(s));
  TAP_EQ(fakecudaClaim(a, N), 0, "after the sync: no hazard");
  CK(cuStreamDestroy_v2(s));
  CK(cuMemFree_v2(a));
  CK(cuMemFree_v2(b));
}

int main(void) {
  setenv("FAKECUDA_BACKING", "1", 1);
  setenv("FAKECUDA_MEMORY", "1GiB", 1);
  unsetenv("FAKECUDA_DEVICES");
  TAP_EQ(fakecudaEnqueueWork(NULL, 0x1000, 1), CUDA_ERROR_NOT_INITIALIZED,
         "fakecudaEnqueueWork before cuInit");
  TAP_EQ(fakecudaClaim(0x1000, 1), 0, "fakecudaClaim before cuInit");
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS) {
    tap_ok(0, "setup");
    return tap_done();
  }
  TAP_EQ(cuStreamSynchronize(NULL), CUDA_ERROR_INVALID_CONTEXT, "the NULL stream needs a context");
  TAP_EQ(fakecudaEnqueueWork(NULL, 0x1000, 1), CUDA_ERROR_INVALID_CONTEXT,
         "fakecudaEnqueueWork on the NULL stream needs a context");
  cuCtxSetCurrent(ctx);
  streams();
  pending_and_polls();
  legacy_rules();
  per_thread();
  hazards();
  TAP_EQ(fakecudaPendingWork(), 0, "no pending work left");
  cuDevicePrimaryCtxRelease_v2(0);
  return tap_done();
}
