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
 *   hookbench vmm N BYTES      N rounds of virtual memory management on device 0, each step
 *                              timed on its own: cuMemCreate of BYTES (rounded up to the
 *                              granularity), cuMemAddressReserve, cuMemMap, cuMemSetAccess,
 *                              cuMemUnmap, cuMemAddressFree, cuMemRelease (`make gpu-bench`)
 *   hookbench spill N BYTES HOLD  HOLD bytes allocated first (the cap, under the shim), then N
 *                              cuMemAlloc_v2 + cuMemFree_v2 pairs of BYTES beyond it (spilled
 *                              with GPUCAP_OVERSUBSCRIBE and GPUCAP_SPILL)
 *   hookbench migrate N BYTES  N prefetches of a BYTES managed allocation to the device and
 *                              back: 2 x BYTES / 4 KiB pages migrated each
 *
 * Each figure is the median of RUNS timed rounds (default 11) after one warm-up round; vmm
 * prints each step's median and least per-call time.
 */
#include "shim/base/cudadefs.h"
#include "tests/pinned.h"

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

enum { VMM_STEPS = 7 };
static const char *const vmm_names[VMM_STEPS] = {"create", "reserve",   "map",    "access",
                                                 "unmap",  "unreserve", "release"};

/* One round of n VMM sequences of bytes; t[step] gets ns per call of each step. -1 on a failed
 * call. */
static double vmm_round(long n, size_t bytes, double t[VMM_STEPS]) {
  CUmemAllocationProp prop = pinned_prop(0);
  CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  for (int s = 0; s < VMM_STEPS; s++) {
    t[s] = 0;
  }
  for (long i = 0; i < n; i++) {
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    double t0 = now_ns();
    CUresult rc = cuMemCreate(&h, bytes, &prop, 0);
    double t1 = now_ns();
    rc = rc ? rc : cuMemAddressReserve(&va, bytes, 0, 0, 0);
    double t2 = now_ns();
    rc = rc ? rc : cuMemMap(va, bytes, 0, h, 0);
    double t3 = now_ns();
    rc = rc ? rc : cuMemSetAccess(va, bytes, &access, 1);
    double t4 = now_ns();
    rc = rc ? rc : cuMemUnmap(va, bytes);
    double t5 = now_ns();
    rc = rc ? rc : cuMemAddressFree(va, bytes);
    double t6 = now_ns();
    rc = rc ? rc : cuMemRelease(h);
    double t7 = now_ns();
    if (rc != CUDA_SUCCESS) {
      return -1;
    }
    double at[VMM_STEPS + 1] = {t0, t1, t2, t3, t4, t5, t6, t7};
    for (int s = 0; s < VMM_STEPS; s++) {
      t[s] += at[s + 1] - at[s];
    }
  }
  for (int s = 0; s < VMM_STEPS; s++) {
    t[s] /= (double)n;
  }
  return 0;
}

/* hookbench vmm: each step's median and least ns per call over the rounds. */
static int vmm(long n, size_t bytes, int runs) {
  size_t gran = 0;
  CUmemAllocationProp prop = pinned_prop(0);
  if (cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) || gran == 0) {
    fprintf(stderr, "hookbench: no VMM granularity\n");
    return 1;
  }
  bytes = (bytes + gran - 1) / gran * gran;
  double t[101][VMM_STEPS], warm[VMM_STEPS];
  if (vmm_round(n, bytes, warm) < 0) {
    fprintf(stderr, "hookbench: a VMM call failed\n");
    return 1;
  }
  for (int r = 0; r < runs; r++) {
    if (vmm_round(n, bytes, t[r]) < 0) {
      fprintf(stderr, "hookbench: a VMM call failed\n");
      return 1;
    }
  }
  printf("{\"what\":\"vmm\",\"n\":%ld,\"bytes\":%zu", n, bytes);
  for (int s = 0; s < VMM_STEPS; s++) {
    double col[101];
    for (int r = 0; r < runs; r++) {
      col[r] = t[r][s];
    }
    qsort(col, (size_t)runs, sizeof col[0], cmp);
    printf(",\"%s_ns\":%.1f,\"%s_ns_min\":%.1f", vmm_names[s], col[runs / 2], vmm_names[s], col[0]);
  }
  printf("}\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: hookbench pair|query|info|cudart|vmm|spill|migrate N [BYTES [HOLD]]\n");
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
  if (strcmp(what, "vmm") == 0) {
    return vmm(n, bytes, runs);
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
