/* fronts: the per-thread fronts of the pool seen from a program (docs/design.md, "Per-thread
 * fronts"). Linked with -lcuda (the fake driver). Prints TAP. usage: fronts MODE [ARGS]
 *   churn N ITER   N threads allocate and free blocks of a few sizes (so fronts cache and hand
 *                  them out again) under the cap; every call answers success or out-of-memory
 *   room N BIG CAP N threads each allocate and free 1 MiB in 256 KiB blocks, which their fronts
 *                  keep, and stay alive; get-info must say the whole CAP is free; then the main
 *                  thread asks for BIG bytes, which fit the cap only with the room they cache
 *   exit           a thread frees blocks into its front and exits (its front goes back)
 *   fork           a thread frees a block into its front, keeps another, and forks: the child
 *                  (no CUDA context) gets the driver's answer for the block, not the parent's
 *   cross N BIG    a thread allocates N blocks of 1 MiB and exits; another frees them (with
 *                  GPUCAP_ARENAS, blocks of another thread's arena), then frees one again and an
 *                  interior address (both invalid values, the pool intact); the main thread
 *                  then gets BIG bytes, which fit only once the freed blocks' room is back
 *   borrow CAP     a thread allocates two blocks of 1 MiB and frees the first; another
 *                  allocates 1 MiB blocks until refused: it must get all of the CAP but the
 *                  1 MiB the first holds (with GPUCAP_ARENAS, the last one in the first's arena)
 *   share HOLD CAP a thread allocates 1 MiB (with GPUCAP_ARENAS, opening an arena of its own)
 *                  and waits while another allocates HOLD blocks of 1 MiB and keeps them; then
 *                  the first allocates 1 MiB blocks until refused; prints "# second N" (its
 *                  blocks, the first included); it must get all of the CAP left
 *   mix SLOTS ITER one thread keeps up to SLOTS blocks of a few sizes live, freeing and
 *                  allocating at random (one fixed seed) near the cap; prints "# refused N",
 *                  which the script compares with fronts on and off at the same cap
 * The script checks from the driver's side (FAKECUDA_STATS) that its peak never passed the cap.
 */
#include "shim/base/cudadefs.h"
#include "tests/tap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define LIVE 4

static CUcontext ctx;
static int iterations;
static pthread_barrier_t cached, done;

struct result {
  int ok, oom, other;
};

