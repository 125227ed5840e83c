/* pooltest: pooled allocation as a program sees it, checked against the fake driver's own
 * counters (linked with -lcuda and the fake's test hooks). Prints TAP.
 *
 *   pooltest many N      N mixed-size allocations and frees; the driver must see only a
 *                        handful of region allocations
 *   pooltest reuse       a block freed while device work still touches it is never handed to
 *                        a new owner before that work is done (the fake counts hazards)
 *   pooltest pitch       prints the pitch cuMemAllocPitch_v2 answers for a range of widths
 *   pooltest errors      bad frees get the driver's codes and leave the pool intact
 *   pooltest idle [P]    after a burst, the pool gives its idle memory back: polls (each poll a
 *                        cuMemGetInfo, 20 ms apart, P times at most, default 1500: 30 s)
 *                        until the driver holds at most one 2 MiB unit above the block in use
 *   pooltest steady N    N rounds of allocating and freeing the same 8 MiB, 1 ms apart: the
 *                        pool keeps it (the driver unmaps nothing)
 */
#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MiB ((size_t)1 << 20)

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, ms % 1000 * 1000000};
  nanosleep(&t, NULL);
}

static void setup(void) {
  CUdevice dev;
  CUcontext ctx;
  TAP_EQ(cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
             cuCtxSetCurrent(ctx),
         0, "context set up");
}

static void many(int n) {
  enum { LIVE = 256 };
  CUdeviceptr live[LIVE] = {0};
  unsigned seed = 7;
  int failures = 0;
  /* Driver allocations: regions (cuMemAlloc_v2) or units (cuMemCreate). */
  unsigned long long before = fakecudaCalls("cuMemAlloc_v2") + fakecudaCalls("cuMemCreate");
  for (int i = 0; i < n; i++) {
    int k = rand_r(&seed) % LIVE;
    if (live[k]) {
      failures += cuMemFree_v2(live[k]) != CUDA_SUCCESS;
      live[k] = 0;
    } else {
      failures += cuMemAlloc_v2(&live[k], 256 + (size_t)(rand_r(&seed) % (64 << 10))) != 0;
    }
  }
  for (int k = 0; k < LIVE; k++) {
    failures += live[k] && cuMemFree_v2(live[k]) != CUDA_SUCCESS;
  }
  unsigned long long calls = fakecudaCalls("cuMemAlloc_v2") + fakecudaCalls("cuMemCreate") - before;
  TAP_EQ(failures, 0, "%d allocations and frees all succeed", n);
  tap_ok(calls > 0 && calls <= 8, "they cost %llu driver allocations", calls);
  printf("driver_allocs=%llu\n", calls);
}

static void reuse(void) {
  CUdeviceptr a = 0, b = 0, c = 0;
  CUstream s;
  TAP_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS, "stream");
  TAP_EQ(cuMemAlloc_v2(&a, 1 << 20), CUDA_SUCCESS, "block A");
  TAP_EQ(cuMemAlloc_v2(&c, 1 << 20), CUDA_SUCCESS, "block C fills the first region");
  TAP_EQ(fakecudaEnqueueWork(s, a, 1 << 20), CUDA_SUCCESS, "work on a stream still uses A");
  unsigned long long syncs = fakecudaCalls("cuCtxSynchronize");
  TAP_EQ(cuMemFree_v2(a), CUDA_SUCCESS, "A is freed (the program does not wait)");
  TAP_EQ(fakecudaPendingWork(), 1, "the free did not synchronise the device");
  TAP_EQ(cuMemAlloc_v2(&b, 1 << 20), CUDA_SUCCESS, "block B, same size");
  TAP_EQ(fakecudaClaim(b, 1 << 20), 0, "no pending work touches B when it is handed out");
  tap_ok(b == a, "B reuses A's memory (%#llx vs %#llx) ...", (unsigned long long)b,
         (unsigned long long)a);
  TAP_EQ(fakecudaCalls("cuCtxSynchronize") - syncs, 1, "... after one synchronize");
  TAP_EQ(fakecudaHazards(), 0, "the driver counted no hazard");
  cuMemFree_v2(b);
  cuMemFree_v2(c);
}

