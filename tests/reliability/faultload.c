/* faultload: a fixed CUDA workload that judges, call by call, what it sees while the fake
 * driver fails one driver call (FAKECUDA_FAIL=NAME:N:CODE, one entry). Linked with -lcuda (the
 * fake) for its test hooks; run with gpucap preloaded. Used by tests/reliability/faults.sh.
 *
 * The workload: init, a primary context, a stream and an event; allocations of several sizes
 * (pitched too) that grow the pool, asynchronous memsets on them, event record/synchronise,
 * get-info and total-mem, frees while work is pending, reuse that needs a synchronize, a request
 * over the cap, a second context whose pool holds idle memory the first one needs, destroying
 * it, a full clean-up, and the primary context released and retained again. Around each
 * program call the fake's call counter of NAME tells
 * whether the injected failure fired inside it (in the driver call the program made, or in a
 * call gpucap made on its behalf). Rules, per program call:
 *   - the failed call was the program's own: the program must see CODE, except that an
 *     allocation the driver refused for memory (CUDA_ERROR_OUT_OF_MEMORY) may succeed: gpucap
 *     gives back what its pools hold idle and asks the driver once more;
 *   - it was gpucap's, inside the program call: CODE, or success when gpucap could still give a
 *     correct answer (whose correctness the end-of-run checks and the get-info bounds verify),
 *     never a different error;
 *   - no failure inside: success (or CUDA_ERROR_OUT_OF_MEMORY for an allocation under the cap).
 * A failed program free is retried (the failure hit once), so a correct gpucap leaks nothing.
 * After each phase the current context must still be the one the program set.
 * Prints key=value lines: one `step=` line per call that saw the failure or broke a rule, then
 * `allocs=N live_allocs=N fired=0|1 bad=N`; exits 1 iff a rule was broken.
 */
#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAP ((size_t)64 << 20)
#define MiB ((size_t)1 << 20)

enum kind { K_ALLOC, K_OTHER };

static char fault_name[128];
static unsigned long long fault_n;
static int fault_code;
static unsigned long long before;
static int fired, bad, steps;
static int pooled;               /* GPUCAP_POOL is not off */
static long allocs, live_allocs; /* successful allocations; those in contexts alive at exit */

static void parse_fault(void) {
  const char *f = getenv("FAKECUDA_FAIL");
  if (f == NULL || f[0] == '\0') {
    return;
  }
  const char *c1 = strchr(f, ':');
  if (c1 == NULL || (size_t)(c1 - f) >= sizeof fault_name) {
    return;
  }
  memcpy(fault_name, f, (size_t)(c1 - f));
  fault_n = strtoull(c1 + 1, NULL, 10);
  const char *c2 = strchr(c1 + 1, ':');
  fault_code = c2 ? atoi(c2 + 1) : CUDA_ERROR_OUT_OF_MEMORY;
}

static unsigned long long count_now(void) {
  return fault_name[0] ? fakecudaCalls(fault_name) : 0;
}

static void begin(void) {
  before = count_now();
}

static void complain(const char *api, CUresult rc, int hit, const char *why) {
  bad++;
  printf("step=%d api=%s rc=%d hit=%d bad=\"%s\"\n", steps, api, rc, hit, why);
}

/* True iff gpucap itself serves `api` (the pool), so a driver call of the same name inside it
 * is gpucap's, not the program's. */
static int served_by_gpucap(const char *api) {
  return pooled && (strcmp(api, "cuMemAlloc_v2") == 0 || strcmp(api, "cuMemAllocPitch_v2") == 0 ||
                    strcmp(api, "cuMemFree_v2") == 0);
}

/* Driver calls gpucap makes only to win memory back for an allocation (synchronising and
 * trimming other contexts' pools, giving regions back, unmapping a VMM-backed pool's units):
 * when one fails, the memory stays where it was and the allocation may fail with
 * CUDA_ERROR_OUT_OF_MEMORY. */
static int reclaim_call(const char *name) {
  static const char *const names[] = {"cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2",
                                      "cuCtxSynchronize", "cuMemFree_v2", "cuMemUnmap"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (strcmp(name, names[i]) == 0) {
      return 1;
    }
  }
  return 0;
}

