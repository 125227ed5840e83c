/* capholes: ways a program could get past the cap, each tried the way a real program (or a
 * hostile one) does it. Linked with -lcuda (the fake); run with gpucap preloaded,
 * GPUCAP_MEMORY_LIMIT=64MiB on every device and FAKECUDA_STATS set, so that
 * tests/reliability/capholes.sh can also check from the fake's own per-device peak that no
 * device ever held more than the cap. Prints TAP.
 * usage: capholes vmm|vmm-retain|vmm-self-import|pool-device|stream-device|no-context|ctx-destroy|
 *                 primary-reset|pending-free|pitch|getinfo-v1|double-free
 * (one scenario per process, so a charge cannot leak from one into the next)
 */
#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/hold.h"
#include "tests/pinned.h"
#include "tests/tap.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* The fake driver's test hooks are weak references: on a real driver (tests/gpu/check.sh) they
 * are absent, and what only they can do is skipped, saying so. */
#pragma weak fakecudaClaim
#pragma weak fakecudaEnqueueWork
#pragma weak fakecudaCalls
#define NO_HOOKS "only the fake driver has the test hooks for it"

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define CAP (64 * MiB)

static CUcontext primary;

static size_t free_now(void) {
  size_t f = 0, t = 0;
  cuMemGetInfo_v2(&f, &t);
  return f;
}

/* ---- VMM: physical memory lives until released and unmapped. ---- */

/* NVIDIA's sample pattern: reserve, create, map, set access, release the handle at once. Returns
 * the mapped address (0 when any step failed); *rc is the cuMemCreate answer. */
static CUdeviceptr map_released(size_t size, CUresult *rc) {
  CUmemAllocationProp prop = pinned_prop(0);
  CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  if (cuMemAddressReserve(&va, size, 0, 0, 0) != CUDA_SUCCESS) {
    *rc = CUDA_ERROR_UNKNOWN;
    return 0;
  }
  *rc = cuMemCreate(&h, size, &prop, 0);
  if (*rc != CUDA_SUCCESS) {
    cuMemAddressFree(va, size);
    return 0;
  }
  if (cuMemMap(va, size, 0, h, 0) != CUDA_SUCCESS ||
      cuMemSetAccess(va, size, &access, 1) != CUDA_SUCCESS || cuMemRelease(h) != CUDA_SUCCESS) {
    *rc = CUDA_ERROR_UNKNOWN;
    return 0;
  }
  return va;
}

static void vmm(void) {
  CUdeviceptr va[8] = {0};
  int mapped = 0;
  CUresult rc = CUDA_SUCCESS, last = CUDA_SUCCESS;
  for (int i = 0; i < 8; i++) {
    va[i] = map_released(32 * MiB, &rc);
    mapped += va[i] != 0;
    last = rc;
  }
  TAP_EQ(mapped, 2, "create, map, release at once: 2 x 32 MiB fit under 64 MiB, not 8");
  TAP_EQ(last, CUDA_ERROR_OUT_OF_MEMORY, "  the others: cuMemCreate answers OUT_OF_MEMORY");
  TAP_EQ(free_now(), 0, "  get-info: nothing free while both are mapped");
  TAP_EQ(cuMemUnmap(va[0], 32 * MiB), CUDA_SUCCESS, "unmap the first (its handle is released)");
  TAP_EQ(free_now(), 32 * MiB, "  get-info: its 32 MiB are free again");
  CUdeviceptr again = map_released(32 * MiB, &rc);
  tap_ok(again != 0, "  and 32 MiB can be created and mapped again (rc %d)", rc);
  TAP_EQ(free_now(), 0, "  get-info: nothing free");
  TAP_EQ(cuMemUnmap(again, 32 * MiB) || cuMemUnmap(va[1], 32 * MiB), CUDA_SUCCESS, "unmap both");
  TAP_EQ(free_now(), CAP, "  get-info: the whole cap is free");
}

/* cuMemRetainAllocationHandle adds a reference: the memory stays until that one is released
 * too; and a handle mapped twice lives until both mappings are gone. */
