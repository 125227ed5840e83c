/* A program linked with -lcuda that calls the driver's exported names directly (no dlsym, no
 * cuGetProcAddress). Under the shim those names must bind to gpucap's exports: checked with
 * dladdr on the addresses the program itself linked against, and by the cap holding.
 * Prints TAP. Run with GPUCAP_MEMORY_LIMIT=64MiB.
 */
#include "shim/base/cudadefs.h"
#include "tests/tap.h"

#include <dlfcn.h>
#include <string.h>

/* The object that defines the function the program linked against. */
static const char *object_of(void (*fn)(void)) {
  union {
    void (*fn)(void);
    void *ptr;
  } u = {.fn = fn};
  Dl_info info;
  if (!dladdr(u.ptr, &info) || !info.dli_fname) {
    return "?";
  }
  const char *slash = strrchr(info.dli_fname, '/');
  return slash ? slash + 1 : info.dli_fname;
}

int main(void) {
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr a = 0, b = 0;
  size_t f = 0, t = 0;
  tap_ok(strcmp(object_of((void (*)(void))cuMemAlloc_v2), "libgpucap.so") == 0,
         "cuMemAlloc_v2 binds to %s", object_of((void (*)(void))cuMemAlloc_v2));
  tap_ok(strcmp(object_of((void (*)(void))cuInit), "libcuda.so.1") == 0, "cuInit binds to %s",
         object_of((void (*)(void))cuInit));
  TAP_EQ(cuInit(0), CUDA_SUCCESS, "cuInit");
  TAP_EQ(cuDeviceGet(&dev, 0), CUDA_SUCCESS, "cuDeviceGet");
  TAP_EQ(cuMemAlloc_v2(&a, 1 << 20), CUDA_ERROR_INVALID_CONTEXT,
         "no current context: the driver's own error");
  TAP_EQ(cuDevicePrimaryCtxRetain(&ctx, dev), CUDA_SUCCESS, "cuDevicePrimaryCtxRetain");
  TAP_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS, "cuCtxSetCurrent");
  TAP_EQ(cuMemAlloc_v2(&a, 48 << 20), CUDA_SUCCESS, "48 MiB under a 64 MiB cap");
  TAP_EQ(cuMemAlloc_v2(&b, 32 << 20), CUDA_ERROR_OUT_OF_MEMORY, "32 MiB more passes the cap");
  TAP_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS, "cuMemGetInfo_v2");
  TAP_EQ(t, 64 << 20, "total reports the cap");
  TAP_EQ(f, 16 << 20, "free reports the cap minus what is in use");
  TAP_EQ(cuMemFree_v2(a), CUDA_SUCCESS, "free");
  TAP_EQ(cuMemAlloc_v2(&b, 32 << 20), CUDA_SUCCESS, "32 MiB fits once the 48 MiB are freed");
  TAP_EQ(cuMemFree_v2(b), CUDA_SUCCESS, "free");
  TAP_EQ(cuMemFree_v2(b), CUDA_ERROR_INVALID_VALUE, "double free: the driver's error code");
  TAP_EQ(cuMemGetInfo_v2(&f, &t), CUDA_SUCCESS, "cuMemGetInfo_v2");
  TAP_EQ(f, 64 << 20, "everything is free again");
  return tap_done();
}
