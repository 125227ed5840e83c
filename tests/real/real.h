/* Shared by the programs of tests/real: ordinary CUDA programs built by nvcc against NVIDIA's
 * runtime (static and shared), run by tests/real/real.sh over the fake driver with and without
 * gpucap. A program prints one line per fact and checks its own expectations:
 *   NAME=VALUE    a fact that must read the same with and without gpucap (real.sh compares);
 *   ~NAME=VALUE   a fact that depends on the memory the program is given (the cap), which
 *                 real.sh checks against the cap it set;
 *   NAME=FAIL ... an expectation the program found false (real.sh fails the row).
 * The program exits 0 when every expectation held. Nothing here knows whether gpucap is there.
 */
#ifndef GPUCAP_TESTS_REAL_REAL_H
#define GPUCAP_TESTS_REAL_REAL_H

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/hold.h"

#define MiB ((size_t)1 << 20)

static int real_failures;

/* Prints NAME=ok, or NAME=FAIL with the condition and counts a failure. */
static inline int real_check(const char *name, int cond, const char *what) {
  if (cond) {
    printf("%s=ok\n", name);
  } else {
    printf("%s=FAIL (%s)\n", name, what);
    real_failures++;
  }
  return cond;
}
#define CHECK(name, cond) real_check((name), (cond) ? 1 : 0, #cond)

/* Prints NAME=<the runtime's error name> when a call answered want, else FAIL. */
static inline cudaError_t real_expect(const char *name, cudaError_t got, cudaError_t want) {
  if (got == want) {
    printf("%s=%s\n", name, cudaGetErrorName(got));
  } else {
    printf("%s=FAIL %s (%d), want %s\n", name, cudaGetErrorName(got), (int)got,
           cudaGetErrorName(want));
    real_failures++;
  }
  return got;
}
#define EXPECT(name, call, want) real_expect((name), (call), (want))
#define OK(name, call) real_expect((name), (call), cudaSuccess)

/* A fact that must not depend on gpucap, and one that depends on the memory given. */
#define FACT(name, fmt, ...) printf(name "=" fmt "\n", __VA_ARGS__)
#define CAPFACT(name, fmt, ...) printf("~" name "=" fmt "\n", __VA_ARGS__)

/* The fake driver's test hook fakecudaClaim(ptr, n), when the driver is the fake: how many
 * pending device operations still touch memory the program just received (each one counts a
 * hazard in the driver's report). A real driver has no such symbol: then nothing is checked. */
static inline void real_claim(const void *p, size_t n) {
  static int (*claim)(unsigned long long, size_t);
  static int looked;
  if (!looked) {
    looked = 1;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h != NULL) {
      claim = (int (*)(unsigned long long, size_t))dlsym(h, "fakecudaClaim");
    }
  }
  if (claim != NULL && p != NULL) {
    claim((unsigned long long)(uintptr_t)p, n);
  }
}

/* The fake driver's test hook fakecudaPendingWork(): device work items queued and not yet
 * complete in the process (a kernel queues one per device address among its parameters); -1
 * when the driver is not the fake. */
static inline int real_pending(void) {
  static int (*pending)(void);
  static int looked;
  if (!looked) {
    looked = 1;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h != NULL) {
      pending = (int (*)(void))dlsym(h, "fakecudaPendingWork");
    }
  }
  return pending != NULL ? pending() : -1;
}

/* After a library call that queued device work on stream s (real_pending() read `before` just
 * ahead of it): NAME_queued_work (the fake's pending work grew), NAME_sync, NAME_work_done
 * (nothing pending once s is synchronised). */
static inline void real_queued_then_done(const char *name, int before, cudaStream_t s) {
  char key[96];
  snprintf(key, sizeof key, "%s_queued_work", name);
  real_check(key, real_pending() > before, "the fake's pending work grew");
  snprintf(key, sizeof key, "%s_sync", name);
  real_expect(key, cudaStreamSynchronize(s), cudaSuccess);
  snprintf(key, sizeof key, "%s_work_done", name);
  real_check(key, real_pending() == 0, "no pending work after the stream's synchronisation");
}

/* cudaMalloc, and claims what it got. */
static inline cudaError_t real_malloc(void **p, size_t n) {
  cudaError_t e = cudaMalloc(p, n);
  if (e == cudaSuccess) {
    real_claim(*p, n);
  }
  return e;
}

/* The device's total memory as the runtime reports it (the cap under gpucap). */
static inline size_t real_total(const char *name) {
  size_t free_b = 0, total_b = 0;
  OK(name, cudaMemGetInfo(&free_b, &total_b));
  printf("~%s_total=%zu\n", name, total_b);
  CHECK("free_le_total", free_b <= total_b);
  return total_b;
}

/* The memory the program can still get (cudaMemGetInfo's free figure). On a real GPU it is less
 * than the total from the start: the driver holds the context, other processes their memory. */
static inline size_t real_room(void) {
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  return free_b;
}

/* Fills n bytes with a pattern derived from seed; checks it back. */
static inline void real_pattern(unsigned char *buf, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    buf[i] = (unsigned char)((i * 131u + seed * 7u + (i >> 9)) & 0xff);
  }
}
static inline int real_pattern_ok(const unsigned char *buf, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) {
    if (buf[i] != (unsigned char)((i * 131u + seed * 7u + (i >> 9)) & 0xff)) {
      return 0;
    }
  }
  return 1;
}

/* An allocation larger than the device (as the runtime reports it) must fail with the
 * runtime's own out-of-memory error, be reported once by cudaGetLastError, and leave the
 * program able to go on: a small allocation right after works. */
