/* spilltest: programs that need more device memory than their cap, for tests/integ/spill.sh
 * (oversubscription, GPUCAP_OVERSUBSCRIBE and GPUCAP_SPILL). Linked with -lcuda; prints TAP.
 * Meant for FAKECUDA_BACKING=1 (device bytes are real), one device larger than the cap.
 *
 *   spilltest malloc CAP WANT     four cuMemAlloc_v2 blocks of CAP/4 (the cap full), then a
 *                                 fifth: WANT is fit (served as device memory: no gpucap),
 *                                 spill (served as managed memory) or refuse
 *                                 (CUDA_ERROR_OUT_OF_MEMORY). Every block served is written by
 *                                 a copy, touched by a kernel and read back intact; a spilled
 *                                 one is also prefetched to the device, advised read-mostly and
 *                                 preferred on the device, batch-prefetched and touched again,
 *                                 and answers pointer queries as managed memory.
 *   spilltest split CAP           three blocks of CAP/4, then one of CAP/2 (spilled: half of it
 *                                 still fits under the cap), prefetched whole to the device and
 *                                 touched by a kernel; pitched allocations beyond the cap too
 *   spilltest managed CAP WANT    TensorFlow's per_process_gpu_memory_fraction=1.5: one
 *                                 cuMemAllocManaged of 1.5 x CAP, used by kernels; WANT is ok
 *                                 or refuse
 *   spilltest pair CAP            CuPy's managed pool: two cuMemAllocManaged of 3/4 x CAP, the
 *                                 second made before a kernel touched the first; then kernels
 *                                 all over both
 *   spilltest threads CAP N BYTES N threads, each in a context of its own, allocate BYTES
 *                                 blocks until refused, write and read each back, free them
 *   spilltest fork CAP            spills a block, then forks: the child writes no report
 */
#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/tap.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define CK(call) TAP_EQ((call), CUDA_SUCCESS, "%s", #call)

static CUcontext primary;

static size_t parse(const char *s) {
  return (size_t)strtoull(s, NULL, 0);
}

static int is_managed(CUdeviceptr p) {
  unsigned v = 2;
  return cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) == CUDA_SUCCESS ? (int)v
                                                                                       : -1;
}

/* Writes a pattern of `bytes` into p with a kernel-free copy, lets a kernel touch it, and
 * reads it back: whether it came back intact. */
static int round_trip(CUdeviceptr p, size_t bytes, unsigned char seed) {
  unsigned char *in = malloc(bytes), *out = malloc(bytes);
  int ok = in != NULL && out != NULL;
  for (size_t i = 0; ok && i < bytes; i++) {
    in[i] = (unsigned char)(seed + i * 7);
  }
  ok = ok && cuMemcpyHtoD_v2(p, in, bytes) == CUDA_SUCCESS &&
       fakecudaEnqueueWork(NULL, p, bytes) == CUDA_SUCCESS && cuCtxSynchronize() == CUDA_SUCCESS &&
       cuMemcpyDtoH_v2(out, p, bytes) == CUDA_SUCCESS && memcmp(in, out, bytes) == 0;
  free(in);
  free(out);
  return ok;
}

/* What a program may do to bring memory to the device: every way, on [p, p + bytes). */
static void pull(CUdeviceptr p, size_t bytes) {
  CUmemLocation dev0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUstream s = NULL;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuMemPrefetchAsync_v2(p, bytes, dev0, 0, s));
  CK(cuMemPrefetchAsync(p, bytes, 0, s));
  CK(cuMemAdvise_v2(p, bytes, CU_MEM_ADVISE_SET_READ_MOSTLY, dev0));
  CK(cuMemAdvise(p, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, 0));
  CK(cuMemAdvise_v2(p, bytes, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, dev0));
  CUdeviceptr ptrs[1] = {p};
  size_t sizes[1] = {bytes}, idxs[1] = {0};
  CK(cuMemPrefetchBatchAsync(ptrs, sizes, 1, &dev0, idxs, 1, 0, s));
  CK(cuMemDiscardAndPrefetchBatchAsync(ptrs, sizes, 1, &dev0, idxs, 1, 0, s));
  CK(fakecudaEnqueueWork(s, p, 1));
  CK(cuStreamSynchronize(s));
  CK(cuStreamDestroy_v2(s));
  TAP_EQ(cuMemPrefetchAsync_v2(p, bytes, dev0, 1, NULL), CUDA_ERROR_INVALID_VALUE,
         "a prefetch with bad flags still gets the driver's answer");
  TAP_EQ(cuMemAdvise_v2(p, bytes, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
                        (CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, 9}),
         CUDA_ERROR_INVALID_DEVICE, "advice naming device 9 of 1 gets the driver's answer");
}

