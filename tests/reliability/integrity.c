/* integrity: data integrity under load, through gpucap, over the fake driver with host-backed
 * memory (FAKECUDA_BACKING=1). Linked with -lcuda (the fake) for its test hooks. Prints TAP.
 *
 * usage: integrity THREADS STREAMS ITERATIONS [SECONDS [SEED]]
 * Each thread owns STREAMS streams and up to 8 blocks at a time. It allocates blocks of random
 * sizes (pitched ones too), claims each one from the fake (no pending device work may touch a
 * block handed out) and records it in a global map that rejects overlaps; it then writes a
 * pattern unique to the block on a random stream of its own, asynchronously: a 32-bit memset
 * plus tail bytes, or a copy from a pinned buffer of pseudo-random bytes. Before freeing, it
 * copies the block back (on the same stream, or another one made to wait on an event recorded
 * after the writes), synchronises that stream and compares every byte. Half the frees leave
 * one more asynchronous write pending on the block (cuMemFree_v2 or cuMemFreeAsync): were the
 * block reused before that write ran, the next owner's pattern would be overwritten and its
 * check would fail. Runs ITERATIONS operations per thread, or SECONDS when given (> 0).
 * Allocations may be refused at the cap (CUDA_ERROR_OUT_OF_MEMORY); every other answer must
 * be success.
 */
#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/tap.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize); /* tests/fakecuda/fakedefs.h */

enum { MAXTHREADS = 16, MAXSTREAMS = 8, SLOTS = 8, MAXLIVE = MAXTHREADS * SLOTS };
#define MAXBLOCK ((size_t)1 << 20)

typedef struct block {
  CUdeviceptr ptr;
  size_t size;
  uint64_t serial; /* unique across the run: the pattern's seed */
  int stream;      /* the stream that wrote it */
  int copied;      /* written by a copy from the slot's pinned buffer (else by memsets) */
} block_t;

typedef struct worker {
  int id;
  unsigned seed;
  CUstream streams[MAXSTREAMS];
  CUevent event;
  unsigned char *src[SLOTS]; /* pinned sources of the copies, one per slot */
  unsigned char *dst;        /* pinned destination of the checks */
  unsigned char *want;
  block_t slot[SLOTS];
  long ops, blocks, ooms, errors, corrupt, claims_bad, overlaps, pending_frees;
  unsigned long long bytes_checked;
  char first_error[160];
} worker_t;

static CUcontext ctx;
static int nstreams;
static long iterations;
static double seconds;
static struct timespec start;
static uint64_t next_serial;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { CUdeviceptr lo, hi; } live[MAXLIVE];
static int nlive;

static double elapsed(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - start.tv_sec) + (double)(now.tv_nsec - start.tv_nsec) / 1e9;
}

static void error(worker_t *w, const char *what, CUresult rc) {
  if (w->errors++ == 0) {
    snprintf(w->first_error, sizeof w->first_error, "%s answered %d", what, rc);
  }
}

/* Records [p, p + n) as live; returns 0 if it overlaps a live block. */
static int registry_add(CUdeviceptr p, size_t n) {
  int ok = 1;
  pthread_mutex_lock(&registry_lock);
  for (int i = 0; i < nlive; i++) {
    if (p < live[i].hi && live[i].lo < p + n) {
      ok = 0;
    }
  }
  if (nlive < MAXLIVE) {
    live[nlive].lo = p;
    live[nlive].hi = p + n;
    nlive++;
  }
  pthread_mutex_unlock(&registry_lock);
  return ok;
}

