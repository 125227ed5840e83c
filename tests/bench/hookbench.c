/* hookbench: the shim's own cost per call, measured through its hooks over the fake driver
 * (`make bench`; docs/benchmarks.md, "Through the hooks"). Linked with -lcuda like a program;
 * run with and without libgpucap.so preloaded. Prints one JSON line.
 *
 *   hookbench pair N BYTES     N cuMemAlloc_v2 + cuMemFree_v2 pairs of BYTES (pooled under the
 *                              shim; the fake's own allocation without it)
 *   hookbench query N          N cuCtxGetCurrent + cuCtxGetDevice calls: the driver queries a
 *                              pooled pair makes (the fake's share of a pooled pair)
 *   hookbench info N           N cuMemGetInfo_v2 calls: a pass-through hook
 *   hookbench cudart N BYTES   N cudaMalloc + cudaFree pairs through NVIDIA's shared runtime
 *                              (dlopened: libcudart.so from LD_LIBRARY_PATH): the ledger looks
 *                              past the runtime for the caller. Exits 3 when there is none
 *   hookbench spill N BYTES HOLD  HOLD bytes allocated first (the cap, under the shim), then N
 *                              cuMemAlloc_v2 + cuMemFree_v2 pairs of BYTES beyond it (spilled
 *                              with GPUCAP_OVERSUBSCRIBE and GPUCAP_SPILL)
 *   hookbench migrate N BYTES  N prefetches of a BYTES managed allocation to the device and
 *                              back: 2 x BYTES / 4 KiB pages migrated each
 *
 * Each figure is the median of RUNS timed rounds (default 11) after one warm-up round.
 */
#include "shim/cudadefs.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int (*rt_malloc)(void **p, size_t bytes);
static CUdeviceptr managed; /* migrate's allocation */
static int (*rt_free)(void *p);

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One round of n operations of `what`; returns ns per operation, or -1 on a failed call. */
static double round_of(const char *what, long n, size_t bytes) {
  double t0 = now_ns();
  for (long i = 0; i < n; i++) {
    if (strcmp(what, "pair") == 0 || strcmp(what, "spill") == 0) {
      CUdeviceptr p;
      if (cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS || cuMemFree_v2(p) != CUDA_SUCCESS) {
        return -1;
      }
    } else if (strcmp(what, "cudart") == 0) {
      void *p;
      if (rt_malloc(&p, bytes) != 0 || rt_free(p) != 0) {
        return -1;
      }
    } else if (strcmp(what, "migrate") == 0) {
      CUmemLocation dev = {CU_MEM_LOCATION_TYPE_DEVICE, 0}, host = {CU_MEM_LOCATION_TYPE_HOST, 0};
      if (cuMemPrefetchAsync_v2(managed, bytes, dev, 0, NULL) != CUDA_SUCCESS ||
          cuMemPrefetchAsync_v2(managed, bytes, host, 0, NULL) != CUDA_SUCCESS) {
        return -1;
      }
    } else if (strcmp(what, "query") == 0) {
      CUcontext c;
      CUdevice d;
      if (cuCtxGetCurrent(&c) != CUDA_SUCCESS || cuCtxGetDevice(&d) != CUDA_SUCCESS) {
        return -1;
      }
    } else {
      size_t f, t;
      if (cuMemGetInfo_v2(&f, &t) != CUDA_SUCCESS) {
        return -1;
      }
    }
  }
  return (now_ns() - t0) / (double)n;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: hookbench pair|query|info|cudart|spill|migrate N [BYTES [HOLD]]\n");
    return 2;
  }
  const char *what = argv[1];
  long n = atol(argv[2]);
  size_t bytes = argc > 3 ? strtoull(argv[3], NULL, 0) : 4096;
  int runs = getenv("RUNS") ? atoi(getenv("RUNS")) : 11;
  runs = runs < 1 ? 1 : runs > 101 ? 101 : runs;
  if (strcmp(what, "cudart") == 0) {
    void *rt = dlopen("libcudart.so", RTLD_NOW);
    rt = rt ? rt : dlopen("libcudart.so.13", RTLD_NOW);
    if (!rt || !(*(void **)&rt_malloc = dlsym(rt, "cudaMalloc")) ||
        !(*(void **)&rt_free = dlsym(rt, "cudaFree"))) {
      fprintf(stderr, "hookbench: no libcudart.so to load\n");
      return 3;
    }
  }
  CUdevice dev;
  CUcontext ctx;
  if (n <= 0 || cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
      cuCtxSetCurrent(ctx)) {
    fprintf(stderr, "hookbench: setup failed\n");
    return 1;
  }
  CUdeviceptr hold = 0;
  if ((strcmp(what, "spill") == 0 && argc > 4 &&
       cuMemAlloc_v2(&hold, strtoull(argv[4], NULL, 0)) != CUDA_SUCCESS) ||
      (strcmp(what, "migrate") == 0 &&
       cuMemAllocManaged(&managed, bytes, CU_MEM_ATTACH_GLOBAL) != CUDA_SUCCESS)) {
    fprintf(stderr, "hookbench: %s: setup failed\n", what);
    return 1;
  }
  double t[101];
  round_of(what, n, bytes); /* warm: the pool's region, the call-site caches */
  for (int r = 0; r < runs; r++) {
    t[r] = round_of(what, n, bytes);
    if (t[r] < 0) {
      fprintf(stderr, "hookbench: a %s call failed\n", what);
      return 1;
    }
  }
  qsort(t, (size_t)runs, sizeof t[0], cmp);
  printf("{\"what\":\"%s\",\"n\":%ld,\"ns\":%.1f,\"ns_min\":%.1f}\n", what, n, t[runs / 2], t[0]);
  return 0;
}