static inline void real_over_cap(const char *name, size_t total) {
  char key[96];
  void *p = NULL;
  snprintf(key, sizeof key, "%s_over_cap", name);
  EXPECT(key, cudaMalloc(&p, total + 4 * MiB), cudaErrorMemoryAllocation);
  snprintf(key, sizeof key, "%s_last_error", name);
  EXPECT(key, cudaGetLastError(), cudaErrorMemoryAllocation);
  snprintf(key, sizeof key, "%s_last_error_cleared", name);
  EXPECT(key, cudaGetLastError(), cudaSuccess);
  snprintf(key, sizeof key, "%s_goes_on", name);
  if (OK(key, real_malloc(&p, MiB)) == cudaSuccess) {
    snprintf(key, sizeof key, "%s_goes_on_free", name);
    OK(key, cudaFree(p));
  }
}

/* Allocates chunks with alloc(&chunk, bytes) until it refuses one, then frees them all with
 * release: the number that fit depends on the memory given (printed as ~NAME_fill), the
 * refusal must be the runtime's out-of-memory error, and the chunks must never add up to more
 * than the total. Before freeing them it holds still (test_hold): the moment a watcher outside
 * must see. Returns how many fit. */
typedef cudaError_t (*real_alloc_fn)(void **chunk, size_t bytes);
typedef cudaError_t (*real_free_fn)(void *chunk);

static inline int real_fill_with(const char *name, size_t chunk, size_t total, real_alloc_fn alloc,
                                 real_free_fn release) {
  enum { MAXCHUNKS = 4096 };
  static void *chunks[MAXCHUNKS];
  int n = 0;
  cudaError_t e = cudaSuccess;
  while (n < MAXCHUNKS && (e = alloc(&chunks[n], chunk)) == cudaSuccess) {
    n++;
  }
  char key[96];
  snprintf(key, sizeof key, "%s_fill_refusal", name);
  real_expect(key, e, cudaErrorMemoryAllocation);
  cudaGetLastError();
  printf("~%s_fill=%d\n", name, n);
  snprintf(key, sizeof key, "%s_fill_within_total", name);
  real_check(key, n > 0 && (size_t)n * chunk <= total, "0 < chunks x size <= total");
  test_hold();
  int freed = 0;
  for (int i = 0; i < n; i++) {
    freed += release(chunks[i]) == cudaSuccess;
  }
  snprintf(key, sizeof key, "%s_fill_freed", name);
  real_check(key, freed == n, "every chunk freed");
  return n;
}

/* real_fill_with cudaMalloc (each chunk claimed) and cudaFree. */
static inline int real_fill(const char *name, size_t chunk, size_t total) {
  return real_fill_with(name, chunk, total, real_malloc, cudaFree);
}

/* Writes n bytes of the pattern of seed to device memory (NAME_put), and later reads them back
 * (NAME_get) and checks them (NAME_intact). */
static inline void real_put(const char *name, void *dev, size_t n, unsigned seed) {
  unsigned char *host = (unsigned char *)malloc(n);
  char key[96];
  real_pattern(host, n, seed);
  snprintf(key, sizeof key, "%s_put", name);
  OK(key, cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice));
  free(host);
}

static inline void real_get_ok(const char *name, const void *dev, size_t n, unsigned seed) {
  unsigned char *back = (unsigned char *)calloc(1, n);
  char key[96];
  snprintf(key, sizeof key, "%s_get", name);
  OK(key, cudaMemcpy(back, dev, n, cudaMemcpyDeviceToHost));
  snprintf(key, sizeof key, "%s_intact", name);
  real_check(key, real_pattern_ok(back, n, seed), "the bytes written");
  free(back);
}

/* cudaMemcpy3D of extent e from src (or src_array when not NULL) to dst (or dst_array). */
static inline cudaError_t real_copy3d(cudaPitchedPtr src, cudaArray_t src_array, cudaPitchedPtr dst,
                                      cudaArray_t dst_array, cudaExtent e, cudaMemcpyKind kind) {
  cudaMemcpy3DParms p = {};
  p.srcPtr = src;
  p.srcArray = src_array;
  p.dstPtr = dst;
  p.dstArray = dst_array;
  p.extent = e;
  p.kind = kind;
  return cudaMemcpy3D(&p);
}

/* A library's status: prints NAME=TEXT, and NAME_ok=FAIL when it is not the one wanted. */
static inline int real_status(const char *name, int got, int want, const char *text) {
  printf("%s=%s\n", name, text);
  if (got != want) {
    printf("%s_ok=FAIL (%d, want %d)\n", name, got, want);
    real_failures++;
  }
  return got == want;
}

/* Holds all the memory the device will give, in chunks of 4 MiB and then of 64 KiB, so that
 * any allocation of 64 KiB or more fails, and holds still (test_hold) once it has it; returns
 * how many chunks (at most max) it took. */
static inline int real_ballast(void **chunks, int max) {
  int n = 0;
  while (n < max && real_malloc(&chunks[n], 4 * MiB) == cudaSuccess) {
    n++;
  }
  while (n < max && real_malloc(&chunks[n], 64 * 1024) == cudaSuccess) {
    n++;
  }
  cudaGetLastError();
  test_hold();
  return n;
}

static inline void real_ballast_free(void **chunks, int n) {
  for (int i = 0; i < n; i++) {
    cudaFree(chunks[i]);
  }
}

/* Ends main: every expectation held? Then, with TEST_HOLD_MS set (tests/hold.h), the program
 * holds still, keeping what it still holds (its context, its modules, what its libraries keep),
 * for a watcher outside to measure. */
static inline int real_end(void) {
  printf("failures=%d\n", real_failures);
  test_hold();
  return real_failures == 0 ? 0 : 1;
}

#endif
