/* oomtest: refusals of known kinds, for the out-of-memory verdict and output tests, and a race
 * for the ledger's counts (linked with -lcuda; run under a cap). Prints `key=value` lines.
 *
 *   oomtest frag MiB      fills the cap with 1 MiB blocks, frees every other one, then asks
 *                         for 2 MiB: enough bytes are free, no piece is large enough
 *   oomtest full MiB      fills the cap with MiB-sized blocks, then asks for one more
 *   oomtest threads N K   N threads each ask K times for more than the cap, each time after
 *                         a 1 MiB allocation that succeeds
 *   oomtest others MiB    holds a 1 MiB block in the primary context, then asks for MiB in a
 *                         context of its own (run with one region per pool,
 *                         GPUCAP_POOL=regions GPUCAP_ALLOW_GROWTH=false: the primary's region
 *                         holds the cap, idle but for the block, so it cannot be returned)
 *   oomtest race K        one thread allocates 1 MiB blocks K times and never frees them;
 *                         another frees every address the first has been given, over and over
 *                         (so a block may be freed while its allocation is still returning),
 *                         each free followed by a 64 KiB allocation and free of its own
 */
#include "shim/base/cudadefs.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX 4096
#define MiB ((size_t)1 << 20)

static CUcontext ctx;
static int tries;

static void *refused(void *arg) {
  (void)arg;
  cuCtxSetCurrent(ctx);
  int ok = 0;
  for (int i = 0; i < tries; i++) {
    CUdeviceptr p;
    if (cuMemAlloc_v2(&p, MiB) == CUDA_SUCCESS) { /* a success between refusals */
      cuMemFree_v2(p);
    }
    ok += cuMemAlloc_v2(&p, (size_t)1 << 40) == CUDA_ERROR_OUT_OF_MEMORY;
  }
  return (void *)(long)ok;
}

/* The race: the addresses the allocating thread was given, and when it is done. */
static _Atomic CUdeviceptr given[MAX];
static atomic_int ngiven;
static atomic_long nfreed;
static atomic_bool done;

static void *allocator(void *arg) {
  cuCtxSetCurrent(ctx);
  long refused = 0;
  for (int i = 0; i < tries; i++) {
    CUdeviceptr p;
    if (cuMemAlloc_v2(&p, MiB) != CUDA_SUCCESS) {
      refused++;
      continue;
    }
    int n = atomic_load(&ngiven), k = 0;
    while (k < n && atomic_load(&given[k]) != p) {
      k++;
    }
    if (k == n && n < MAX) {
      atomic_store(&given[n], p);
      atomic_store(&ngiven, n + 1);
    }
    while (i + 1 - refused - atomic_load(&nfreed) > 4) { /* at most 4 live: no refusals */
      sched_yield();
    }
  }
  atomic_store(&done, true);
  *(long *)arg = refused;
  return NULL;
}

static void *freer(void *arg) {
  cuCtxSetCurrent(ctx);
  while (!atomic_load(&done)) {
    for (int k = 0; k < atomic_load(&ngiven); k++) {
      if (cuMemFree_v2(atomic_load(&given[k])) == CUDA_SUCCESS) {
        atomic_fetch_add(&nfreed, 1);
        CUdeviceptr q;
        if (cuMemAlloc_v2(&q, MiB / 16) == CUDA_SUCCESS) {
          cuMemFree_v2(q);
        }
      }
    }
  }
  for (int k = 0; k < atomic_load(&ngiven); k++) { /* what is left */
    if (cuMemFree_v2(atomic_load(&given[k])) == CUDA_SUCCESS) {
      atomic_fetch_add(&nfreed, 1);
    }
  }
  *(long *)arg = atomic_load(&nfreed);
  return NULL;
}

int main(int argc, char **argv) {
  CUdevice dev;
  if (argc < 3 || cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
      cuCtxSetCurrent(ctx)) {
    fprintf(stderr, "usage: oomtest frag|full|others MiB | oomtest threads N K | oomtest race K\n");
    return 2;
  }
  static CUdeviceptr blocks[MAX];
  if (strcmp(argv[1], "race") == 0) {
    tries = atoi(argv[2]);
    long refused = 0, freed = 0;
    pthread_t a, f;
    pthread_create(&a, NULL, allocator, &refused);
    pthread_create(&f, NULL, freer, &freed);
    pthread_join(a, NULL);
    pthread_join(f, NULL);
    printf("allocated=%ld freed=%ld\n", tries - refused, freed);
    return 0;
  }
  if (strcmp(argv[1], "others") == 0) {
    CUdeviceptr held, asked = 0;
    CUcontext own;
    CUresult first = cuMemAlloc_v2(&held, MiB);
    if (first != CUDA_SUCCESS || cuCtxCreate_v2(&own, 0, dev) != CUDA_SUCCESS) {
      printf("held_rc=%d\n", first);
      return 1;
    }
    printf("held_rc=0 other_rc=%d\n", cuMemAlloc_v2(&asked, (size_t)atoi(argv[2]) * MiB));
    if (asked != 0) {
      cuMemFree_v2(asked);
    }
    cuCtxDestroy_v2(own);
    cuCtxSetCurrent(ctx);
    cuMemFree_v2(held);
    return 0;
  }
  if (strcmp(argv[1], "threads") == 0) {
    int n = atoi(argv[2]);
    tries = argc > 3 ? atoi(argv[3]) : 1000;
    pthread_t t[64];
    long refusals = 0;
    for (int i = 0; i < n && i < 64; i++) {
      pthread_create(&t[i], NULL, refused, NULL);
    }
    for (int i = 0; i < n && i < 64; i++) {
      void *r;
      pthread_join(t[i], &r);
      refusals += (long)r;
    }
    printf("refusals=%ld\n", refusals);
    return 0;
  }
  size_t block = strcmp(argv[1], "frag") == 0 ? MiB : (size_t)atoi(argv[2]) * MiB;
  int n = 0;
  while (n < MAX && cuMemAlloc_v2(&blocks[n], block) == CUDA_SUCCESS) {
    n++;
  }
  if (strcmp(argv[1], "frag") == 0) {
    for (int i = 0; i < n; i += 2) {
      cuMemFree_v2(blocks[i]);
      blocks[i] = 0;
    }
    cuCtxSynchronize(); /* the frees are reusable now */
    block = 2 * MiB;
  }
  CUdeviceptr extra;
  printf("filled=%d last_rc=%d\n", n, cuMemAlloc_v2(&extra, block));
  for (int i = 0; i < n; i++) {
    if (blocks[i]) {
      cuMemFree_v2(blocks[i]);
    }
  }
  return 0;
}
