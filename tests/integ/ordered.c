/* ordered: the driver's stream-ordered pools beside gpucap's own, over the fake driver (linked
 * with -lcuda), with gpucap preloaded. Prints TAP; tests/integ/ordered.sh judges the cap from
 * outside with the fake's own per-device peak.
 * usage: ordered retained|uncapped|destroyed|spare|threads|race
 *   retained   (64 MiB cap) the default pool keeps what is freed into it (release threshold at
 *              its maximum, as CuPy's MemoryAsyncPool sets): 44 MiB allocated, freed and
 *              synchronised, then 44 MiB with cuMemAlloc_v2
 *   uncapped   (no cap, a 1 GiB device) 700 MiB through gpucap's pool, freed, then 400 MiB
 *              with cuMemAllocAsync: the driver refuses until gpucap gives its idle memory back
 *   destroyed  (64 MiB cap) a created pool destroyed while 40 MiB of it is live
 *   spare      (64 MiB cap) a pool that keeps 40 MiB freed serves 40 MiB again without growing
 *   threads    (64 MiB cap) four threads allocating from the retaining default pool, one with
 *              cuMemAlloc_v2, all refused or served, none with another answer
 *   race       (64 MiB cap) the cap filled through gpucap's pool and freed, then six threads
 *              each taking a small pooled block and a small stream-ordered (or managed) one at
 *              once, 30 times over each: the pool's idle memory comes back for every thread,
 *              none is refused (one thread's relief must serve the others that found nothing
 *              left to give; run with latency on cuMemRelease to widen the window)
 */
#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/fakecuda/testlib.h"
#include "tests/tap.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

static CUcontext ctx;

static size_t free_now(void) {
  size_t f = 0, t = 0;
  cuMemGetInfo_v2(&f, &t);
  return f;
}

static void keep_freed(CUmemoryPool pool) {
  cuuint64_t keep = UINT64_MAX;
  CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
}

static cuuint64_t pool_reserved(CUmemoryPool pool) {
  cuuint64_t v = 0;
  CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v));
  return v;
}

static void retained_mode(CUstream s) {
  CUmemoryPool pool;
  CUdeviceptr p = 0, q = 0;
  CK(cuDeviceGetDefaultMemPool(&pool, 0));
  keep_freed(pool);
  TAP_EQ(cuMemAllocAsync(&p, 44 * MiB, s), CUDA_SUCCESS, "44 MiB stream-ordered");
  CK(cuMemFreeAsync(p, s));
  CK(cuStreamSynchronize(s));
  TAP_EQ(pool_reserved(pool), (cuuint64_t)44 * MiB, "  freed, the pool still holds it");
  size_t f = free_now();
  tap_ok(f <= 20 * MiB, "  and cuMemGetInfo counts it: %zu bytes free of the 64 MiB cap", f);
  TAP_EQ(cuMemAlloc_v2(&q, 44 * MiB), CUDA_SUCCESS,
         "44 MiB with cuMemAlloc_v2: served once the pool gave its idle memory back");
  TAP_EQ(pool_reserved(pool), (cuuint64_t)0, "  the pool was trimmed for it");
  CK(cuMemFree_v2(q));
}

static void uncapped_mode(CUstream s) {
  CUdeviceptr big = 0, p = 0;
  TAP_EQ(cuMemAlloc_v2(&big, 700 * MiB), CUDA_SUCCESS, "700 MiB through gpucap's pool");
  CK(cuMemFree_v2(big));
  size_t f = free_now();
  tap_ok(f >= 1000 * MiB, "  freed: cuMemGetInfo says %zu bytes are free", f);
  TAP_EQ(cuMemAllocAsync(&p, 400 * MiB, s), CUDA_SUCCESS,
         "400 MiB stream-ordered: the driver's refusal made gpucap give its idle pool back");
  CK(cuMemFreeAsync(p, s));
  CK(cuStreamSynchronize(s));
}

