/* fakecuda_machine_worker: one process of a shared machine (FAKECUDA_MACHINE) for
 * tests/fakecuda/test_machine.sh, linked with both fakes (libcuda.so.1, libnvidia-ml.so.1). Its
 * threads take and free device memory of device 0 at random through every path that holds some
 * (cuMemAlloc, cuMemAllocPitch, cuMemAllocAsync, cuMemCreate, arrays), each thread holding at most
 * HELD allocations, and check what they can from inside: every call answers success or
 * CUDA_ERROR_OUT_OF_MEMORY, cuMemGetInfo_v2 never reports more free than total, NVML's figures
 * add up (used + free = total; the compute processes, this one among them, within the total),
 * and (with
 * FAKECUDA_BACKING=1) the bytes written into each cuMemAlloc block are still there when it is
 * freed. Not a TAP test itself.
 *
 *   stress SEED OPS [N]  THREADS threads of OPS operations, then everything freed; prints
 *                     "joined" after cuInit (it holds a slot of the machine from there on),
 *                     "stress ok=N oom=N bad=N" at the end, and exits 1 if any check failed.
 *                     With N: starts once NVML lists N processes ("started ..."), requires at
 *                     least N - 1 in every NVML list it reads (one, the test's victim, may die),
 *                     and keeps its context until its standard input ends
 *   loop SEED         the same without end; prints "running" once its threads hold memory
 *                     (the process a test kills with kill -9 in the middle of allocating)
 *   share N BYTES     takes BYTES with cuMemAlloc; once NVML shows N x BYTES used (the N
 *                     processes of the machine all holding theirs), checks that NVML's memory
 *                     (v1, v2) agrees with cuMemGetInfo_v2 and that every compute process list
 *                     (v1, v2, v3) holds N processes of BYTES each, this one among them, with
 *                     NVML's answer to a buffer too small; prints "memory ...", "procs ...",
 *                     "bad=N" and holds its bytes until its standard input ends
 *   wedge BYTES       takes BYTES with cuMemAlloc, then takes the machine ledger's lock itself
 *                     (through its own mapping of the file) and prints "locked" and waits: the
 *                     process a test kills with kill -9 while it holds the lock
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/fakecuda/fk_machine.h"
#include "tests/fakecuda/nvml/nvmldefs.h"

#define THREADS 4
#define HELD 8
#define MAXPROCS 32

enum { K_ALLOC, K_PITCH, K_ASYNC, K_VMM, K_ARRAY, K_KINDS };

struct block {
  int kind;
  CUdeviceptr p;
  CUmemGenericAllocationHandle h;
  CUarray a;
  uint32_t mark;
};

struct worker {
  unsigned seed;
  long ops; /* < 0: without end */
  long ok, oom, bad;
  CUcontext ctx;
};

static int backing;
static unsigned listed_min; /* stress with N: NVML must list at least N - 1 processes throughout */
static long started;        /* successful allocations of every thread (atomic) */

/* A pseudo-random number below n from the thread's seed. */
static unsigned below(unsigned *seed, unsigned n) {
  return (unsigned)rand_r(seed) % n;
}

static CUresult take(struct block *b, unsigned *seed, CUstream s) {
  size_t size = (size_t)(below(seed, 2048) + 1) * 512;
  size_t pitch;
  b->kind = (int)below(seed, K_KINDS);
  switch (b->kind) {
  case K_ALLOC:
    return cuMemAlloc_v2(&b->p, size);
  case K_PITCH:
    return cuMemAllocPitch_v2(&b->p, &pitch, size / 16 + 1, 16, 4);
  case K_ASYNC:
    return cuMemAllocAsync(&b->p, size, s);
  case K_VMM: {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    return cuMemCreate(&b->h, (size_t)2 << 20, &prop, 0);
  }
  default: {
    CUDA_ARRAY3D_DESCRIPTOR d;
    memset(&d, 0, sizeof d);
    d.Width = below(seed, 512) + 1;
    d.Height = below(seed, 256) + 1;
    d.Format = CU_AD_FORMAT_FLOAT;
    d.NumChannels = 1;
    return cuArray3DCreate_v2(&b->a, &d);
  }
  }
}

