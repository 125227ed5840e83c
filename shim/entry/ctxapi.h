/* What gpucap knows of each device's primary context, learnt from the program's own
 * cuDevicePrimaryCtxRetain calls (every program, cudart included, gets a primary context only
 * that way), so no probe of gpucap's own ever retains, releases or creates one.
 * Lock-free (atomics); thread-safe.
 */
#ifndef GPUCAP_SHIM_CTXAPI_H
#define GPUCAP_SHIM_CTXAPI_H

#include "shim/base/cudadefs.h"

/* Device dev's primary context as the last successful retain returned it, or NULL when none
 * was retained since the last time the driver destroyed it (last release) or dev is out of
 * range. */
CUcontext ctxapi_primary(int dev);

#endif