static void vmm_retain(void) {
  CUmemAllocationProp prop = pinned_prop(0);
  CUmemGenericAllocationHandle h = 0, again = 0, other = 0;
  CUdeviceptr va = 0;
  CUresult rc;
  TAP_EQ(cuMemAddressReserve(&va, 64 * MiB, 0, 0, 0), CUDA_SUCCESS, "reserve 64 MiB of addresses");
  TAP_EQ(cuMemCreate(&h, 32 * MiB, &prop, 0), CUDA_SUCCESS, "create 32 MiB");
  TAP_EQ(cuMemMap(va, 32 * MiB, 0, h, 0) || cuMemMap(va + 32 * MiB, 32 * MiB, 0, h, 0),
         CUDA_SUCCESS, "map it twice");
  TAP_EQ(cuMemRelease(h), CUDA_SUCCESS, "release the handle");
  TAP_EQ(cuMemRetainAllocationHandle(&again, (void *)(va + 32 * MiB)), CUDA_SUCCESS,
         "retain it again through the second mapping");
  TAP_EQ(again, h, "  the same handle");
  TAP_EQ(cuMemUnmap(va, 64 * MiB), CUDA_SUCCESS, "unmap both mappings at once");
  TAP_EQ(free_now(), 32 * MiB, "get-info: still 32 MiB held (the retained reference)");
  rc = cuMemCreate(&other, 48 * MiB, &prop, 0);
  TAP_EQ(rc, CUDA_ERROR_OUT_OF_MEMORY, "48 MiB more do not fit");
  TAP_EQ(cuMemRelease(again), CUDA_SUCCESS, "release the retained reference");
  TAP_EQ(free_now(), CAP, "get-info: the whole cap is free");
  TAP_EQ(cuMemCreate(&other, 48 * MiB, &prop, 0), CUDA_SUCCESS, "48 MiB fit now");
  TAP_EQ(cuMemRelease(other) || cuMemAddressFree(va, 64 * MiB), CUDA_SUCCESS, "clean up");
}

/* A process that imports its own POSIX file-descriptor export gets its handle back with one
 * more reference: the memory stays until that one is released too. */
static void vmm_self_import(void) {
  CUmemAllocationProp prop = pinned_prop(0);
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h = 0, imported = 0, other = 0;
  int fd = -1;
  TAP_EQ(cuMemCreate(&h, 32 * MiB, &prop, 0), CUDA_SUCCESS, "create 32 MiB, shareable");
  TAP_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
         CUDA_SUCCESS, "export it to a file descriptor");
  TAP_EQ(cuMemImportFromShareableHandle(&imported, (void *)(intptr_t)fd,
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
         CUDA_SUCCESS, "import that descriptor in the same process");
  TAP_EQ(cuMemRelease(h), CUDA_SUCCESS, "release the created handle");
  TAP_EQ(free_now(), 32 * MiB, "get-info: still 32 MiB held (the imported reference)");
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  TAP_EQ(cuMemCreate(&other, 48 * MiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY,
         "48 MiB more do not fit");
  TAP_EQ(cuMemRelease(imported), CUDA_SUCCESS, "release the imported reference");
  TAP_EQ(free_now(), CAP, "get-info: the whole cap is free");
  TAP_EQ(cuMemCreate(&other, 48 * MiB, &prop, 0), CUDA_SUCCESS, "48 MiB fit now");
  TAP_EQ(cuMemRelease(other), CUDA_SUCCESS, "clean up");
  close(fd);
}

/* ---- Stream-ordered memory: charged to the device of its pool or stream (pool-device and
 * stream-device run with a cap on device 1 only, device 0 current). ---- */

/* Allocates 32 MiB blocks with alloc until one is refused (at most 10); returns how many. */
static int count_async(CUresult (*alloc)(CUdeviceptr *, void *), void *arg, CUresult *last) {
  int n = 0;
  for (int i = 0; i < 10; i++) {
    CUdeviceptr p = 0;
    *last = alloc(&p, arg);
    if (*last != CUDA_SUCCESS) {
      break;
    }
    n++;
  }
  return n;
}

static CUresult from_pool(CUdeviceptr *p, void *pool) {
  return cuMemAllocFromPoolAsync(p, 32 * MiB, (CUmemoryPool)pool, NULL);
}

static CUresult on_stream(CUdeviceptr *p, void *stream) {
  return cuMemAllocAsync(p, 32 * MiB, (CUstream)stream);
}

/* Allocates on device 1 with alloc (device 0 current, capped nowhere): 2 x 32 MiB fit. */
static void on_device1(const char *how, CUresult (*alloc)(CUdeviceptr *, void *), void *arg) {
  CUresult last;
  size_t free0 = free_now();
  int n = count_async(alloc, arg, &last);
  TAP_EQ(n, 2, "device 0 current: 2 x 32 MiB %s fit under device 1's cap", how);
  TAP_EQ(last, CUDA_ERROR_OUT_OF_MEMORY, "  the third: OUT_OF_MEMORY");
  TAP_EQ(free_now(), free0, "  device 0's get-info: nothing of it charged there");
}

static void pool_device(void) {
  CUmemoryPool pool1 = NULL;
  TAP_EQ(cuDeviceGetDefaultMemPool(&pool1, 1), CUDA_SUCCESS, "device 1's default pool");
  on_device1("from device 1's pool", from_pool, pool1);
}

static void stream_device(void) {
  CUcontext c1 = NULL, popped = NULL;
  CUstream s1 = NULL;
  TAP_EQ(cuCtxCreate_v2(&c1, 0, 1) || cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS,
         "a context on device 1 and a stream in it");
  TAP_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS, "device 0 current again");
  on_device1("on the device-1 stream", on_stream, s1);
}