/* Judges one program call that returned rc. */
static CUresult judge(const char *api, enum kind kind, CUresult rc) {
  unsigned long long after = count_now();
  int hit = fault_name[0] && fault_n > before && fault_n <= after;
  steps++;
  if (!hit) {
    if (rc != CUDA_SUCCESS && !(kind == K_ALLOC && rc == CUDA_ERROR_OUT_OF_MEMORY)) {
      complain(api, rc, hit, "failed with no failure injected inside");
    }
    return rc;
  }
  fired = 1;
  int own = strcmp(api, fault_name) == 0 && !served_by_gpucap(api);
  const char *how = rc == (CUresult)fault_code ? "propagated"
                    : rc == CUDA_SUCCESS       ? "absorbed"
                                               : "replaced";
  printf("step=%d api=%s rc=%d hit=1 internal=%d outcome=%s\n", steps, api, rc, !own, how);
  if (rc == (CUresult)fault_code) {
    return rc;
  }
  int oom_ok = kind == K_ALLOC && rc == CUDA_ERROR_OUT_OF_MEMORY &&
               (fault_code == CUDA_ERROR_OUT_OF_MEMORY || reclaim_call(fault_name));
  int retried = kind == K_ALLOC && fault_code == CUDA_ERROR_OUT_OF_MEMORY && rc == CUDA_SUCCESS;
  if (own && !retried) {
    complain(api, rc, hit, "the program's own driver call failed but it saw another answer");
  } else if (rc != CUDA_SUCCESS && !oom_ok) {
    complain(api, rc, hit, "gpucap replaced the driver's error with another one");
  }
  return rc;
}

#define CALL(api, kind, expr) (begin(), judge(api, kind, (expr)))

/* ------------------------------------------------------------------ the workload */

enum { NBLK = 16 };
static CUdeviceptr blk[NBLK];
static size_t blk_size[NBLK];
static CUcontext primary;

static void expect_current(CUcontext want, const char *where) {
  CUcontext cur = NULL;
  if (CALL("cuCtxGetCurrent", K_OTHER, cuCtxGetCurrent(&cur)) == CUDA_SUCCESS && cur != want) {
    complain(where, CUDA_SUCCESS, 0, "the current context changed under the program");
  }
}

static void alloc(int i, size_t bytes, int counted_at_exit) {
  CUdeviceptr p = 0;
  if (CALL("cuMemAlloc_v2", K_ALLOC, cuMemAlloc_v2(&p, bytes)) == CUDA_SUCCESS) {
    if (fakecudaClaim(p, bytes) != 0) {
      complain("cuMemAlloc_v2", CUDA_SUCCESS, 0, "a new block still has pending work");
    }
    blk[i] = p;
    blk_size[i] = bytes;
    allocs++;
    live_allocs += counted_at_exit;
  }
}

static void alloc_pitch(int i, size_t width, size_t height) {
  CUdeviceptr p = 0;
  size_t pitch = 0;
  if (CALL("cuMemAllocPitch_v2", K_ALLOC, cuMemAllocPitch_v2(&p, &pitch, width, height, 4)) ==
      CUDA_SUCCESS) {
    if (pitch < width || pitch % 512 != 0) {
      complain("cuMemAllocPitch_v2", CUDA_SUCCESS, 0, "a pitch the driver would not give");
    }
    blk[i] = p;
    blk_size[i] = pitch * height;
    allocs++;
    live_allocs++;
  }
}

/* A program frees; if the driver refused once, it tries again (which must then succeed). */
static void release(int i) {
  if (!blk[i]) {
    return;
  }
  if (CALL("cuMemFree_v2", K_OTHER, cuMemFree_v2(blk[i])) != CUDA_SUCCESS) {
    CALL("cuMemFree_v2", K_OTHER, cuMemFree_v2(blk[i]));
  }
  blk[i] = 0;
}

static void info(void) {
  size_t f = 0, t = 0, total = 0;
  if (CALL("cuMemGetInfo_v2", K_OTHER, cuMemGetInfo_v2(&f, &t)) == CUDA_SUCCESS &&
      (t > CAP || f > t)) {
    printf("# get-info: free %zu total %zu\n", f, t);
    complain("cuMemGetInfo_v2", CUDA_SUCCESS, 0, "get-info reports more than the cap");
  }
  if (CALL("cuDeviceTotalMem_v2", K_OTHER, cuDeviceTotalMem_v2(&total, 0)) == CUDA_SUCCESS &&
      total > CAP) {
    complain("cuDeviceTotalMem_v2", CUDA_SUCCESS, 0, "total-mem reports more than the cap");
  }
}

static void memset_on(CUstream s, int i) {
  if (blk[i]) {
    CALL("cuMemsetD8Async", K_OTHER, cuMemsetD8Async(blk[i], (unsigned char)i, blk_size[i], s));
  }
}