static int malloc_mode(size_t cap, const char *want) {
  CUdeviceptr b[5] = {0};
  size_t q = cap / 4;
  for (int i = 0; i < 4; i++) {
    CK(cuMemAlloc_v2(&b[i], q));
  }
  CUresult rc = cuMemAlloc_v2(&b[4], q);
  if (strcmp(want, "refuse") == 0) {
    TAP_EQ(rc, CUDA_ERROR_OUT_OF_MEMORY, "a fifth quarter of the cap is refused");
    b[4] = 0;
  } else {
    TAP_EQ(rc, CUDA_SUCCESS, "a fifth quarter of the cap is served (%s)", want);
    TAP_EQ(is_managed(b[4]), strcmp(want, "spill") == 0, "it is managed memory iff spilled");
    CUdeviceptr base = 0;
    size_t size = 0;
    CK(cuMemGetAddressRange_v2(&base, &size, b[4] + 100));
    tap_ok(base == b[4] && size == q, "its address range is the block");
  }
  for (int i = 0; i < 5; i++) {
    if (b[i]) {
      tap_ok(round_trip(b[i], q, (unsigned char)i), "block %d: written by a copy, read back", i);
    }
  }
  if (b[4] && strcmp(want, "spill") == 0) {
    pull(b[4], q);
    tap_ok(round_trip(b[4], q, 9), "the spilled block after the prefetches and advice");
    CK(cuMemsetD32_v2(b[4], 0x5a5a5a5a, q / 4));
    unsigned v = 0;
    CK(cuMemcpyDtoH_v2(&v, b[4] + q - 4, 4));
    TAP_EQ(v, 0x5a5a5a5au, "a memset of the spilled block");
  }
  for (int i = 0; i < 5; i++) {
    if (b[i]) {
      CK(cuMemFree_v2(b[i]));
    }
  }
  if (b[4]) {
    TAP_EQ(cuMemFree_v2(b[4]), CUDA_ERROR_INVALID_VALUE, "freeing it again: the driver's answer");
  }
  CUdeviceptr again = 0;
  CK(cuMemAlloc_v2(&again, cap / 2));
  TAP_EQ(is_managed(again), 0, "after the frees, half the cap is device memory again");
  CK(cuMemFree_v2(again));
  return 0;
}

static int split_mode(size_t cap) {
  CUdeviceptr b[3], big = 0, p = 0;
  size_t q = cap / 4, pitch = 0;
  for (int i = 0; i < 3; i++) {
    CK(cuMemAlloc_v2(&b[i], q));
  }
  CK(cuMemAlloc_v2(&big, cap / 2));
  TAP_EQ(is_managed(big), 1, "half the cap with a quarter left: spilled");
  CUmemLocation dev0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CK(cuMemPrefetchAsync_v2(big, cap / 2, dev0, 0, NULL));
  CK(fakecudaEnqueueWork(NULL, big, 1));
  CK(cuCtxSynchronize());
  tap_ok(round_trip(big, cap / 2, 3), "written and read back");
  CK(cuMemAllocPitch_v2(&p, &pitch, 1000, 1024, 4));
  TAP_EQ(pitch, 1024, "a pitched allocation beyond the cap has the driver's pitch");
  TAP_EQ(is_managed(p), 1, "and is spilled");
  CK(cuMemFree_v2(p));
  CK(cuMemFree_v2(big));
  for (int i = 0; i < 3; i++) {
    CK(cuMemFree_v2(b[i]));
  }
  return 0;
}

static int managed_mode(size_t cap, const char *want) {
  CUdeviceptr m = 0;
  size_t bytes = cap + cap / 2;
  CUresult rc = cuMemAllocManaged(&m, bytes, CU_MEM_ATTACH_GLOBAL);
  if (strcmp(want, "refuse") == 0) {
    TAP_EQ(rc, CUDA_ERROR_OUT_OF_MEMORY, "1.5 x the cap of managed memory is refused");
    return 0;
  }
  TAP_EQ(rc, CUDA_SUCCESS, "1.5 x the cap of managed memory (TensorFlow's fraction 1.5)");
  if (rc != CUDA_SUCCESS) {
    return 0;
  }
  /* TensorFlow's BFC hands out pieces of its one region to kernels all over it. */
  for (size_t off = 0; off < bytes; off += 8 * MiB) {
    CK(fakecudaEnqueueWork(NULL, m + off, 1));
  }
  CK(cuCtxSynchronize());
  unsigned char *host = (unsigned char *)(uintptr_t)m;
  host[0] = 1;
  host[bytes - 1] = 2; /* the host reaches all of it */
  tap_ok(round_trip(m + bytes - 4 * MiB, 4 * MiB, 5), "its last 4 MiB written and read back");
  CK(cuMemFree_v2(m));
  return 0;
}