static void destroyed_mode(CUstream s) {
  CUmemoryPool pool;
  CUmemPoolProps props;
  CUdeviceptr live = 0, q = 0;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CK(cuMemPoolCreate(&pool, &props));
  keep_freed(pool);
  CUdeviceptr gone = 0;
  CK(cuMemAllocFromPoolAsync(&gone, 8 * MiB, pool, s));
  CK(cuMemFreeAsync(gone, s));
  CK(cuStreamSynchronize(s));
  TAP_EQ(cuMemAllocFromPoolAsync(&live, 40 * MiB, pool, s), CUDA_SUCCESS, "40 MiB from a pool");
  CK(cuMemsetD8Async(live, 3, 40 * MiB, s));
  TAP_EQ(cuMemPoolDestroy(pool), CUDA_SUCCESS, "  the pool destroyed with the block live");
  TAP_EQ(cuMemAlloc_v2(&q, 40 * MiB), CUDA_ERROR_OUT_OF_MEMORY,
         "40 MiB more: refused, the destroyed pool's block still holds its memory");
  CK(cuMemFreeAsync(live, s));
  CK(cuStreamSynchronize(s));
  TAP_EQ(cuMemAlloc_v2(&q, 40 * MiB), CUDA_SUCCESS, "  once it is freed, served");
  CK(cuMemFree_v2(q));
  TAP_EQ(free_now(), (size_t)64 * MiB, "  and nothing stays charged");
}

static void spare_mode(CUstream s) {
  CUmemoryPool pool;
  CUdeviceptr a = 0, b = 0, c = 0;
  CK(cuDeviceGetDefaultMemPool(&pool, 0));
  keep_freed(pool);
  CK(cuMemAllocAsync(&a, 40 * MiB, s));
  CK(cuMemFreeAsync(a, s));
  CK(cuStreamSynchronize(s));
  CK(cuMemAlloc_v2(&c, 20 * MiB)); /* leaves 4 MiB under the cap beside the pool's 40 */
  TAP_EQ(cuMemAllocAsync(&b, 40 * MiB, s), CUDA_SUCCESS,
         "40 MiB again from a pool keeping 40 MiB, 4 MiB left under the cap: served");
  TAP_EQ(pool_reserved(pool), (cuuint64_t)40 * MiB, "  without growing or trimming the pool");
  CK(cuMemFreeAsync(b, s));
  CK(cuStreamSynchronize(s));
  CK(cuMemFree_v2(c));
}

static pthread_barrier_t all_holding;

struct churn {
  CUstream s;
  bool sync_alloc; /* cuMemAlloc_v2 instead of stream-ordered */
  int served, refused, odd;
};

static void *churn(void *arg) {
  struct churn *t = arg;
  CUdeviceptr held[6] = {0};
  cuCtxSetCurrent(ctx);
  for (int i = 0; i < 300; i++) {
    int k = i % 6;
    if (i == 6) {
      pthread_barrier_wait(&all_holding); /* every thread holds its first blocks at once */
    }
    if (held[k]) {
      CUresult rc = t->sync_alloc ? cuMemFree_v2(held[k]) : cuMemFreeAsync(held[k], t->s);
      t->odd += rc != CUDA_SUCCESS;
      held[k] = 0;
      if (i % 5 == 0) {
        cuStreamSynchronize(t->s);
      }
      continue;
    }
    size_t bytes = (size_t)(1 + (i * 7 + k) % 12) * MiB;
    CUresult rc =
        t->sync_alloc ? cuMemAlloc_v2(&held[k], bytes) : cuMemAllocAsync(&held[k], bytes, t->s);
    t->served += rc == CUDA_SUCCESS;
    t->refused += rc == CUDA_ERROR_OUT_OF_MEMORY;
    t->odd += rc != CUDA_SUCCESS && rc != CUDA_ERROR_OUT_OF_MEMORY;
    if (rc != CUDA_SUCCESS) {
      held[k] = 0;
    }
  }
  for (int k = 0; k < 6; k++) {
    if (held[k]) {
      t->odd +=
          (t->sync_alloc ? cuMemFree_v2(held[k]) : cuMemFreeAsync(held[k], t->s)) != CUDA_SUCCESS;
    }
  }
  cuStreamSynchronize(t->s);
  return NULL;
}

