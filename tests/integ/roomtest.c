/* roomtest: does the pool leave the room under the cap that the bare driver would? Linked with
 * -lcuda; prints `key=value` lines for tests/integ/room.sh to compare with and without the shim.
 *
 *   roomtest ctxs N BYTES       N contexts (cuCtxCreate) on device 0, one BYTES block in each:
 *                               prints `ctxs_ok=K`, how many got their block
 *   roomtest kinds FIRST BYTES  allocates FIRST bytes with cuMemAlloc_v2 and frees them (FIRST 0:
 *                               nothing), then one BYTES allocation of each other kind, each
 *                               freed before the next: prints `managed=RC`, `async=RC`,
 *                               `create=RC`, `array=RC` (CUresult codes)
 *   roomtest hold HELD BYTES N  keeps HELD bytes allocated with cuMemAlloc_v2 (a JAX-style
 *                               preallocation), then N cuMemCreate buffers of BYTES (NCCL's):
 *                               prints `held_rc=RC` and `created=K`
 */
#include "shim/base/cudadefs.h"
#include "tests/pinned.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t parse(const char *s) {
  return (size_t)strtoull(s, NULL, 0);
}

static int setup(CUdevice *dev) {
  CUcontext ctx;
  return cuInit(0) || cuDeviceGet(dev, 0) || cuDevicePrimaryCtxRetain(&ctx, *dev) ||
         cuCtxSetCurrent(ctx);
}

static int ctxs(int n, size_t bytes) {
  CUdevice dev;
  if (cuInit(0) || cuDeviceGet(&dev, 0)) {
    return 1;
  }
  int ok = 0;
  for (int i = 0; i < n; i++) {
    CUcontext c;
    CUdeviceptr d;
    if (cuCtxCreate_v2(&c, 0, dev) == CUDA_SUCCESS && cuMemAlloc_v2(&d, bytes) == CUDA_SUCCESS) {
      ok++;
    }
  }
  printf("ctxs_ok=%d\n", ok);
  return 0;
}

static int kinds(size_t first, size_t bytes) {
  CUdevice dev;
  if (setup(&dev)) {
    return 1;
  }
  CUdeviceptr d = 0;
  if (first > 0) {
    CUresult rc = cuMemAlloc_v2(&d, first);
    printf("first_rc=%d free_rc=%d\n", rc, rc == CUDA_SUCCESS ? (int)cuMemFree_v2(d) : -1);
  }
  CUresult rc = cuMemAllocManaged(&d, bytes, CU_MEM_ATTACH_GLOBAL);
  printf("managed=%d\n", rc);
  if (rc == CUDA_SUCCESS) {
    cuMemFree_v2(d);
  }
  rc = cuMemAllocAsync(&d, bytes, NULL);
  printf("async=%d\n", rc);
  if (rc == CUDA_SUCCESS) {
    cuMemFreeAsync(d, NULL);
    cuStreamSynchronize(NULL);
  }
  CUmemAllocationProp p = pinned_prop(dev);
  CUmemGenericAllocationHandle h;
  rc = cuMemCreate(&h, bytes, &p, 0);
  printf("create=%d\n", rc);
  if (rc == CUDA_SUCCESS) {
    cuMemRelease(h);
  }
  CUDA_ARRAY_DESCRIPTOR a = {
      .Width = 4096, .Height = bytes / 4096 / 4, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
  CUarray arr;
  rc = cuArrayCreate_v2(&arr, &a);
  printf("array=%d\n", rc);
  if (rc == CUDA_SUCCESS) {
    cuArrayDestroy(arr);
  }
  return 0;
}

static int hold(size_t held, size_t bytes, int n) {
  CUdevice dev;
  if (setup(&dev)) {
    return 1;
  }
  CUdeviceptr d;
  printf("held_rc=%d\n", cuMemAlloc_v2(&d, held));
  CUmemAllocationProp p = pinned_prop(dev);
  int made = 0;
  for (int i = 0; i < n; i++) {
    CUmemGenericAllocationHandle h;
    made += cuMemCreate(&h, bytes, &p, 0) == CUDA_SUCCESS;
  }
  printf("created=%d\n", made);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "ctxs") == 0) {
    return ctxs(atoi(argv[2]), parse(argv[3]));
  }
  if (argc == 4 && strcmp(argv[1], "kinds") == 0) {
    return kinds(parse(argv[2]), parse(argv[3]));
  }
  if (argc == 5 && strcmp(argv[1], "hold") == 0) {
    return hold(parse(argv[2]), parse(argv[3]), atoi(argv[4]));
  }
  fprintf(stderr, "usage: roomtest ctxs N BYTES | kinds FIRST BYTES | hold HELD BYTES N\n");
  return 2;
}