static void workload(void) {
  CUdevice dev = 0;
  CUstream s = NULL;
  CUevent e = NULL;
  CUcontext second = NULL;

  if (CALL("cuInit", K_OTHER, cuInit(0)) != CUDA_SUCCESS ||
      CALL("cuDeviceGet", K_OTHER, cuDeviceGet(&dev, 0)) != CUDA_SUCCESS ||
      CALL("cuDevicePrimaryCtxRetain", K_OTHER, cuDevicePrimaryCtxRetain(&primary, dev)) !=
          CUDA_SUCCESS) {
    return;
  }
  if (CALL("cuCtxSetCurrent", K_OTHER, cuCtxSetCurrent(primary)) != CUDA_SUCCESS) {
    CALL("cuDevicePrimaryCtxRelease_v2", K_OTHER, cuDevicePrimaryCtxRelease_v2(dev));
    return;
  }
  if (CALL("cuStreamCreate", K_OTHER, cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
    s = NULL; /* fall back to the legacy stream */
  }
  if (CALL("cuEventCreate", K_OTHER, cuEventCreate(&e, 0)) != CUDA_SUCCESS) {
    e = NULL;
  }

  /* Phase 1: growth, device work, events. */
  alloc(0, 1 * MiB, 1);
  alloc(1, 3 * MiB, 1);
  alloc(2, 300, 1);
  alloc(3, 5 * MiB, 1);
  alloc(4, 12 * MiB, 1);
  alloc_pitch(5, 1000, 64);
  for (int i = 0; i < 6; i++) {
    memset_on(s, i);
  }
  if (e && CALL("cuEventRecord", K_OTHER, cuEventRecord(e, s)) == CUDA_SUCCESS) {
    CALL("cuEventSynchronize", K_OTHER, cuEventSynchronize(e));
  }
  info();

  /* Phase 2: frees with work pending, then reuse that needs a synchronize; a request over the
   * cap; a synchronize by the program. */
  memset_on(s, 0);
  memset_on(s, 1);
  release(0);
  release(1);
  release(3);
  alloc(0, 3 * MiB, 1);
  alloc(1, 6 * MiB, 1);
  alloc(6, CAP + MiB, 1);
  release(6);
  if (s) {
    CALL("cuStreamSynchronize", K_OTHER, cuStreamSynchronize(s));
  }
  CALL("cuCtxSynchronize", K_OTHER, cuCtxSynchronize());
  info();
  expect_current(primary, "phase 2");

  /* Phase 3: a second context holds idle pool memory that the first one needs. */
  if (CALL("cuCtxCreate_v2", K_OTHER, cuCtxCreate_v2(&second, 0, dev)) == CUDA_SUCCESS) {
    alloc(8, 24 * MiB, 0);
    alloc(9, 2 * MiB, 0);
    release(8);
    release(9);
    if (CALL("cuCtxSetCurrent", K_OTHER, cuCtxSetCurrent(primary)) == CUDA_SUCCESS) {
      alloc(10, 40 * MiB, 1);
      expect_current(primary, "phase 3");
      release(10);
    }
    if (CALL("cuCtxDestroy_v2", K_OTHER, cuCtxDestroy_v2(second)) != CUDA_SUCCESS) {
      CALL("cuCtxDestroy_v2", K_OTHER, cuCtxDestroy_v2(second));
    }
    CALL("cuCtxSetCurrent", K_OTHER, cuCtxSetCurrent(primary));
  }
  alloc(11, 20 * MiB, 1);
  info();

  /* Phase 4: clean-up. */
  for (int i = 0; i < NBLK; i++) {
    release(i);
  }
  if (e) {
    CALL("cuEventDestroy_v2", K_OTHER, cuEventDestroy_v2(e));
  }
  if (s) {
    CALL("cuStreamDestroy_v2", K_OTHER, cuStreamDestroy_v2(s));
  }
  expect_current(primary, "phase 4");
  info();

  /* Phase 5: the program lets the primary context go (its memory goes with it), then comes
   * back; the new block must be real driver memory. */
  unsigned int flags = 0;
  int active = 0;
  if (CALL("cuDevicePrimaryCtxRelease_v2", K_OTHER, cuDevicePrimaryCtxRelease_v2(dev)) ==
      CUDA_SUCCESS) {
    live_allocs = 0; /* the pool went with the context */
    if (CALL("cuDevicePrimaryCtxGetState", K_OTHER,
             cuDevicePrimaryCtxGetState(dev, &flags, &active)) == CUDA_SUCCESS &&
        active) {
      complain("phase 5", CUDA_SUCCESS, 0, "the primary context outlived the program's release");
    }
  }
  if (CALL("cuDevicePrimaryCtxRetain", K_OTHER, cuDevicePrimaryCtxRetain(&primary, dev)) !=
          CUDA_SUCCESS ||
      CALL("cuCtxSetCurrent", K_OTHER, cuCtxSetCurrent(primary)) != CUDA_SUCCESS) {
    return;
  }
  alloc(12, 1 * MiB, 1);
  if (blk[12]) {
    CALL("cuMemsetD8_v2", K_OTHER, cuMemsetD8_v2(blk[12], 0x5a, blk_size[12]));
    CALL("cuCtxSynchronize", K_OTHER, cuCtxSynchronize());
  }
  release(12);
}

int main(void) {
  const char *pool = getenv("GPUCAP_POOL");
  pooled = pool == NULL || strcmp(pool, "off") != 0;
  parse_fault();
  workload();
  printf("allocs=%ld live_allocs=%ld fired=%d bad=%d steps=%d\n", allocs, live_allocs, fired, bad,
         steps);
  return bad ? 1 : 0;
}
