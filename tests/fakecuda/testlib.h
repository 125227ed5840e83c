/* What the fake driver's memory tests share: sizes, a checked-call shorthand and the device
 * memory in use as the fake's cuMemGetInfo_v2 reports it. Header-only; include after tap.h. */
#ifndef GPUCAP_TESTS_FAKECUDA_TESTLIB_H
#define GPUCAP_TESTS_FAKECUDA_TESTLIB_H

#include "shim/base/cudadefs.h"
#include "tests/tap.h"

#include <stddef.h>

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)
#define CK(call) TAP_EQ((call), CUDA_SUCCESS, "%s", #call)

/* Device memory in use on the current context's device: total - free. */
__attribute__((unused)) static size_t used(void) {
  size_t fr = 0, tot = 0;
  cuMemGetInfo_v2(&fr, &tot);
  return tot - fr;
}

#endif
