/* arenatest: threads allocating from one context's pools (its arenas: docs/design.md, "Arenas")
 * seen from a program. Linked with -lcuda (the fake driver). Prints TAP. usage: arenatest MODE
 * [ARGS]
 *   churn N ITER   N threads allocate and free blocks of a few sizes under the cap; every call
 *                  answers success or out-of-memory
 *   room N BIG CAP N threads each allocate and free 1 MiB in 256 KiB blocks (free memory of
 *                  their arenas) and stay alive; get-info must say the whole CAP is free; then
 *                  the main thread asks for BIG bytes, which fit the cap only with their room
 *   fork           a thread frees one block, keeps another, and forks: the child (no CUDA
 *                  context) gets the driver's answer for both blocks and for a new one
 *   cross N BIG    a thread allocates N blocks of 1 MiB and exits; another frees them (with
 *                  arenas, blocks of another thread's arena), then frees one again and an
 *                  interior address (both invalid values, the pool intact); the main thread
 *                  then gets BIG bytes, which fit only once the freed blocks' room is back
 *   borrow CAP     a thread allocates two blocks of 1 MiB and frees the first; another
 *                  allocates 1 MiB blocks until refused: it must get all of the CAP but the
 *                  1 MiB the first holds (with arenas, the last one in the first's arena)
 *   share HOLD CAP a thread allocates 1 MiB (with arenas, opening an arena of its own) and
 *                  waits while another allocates HOLD blocks of 1 MiB and keeps them; then the
 *                  first allocates 1 MiB blocks until refused; prints "# second N" (its blocks,
 *                  the first included); it must get all of the CAP left
 *   contend BYTES  the main thread allocates and frees 4 KiB (its context's first pool), then
 *                  another thread allocates BYTES, which makes the pool grow (the script makes
 *                  the driver's growth slow); 150 ms after it is about to ask, while it is
 *                  still in the driver with the pool's lock held, the main thread allocates
 *                  1 MiB
 *   tail           (GPUCAP_ARENAS=2, an 8 MiB cap of 2 MiB units) the main thread allocates
 *                  1 MiB (a unit mapped, its second half free); another thread, in the other
 *                  arena, allocates 4 MiB, then 3 MiB: only the first arena's free half and one
 *                  more unit fit, so the block must be lent by the first arena, growing
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
static pthread_barrier_t ready, done;

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

/* Allocates and frees 1 MiB as four 256 KiB blocks, free memory of the thread's pool. */
static int free_some(void) {
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

/* room: free some, then stay alive until the main thread is done. */
static void *holder(void *arg) {
  struct result *r = arg;
  cuCtxSetCurrent(ctx);
  r->other += free_some();
  pthread_barrier_wait(&ready);
  pthread_barrier_wait(&done);
  return NULL;
}

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
  pthread_barrier_wait(&ready); /* the latecomer's arena is open */
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

/* contend: one allocation of grow_bytes, kept until the main thread frees it. */
static size_t grow_bytes;
static CUdeviceptr grown;
static void *grower(void *arg) {
  struct result *r = arg;
  cuCtxSetCurrent(ctx);
  pthread_barrier_wait(&ready); /* the main thread's 150 ms start now */
  r->other += cuMemAlloc_v2(&grown, grow_bytes) != CUDA_SUCCESS;
  return NULL;
}

/* tail: the other arena's thread. */
static void *tailer(void *arg) {
  struct result *r = arg;
  CUdeviceptr four = 0, three = 0;
  cuCtxSetCurrent(ctx);
  r->other += cuMemAlloc_v2(&four, 4 * MiB) != CUDA_SUCCESS;
  CUresult rc = cuMemAlloc_v2(&three, 3 * MiB);
  r->ok += rc == CUDA_SUCCESS;
  r->oom += rc == CUDA_ERROR_OUT_OF_MEMORY;
  r->other +=
      (four && cuMemFree_v2(four) != CUDA_SUCCESS) + (three && cuMemFree_v2(three) != CUDA_SUCCESS);
  return NULL;
}

static void *latecomer(void *arg) {
  struct result *r = arg;
  CUdeviceptr first = 0;
  cuCtxSetCurrent(ctx);
  r->other += cuMemAlloc_v2(&first, 1 * MiB) != CUDA_SUCCESS;
  pthread_barrier_wait(&ready);
  pthread_barrier_wait(&done);
  taker(r);
  r->ok++; /* the first block */
  pthread_barrier_wait(&done);
  r->other += cuMemFree_v2(first) != CUDA_SUCCESS;
  return NULL;
}

/* fork: this thread has freed one block and holds another when it forks. */
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
    pthread_barrier_init(&ready, NULL, (unsigned)n + 1);
    pthread_barrier_init(&done, NULL, (unsigned)n + 1);
    for (int t = 0; t < n; t++) {
      pthread_create(&tid[t], NULL, holder, &res[t]);
    }
    pthread_barrier_wait(&ready);
    size_t fb = 0, tb = 0;
    TAP_EQ(cuMemGetInfo_v2(&fb, &tb), CUDA_SUCCESS, "get-info answers while they keep it");
    size_t cap = argc > 4 ? strtoull(argv[4], NULL, 10) : 64 * MiB;
    TAP_EQ(fb, cap,
           "get-info: the whole cap is free (the program holds nothing; freed blocks "
           "count as the pools' idle memory)");
    CUdeviceptr p = 0;
    CUresult rc = cuMemAlloc_v2(&p, big);
    TAP_EQ(rc, CUDA_SUCCESS, "%zu bytes while %d threads keep 1 MiB free each: served", big, n);
    if (rc == CUDA_SUCCESS) {
      TAP_EQ(cuMemFree_v2(p), CUDA_SUCCESS, "and freed");
    }
    pthread_barrier_wait(&done);
    for (int t = 0; t < n; t++) {
      pthread_join(tid[t], NULL);
      other += res[t].other;
    }
    TAP_EQ(other, 0, "the threads' allocations and frees all succeeded");
  } else if (strcmp(mode, "fork") == 0) {
    pthread_create(&tid[0], NULL, forker, &res[0]);
    pthread_join(tid[0], NULL);
    TAP_EQ(res[0].ok, 0, "the fork child got the driver's answers, not the parent's pool's");
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
  } else if (strcmp(mode, "contend") == 0) {
    grow_bytes = argc > 2 ? strtoull(argv[2], NULL, 10) : 3 * MiB;
    CUdeviceptr first = 0, late = 0;
    TAP_EQ(cuMemAlloc_v2(&first, 4 * KiB), CUDA_SUCCESS, "the main thread's first block");
    TAP_EQ(cuMemFree_v2(first), CUDA_SUCCESS, "... freed");
    pthread_barrier_init(&ready, NULL, 2);
    pthread_create(&tid[0], NULL, grower, &res[0]);
    pthread_barrier_wait(&ready);
    usleep(150 * 1000);
    TAP_EQ(cuMemAlloc_v2(&late, 1 * MiB), CUDA_SUCCESS, "1 MiB while the other thread grows");
    pthread_join(tid[0], NULL);
    TAP_EQ(res[0].other, 0, "the other thread got its %zu bytes", grow_bytes);
    TAP_EQ(cuMemFree_v2(late) + cuMemFree_v2(grown), CUDA_SUCCESS, "both freed");
  } else if (strcmp(mode, "tail") == 0) {
    CUdeviceptr one = 0;
    TAP_EQ(cuMemAlloc_v2(&one, 1 * MiB), CUDA_SUCCESS, "1 MiB in the first arena");
    pthread_create(&tid[0], NULL, tailer, &res[0]);
    pthread_join(tid[0], NULL);
    TAP_EQ(res[0].other, 0, "the other thread's 4 MiB and its frees succeeded");
    TAP_EQ(res[0].ok, 1, "its 3 MiB were served (%d refused)", res[0].oom);
    TAP_EQ(cuMemFree_v2(one), CUDA_SUCCESS, "the first block freed");
  } else if (strcmp(mode, "share") == 0) {
    hold_mib = n;
    int cap_mib = (int)(strtoull(argc > 3 ? argv[3] : "0", NULL, 10) / MiB);
    pthread_barrier_init(&ready, NULL, 2);
    pthread_barrier_init(&done, NULL, 2);
    pthread_create(&tid[1], NULL, latecomer, &res[1]);
    pthread_create(&tid[0], NULL, grabber, &res[0]);
    pthread_join(tid[0], NULL);
    pthread_join(tid[1], NULL);
    printf("# second %d\n", res[1].ok);
    TAP_EQ(res[0].other + res[1].other, 0, "every call answered as expected");
    TAP_EQ(res[0].ok, hold_mib, "one thread holds %d MiB", hold_mib);
    TAP_EQ(res[1].ok, cap_mib - hold_mib, "the other then got all the rest of the cap");
  } else {
    fprintf(stderr,
            "usage: arenatest churn|room|fork|cross|borrow|share|contend|tail [N [ITER|BIG]]\n");
    return 2;
  }
  size_t f = 0, t = 0;
  TAP_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS, "get-info answers");
  return tap_done();
}