static void registry_del(CUdeviceptr p) {
  pthread_mutex_lock(&registry_lock);
  for (int i = 0; i < nlive; i++) {
    if (live[i].lo == p) {
      live[i] = live[--nlive];
      break;
    }
  }
  pthread_mutex_unlock(&registry_lock);
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

/* The bytes a block must hold. */
static void expected(const block_t *b, unsigned char *out) {
  if (b->copied) {
    uint64_t s = mix(b->serial);
    for (size_t i = 0; i < b->size; i++) {
      if (i % 8 == 0) {
        s = mix(s + i);
      }
      out[i] = (unsigned char)(s >> (8 * (i % 8)));
    }
    return;
  }
  uint32_t word = (uint32_t)mix(b->serial) | 1u;
  size_t words = b->size / 4;
  for (size_t i = 0; i < words * 4; i++) {
    out[i] = (unsigned char)(word >> (8 * (i % 4)));
  }
  for (size_t i = words * 4; i < b->size; i++) {
    out[i] = (unsigned char)(b->serial ^ 0x5a);
  }
}

static size_t pick_size(worker_t *w) {
  unsigned r = (unsigned)rand_r(&w->seed);
  switch (r % 8) {
  case 0:
    return 1 + r / 8 % 64;
  case 1:
  case 2:
    return 1 + r / 8 % 4096;
  case 7:
    return MAXBLOCK / 2 + r / 8 % (MAXBLOCK / 2);
  default:
    return 1 + r / 8 % (256 << 10);
  }
}

static void write_block(worker_t *w, int k) {
  block_t *b = &w->slot[k];
  CUstream s = w->streams[b->stream];
  CUresult rc;
  if (b->copied) {
    expected(b, w->src[k]);
    rc = cuMemcpyHtoDAsync_v2(b->ptr, w->src[k], b->size, s);
    if (rc != CUDA_SUCCESS) {
      error(w, "cuMemcpyHtoDAsync_v2", rc);
    }
    return;
  }
  uint32_t word = (uint32_t)mix(b->serial) | 1u;
  size_t words = b->size / 4;
  if (words > 0 && (rc = cuMemsetD32Async(b->ptr, word, words, s)) != CUDA_SUCCESS) {
    error(w, "cuMemsetD32Async", rc);
  }
  if (b->size % 4 != 0 &&
      (rc = cuMemsetD8Async(b->ptr + words * 4, (unsigned char)(b->serial ^ 0x5a), b->size % 4,
                            s)) != CUDA_SUCCESS) {
    error(w, "cuMemsetD8Async", rc);
  }
}

static void alloc_block(worker_t *w, int k) {
  block_t *b = &w->slot[k];
  CUdeviceptr p = 0;
  CUresult rc;
  size_t size;
  if (rand_r(&w->seed) % 8 == 0) {
    size_t pitch = 0, width = 1 + (size_t)rand_r(&w->seed) % 2000,
           height = 1 + (size_t)(rand_r(&w->seed) % 64);
    rc = cuMemAllocPitch_v2(&p, &pitch, width, height, 4);
    size = pitch * height;
  } else {
    size = pick_size(w);
    rc = cuMemAlloc_v2(&p, size);
  }
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
    w->ooms++;
    return;
  }
  if (rc != CUDA_SUCCESS) {
    error(w, "allocation", rc);
    return;
  }
  w->claims_bad += fakecudaClaim(p, size) != 0;
  w->overlaps += !registry_add(p, size);
  b->ptr = p;
  b->size = size;
  b->serial = __atomic_add_fetch(&next_serial, 1, __ATOMIC_RELAXED);
  b->stream = (int)((unsigned)rand_r(&w->seed) % (unsigned)nstreams);
  b->copied = rand_r(&w->seed) % 2;
  w->blocks++;
  write_block(w, k);
}

static void check_and_free(worker_t *w, int k) {
  block_t *b = &w->slot[k];
  int vs = (int)((unsigned)rand_r(&w->seed) % (unsigned)nstreams);
  CUstream s = w->streams[vs];
  CUresult rc;
  if (vs != b->stream) { /* the checking stream waits for the writes */
    if ((rc = cuEventRecord(w->event, w->streams[b->stream])) != CUDA_SUCCESS ||
        (rc = cuStreamWaitEvent(s, w->event, 0)) != CUDA_SUCCESS) {
      error(w, "event record/wait", rc);
    }
  }
  if ((rc = cuMemcpyDtoHAsync_v2(w->dst, b->ptr, b->size, s)) != CUDA_SUCCESS ||
      (rc = cuStreamSynchronize(s)) != CUDA_SUCCESS) {
    error(w, "copy back", rc);
  } else {
    expected(b, w->want);
    if (memcmp(w->dst, w->want, b->size) != 0) {
      w->corrupt++;
    }
    w->bytes_checked += b->size;
  }
  registry_del(b->ptr);
  if (rand_r(&w->seed) % 2) {
    /* A last write still pending when the block is freed. */
    if ((rc = cuMemsetD8Async(b->ptr, 0xee, b->size, s)) != CUDA_SUCCESS) {
      error(w, "cuMemsetD8Async", rc);
    }
    w->pending_frees++;
  }
  rc = rand_r(&w->seed) % 4 == 0 ? cuMemFreeAsync(b->ptr, s) : cuMemFree_v2(b->ptr);
  if (rc != CUDA_SUCCESS) {
    error(w, "free", rc);
  }
  b->ptr = 0;
}

