/* TAP test of the fake driver under concurrency (run under TSan by `make test`): threads on
 * two devices, some on the primary context and some on their own, allocate, set, copy, free
 * (plain and stream-ordered), record and poll events, resolve entry points and use the test
 * hooks at once; the data each thread reads back must be its own and the accounting must
 * balance at the end. Then the runtime's lock order: a context-local storage destructor that
 * takes a lock which another thread holds while it calls the driver must not deadlock (the
 * driver runs destructors without its own lock), with a watchdog for the hang.
 */
#include <pthread.h>
#include <errno.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shim/base/cudadefs.h"
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

/* ---- Context-local storage destructors and the runtime's own lock. ---- */

static const unsigned char cls_uuid[16] = {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11,
                                           0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93};
typedef CUresult (*cls_put_fn)(CUcontext, void *, void *, void (*)(CUcontext, void *, void *));

static pthread_mutex_t runtime_lock = PTHREAD_MUTEX_INITIALIZER; /* the runtime's own lock */
static sem_t holding, in_dtor;
static CUresult holder_rc = CUDA_ERROR_UNKNOWN, dtor_rc = CUDA_ERROR_UNKNOWN;
static CUresult second_destroy_rc = CUDA_SUCCESS;
static int key;

/* Like the runtime's: tells the holder it runs, then takes the runtime's lock and calls the
 * driver on the context it is destroying. */
static void dtor(CUcontext ctx, void *k, void *v) {
  (void)k;
  (void)v;
  sem_post(&in_dtor);
  pthread_mutex_lock(&runtime_lock);
  CUdevice d;
  dtor_rc = cuCtxGetDevice_v2(&d, ctx);
  pthread_mutex_unlock(&runtime_lock);
}

/* Holds the runtime's lock, waits until the destructor runs, then calls the driver: the
 * destroy's lock order. */
static void *holder(void *arg) {
  CUcontext c = arg;
  pthread_mutex_lock(&runtime_lock);
  sem_post(&holding);
  sem_wait(&in_dtor);
  int n = 0;
  holder_rc = cuDeviceGetCount(&n);
  second_destroy_rc = cuCtxDestroy_v2(c); /* the destroy already under way */
  pthread_mutex_unlock(&runtime_lock);
  return NULL;
}

static CUresult destroy_rc = CUDA_ERROR_UNKNOWN;
static sem_t destroyed;

static void *destroyer(void *arg) {
  destroy_rc = cuCtxDestroy_v2(arg);
  sem_post(&destroyed);
  return NULL;
}

static void destructor_lock_order(void) {
  CUuuid id;
  memcpy(id.bytes, cls_uuid, 16);
  const uintptr_t *t = NULL;
  CUresult rc = cuGetExportTable((const void **)&t, &id);
  TAP_EQ(rc, CUDA_SUCCESS, "context-local storage table");
  if (rc != CUDA_SUCCESS) {
    return;
  }
  cls_put_fn put;
  memcpy(&put, &t[0], sizeof put);
  CUcontext c;
  TAP_EQ(cuCtxCreate_v2(&c, 0, 0), CUDA_SUCCESS, "a context with a destructor");
  TAP_EQ(put(c, &key, &key, dtor), CUDA_SUCCESS, "... put");
  sem_init(&holding, 0, 0);
  sem_init(&in_dtor, 0, 0);
  sem_init(&destroyed, 0, 0);
  pthread_t h, d;
  pthread_create(&h, NULL, holder, c);
  sem_wait(&holding);
  pthread_create(&d, NULL, destroyer, c);
  /* A watchdog for the hang: the two threads deadlock when the driver holds its lock. */
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 60;
  int r;
  while ((r = sem_timedwait(&destroyed, &until)) != 0 && errno == EINTR) {
  }
  if (r != 0) {
    tap_ok(0, "a context-local storage destructor deadlocked against the runtime's lock (the "
              "driver held its lock across it)");
    int st = tap_done();
    fflush(stdout);
    _exit(st); /* the deadlocked threads never end */
  }
  pthread_join(d, NULL);
  pthread_join(h, NULL);
  TAP_EQ(destroy_rc, CUDA_SUCCESS,
         "destroying it while another thread holds the runtime's lock and calls the driver");
  TAP_EQ(holder_rc, CUDA_SUCCESS, "... that thread's call went through during the destructor");
  TAP_EQ(dtor_rc, CUDA_SUCCESS, "... and the destructor's call on the context");
  TAP_EQ(second_destroy_rc, CUDA_ERROR_INVALID_CONTEXT,
         "destroying a context whose destructors are running: INVALID_CONTEXT");
  TAP_EQ(cuCtxGetDevice_v2(&(CUdevice){0}, c), CUDA_ERROR_CONTEXT_IS_DESTROYED,
         "the context is destroyed after its destructors");
  sem_destroy(&in_dtor);
  sem_destroy(&holding);
  sem_destroy(&destroyed);
}

int main(void) {
  setenv("FAKECUDA_DRIVER_MEMORY", "off", 1); /* exact figures: test_driver.c has the driver's */
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
  destructor_lock_order();
  return tap_done();
}
