/* nexttest OBJECT: checks that libnext.so's dlsym(RTLD_NEXT, "cuMemAlloc_v2") lands in
 * OBJECT (what glibc alone would answer for the preload order in use) and that allocating
 * through libnext works. Linked with -lcuda. Prints TAP. */
#include "shim/base/cudadefs.h"
#include "tests/tap.h"

#include <dlfcn.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc < 2) {
    return 2;
  }
  void *(*next)(void) = NULL;
  *(void **)&next = dlsym(RTLD_DEFAULT, "nextlib_next");
  tap_ok(next != NULL, "libnext.so is loaded");
  if (!next) {
    return tap_done();
  }
  Dl_info info;
  void *target = next();
  const char *obj = target && dladdr(target, &info) && info.dli_fname ? info.dli_fname : "?";
  const char *slash = strrchr(obj, '/');
  obj = slash ? slash + 1 : obj;
  tap_ok(strcmp(obj, argv[1]) == 0, "RTLD_NEXT from libnext.so finds %s (want %s)", obj, argv[1]);
  CUdevice dev;
  CUcontext ctx;
  CUdeviceptr p = 0;
  TAP_EQ(cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
             cuCtxSetCurrent(ctx),
         0, "context set up");
  TAP_EQ(cuMemAlloc_v2(&p, 1 << 20), CUDA_SUCCESS, "cuMemAlloc_v2 through the preload chain");
  TAP_EQ(cuMemFree_v2(p), CUDA_SUCCESS, "free");
  return tap_done();
}