static void *run(void *arg) {
  worker_t *w = arg;
  CUresult rc = cuCtxSetCurrent(ctx);
  for (int i = 0; rc == CUDA_SUCCESS && i < nstreams; i++) {
    rc = cuStreamCreate(&w->streams[i], i % 2 ? CU_STREAM_NON_BLOCKING : 0);
  }
  if (rc == CUDA_SUCCESS) {
    rc = cuEventCreate(&w->event, 0);
  }
  for (int k = 0; rc == CUDA_SUCCESS && k < SLOTS; k++) {
    rc = cuMemAllocHost_v2((void **)&w->src[k], MAXBLOCK + 4096);
  }
  if (rc == CUDA_SUCCESS) {
    rc = cuMemAllocHost_v2((void **)&w->dst, MAXBLOCK + 4096);
  }
  w->want = malloc(MAXBLOCK + 4096);
  if (rc != CUDA_SUCCESS || w->want == NULL) {
    error(w, "thread setup", rc);
    return NULL;
  }
  for (long i = 0; seconds > 0 ? elapsed() < seconds : i < iterations; i++) {
    int k = rand_r(&w->seed) % SLOTS;
    if (w->slot[k].ptr) {
      check_and_free(w, k);
    } else {
      alloc_block(w, k);
    }
    w->ops++;
  }
  for (int k = 0; k < SLOTS; k++) {
    if (w->slot[k].ptr) {
      check_and_free(w, k);
    }
  }
  for (int i = 0; i < nstreams; i++) {
    if ((rc = cuStreamSynchronize(w->streams[i])) != CUDA_SUCCESS ||
        (rc = cuStreamDestroy_v2(w->streams[i])) != CUDA_SUCCESS) {
      error(w, "stream teardown", rc);
    }
  }
  cuEventDestroy_v2(w->event);
  for (int k = 0; k < SLOTS; k++) {
    cuMemFreeHost(w->src[k]);
  }
  cuMemFreeHost(w->dst);
  free(w->want);
  return NULL;
}

int main(int argc, char **argv) {
  int nthreads = argc > 1 ? atoi(argv[1]) : 4;
  nstreams = argc > 2 ? atoi(argv[2]) : 2;
  iterations = argc > 3 ? atol(argv[3]) : 2000;
  seconds = argc > 4 ? atof(argv[4]) : 0;
  unsigned seed = argc > 5 ? (unsigned)atoi(argv[5]) : 1;
  static worker_t workers[MAXTHREADS];
  pthread_t tid[MAXTHREADS];
  CUdevice dev;
  nthreads = nthreads < 1 ? 1 : nthreads > MAXTHREADS ? MAXTHREADS : nthreads;
  nstreams = nstreams < 1 ? 1 : nstreams > MAXSTREAMS ? MAXSTREAMS : nstreams;
  clock_gettime(CLOCK_MONOTONIC, &start);
  TAP_EQ(cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
             cuCtxSetCurrent(ctx),
         CUDA_SUCCESS, "set up a context");
  for (int t = 0; t < nthreads; t++) {
    workers[t].id = t;
    workers[t].seed = seed * 7919u + (unsigned)t;
    pthread_create(&tid[t], NULL, run, &workers[t]);
  }
  long ops = 0, blocks = 0, ooms = 0, errors = 0, corrupt = 0, claims = 0, overlaps = 0;
  long pending = 0;
  unsigned long long bytes = 0;
  const char *first = "";
  for (int t = 0; t < nthreads; t++) {
    worker_t *w = &workers[t];
    pthread_join(tid[t], NULL);
    ops += w->ops;
    blocks += w->blocks;
    ooms += w->ooms;
    errors += w->errors;
    corrupt += w->corrupt;
    claims += w->claims_bad;
    overlaps += w->overlaps;
    pending += w->pending_frees;
    bytes += w->bytes_checked;
    if (!first[0] && w->first_error[0]) {
      first = w->first_error;
    }
  }
  tap_ok(blocks > 0 && blocks * 2 > ops / 3,
         "%d threads x %d streams: %ld blocks written and "
         "checked (%llu bytes, %ld freed with work pending, %ld refused at the cap)",
         nthreads, nstreams, blocks, bytes, pending, ooms);
  TAP_EQ(corrupt, 0, "no block read back anything but its own pattern");
  TAP_EQ(claims, 0, "no block was handed out while device work still touched it");
  TAP_EQ(fakecudaHazards(), 0, "the driver counted no hazard");
  TAP_EQ(overlaps, 0, "no block overlapped another live block");
  TAP_EQ(errors, 0, "every call answered success (allocations: or out-of-memory) %s", first);
  size_t f = 0, total = 0;
  TAP_EQ(cuMemGetInfo_v2(&f, &total), CUDA_SUCCESS, "get-info");
  TAP_EQ(f, total, "all memory is back (free == total)");
  printf("# figures: threads=%d streams=%d ops=%ld blocks=%ld bytes=%llu seconds=%.1f\n", nthreads,
         nstreams, ops, blocks, bytes, elapsed());
  return tap_done();
}
