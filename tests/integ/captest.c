/* captest: a plain driver-API program linked with -lcuda, used by the cap tests.
 *
 * usage: captest DEVICE BLOCK_BYTES [MAX_BLOCKS]
 * Makes DEVICE's primary context current, allocates BLOCK_BYTES blocks with cuMemAlloc_v2
 * until one fails (at most MAX_BLOCKS, default 4096), tries twice more after a failure, then
 * frees them, printing what the
 * driver calls answered as `key=value` lines for the test scripts to check.
 */
#include "shim/base/cudadefs.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX 4096

static void info(const char *when) {
  size_t f = 0, t = 0;
  CUresult rc = cuMemGetInfo_v2(&f, &t);
  printf("%s_rc=%d %s_free=%zu %s_total=%zu\n", when, rc, when, f, when, t);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: captest DEVICE BLOCK_BYTES [MAX_BLOCKS]\n");
    return 2;
  }
  int ordinal = atoi(argv[1]);
  size_t block = strtoull(argv[2], NULL, 0);
  int max = argc > 3 ? atoi(argv[3]) : MAX;
  static CUdeviceptr blocks[MAX];
  CUdevice dev;
  CUcontext ctx;
  if (cuInit(0) || cuDeviceGet(&dev, ordinal) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
      cuCtxSetCurrent(ctx)) {
    printf("setup_failed=1\n");
    return 1;
  }
  size_t total = 0;
  printf("totalmem_rc=%d ", cuDeviceTotalMem_v2(&total, dev));
  printf("totalmem=%zu\n", total);
  info("before");
  int n = 0;
  CUresult rc = CUDA_SUCCESS;
  while (n < max && n < MAX) {
    rc = cuMemAlloc_v2(&blocks[n], block);
    if (rc != CUDA_SUCCESS) {
      break;
    }
    n++;
  }
  int misaligned = 0;
  for (int i = 0; i < n; i++) {
    misaligned += blocks[i] % 256 != 0;
  }
  printf("allocs=%d last_rc=%d misaligned=%d\n", n, rc, misaligned);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) { /* the rest of a burst of failures */
    CUdeviceptr extra;
    CUresult r1 = cuMemAlloc_v2(&extra, block), r2 = cuMemAlloc_v2(&extra, block);
    printf("burst_rc=%d,%d\n", r1, r2);
  }
  info("full");
  int bad = 0;
  for (int i = 0; i < n; i++) {
    bad += cuMemFree_v2(blocks[i]) != CUDA_SUCCESS;
  }
  printf("free_errors=%d\n", bad);
  info("after");
  return 0;
}