static int pair_mode(size_t cap) {
  CUdeviceptr m[2] = {0, 0};
  size_t bytes = cap / 4 * 3;
  for (int i = 0; i < 2; i++) {
    TAP_EQ(cuMemAllocManaged(&m[i], bytes, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS,
           "managed block %d of 3/4 x the cap, before any kernel", i);
  }
  for (int i = 0; i < 2 && m[0] && m[1]; i++) {
    for (size_t off = 0; off < bytes; off += 2 * MiB) {
      CK(fakecudaEnqueueWork(NULL, m[i] + off, 1));
    }
    CK(cuCtxSynchronize());
    tap_ok(round_trip(m[i], 4 * MiB, (unsigned char)i), "block %d written and read back", i);
  }
  for (int i = 0; i < 2; i++) {
    if (m[i]) {
      CK(cuMemFree_v2(m[i]));
    }
  }
  return 0;
}

struct worker {
  size_t bytes;
  int served, refused, intact, errors;
};

static void *thread_main(void *arg) {
  struct worker *w = arg;
  CUcontext c = NULL;
  CUdeviceptr got[64];
  int n = 0;
  if (cuCtxCreate_v2(&c, 0, 0) != CUDA_SUCCESS) {
    w->errors++;
    return NULL;
  }
  for (; n < 64; n++) {
    CUresult rc = cuMemAlloc_v2(&got[n], w->bytes);
    if (rc != CUDA_SUCCESS) {
      w->refused += rc == CUDA_ERROR_OUT_OF_MEMORY;
      w->errors += rc != CUDA_ERROR_OUT_OF_MEMORY;
      break;
    }
    w->served++;
  }
  for (int i = 0; i < n; i++) {
    w->intact += round_trip(got[i], w->bytes, (unsigned char)i);
  }
  for (int i = 0; i < n; i++) {
    w->errors += cuMemFree_v2(got[i]) != CUDA_SUCCESS;
  }
  w->errors += cuCtxDestroy_v2(c) != CUDA_SUCCESS;
  return NULL;
}

static int threads_mode(int n, size_t bytes) {
  pthread_t t[16];
  struct worker w[16];
  n = n > 16 ? 16 : n;
  memset(w, 0, sizeof w);
  for (int i = 0; i < n; i++) {
    w[i].bytes = bytes;
    pthread_create(&t[i], NULL, thread_main, &w[i]);
  }
  int served = 0, refused = 0, intact = 0, errors = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(t[i], NULL);
    served += w[i].served;
    refused += w[i].refused;
    intact += w[i].intact;
    errors += w[i].errors;
  }
  TAP_EQ(errors, 0, "%d threads, a context each: every answer success or out of memory", n);
  tap_ok(refused == n, "every thread was refused at last (%d)", refused);
  TAP_EQ(intact, served, "all %d blocks served came back intact", served);
  printf("served=%d\n", served);
  return 0;
}

static int fork_mode(size_t cap) {
  CUdeviceptr a = 0, b = 0;
  CK(cuMemAlloc_v2(&a, cap));
  CK(cuMemAlloc_v2(&b, cap / 2));
  TAP_EQ(is_managed(b), 1, "half the cap beyond it: spilled");
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    exit(0); /* through gpucap's exit path, in a process that spilled nothing */
  }
  int status = -1;
  waitpid(pid, &status, 0);
  tap_ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a child forked after the spill exits");
  CK(cuMemFree_v2(b));
  CK(cuMemFree_v2(a));
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: spilltest MODE CAP ...\n");
    return 2;
  }
  size_t cap = parse(argv[2]);
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&primary, 0) != CUDA_SUCCESS ||
      cuCtxSetCurrent(primary) != CUDA_SUCCESS) {
    fprintf(stderr, "spilltest: no device\n");
    return 2;
  }
  if (strcmp(argv[1], "malloc") == 0 && argc == 4) {
    malloc_mode(cap, argv[3]);
  } else if (strcmp(argv[1], "split") == 0) {
    split_mode(cap);
  } else if (strcmp(argv[1], "managed") == 0 && argc == 4) {
    managed_mode(cap, argv[3]);
  } else if (strcmp(argv[1], "pair") == 0) {
    pair_mode(cap);
  } else if (strcmp(argv[1], "threads") == 0 && argc == 5) {
    threads_mode(atoi(argv[3]), parse(argv[4]));
  } else if (strcmp(argv[1], "fork") == 0) {
    fork_mode(cap);
  } else {
    fprintf(stderr, "spilltest: bad arguments\n");
    return 2;
  }
  TAP_EQ(fakecudaHazards(), 0ull, "no hazards");
  return tap_done();
}
