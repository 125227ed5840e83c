/* gpuhold: holds device memory for `make gpu-check` (tests/gpu/check.sh). Linked with -lcuda,
 * like a program linked against libcuda.so.1: the real driver or the fake, whichever the loader
 * finds; needs no toolkit.
 *
 *   gpuhold leave ROOM
 *       the ballast: on every device, takes memory with cuMemAlloc_v2 until at most ROOM bytes
 *       are free (as cuMemGetInfo_v2 says), prints "held DEVICE BYTES FREE" per device and
 *       "ready", and holds it until SIGTERM or SIGINT. A program run beside it meets a device
 *       with ROOM free, as the programs of tests/real expect of the small devices they fill.
 *   gpuhold take BYTES [MS]
 *       takes up to BYTES on device 0 in blocks of at most 8 MiB until it has them or the driver
 *       (or gpucap) refuses one, prints "took N" (N bytes), holds them MS milliseconds (default
 *       300: many samples of a watcher) and frees them. Exits 0 whenever it took anything.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shim/base/cudadefs.h"

#define MiB ((size_t)1 << 20)
#define MAXBLOCKS 65536

static CUdeviceptr blocks[MAXBLOCKS];
static int nblocks;

static int setup(int dev, CUcontext *ctx) {
  CUdevice d;
  if (cuDeviceGet(&d, dev) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(ctx, d) != CUDA_SUCCESS ||
      cuCtxSetCurrent(*ctx) != CUDA_SUCCESS) {
    fprintf(stderr, "gpuhold: error: no context on device %d\n", dev);
    return -1;
  }
  return 0;
}

static size_t free_now(void) {
  size_t f = 0, t = 0;
  cuMemGetInfo_v2(&f, &t);
  return f;
}

static int leave(size_t room) {
  int ndev = 0;
  if (cuDeviceGetCount(&ndev) != CUDA_SUCCESS) {
    return 1;
  }
  for (int dev = 0; dev < ndev; dev++) {
    CUcontext ctx;
    if (setup(dev, &ctx) != 0) {
      return 1;
    }
    size_t held = 0, chunk = (size_t)1 << 30;
    while (chunk >= 2 * MiB && nblocks < MAXBLOCKS) {
      size_t f = free_now();
      if (f <= room || f - room < chunk) {
        chunk /= 2;
        continue;
      }
      if (cuMemAlloc_v2(&blocks[nblocks], chunk) == CUDA_SUCCESS) {
        nblocks++;
        held += chunk;
      } else {
        chunk /= 2;
      }
    }
    printf("held %d %zu %zu\n", dev, held, free_now());
  }
  printf("ready\n");
  fflush(stdout);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigprocmask(SIG_BLOCK, &set, NULL);
  int sig;
  sigwait(&set, &sig);
  return 0;
}

static int take(size_t want, long ms) {
  CUcontext ctx;
  if (setup(0, &ctx) != 0) {
    return 1;
  }
  size_t took = 0;
  while (took < want && nblocks < MAXBLOCKS) {
    size_t n = want - took < 8 * MiB ? want - took : 8 * MiB;
    if (cuMemAlloc_v2(&blocks[nblocks], n) != CUDA_SUCCESS) {
      break;
    }
    nblocks++;
    took += n;
  }
  printf("took %zu\n", took);
  fflush(stdout);
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
  for (int i = 0; i < nblocks; i++) {
    cuMemFree_v2(blocks[i]);
  }
  return took > 0 ? 0 : 1;
}

int main(int argc, char **argv) {
  if (argc >= 3 && cuInit(0) != CUDA_SUCCESS) {
    fprintf(stderr, "gpuhold: error: cuInit failed\n");
    return 1;
  }
  if (argc == 3 && strcmp(argv[1], "leave") == 0) {
    return leave(strtoull(argv[2], NULL, 10));
  }
  if ((argc == 3 || argc == 4) && strcmp(argv[1], "take") == 0) {
    return take(strtoull(argv[2], NULL, 10), argc == 4 ? atol(argv[3]) : 300);
  }
  fprintf(stderr, "usage: gpuhold leave ROOM | gpuhold take BYTES [MS]\n");
  return 2;
}