static void pitch(void) {
  static const size_t widths[] = {1, 100, 511, 512, 513, 1000, 4096, 65537};
  static const unsigned elems[] = {4, 8, 16};
  for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++) {
    for (size_t e = 0; e < 3; e++) {
      CUdeviceptr p = 0;
      size_t pitch = 0;
      CUresult rc = cuMemAllocPitch_v2(&p, &pitch, widths[i], 3, elems[e]);
      printf("pitch %zu %u -> %d %zu\n", widths[i], elems[e], rc, pitch);
      if (rc == CUDA_SUCCESS) {
        cuMemFree_v2(p);
      }
    }
  }
  CUdeviceptr p = 0;
  size_t pitch = 0;
  printf("pitch-bad-elem -> %d\n", cuMemAllocPitch_v2(&p, &pitch, 64, 2, 3));
  printf("pitch-zero-width -> %d\n", cuMemAllocPitch_v2(&p, &pitch, 0, 2, 4));
}

static void errors(void) {
  CUdeviceptr a = 0, b = 0;
  TAP_EQ(cuMemAlloc_v2(&a, 4096), CUDA_SUCCESS, "block A");
  TAP_EQ(cuMemAlloc_v2(&b, 4096), CUDA_SUCCESS, "block B");
  TAP_EQ(cuMemFree_v2(a + 256), CUDA_ERROR_INVALID_VALUE, "interior pointer");
  TAP_EQ(cuMemFree_v2(a), CUDA_SUCCESS, "free A");
  TAP_EQ(cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE, "double free");
  TAP_EQ(cuMemFree_v2(0xdead0000ull), CUDA_ERROR_INVALID_VALUE, "unknown pointer (driver)");
  TAP_EQ(cuMemAlloc_v2(&a, 0), CUDA_ERROR_INVALID_VALUE, "zero bytes (driver)");
  TAP_EQ(cuMemAlloc_v2(NULL, 16), CUDA_ERROR_INVALID_VALUE, "NULL out-pointer (driver)");
  TAP_EQ(cuMemFree_v2(b), CUDA_SUCCESS, "B is still live and frees");
}

/* The device memory the driver holds for this process (the fake's own count). */
static size_t held(void) {
  size_t used = 0;
  int contexts = 0;
  fakecudaDeviceUsage(0, &used, &contexts);
  return used;
}

static void idle(int max_polls) {
  enum { BURST = 48 };
  CUdeviceptr keep = 0, burst[BURST];
  int failures = cuMemAlloc_v2(&keep, 4096) != CUDA_SUCCESS;
  for (int i = 0; i < BURST; i++) {
    failures += cuMemAlloc_v2(&burst[i], MiB + (size_t)i * 4096) != CUDA_SUCCESS;
  }
  size_t peak = held();
  for (int i = 0; i < BURST; i++) {
    failures += cuMemFree_v2(burst[i]) != CUDA_SUCCESS;
  }
  TAP_EQ(failures, 0, "a burst of %d blocks over %zu bytes, freed", BURST, peak);
  size_t f = 0, t = 0, now = held();
  for (int polls = 0; polls < max_polls && now > 2 * MiB + 4096; polls++) {
    sleep_ms(20);
    cuMemGetInfo_v2(&f, &t);
    now = held();
  }
  tap_ok(now <= 2 * MiB + 4096, "the driver holds %zu bytes: one unit above the 4 KiB in use", now);
  TAP_EQ(cuMemFree_v2(keep), CUDA_SUCCESS, "the kept block frees");
  printf("burst_held=%zu idle_held=%zu\n", peak, now);
}

static void steady(int rounds) {
  int failures = 0;
  unsigned long long before = fakecudaCalls("cuMemUnmap");
  for (int i = 0; i < rounds; i++) {
    CUdeviceptr b = 0;
    failures += cuMemAlloc_v2(&b, 8 * MiB) != CUDA_SUCCESS;
    failures += cuMemFree_v2(b) != CUDA_SUCCESS;
    sleep_ms(1);
  }
  TAP_EQ(failures, 0, "%d rounds of 8 MiB allocated and freed", rounds);
  TAP_EQ(fakecudaCalls("cuMemUnmap") - before, 0ull, "the pool kept the memory the loop uses");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: pooltest many N | reuse | pitch | errors | idle | steady N\n");
    return 2;
  }
  setup();
  if (strcmp(argv[1], "many") == 0) {
    many(argc > 2 ? atoi(argv[2]) : 10000);
  } else if (strcmp(argv[1], "reuse") == 0) {
    reuse();
  } else if (strcmp(argv[1], "pitch") == 0) {
    pitch();
  } else if (strcmp(argv[1], "errors") == 0) {
    errors();
  } else if (strcmp(argv[1], "idle") == 0) {
    idle(argc > 2 ? atoi(argv[2]) : 1500);
  } else if (strcmp(argv[1], "steady") == 0) {
    steady(argc > 2 ? atoi(argv[2]) : 200);
  }
  return tap_done();
}
