/* libnext.so: a preloadable library that defines cuMemAlloc_v2 itself and finds "the next
 * one" with dlsym(RTLD_NEXT, ...), as other interposers and OpenMP's tool loader do. If
 * gpucap's dlsym were not transparent for RTLD_NEXT, the search would start after gpucap and
 * could find this library again (infinite recursion). */
#include "shim/base/cudadefs.h"

#include <dlfcn.h>

#define EXPORT __attribute__((visibility("default")))

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);

EXPORT void *nextlib_next(void);

EXPORT void *nextlib_next(void) {
  void *next = dlsym(RTLD_NEXT, "cuMemAlloc_v2");
  /* Keep the call a real call: as a tail call glibc would see our caller as the caller. */
  __asm__ volatile("" ::: "memory");
  return next;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
  alloc_fn next;
  *(void **)&next = nextlib_next();
  if (!next || next == cuMemAlloc_v2) {
    return CUDA_ERROR_UNKNOWN;
  }
  return next(dptr, bytesize);
}
