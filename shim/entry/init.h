/* gpucap's lazy start, in the order it needs: the driver adopted (shim/base/real.h), then the
 * settings loaded (shim/base/settings.h), at the first CUDA call that reaches gpucap, never from a
 * constructor. Every hook begins here (shim/entry/prologue.h), and so does the dlsym hook once a
 * lookup landed in a driver. Thread-safe; after the first success, one atomic load.
 */
#ifndef GPUCAP_SHIM_INIT_H
#define GPUCAP_SHIM_INIT_H

#include <stdbool.h>

/* True iff the driver is adopted (adopting the driver object that holds addr, or, with addr
 * NULL, libcuda.so.1: see real_driver_ready) and the settings are loaded, so that the first
 * message gpucap prints already obeys GPUCAP_VERBOSE. */
bool init_ready(const void *addr);

#endif
