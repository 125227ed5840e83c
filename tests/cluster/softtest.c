/* softtest: a program that allocates, frees most of it, and asks the fake driver (not gpucap)
 * what the process holds: the oracle of the guarantee tests (idle pool memory goes back above a
 * dmem.min or NVIDIA_GPU_MEMORY_REQUEST).
 *
 * usage: softtest DEVICE BLOCK_BYTES BLOCKS FREED
 * Allocates BLOCKS blocks of BLOCK_BYTES with cuMemAlloc_v2 on DEVICE, frees the first FREED,
 * then prints `allocs=N held_full=BYTES held_after=BYTES`, the bytes the fake driver says the
 * process holds with every block live and after the frees.
 */
#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX 256

static size_t held(int dev) {
  size_t used = 0;
  int contexts = 0;
  return fakecudaDeviceUsage(dev, &used, &contexts) == CUDA_SUCCESS ? used : 0;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: softtest DEVICE BLOCK_BYTES BLOCKS FREED\n");
    return 2;
  }
  int ordinal = atoi(argv[1]), n = atoi(argv[3]), freed = atoi(argv[4]);
  size_t block = strtoull(argv[2], NULL, 0);
  static CUdeviceptr blocks[MAX];
  CUdevice dev;
  CUcontext ctx;
  if (n > MAX || freed > n || cuInit(0) || cuDeviceGet(&dev, ordinal) ||
      cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) {
    printf("setup_failed=1\n");
    return 1;
  }
  int allocs = 0;
  while (allocs < n && cuMemAlloc_v2(&blocks[allocs], block) == CUDA_SUCCESS) {
    allocs++;
  }
  size_t full = held(ordinal);
  for (int i = 0; i < freed && i < allocs; i++) {
    cuMemFree_v2(blocks[i]);
  }
  printf("allocs=%d held_full=%zu held_after=%zu\n", allocs, full, held(ordinal));
  return 0;
}
