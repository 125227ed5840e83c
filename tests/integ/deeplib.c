/* deeplib: a library a program loads with RTLD_DEEPBIND, in the two shapes libraries reach the
 * driver: built with DEEPLIB_LINKED it is linked with -lcuda and calls the driver's exported
 * names; otherwise it dlopens libcuda.so.1 and looks the entry points up through dlsym and
 * cuGetProcAddress_v2, as the CUDA runtime does. Either way RTLD_DEEPBIND makes its own scope
 * (itself, then its dependencies: libc's dlsym, the driver) come before the preloaded gpucap.
 * deep_alloc(bytes, n) makes device 0's primary context current and allocates n blocks of
 * `bytes` with cuMemAlloc_v2; returns how many it got. Test helper for tests/integ/deepbind.sh.
 */
#include "shim/base/cudadefs.h"

#include <dlfcn.h>

#define EXPORT __attribute__((visibility("default")))

typedef CUresult (*init_fn)(unsigned int);
typedef CUresult (*retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*current_fn)(CUcontext);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);

EXPORT int deep_alloc(size_t bytes, int n);

#ifdef DEEPLIB_LINKED
static int resolve(init_fn *init, retain_fn *retain, current_fn *current, alloc_fn *alloc) {
  *init = cuInit;
  *retain = cuDevicePrimaryCtxRetain;
  *current = cuCtxSetCurrent;
  *alloc = cuMemAlloc_v2;
  return 0;
}
#else
static int resolve(init_fn *init, retain_fn *retain, current_fn *current, alloc_fn *alloc) {
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
  CUdriverProcAddressQueryResult status;
  if (!driver) {
    return -1;
  }
  *(void **)&gpa = dlsym(driver, "cuGetProcAddress_v2");
  if (!gpa || gpa("cuInit", (void **)init, 12000, 0, &status) ||
      gpa("cuDevicePrimaryCtxRetain", (void **)retain, 12000, 0, &status) ||
      gpa("cuCtxSetCurrent", (void **)current, 12000, 0, &status) ||
      gpa("cuMemAlloc", (void **)alloc, 12000, 0, &status)) {
    return -1;
  }
  return 0;
}
#endif

int deep_alloc(size_t bytes, int n) {
  init_fn init;
  retain_fn retain;
  current_fn current;
  alloc_fn alloc;
  CUcontext ctx;
  if (resolve(&init, &retain, &current, &alloc) != 0 || init(0) || retain(&ctx, 0) ||
      current(ctx)) {
    return -1;
  }
  int got = 0;
  for (int i = 0; i < n; i++) {
    CUdeviceptr p;
    got += alloc(&p, bytes) == CUDA_SUCCESS;
  }
  return got;
}