/* A stream of another context needs no current context: never uncapped for lack of one. */
static void no_context(void) {
  CUcontext c1 = NULL, popped = NULL;
  CUstream s1 = NULL;
  CUresult last;
  TAP_EQ(cuCtxCreate_v2(&c1, 0, 0) || cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS,
         "a created context and a stream in it");
  TAP_EQ(cuCtxPopCurrent_v2(&popped) || cuCtxSetCurrent(NULL), CUDA_SUCCESS,
         "no current context at all");
  int n = count_async(on_stream, s1, &last);
  TAP_EQ(n, 2, "2 x 32 MiB on that stream fit under the cap, not 10");
  TAP_EQ(last, CUDA_ERROR_OUT_OF_MEMORY, "  the third: OUT_OF_MEMORY");
}

/* Stream-ordered memory belongs to no context: a destroyed context leaves it allocated. */
static void ctx_destroy(void) {
  CUcontext c = NULL;
  CUstream s = NULL;
  CUdeviceptr a = 0, b = 0;
  TAP_EQ(cuCtxCreate_v2(&c, 0, 0) || cuStreamCreate(&s, 0), CUDA_SUCCESS,
         "a created context and a stream");
  TAP_EQ(cuMemAllocAsync(&a, 48 * MiB, s), CUDA_SUCCESS, "48 MiB stream-ordered in it");
  TAP_EQ(cuStreamSynchronize(s), CUDA_SUCCESS, "synchronize");
  TAP_EQ(cuCtxDestroy_v2(c), CUDA_SUCCESS, "destroy the context (the block stays allocated)");
  TAP_EQ(cuCtxSetCurrent(primary), CUDA_SUCCESS, "the primary context");
  TAP_EQ(cuMemAllocAsync(&b, 48 * MiB, NULL), CUDA_ERROR_OUT_OF_MEMORY, "48 MiB more do not fit");
  TAP_EQ(free_now(), 16 * MiB, "get-info: 16 MiB free");
  TAP_EQ(cuMemFreeAsync(a, NULL) || cuStreamSynchronize(NULL), CUDA_SUCCESS,
         "free the first block and synchronize");
  TAP_EQ(cuMemAllocAsync(&b, 48 * MiB, NULL), CUDA_SUCCESS, "now 48 MiB fit");
}