static CUresult give(const struct block *b, CUstream s) {
  switch (b->kind) {
  case K_ALLOC:
  case K_PITCH:
    return cuMemFree_v2(b->p);
  case K_ASYNC: {
    CUresult rc = cuMemFreeAsync(b->p, s);
    return rc == CUDA_SUCCESS ? cuStreamSynchronize(s) : rc; /* the pool releases it there */
  }
  case K_VMM:
    return cuMemRelease(b->h);
  default:
    return cuArrayDestroy(b->a);
  }
}

/* With backing, a cuMemAlloc block carries 64 bytes of its own at its start. */
static int mark(struct block *b, int check) {
  if (!backing || b->kind != K_ALLOC) {
    return 1;
  }
  uint32_t want[16], got[16];
  for (int i = 0; i < 16; i++) {
    want[i] = b->mark * 2654435761u + (uint32_t)i;
  }
  if (!check) {
    return cuMemcpyHtoD_v2(b->p, want, sizeof want) == CUDA_SUCCESS;
  }
  return cuMemcpyDtoH_v2(got, b->p, sizeof got) == CUDA_SUCCESS &&
         memcmp(got, want, sizeof got) == 0;
}

/* NVML's view of device 0 while the machine's processes allocate: used + free = total, the
 * compute processes (this one among them: it has a context) hold at most the total together, and
 * there are at least listed_min of them (the others of the machine). */
static int nvml_sane(size_t total) {
  nvmlDevice_t dev;
  nvmlMemory_t m;
  nvmlProcessInfo_t procs[MAXPROCS];
  unsigned n = MAXPROCS, self = 0;
  unsigned long long sum = 0;
  if (nvmlDeviceGetHandleByIndex_v2(0, &dev) != NVML_SUCCESS ||
      nvmlDeviceGetMemoryInfo(dev, &m) != NVML_SUCCESS ||
      nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, procs) != NVML_SUCCESS) {
    return 0;
  }
  for (unsigned i = 0; i < n; i++) {
    sum += procs[i].usedGpuMemory;
    self += procs[i].pid == (unsigned)getpid();
  }
  return m.total == total && m.used <= m.total && m.used + m.free == m.total && sum <= total &&
         self == 1 && n >= listed_min;
}

static void *thread_main(void *arg) {
  struct worker *w = arg;
  struct block held[HELD];
  int n = 0;
  CUstream s = NULL;
  w->bad += cuCtxSetCurrent(w->ctx) != CUDA_SUCCESS;
  w->bad += cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS;
  for (long i = 0; w->ops < 0 || i < w->ops; i++) {
    if (n == HELD || (n > 0 && below(&w->seed, 3) == 0)) {
      int k = (int)below(&w->seed, (unsigned)n);
      w->bad += !mark(&held[k], 1);
      w->bad += give(&held[k], s) != CUDA_SUCCESS;
      held[k] = held[--n];
      continue;
    }
    struct block *b = &held[n];
    CUresult rc = take(b, &w->seed, s);
    if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
      w->oom++;
      continue;
    }
    if (rc != CUDA_SUCCESS) {
      w->bad++;
      continue;
    }
    b->mark = (uint32_t)rand_r(&w->seed);
    w->bad += !mark(b, 0);
    n++;
    w->ok++;
    __atomic_add_fetch(&started, 1, __ATOMIC_RELAXED);
    size_t fr = 0, tot = 0;
    w->bad += cuMemGetInfo_v2(&fr, &tot) != CUDA_SUCCESS || fr > tot;
    if (below(&w->seed, 8) == 0) {
      w->bad += !nvml_sane(tot);
    }
  }
  while (n > 0) {
    w->bad += !mark(&held[n - 1], 1);
    w->bad += give(&held[--n], s) != CUDA_SUCCESS;
  }
  w->bad += cuStreamDestroy_v2(s) != CUDA_SUCCESS;
  return NULL;
}

