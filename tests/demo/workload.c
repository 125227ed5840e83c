/* The bundled demo workload: a small "training job" written against the CUDA driver API.
 * It loads weights, then allocates bigger and bigger activation buffers until the device says
 * no, asking cuMemGetInfo along the way, and frees everything. Run over the fake driver, with
 * and without gpucap, by `make demo`. */
#include "shim/base/cudadefs.h"

#include <stdio.h>

#define MiB (1024.0 * 1024.0)

static void show_info(void) {
  size_t free_b = 0, total_b = 0;
  CUresult rc = cuMemGetInfo_v2(&free_b, &total_b);
  printf("  cuMemGetInfo -> %d: total %8.0f MiB, free %8.0f MiB\n", rc, (double)total_b / MiB,
         (double)free_b / MiB);
}

int main(void) {
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr weights = 0, act[16] = {0};
  setvbuf(stdout, NULL, _IOLBF, 0); /* interleave with gpucap's stderr in order */
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
      cuCtxSetCurrent(ctx)) {
    fprintf(stderr, "workload: no CUDA device\n");
    return 1;
  }
  show_info();
  CUresult rc = cuMemAlloc_v2(&weights, (size_t)(768 * MiB));
  printf("  weights      768 MiB -> %s\n", rc ? "refused" : "ok");
  int n = 0;
  size_t size = (size_t)(256 * MiB);
  for (; n < 16; n++, size *= 2) {
    rc = cuMemAlloc_v2(&act[n], size);
    printf("  activations %5.0f MiB -> %s\n", (double)size / MiB,
           rc == CUDA_SUCCESS               ? "ok"
           : rc == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY"
                                            : "error");
    if (rc != CUDA_SUCCESS) {
      break;
    }
  }
  show_info();
  for (int i = 0; i < n; i++) {
    cuMemFree_v2(act[i]);
  }
  cuMemFree_v2(weights);
  show_info();
  return 0;
}