/* A primary context reset frees the device's stream-ordered memory (the fake models it). */
static void primary_reset(void) {
  CUcontext c = NULL, popped = NULL;
  CUstream s = NULL;
  CUdeviceptr a = 0, b = 0;
  TAP_EQ(cuMemAllocAsync(&a, 24 * MiB, NULL), CUDA_SUCCESS, "24 MiB in the primary context");
  TAP_EQ(cuCtxCreate_v2(&c, 0, 0) || cuStreamCreate(&s, 0), CUDA_SUCCESS,
         "a created context on the same device");
  TAP_EQ(cuMemAllocAsync(&b, 24 * MiB, s) || cuStreamSynchronize(s), CUDA_SUCCESS,
         "24 MiB more in it");
  TAP_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS, "the primary context current");
  TAP_EQ(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS, "reset the primary context");
  TAP_EQ(cuDevicePrimaryCtxRetain(&primary, 0) || cuCtxSetCurrent(primary), CUDA_SUCCESS,
         "retain it again");
  TAP_EQ(free_now(), CAP, "get-info: the whole cap is free (the device freed both blocks)");
  TAP_EQ(cuMemAllocAsync(&a, 60 * MiB, NULL), CUDA_SUCCESS, "60 MiB fit");
}

/* A stream-ordered free takes effect when the stream reaches it. */
static void pending_free(void) {
  CUstream s1 = NULL, s2 = NULL;
  CUdeviceptr a = 0, b = 0;
  TAP_EQ(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING) || cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING),
         CUDA_SUCCESS, "two streams");
  TAP_EQ(cuMemAllocAsync(&a, 60 * MiB, s1), CUDA_SUCCESS, "60 MiB on the first");
  if (fakecudaEnqueueWork != NULL) {
    TAP_EQ(fakecudaEnqueueWork(s1, a, 60 * MiB), CUDA_SUCCESS, "work on it");
  } else {
    tap_skip("work on it", NO_HOOKS);
  }
  TAP_EQ(cuMemFreeAsync(a, s1), CUDA_SUCCESS, "free it on the first stream (still pending)");
  TAP_EQ(cuMemAllocAsync(&b, 60 * MiB, s2), CUDA_SUCCESS,
         "60 MiB on the second stream: served once the free has completed");
  if (fakecudaClaim != NULL) {
    TAP_EQ(fakecudaClaim(b, 60 * MiB), 0, "  no work of the old block touches it");
  } else {
    tap_skip("  no work of the old block touches it", NO_HOOKS);
  }
  TAP_EQ(cuMemFreeAsync(b, s2) || cuStreamSynchronize(s2), CUDA_SUCCESS, "free it and sync");
  TAP_EQ(free_now(), CAP, "get-info: the whole cap is free after the frees completed");
  TAP_EQ(cuMemAllocAsync(&a, 40 * MiB, s1) || cuMemFreeAsync(a, s1), CUDA_SUCCESS,
         "40 MiB allocated and freed on the first stream");
  TAP_EQ(cuMemAllocAsync(&b, 40 * MiB, s1), CUDA_SUCCESS,
         "40 MiB again on the same stream (stream-ordered reuse)");
  TAP_EQ((fakecudaEnqueueWork != NULL ? fakecudaEnqueueWork(s1, b, 40 * MiB) : CUDA_SUCCESS) ||
             cuMemFreeAsync(b, s1),
         CUDA_SUCCESS, "work on it, and free it on that stream");
  CUdeviceptr c = 0;
  TAP_EQ(cuMemAlloc_v2(&c, 48 * MiB), CUDA_SUCCESS,
         "48 MiB from gpucap's pool: served once the free has completed");
}

/* ---- GPUCAP_POOL=off: an over-cap pitch request never reaches the driver. ---- */

