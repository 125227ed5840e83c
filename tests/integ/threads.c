/* threads: several threads allocate, export over IPC and free random sizes through the shim at
 * once, under a cap. Every call must answer CUDA_SUCCESS or CUDA_ERROR_OUT_OF_MEMORY, and at
 * the end all memory is back. (The test script checks from the driver's side that its peak never
 * passed the cap.) Linked with -lcuda. Prints TAP. usage: threads NTHREADS ITERATIONS [noipc]
 * (noipc: no exports) */
#include "shim/base/cudadefs.h"
#include "tests/tap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LIVE 16

static CUcontext ctx;
static int iterations;
static int share = 1; /* export some blocks over IPC (not with "noipc") */

struct result {
  int ok, oom, other;
};

static void *worker(void *arg) {
  struct result *r = arg;
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
    size_t size = ((size_t)(rand_r(&seed) % 64) + 1) << 20;
    CUresult rc = cuMemAlloc_v2(&live[k], size);
    if (rc == CUDA_SUCCESS) {
      r->ok++;
      if (share && i % 4 == 0) { /* some blocks are shared: exports race the other threads' frees */
        CUipcMemHandle h;
        r->other += cuIpcGetMemHandle(&h, live[k]) != CUDA_SUCCESS;
      }
    } else {
      live[k] = 0;
      r->oom += rc == CUDA_ERROR_OUT_OF_MEMORY;
      r->other += rc != CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  for (int k = 0; k < LIVE; k++) {
    if (live[k]) {
      r->other += cuMemFree_v2(live[k]) != CUDA_SUCCESS;
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  iterations = argc > 2 ? atoi(argv[2]) : 2000;
  share = argc <= 3 || strcmp(argv[3], "noipc") != 0;
  CUdevice dev;
  pthread_t tid[64];
  struct result res[64] = {{0}};
  if (n > 64) {
    n = 64;
  }
  TAP_EQ(cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev), 0, "setup");
  for (int t = 0; t < n; t++) {
    pthread_create(&tid[t], NULL, worker, &res[t]);
  }
  int ok = 0, oom = 0, other = 0;
  for (int t = 0; t < n; t++) {
    pthread_join(tid[t], NULL);
    ok += res[t].ok;
    oom += res[t].oom;
    other += res[t].other;
  }
  tap_ok(ok > 0 && oom > 0, "%d threads: %d allocations, %d refused at the cap", n, ok, oom);
  TAP_EQ(other, 0, "no call answered anything but success or out-of-memory");
  size_t f = 0, t = 0;
  cuCtxSetCurrent(ctx);
  TAP_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS, "get-info");
  TAP_EQ(f, t, "all memory is back");
  return tap_done();
}