static int race_refused;
static bool race_managed; /* the second block managed instead of stream-ordered */
static pthread_mutex_t race_lock = PTHREAD_MUTEX_INITIALIZER;

static void *racer(void *arg) {
  long id = (long)(intptr_t)arg;
  cuCtxSetCurrent(ctx);
  for (int r = 0; r < 40; r++) {
    size_t n = 512 + (size_t)((id * 7919 + r * 104729) % 7680);
    CUdeviceptr p = 0, q = 0;
    CUresult a = cuMemAlloc_v2(&p, n);
    CUresult b = race_managed ? cuMemAllocManaged(&q, n, CU_MEM_ATTACH_GLOBAL)
                              : cuMemAllocAsync(&q, n, CU_STREAM_PER_THREAD);
    if (a != CUDA_SUCCESS || b != CUDA_SUCCESS) {
      pthread_mutex_lock(&race_lock);
      race_refused++;
      pthread_mutex_unlock(&race_lock);
    }
    if (b == CUDA_SUCCESS) {
      race_managed ? cuMemFree_v2(q) : cuMemFreeAsync(q, CU_STREAM_PER_THREAD);
    }
    cuStreamSynchronize(CU_STREAM_PER_THREAD);
    if (a == CUDA_SUCCESS) {
      cuMemFree_v2(p);
    }
  }
  return NULL;
}

static void race_mode(void) {
  for (int round = 0; round < 60; round++) {
    race_managed = round >= 30;
    CUdeviceptr b[16];
    int n = 0;
    while (n < 16 && cuMemAlloc_v2(&b[n], 4 * MiB) == CUDA_SUCCESS) {
      n++;
    }
    for (int i = 0; i < n; i++) {
      cuMemFree_v2(b[i]);
    }
    pthread_t t[6];
    for (long i = 0; i < 6; i++) {
      pthread_create(&t[i], NULL, racer, (void *)(intptr_t)i);
    }
    for (int i = 0; i < 6; i++) {
      pthread_join(t[i], NULL);
    }
  }
  TAP_EQ(race_refused, 0, "60 rounds of six threads after a fill to the cap: nothing refused");
}

static void threads_mode(void) {
  CUmemoryPool pool;
  struct churn t[5];
  pthread_t id[5];
  CK(cuDeviceGetDefaultMemPool(&pool, 0));
  keep_freed(pool);
  for (int i = 0; i < 5; i++) {
    memset(&t[i], 0, sizeof t[i]);
    CK(cuStreamCreate(&t[i].s, CU_STREAM_NON_BLOCKING));
    t[i].sync_alloc = i == 4;
  }
  pthread_barrier_init(&all_holding, NULL, 5);
  for (int i = 0; i < 5; i++) {
    pthread_create(&id[i], NULL, churn, &t[i]);
  }
  int served = 0, refused = 0, odd = 0;
  for (int i = 0; i < 5; i++) {
    pthread_join(id[i], NULL);
    served += t[i].served;
    refused += t[i].refused;
    odd += t[i].odd;
  }
  TAP_EQ(odd, 0, "five threads: every answer success or out of memory");
  tap_ok(served > 0 && refused > 0, "  %d served, %d refused", served, refused);
  CK(cuMemPoolTrimTo(pool, 0));
  TAP_EQ(free_now(), (size_t)64 * MiB, "  everything freed and trimmed: nothing stays charged");
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  CUdevice dev;
  CUstream s;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  if (strcmp(mode, "retained") == 0) {
    retained_mode(s);
  } else if (strcmp(mode, "uncapped") == 0) {
    uncapped_mode(s);
  } else if (strcmp(mode, "destroyed") == 0) {
    destroyed_mode(s);
  } else if (strcmp(mode, "spare") == 0) {
    spare_mode(s);
  } else if (strcmp(mode, "threads") == 0) {
    threads_mode();
  } else if (strcmp(mode, "race") == 0) {
    race_mode();
  } else {
    tap_ok(false, "unknown mode '%s'", mode);
  }
  TAP_EQ(fakecudaHazards(), 0, "no hazards");
  return tap_done();
}