/* The compute process lists of dev in the three layouts (v1 entries, v2 entries, v3 = v2's
 * layout) agree with each other: nproc processes of bytes each, this one once, MIG ids unset.
 * Returns the number of failed checks. */
static int lists_agree(nvmlDevice_t dev, unsigned nproc, size_t bytes) {
  nvmlProcessInfo_v1_t v1[MAXPROCS];
  nvmlProcessInfo_v2_t v2[MAXPROCS];
  nvmlProcessInfo_t v3[MAXPROCS];
  unsigned n1 = MAXPROCS, n2 = MAXPROCS, n3 = MAXPROCS;
  int bad = nvmlDeviceGetComputeRunningProcesses(dev, &n1, v1) != NVML_SUCCESS;
  bad += nvmlDeviceGetComputeRunningProcesses_v2(dev, &n2, v2) != NVML_SUCCESS;
  bad += nvmlDeviceGetComputeRunningProcesses_v3(dev, &n3, v3) != NVML_SUCCESS;
  if (bad != 0 || n1 != nproc || n2 != nproc || n3 != nproc) {
    printf("lists: %d failed, %u %u %u processes\n", bad, n1, n2, n3);
    return bad + 1;
  }
  unsigned self = 0;
  printf("procs");
  for (unsigned i = 0; i < nproc; i++) {
    printf(" %u:%llu", v3[i].pid, v3[i].usedGpuMemory);
    self += v3[i].pid == (unsigned)getpid();
    bad += v1[i].pid != v3[i].pid || v2[i].pid != v3[i].pid || v1[i].usedGpuMemory != bytes ||
           v2[i].usedGpuMemory != bytes || v3[i].usedGpuMemory != bytes ||
           v2[i].gpuInstanceId != 0xFFFFFFFFu || v3[i].computeInstanceId != 0xFFFFFFFFu;
  }
  printf("\n");
  return bad + (self != 1);
}

/* One of nproc processes holding bytes each (see the top). */
static int share(unsigned nproc, size_t bytes) {
  CUcontext ctx;
  CUdeviceptr p;
  nvmlDevice_t dev;
  if (nproc < 2 || nproc > MAXPROCS || cuInit(0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
      cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS || nvmlInit_v2() != NVML_SUCCESS ||
      nvmlDeviceGetHandleByIndex_v2(0, &dev) != NVML_SUCCESS) {
    printf("share init failed\nbad=1\n");
    return 1;
  }
  /* Until every process holds its bytes: at most a minute, a bound for hangs, not a timing. */
  unsigned long long want = (unsigned long long)nproc * bytes;
  nvmlMemory_t m = {0};
  for (int i = 0; i < 1200 && (nvmlDeviceGetMemoryInfo(dev, &m) != NVML_SUCCESS || m.used != want);
       i++) {
    usleep(50000);
  }
  size_t cfree = 0, ctotal = 0;
  nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
  int bad = cuMemGetInfo_v2(&cfree, &ctotal) != CUDA_SUCCESS;
  bad += nvmlDeviceGetMemoryInfo_v2(dev, &m2) != NVML_SUCCESS;
  bad += m.used != want || m.free != cfree || m.total != ctotal || m2.used != m.used ||
         m2.free != m.free || m2.total != m.total;
  printf("memory used=%llu free=%llu total=%llu cuda free=%zu total=%zu\n", m.used, m.free, m.total,
         cfree, ctotal);

  /* The size protocol: ask for the count, then offer one entry too few. */
  unsigned n = 0;
  bad += nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, NULL) != NVML_ERROR_INSUFFICIENT_SIZE ||
         n != nproc;
  nvmlProcessInfo_t few[MAXPROCS];
  memset(few, 0xab, sizeof few);
  n = nproc - 1;
  bad += nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, few) != NVML_ERROR_INSUFFICIENT_SIZE ||
         n != nproc || few[0].pid != 0xababababu;
  n = 0;
  bad += nvmlDeviceGetComputeRunningProcesses(dev, &n, NULL) != NVML_ERROR_INSUFFICIENT_SIZE ||
         n != nproc;
  bad += lists_agree(dev, nproc, bytes);
  printf("bad=%d\n", bad);
  fflush(stdout);
  while (getchar() != EOF) {
  }
  bad += cuMemFree_v2(p) != CUDA_SUCCESS || nvmlShutdown() != NVML_SUCCESS;
  cuDevicePrimaryCtxRelease_v2(0);
  return bad != 0;
}

