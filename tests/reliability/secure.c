/* secure: a CUDA program linked with gpucap itself (not preloaded) and the fake driver through
 * absolute run paths, so that a set-group-ID copy still runs with gpucap although the loader,
 * in secure-execution mode, ignores LD_PRELOAD and LD_LIBRARY_PATH. Prints `at_secure=0|1`
 * (whether the kernel marked the process AT_SECURE, i.e. secure_getenv returns NULL) and
 * `allocs=N`: how many of up to 16 allocations of 1 MiB succeeded, then frees them.
 * Used by tests/reliability/security.sh.
 */
#include "shim/base/cudadefs.h"

#include <stdio.h>
#include <sys/auxv.h>

int main(void) {
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr p[16];
  int n = 0;
  printf("at_secure=%lu\n", getauxval(AT_SECURE));
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
      cuCtxSetCurrent(ctx)) {
    printf("setup_failed=1\n");
    return 1;
  }
  while (n < 16 && cuMemAlloc_v2(&p[n], 1 << 20) == CUDA_SUCCESS) {
    n++;
  }
  printf("allocs=%d\n", n);
  for (int i = 0; i < n; i++) {
    cuMemFree_v2(p[i]);
  }
  return 0;
}
