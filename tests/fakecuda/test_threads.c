/* TAP test of the fake driver under concurrency (run under TSan by `make test`): threads on
 * two devices, some on the primary context and some on their own, allocate, set, copy, free
 * (plain and stream-ordered), record and poll events, resolve entry points and use the test
 * hooks at once; the data each thread reads back must be its own and the accounting must
 * balance at the end.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shim/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/tap.h"

#define THREADS 6
#define ITERATIONS 120

struct result {
  int failures;
  int checked;
  CUresult first_bad;
  int first_line;
};

static struct result results[THREADS];

#define EXPECT(cond)                                                                               \
  do {                                                                                             \
    r->checked++;                                                                                  \
    if (!(cond) && r->failures++ == 0) {                                                           \
      r->first_line = __LINE__;                                                                    \
    }                                                                                              \
  } while (0)
#define EXPECT_OK(call)                                                                            \
  do {                                                                                             \
    CUresult rc_ = (call);                                                                         \
    if (rc_ != CUDA_SUCCESS && r->failures == 0) {                                                 \
      r->first_bad = rc_;                                                                          \
    }                                                                                              \
    EXPECT(rc_ == CUDA_SUCCESS);                                                                   \
  } while (0)

static void *worker(void *arg) {
  int tid = (int)(intptr_t)arg;
  struct result *r = &results[tid];
  int dev = tid % 2, own = tid % 3 == 0;
  CUcontext ctx;
  if (own) {
    EXPECT_OK(cuCtxCreate_v2(&ctx, 0, dev));
  } else {
    EXPECT_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
    EXPECT_OK(cuCtxSetCurrent(ctx));
  }
  CUstream s;
  CUevent e;
  EXPECT_OK(cuStreamCreate(&s, tid % 2 ? CU_STREAM_NON_BLOCKING : 0));
  EXPECT_OK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  unsigned char host[512 * 64];
  for (int i = 0; i < ITERATIONS; i++) {
    size_t size = 512 * (size_t)(1 + (i * 7 + tid) % 64);
    unsigned char mark = (unsigned char)(tid * 16 + i % 16);
    CUdeviceptr d, a;
    EXPECT_OK(cuMemAlloc_v2(&d, size));
    EXPECT_OK(cuMemsetD8Async(d, mark, size, s));
    EXPECT_OK(cuEventRecord(e, s));
    if (i % 3 == 0) {
      CUresult q;
      int polls = 0;
      while ((q = cuEventQuery(e)) == CUDA_ERROR_NOT_READY) {
        polls++;
      }
      EXPECT(q == CUDA_SUCCESS && polls <= 1);
    } else {
      EXPECT_OK(cuStreamWaitEvent(CU_STREAM_PER_THREAD, e, 0));
    }
    EXPECT_OK(cuMemcpyDtoHAsync_v2(host, d, size, s)); /* pageable: synchronous */
    EXPECT(host[0] == mark && host[size - 1] == mark);
    /* Stream-ordered memory used and freed in order on the per-thread stream. */
    EXPECT_OK(cuMemAllocAsync_ptsz(&a, 4096, NULL));
    EXPECT_OK(cuMemsetD32Async_ptsz(a, 0xfeedf00du + (unsigned)tid, 1024, NULL));
    EXPECT_OK(fakecudaEnqueueWork(CU_STREAM_PER_THREAD, a, 64));
    EXPECT_OK(cuMemFreeAsync_ptsz(a, NULL));
    if (i % 5 == 0) {
      EXPECT_OK(cuStreamSynchronize(s));
      EXPECT(fakecudaClaim(d, size) == 0); /* only this thread's s ever touched d */
    }
    size_t fr = 0, tot = 0;
    EXPECT_OK(cuMemGetInfo_v2(&fr, &tot));
    EXPECT(fr <= tot && tot != 0);
    void *pfn = NULL;
    EXPECT_OK(cuGetProcAddress_v2("cuMemAlloc", &pfn, 3020, 0, NULL));
    EXPECT(pfn != NULL);
    EXPECT_OK(cuMemFree_v2(d));
  }
  EXPECT_OK(cuStreamSynchronize(s));
  EXPECT_OK(cuStreamDestroy_v2(s));
  EXPECT_OK(cuEventDestroy_v2(e));
  EXPECT_OK(cuCtxSynchronize());
  if (own) {
    EXPECT_OK(cuCtxDestroy_v2(ctx));
  } else {
    EXPECT_OK(cuCtxSetCurrent(NULL));
    EXPECT_OK(cuDevicePrimaryCtxRelease_v2(dev));
  }
  return NULL;
}

int main(void) {
  setenv("FAKECUDA_BACKING", "1", 1);
  setenv("FAKECUDA_DEVICES", "2", 1);
  setenv("FAKECUDA_MEMORY", "1GiB", 1);
  if (!tap_ok(cuInit(0) == CUDA_SUCCESS, "cuInit")) {
    return tap_done();
  }
  CUcontext keep[2];
  for (int d = 0; d < 2; d++) {
    cuDevicePrimaryCtxRetain(&keep[d], d); /* keeps the primary contexts alive throughout */
  }
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
  }
  for (int i = 0; i < THREADS; i++) {
    tap_ok(results[i].failures == 0 && results[i].checked > 0,
           "thread %d: %d checks, %d failed (first at line %d, rc %d)", i, results[i].checked,
           results[i].failures, results[i].first_line, results[i].first_bad);
  }
  for (int d = 0; d < 2; d++) {
    size_t fr = 0, tot = 0;
    cuCtxSetCurrent(keep[d]);
    cuCtxSynchronize();
    cuMemGetInfo_v2(&fr, &tot);
    TAP_EQ(tot - fr, 0, "device %d: every byte returned", d);
    cuDevicePrimaryCtxRelease_v2(d);
  }
  TAP_EQ(fakecudaPendingWork(), 0, "no pending work left");
  TAP_EQ(fakecudaCalls("cuMemAlloc_v2"), THREADS * ITERATIONS, "every cuMemAlloc_v2 call counted");
  return tap_done();
}