static void pitch(void) {
  CUdeviceptr p = 0;
  size_t pitch_b = 0;
  TAP_EQ(cuMemAllocPitch_v2(&p, &pitch_b, MiB, 4096, 4), CUDA_ERROR_OUT_OF_MEMORY,
         "4 GiB pitched: OUT_OF_MEMORY");
  if (fakecudaCalls != NULL) {
    TAP_EQ(fakecudaCalls("cuMemAllocPitch_v2"), 0, "  the driver was never asked");
  } else {
    tap_skip("  the driver was never asked", NO_HOOKS);
  }
  TAP_EQ(cuMemAllocPitch_v2(&p, &pitch_b, 1000, 1000, 4), CUDA_SUCCESS, "1000 x 1000 fits");
  TAP_EQ(pitch_b, 1024, "  pitch 1024");
  TAP_EQ(free_now(), CAP - 1024 * 1000, "  get-info: pitch x height charged");
  TAP_EQ(cuMemFree_v2(p), CUDA_SUCCESS, "free it");
  TAP_EQ(free_now(), CAP, "  the whole cap is back");
}

/* ---- The legacy 32-bit get-info must not decide a fractional cap. ---- */

static void getinfo_v1(void) {
  unsigned int f32 = 0, t32 = 0;
  size_t f = 0, t = 0, total = 0;
  TAP_EQ(cuMemGetInfo(&f32, &t32), CUDA_SUCCESS, "the legacy cuMemGetInfo first");
  TAP_EQ(t32, 0xffffffffu, "  its total is clamped at 4 GiB - 1");
  TAP_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS, "then cuMemGetInfo_v2");
  TAP_EQ(t, 8 * GiB, "  total: half of the 16 GiB device");
  TAP_EQ(cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS, "cuDeviceTotalMem_v2");
  TAP_EQ(total, 8 * GiB, "  total: half of the 16 GiB device");
}

/* ---- Two threads freeing one pass-through block at once (a program bug). ---- */

static pthread_barrier_t barrier;
static CUdeviceptr shared_block;

static void *free_shared(void *arg) {
  (void)arg;
  cuCtxSetCurrent(primary);
  for (int i = 0; i < 2000; i++) {
    pthread_barrier_wait(&barrier);
    cuMemFree_v2(shared_block);
    pthread_barrier_wait(&barrier);
  }
  return NULL;
}

static void double_free(void) {
  pthread_t t[2];
  int failed = 0;
  pthread_barrier_init(&barrier, NULL, 3);
  for (int i = 0; i < 2; i++) {
    pthread_create(&t[i], NULL, free_shared, NULL);
  }
  for (int i = 0; i < 2000; i++) {
    failed += cuMemAlloc_v2(&shared_block, MiB) != CUDA_SUCCESS;
    pthread_barrier_wait(&barrier);
    pthread_barrier_wait(&barrier);
  }
  for (int i = 0; i < 2; i++) {
    pthread_join(t[i], NULL);
  }
  TAP_EQ(failed, 0, "2000 x 1 MiB, each freed by two threads at once");
  TAP_EQ(free_now(), CAP, "get-info: the whole cap is free (no charge leaked)");
  CUdeviceptr p = 0;
  TAP_EQ(cuMemAlloc_v2(&p, CAP), CUDA_SUCCESS, "and all of it can be allocated");
}

int main(int argc, char **argv) {
  const char *scenario = argc > 1 ? argv[1] : "";
  static const struct {
    const char *name;
    void (*run)(void);
  } scenarios[] = {
      {"vmm", vmm},
      {"vmm-retain", vmm_retain},
      {"vmm-self-import", vmm_self_import},
      {"pool-device", pool_device},
      {"stream-device", stream_device},
      {"no-context", no_context},
      {"ctx-destroy", ctx_destroy},
      {"primary-reset", primary_reset},
      {"pending-free", pending_free},
      {"pitch", pitch},
      {"getinfo-v1", getinfo_v1},
      {"double-free", double_free},
  };
  TAP_EQ(cuInit(0) || cuDevicePrimaryCtxRetain(&primary, 0) || cuCtxSetCurrent(primary),
         CUDA_SUCCESS, "set up device 0's primary context");
  for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
    if (strcmp(scenario, scenarios[i].name) == 0) {
      scenarios[i].run();
      test_hold(); /* what the scenario left allocated, for a watcher (tests/gpu/check.sh) */
      return tap_done();
    }
  }
  tap_ok(0, "unknown scenario '%s'", scenario);
  return tap_done();
}
