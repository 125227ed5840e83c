/* A library loaded before the fake driver that exports two of its names, as a naive LD_PRELOAD
 * shim would. test_gpa proves that the fake's cuGetProcAddress still hands out the fake's own
 * functions (it is linked -Bsymbolic, like a real driver resolves its own table). */
#include "shim/base/cudadefs.h"

__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
  (void)dptr;
  (void)size;
  return CUDA_ERROR_UNKNOWN;
}

__attribute__((visibility("default"))) CUresult
cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                    CUdriverProcAddressQueryResult *symbolStatus) {
  (void)symbol;
  (void)pfn;
  (void)cudaVersion;
  (void)flags;
  (void)symbolStatus;
  return CUDA_ERROR_UNKNOWN;
}
