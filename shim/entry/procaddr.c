/* gpucap's cuGetProcAddress and cuGetProcAddress_v2: ask the real driver with the caller's
 * version and flags, then hand out the hook of exactly the ABI the driver chose (or the
 * driver's own pointer for names gpucap does not hook). Self-queries get these wrappers.
 * symbolStatus is the driver's, untouched. No locks; safe before cuInit.
 */
#include "shim/entry/prologue.h"
#include "shim/entry/route.h"
#include "shim/base/real.h"

GPUCAP_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                        cuuint64_t flags) {
  HOOK_PROLOGUE_OR(CUDA_ERROR_NOT_SUPPORTED, real.cuGetProcAddress);
  CUresult rc = real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
  if (rc == CUDA_SUCCESS && symbol && pfn && *pfn) {
    *pfn = route_answer(symbol, cudaVersion, flags, *pfn);
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                           cuuint64_t flags,
                                           CUdriverProcAddressQueryResult *symbolStatus) {
  HOOK_PROLOGUE_OR(CUDA_ERROR_NOT_SUPPORTED, real.cuGetProcAddress_v2);
  CUresult rc = real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (rc == CUDA_SUCCESS && symbol && pfn && *pfn) {
    *pfn = route_answer(symbol, cudaVersion, flags, *pfn);
  }
  return rc;
}