/* churn: sizes from a small set, so a freed block's size comes back soon. */
static void *churn(void *arg) {
  struct result *r = arg;
  static const size_t sizes[] = {256 * KiB, 1 * MiB, 3 * MiB + 512, 4 * MiB};
  unsigned seed = (unsigned)(size_t)arg;
  CUdeviceptr live[LIVE] = {0};
  cuCtxSetCurrent(ctx);
  for (int i = 0; i < iterations; i++) {
    int k = rand_r(&seed) % LIVE;
    if (live[k]) {
      r->other += cuMemFree_v2(live[k]) != CUDA_SUCCESS;
      live[k] = 0;
      continue;
    }
    CUresult rc = cuMemAlloc_v2(&live[k], sizes[rand_r(&seed) % 4]);
    if (rc != CUDA_SUCCESS) {
      live[k] = 0;
    }
    r->ok += rc == CUDA_SUCCESS;
    r->oom += rc == CUDA_ERROR_OUT_OF_MEMORY;
    r->other += rc != CUDA_SUCCESS && rc != CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (int k = 0; k < LIVE; k++) {
    if (live[k]) {
      r->other += cuMemFree_v2(live[k]) != CUDA_SUCCESS;
    }
  }
  return NULL;
}

/* mix: SLOTS slots, each free or holding one block of a size from a small set; each step
 * frees a live slot or fills an empty one, so sizes come back and placement matters. Returns
 * the allocations refused; *other counts anything but success or out-of-memory. */
static int mix(int slots, int iter, int *other) {
  static const size_t sizes[] = {24 * KiB,  40 * KiB,  64 * KiB + 512, 100 * KiB,
                                 160 * KiB, 256 * KiB, 400 * KiB};
  enum { NSIZES = sizeof sizes / sizeof sizes[0] };
  CUdeviceptr *live = calloc((size_t)slots, sizeof(*live));
  unsigned seed = 12345;
  int refused = 0;
  for (int i = 0; live && i < iter; i++) {
    int k = rand_r(&seed) % slots;
    if (live[k]) {
      *other += cuMemFree_v2(live[k]) != CUDA_SUCCESS;
      live[k] = 0;
      continue;
    }
    CUresult rc = cuMemAlloc_v2(&live[k], sizes[rand_r(&seed) % NSIZES]);
    if (rc != CUDA_SUCCESS) {
      live[k] = 0;
    }
    refused += rc == CUDA_ERROR_OUT_OF_MEMORY;
    *other += rc != CUDA_SUCCESS && rc != CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (int k = 0; live && k < slots; k++) {
    *other += live[k] && cuMemFree_v2(live[k]) != CUDA_SUCCESS;
  }
  *other += live == NULL;
  free(live);
  return refused;
}

/* Allocates and frees 1 MiB as four 256 KiB blocks, which the thread's front keeps. */
static int cache_some(void) {
  CUdeviceptr p[4] = {0};
  int bad = 0;
  for (int k = 0; k < 4; k++) {
    bad += cuMemAlloc_v2(&p[k], 256 * KiB) != CUDA_SUCCESS;
  }
  for (int k = 0; k < 4; k++) {
    bad += p[k] && cuMemFree_v2(p[k]) != CUDA_SUCCESS;
  }
  return bad;
}

/* room: cache, then stay alive (with the cached blocks) until the main thread is done. */
static void *holder(void *arg) {
  struct result *r = arg;
  cuCtxSetCurrent(ctx);
  r->other += cache_some();
  pthread_barrier_wait(&cached);
  pthread_barrier_wait(&done);
  return NULL;
}

static void *leaver(void *arg) {
  struct result *r = arg;
  cuCtxSetCurrent(ctx);
  r->other += cache_some();
  return NULL;
}

/* cross: blocks made by one thread, freed by another. */
static CUdeviceptr made[64];
static int nmade;

static void *maker(void *arg) {
  struct result *r = arg;
  cuCtxSetCurrent(ctx);
  for (int k = 0; k < nmade; k++) {
    r->other += cuMemAlloc_v2(&made[k], 1 * MiB) != CUDA_SUCCESS;
  }
  return NULL;
}

static void *freer(void *arg) {
  struct result *r = arg;
  CUdeviceptr mine = 0;
  cuCtxSetCurrent(ctx);
  r->other += cuMemAlloc_v2(&mine, 4 * KiB) != CUDA_SUCCESS;           /* this thread's own arena */
  r->other += cuMemFree_v2(made[0] + 256) != CUDA_ERROR_INVALID_VALUE; /* interior: refused */
  for (int k = 0; k < nmade; k++) {
    r->other += cuMemFree_v2(made[k]) != CUDA_SUCCESS;
  }
  r->other += cuMemFree_v2(made[0]) != CUDA_ERROR_INVALID_VALUE; /* a double free */
  r->other += cuMemFree_v2(mine) != CUDA_SUCCESS;
  return NULL;
}

/* Makes ctx current, allocates two blocks of 1 MiB, frees the first (*freed) and keeps the
 * second (*kept); failures are counted in r->other. */
static void keep_one_of_two(struct result *r, CUdeviceptr *freed, CUdeviceptr *kept) {
  cuCtxSetCurrent(ctx);
  r->other += cuMemAlloc_v2(freed, 1 * MiB) != CUDA_SUCCESS;
  r->other += cuMemAlloc_v2(kept, 1 * MiB) != CUDA_SUCCESS;
  r->other += cuMemFree_v2(*freed) != CUDA_SUCCESS;
}

/* borrow: the first thread keeps one block of two, the second takes what it can. */
static void *keeper(void *arg) {
  CUdeviceptr a = 0, b = 0;
  keep_one_of_two(arg, &a, &b);
  return NULL;
}

static void *taker(void *arg) {
  struct result *r = arg;
  CUdeviceptr got[256];
  CUresult rc = CUDA_SUCCESS;
  cuCtxSetCurrent(ctx);
  while (r->ok < 256 && (rc = cuMemAlloc_v2(&got[r->ok], 1 * MiB)) == CUDA_SUCCESS) {
    r->ok++;
  }
  r->other += rc != CUDA_ERROR_OUT_OF_MEMORY;
  for (int k = 0; k < r->ok; k++) {
    r->other += cuMemFree_v2(got[k]) != CUDA_SUCCESS;
  }
  return NULL;
}

/* share: the grabber holds hold_mib blocks of 1 MiB while the latecomer, whose arena is already
 * open, waits; then the latecomer takes what it can (taker). */
static int hold_mib;

static void *grabber(void *arg) {
  struct result *r = arg;
  CUdeviceptr got[256];
  cuCtxSetCurrent(ctx);
  pthread_barrier_wait(&cached); /* the latecomer's arena is open */
  while (r->ok < hold_mib && r->ok < 256 && cuMemAlloc_v2(&got[r->ok], 1 * MiB) == CUDA_SUCCESS) {
    r->ok++;
  }
  pthread_barrier_wait(&done); /* the latecomer takes */
  pthread_barrier_wait(&done); /* ... until refused */
  for (int k = 0; k < r->ok; k++) {
    r->other += cuMemFree_v2(got[k]) != CUDA_SUCCESS;
  }
  return NULL;
}

static void *latecomer(void *arg) {
  struct result *r = arg;
  CUdeviceptr first = 0;
  cuCtxSetCurrent(ctx);
  r->other += cuMemAlloc_v2(&first, 1 * MiB) != CUDA_SUCCESS;
  pthread_barrier_wait(&cached);
  pthread_barrier_wait(&done);
  taker(r);
  r->ok++; /* the first block */
  pthread_barrier_wait(&done);
  r->other += cuMemFree_v2(first) != CUDA_SUCCESS;
  return NULL;
}

/* fork: this thread knows one block as cached and one as live when it forks. */
static void *forker(void *arg) {
  struct result *r = arg;
  CUdeviceptr freed = 0, kept = 0;
  keep_one_of_two(r, &freed, &kept);
  pid_t pid = fork();
  if (pid == 0) {
    /* The child has no CUDA context: the driver answers for both blocks and for a new one. */
    CUdeviceptr p = 0;
    int bad = (cuMemFree_v2(kept) == CUDA_SUCCESS) + (cuMemFree_v2(freed) == CUDA_SUCCESS) +
              (cuMemAlloc_v2(&p, 1 * MiB) == CUDA_SUCCESS);
    _exit(bad);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  r->ok = WIFEXITED(status) ? WEXITSTATUS(status) : 100;
  r->other += cuMemFree_v2(kept) != CUDA_SUCCESS;
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  int n = argc > 2 ? atoi(argv[2]) : 4;
  CUdevice dev;
  pthread_t tid[64];
  struct result res[64];
  memset(res, 0, sizeof res);
  n = n < 1 ? 1 : n > 64 ? 64 : n;
  TAP_EQ(cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev), 0, "setup");
  cuCtxSetCurrent(ctx);
  int ok = 0, oom = 0, other = 0;
  if (strcmp(mode, "churn") == 0) {
    iterations = argc > 3 ? atoi(argv[3]) : 2000;
    for (int t = 0; t < n; t++) {
      pthread_create(&tid[t], NULL, churn, &res[t]);
    }
    for (int t = 0; t < n; t++) {
      pthread_join(tid[t], NULL);
      ok += res[t].ok;
      oom += res[t].oom;
      other += res[t].other;
    }
    tap_ok(ok > 0, "%d threads: %d allocations, %d refused at the cap", n, ok, oom);
    TAP_EQ(other, 0, "no call answered anything but success or out-of-memory");
  } else if (strcmp(mode, "room") == 0) {
    size_t big = argc > 3 ? strtoull(argv[3], NULL, 10) : 60 * MiB;
    pthread_barrier_init(&cached, NULL, (unsigned)n + 1);
    pthread_barrier_init(&done, NULL, (unsigned)n + 1);
    for (int t = 0; t < n; t++) {
      pthread_create(&tid[t], NULL, holder, &res[t]);
    }
    pthread_barrier_wait(&cached);
    size_t fb = 0, tb = 0;
    TAP_EQ(cuMemGetInfo_v2(&fb, &tb), CUDA_SUCCESS, "get-info answers while they cache");
    size_t cap = argc > 4 ? strtoull(argv[4], NULL, 10) : 64 * MiB;
    TAP_EQ(fb, cap,
           "get-info: the whole cap is free (the program holds nothing; cached blocks "
           "count as the pool's idle memory)");
    CUdeviceptr p = 0;
    CUresult rc = cuMemAlloc_v2(&p, big);
    TAP_EQ(rc, CUDA_SUCCESS, "%zu bytes while %d threads cache 1 MiB each: served", big, n);
    if (rc == CUDA_SUCCESS) {
      TAP_EQ(cuMemFree_v2(p), CUDA_SUCCESS, "and freed");
    }
    pthread_barrier_wait(&done);
    for (int t = 0; t < n; t++) {
      pthread_join(tid[t], NULL);
      other += res[t].other;
    }
    TAP_EQ(other, 0, "the threads' allocations and frees all succeeded");
  } else if (strcmp(mode, "exit") == 0) {
    for (int t = 0; t < n; t++) {
      pthread_create(&tid[t], NULL, leaver, &res[t]);
      pthread_join(tid[t], NULL);
      other += res[t].other;
    }
    TAP_EQ(other, 0, "%d threads cached blocks and exited", n);
  } else if (strcmp(mode, "fork") == 0) {
    pthread_create(&tid[0], NULL, forker, &res[0]);
    pthread_join(tid[0], NULL);
    TAP_EQ(res[0].ok, 0, "the fork child got the driver's answers, not the parent's front's");
    TAP_EQ(res[0].other, 0, "the parent's allocations and frees all succeeded");
  } else if (strcmp(mode, "cross") == 0) {
    nmade = n;
    size_t big = argc > 3 ? strtoull(argv[3], NULL, 10) : 60 * MiB;
    pthread_create(&tid[0], NULL, maker, &res[0]);
    pthread_join(tid[0], NULL);
    pthread_create(&tid[1], NULL, freer, &res[1]);
    pthread_join(tid[1], NULL);
    TAP_EQ(res[0].other, 0, "one thread allocated %d blocks of 1 MiB", n);
    TAP_EQ(res[1].other, 0,
           "another freed them; an interior address and a second free of one were refused");
    CUdeviceptr p = 0;
    CUresult rc = cuMemAlloc_v2(&p, big);
    TAP_EQ(rc, CUDA_SUCCESS, "then %zu bytes in the main thread: served", big);
    if (rc == CUDA_SUCCESS) {
      TAP_EQ(cuMemFree_v2(p), CUDA_SUCCESS, "and freed");
    }
  } else if (strcmp(mode, "borrow") == 0) {
    int cap_mib = (int)(strtoull(argc > 2 ? argv[2] : "0", NULL, 10) / MiB);
    pthread_create(&tid[0], NULL, keeper, &res[0]);
    pthread_join(tid[0], NULL);
    pthread_create(&tid[1], NULL, taker, &res[1]);
    pthread_join(tid[1], NULL);
    TAP_EQ(res[0].other + res[1].other, 0, "every call answered as expected");
    TAP_EQ(res[1].ok, cap_mib - 1, "the second thread got all of the cap but the 1 MiB held");
  } else if (strcmp(mode, "share") == 0) {
    hold_mib = n;
    int cap_mib = (int)(strtoull(argc > 3 ? argv[3] : "0", NULL, 10) / MiB);
    pthread_barrier_init(&cached, NULL, 2);
    pthread_barrier_init(&done, NULL, 2);
    pthread_create(&tid[1], NULL, latecomer, &res[1]);
    pthread_create(&tid[0], NULL, grabber, &res[0]);
    pthread_join(tid[0], NULL);
    pthread_join(tid[1], NULL);
    printf("# second %d\n", res[1].ok);
    TAP_EQ(res[0].other + res[1].other, 0, "every call answered as expected");
    TAP_EQ(res[0].ok, hold_mib, "one thread holds %d MiB", hold_mib);
    TAP_EQ(res[1].ok, cap_mib - hold_mib, "the other then got all the rest of the cap");
  } else if (strcmp(mode, "mix") == 0) {
    int refused = mix(n < 1 ? 1 : atoi(argv[2]), argc > 3 ? atoi(argv[3]) : 20000, &other);
    printf("# refused %d\n", refused);
    TAP_EQ(other, 0, "every call answered success or out-of-memory");
  } else {
    fprintf(stderr, "usage: fronts churn|room|exit|fork|cross|borrow|share|mix [N [ITER|BIG]]\n");
    return 2;
  }
  size_t f = 0, t = 0;
  TAP_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS, "get-info answers");
  return tap_done();
}