/* Holds BYTES of the machine, then its ledger's lock, until killed. */
static int wedge(size_t bytes) {
  CUcontext ctx;
  CUdeviceptr p;
  const char *name = getenv("FAKECUDA_MACHINE");
  if (name == NULL || cuInit(0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS ||
      cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS) {
    printf("wedge init failed\n");
    return 1;
  }
  char path[160];
  (void)snprintf(path, sizeof path, "%s/fakecuda.%u.%s", FK_MACHINE_DIR, (unsigned)geteuid(), name);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  struct fk_ledger *l =
      fd < 0 ? MAP_FAILED : mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (l == MAP_FAILED || pthread_mutex_lock(&l->lock) != 0) {
    printf("wedge cannot lock %s\n", path);
    return 1;
  }
  printf("locked\n");
  fflush(stdout);
  for (;;) {
    pause();
  }
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "share") == 0) {
    return share((unsigned)atoi(argv[2]), (size_t)strtoull(argv[3], NULL, 10));
  }
  if (argc == 3 && strcmp(argv[1], "wedge") == 0) {
    return wedge((size_t)strtoull(argv[2], NULL, 10));
  }
  if (argc < 3 || (strcmp(argv[1], "stress") != 0 && strcmp(argv[1], "loop") != 0)) {
    fprintf(stderr, "usage: %s stress SEED OPS [N] | loop SEED | share N BYTES | wedge BYTES\n",
            argv[0]);
    return 2;
  }
  const char *b = getenv("FAKECUDA_BACKING");
  backing = b != NULL && strcmp(b, "1") == 0;
  long ops = strcmp(argv[1], "loop") == 0 ? -1 : (argc > 3 ? atol(argv[3]) : 300);
  CUcontext ctx;
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
      nvmlInit_v2() != NVML_SUCCESS) {
    printf("%s init failed\n", argv[1]);
    return 1;
  }
  printf("joined\n"); /* a process of the machine from here on */
  fflush(stdout);
  long bad = 0;
  unsigned peers = argc > 4 ? (unsigned)atoi(argv[4]) : 0;
  if (peers > 0) {
    /* Until NVML lists the machine's N processes: at most a minute, a bound for hangs. */
    nvmlDevice_t dev;
    unsigned n = 0;
    nvmlDeviceGetHandleByIndex_v2(0, &dev);
    for (int i = 0; i < 1200 && n < peers; i++) {
      n = 0;
      if (nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, NULL) != NVML_ERROR_INSUFFICIENT_SIZE) {
        n = 0;
      }
      if (n < peers) {
        usleep(50000);
      }
    }
    bad += n < peers;
    listed_min = peers - 1;
    printf("started with %u processes listed\n", n);
    fflush(stdout);
  }
  struct worker w[THREADS];
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (struct worker){
        .seed = (unsigned)atoi(argv[2]) * 7919u + (unsigned)i, .ops = ops, .ctx = ctx};
    pthread_create(&t[i], NULL, thread_main, &w[i]);
  }
  if (ops < 0) {
    while (__atomic_load_n(&started, __ATOMIC_RELAXED) < 4 * THREADS) {
      sched_yield();
    }
    printf("running\n");
    fflush(stdout);
  }
  long ok = 0, oom = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    ok += w[i].ok;
    oom += w[i].oom;
    bad += w[i].bad;
  }
  size_t fr = 0, tot = 0;
  cuCtxSynchronize();
  cuMemGetInfo_v2(&fr, &tot);
  printf("stress ok=%ld oom=%ld bad=%ld\n", ok, oom, bad);
  fflush(stdout);
  if (peers > 0) {
    while (getchar() != EOF) { /* listed (its context live) until the others are done too */
    }
  }
  cuDevicePrimaryCtxRelease_v2(0);
  nvmlShutdown();
  return bad != 0;
}
