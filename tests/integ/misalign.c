/* misalign: a libcuda.so.1 that sits between gpucap and the fake driver (as a vendor layer or
 * another interposer may sit between a program and the real driver) and hands out device
 * addresses 64 bytes past a 256-byte boundary: cuMemAlloc_v2 asks the driver below (the fake,
 * built under another soname, found through RTLD_NEXT) for 64 bytes more, cuMemFree_v2 gives
 * back what it got. Every other entry point is the driver's own. Test helper for
 * tests/integ/misalign.sh.
 */
#include "shim/base/cudadefs.h"

#include <dlfcn.h>
#include <pthread.h>

#define SHIFT 64
#define MAX_BLOCKS 4096

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUdeviceptr shifted[MAX_BLOCKS];
static int nshifted;

static void *below(const char *name) {
  return dlsym(RTLD_NEXT, name);
}

__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
  CUresult (*alloc)(CUdeviceptr *, size_t);
  *(void **)&alloc = below("cuMemAlloc_v2");
  CUdeviceptr p = 0;
  if (!dptr || bytes == 0 || bytes + SHIFT < bytes) {
    return alloc(dptr, bytes);
  }
  CUresult rc = alloc(&p, bytes + SHIFT);
  if (rc == CUDA_SUCCESS) {
    pthread_mutex_lock(&lock);
    if (nshifted < MAX_BLOCKS) {
      shifted[nshifted++] = p + SHIFT;
      *dptr = p + SHIFT;
    } else {
      *dptr = p;
    }
    pthread_mutex_unlock(&lock);
  }
  return rc;
}

__attribute__((visibility("default"))) CUresult cuMemFree_v2(CUdeviceptr dptr) {
  CUresult (*release)(CUdeviceptr);
  *(void **)&release = below("cuMemFree_v2");
  pthread_mutex_lock(&lock);
  for (int i = 0; i < nshifted; i++) {
    if (shifted[i] == dptr) {
      shifted[i] = shifted[--nshifted];
      dptr -= SHIFT;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return release(dptr);
}
