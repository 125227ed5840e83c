/* The real functions behind gpucap's hooks: glibc's dlsym and the driver's entry points.
 *
 * The driver is never a link-time dependency. It is adopted lazily: the object that the first
 * intercepted dlsym() resolved a hooked name into (what cudart dlopen'ed), else libcuda.so.1 if
 * already loaded, else a fresh dlopen("libcuda.so.1"). A process that never touches CUDA never
 * loads it. Adoption happens once; all functions here are thread-safe.
 */
#ifndef GPUCAP_SHIM_REAL_H
#define GPUCAP_SHIM_REAL_H

#include "shim/base/cudadefs.h"

#include <stdbool.h>

/* The driver's entry points that gpucap forwards to or queries. NULL until real_driver_ready()
 * has succeeded; afterwards a NULL member means the driver does not export that symbol. */
struct real_fns {
#define HOOK(base, version, pt, symbol) __typeof__(&symbol) symbol;
#include "shim/base/hooks.def"
#undef HOOK
#define REAL_EXTRA(X)                                                                              \
  X(cuCtxGetDevice)                                                                                \
  X(cuCtxGetCurrent)                                                                               \
  X(cuCtxSynchronize)                                                                              \
  X(cuDeviceGetAttribute)                                                                          \
  X(cuCtxGetLimit)                                                                                 \
  X(cuDeviceGetName)                                                                               \
  X(cuDeviceGetUuid_v2)                                                                            \
  X(cuDeviceGetPCIBusId)                                                                           \
  X(cuDevicePrimaryCtxGetState)                                                                    \
  X(cuCtxPushCurrent_v2)                                                                           \
  X(cuCtxPopCurrent_v2)                                                                            \
  X(cuCtxSetCurrent)                                                                               \
  X(cuCtxGetDevice_v2)                                                                             \
  X(cuDeviceGetCount)                                                                              \
  X(cuDeviceGetDefaultMemPool)                                                                     \
  X(cuDeviceGetMemPool)                                                                            \
  X(cuMemPoolGetAttribute)                                                                         \
  X(cuMemPoolTrimTo)                                                                               \
  X(cuStreamGetCtx)                                                                                \
  X(cuStreamSynchronize)                                                                           \
  X(cuEventCreate)                                                                                 \
  X(cuEventRecord)                                                                                 \
  X(cuEventQuery)                                                                                  \
  X(cuEventSynchronize)                                                                            \
  X(cuEventDestroy_v2)                                                                             \
  X(cuArrayGetMemoryRequirements)                                                                  \
  X(cuStreamIsCapturing)                                                                           \
  X(cuStreamIsCapturing_ptsz)                                                                      \
  X(cuGraphGetNodes)                                                                               \
  X(cuGraphNodeGetType)                                                                            \
  X(cuGraphMemAllocNodeGetParams)                                                                  \
  X(cuDeviceGetGraphMemAttribute)                                                                  \
  X(cuMipmappedArrayGetMemoryRequirements)                                                         \
  X(cuMemAddressReserve)                                                                           \
  X(cuMemAddressFree)                                                                              \
  X(cuMemSetAccess)                                                                                \
  X(cuMemGetAllocationGranularity)                                                                 \
  X(cuMemExportToShareableHandle)                                                                  \
  X(cuMemGetAllocationPropertiesFromHandle)                                                        \
  X(cuDeviceCanAccessPeer)
#define REAL_FIELD(symbol) __typeof__(&symbol) symbol;
  REAL_EXTRA(REAL_FIELD)
#undef REAL_FIELD
};
extern struct real_fns real;

/* Marks code that runs inside dlsym, which sanitizer runtimes call while they initialise:
 * such code must not be instrumented. */
#define SHIM_UNINSTRUMENTED __attribute__((no_sanitize("address", "undefined", "thread")))

/* glibc's dlsym (the GLIBC_2.34 version, else GLIBC_2.2.5), resolved on first use with dlvsym.
 * Never NULL after real_dlsym_init(); if glibc offers neither, a stand-in that returns NULL. */
extern void *(*gpucap_real_dlsym)(void *handle, const char *name);
SHIM_UNINSTRUMENTED void real_dlsym_init(void);

/* Adopts the driver object containing `addr` if no driver is adopted yet (addr may be NULL).
 * Returns true iff a driver is adopted (now or before) and its entry points are loaded.
 * Never loads a library when `addr` is non-NULL. Re-entrant calls made while a dlopen of the
 * driver is running on the same thread return false. */
bool real_driver_ready(const void *addr);

/* The adopted driver's file name ("?" when the loader does not say), or NULL before adoption. */
const char *real_driver_name(void);

/* True iff `addr` lies inside the adopted driver object. O(1) after the first call for addr's
 * object (one dladdr). */
bool real_driver_owns(const void *addr);

/* The driver's own symbol `name` (dlsym on the driver's handle), or NULL. */
void *real_driver_sym(const char *name);

#endif
