/* The allocation properties of plain device memory for cuMemCreate and its granularity query,
 * shared by the test programs. Header only. */
#ifndef GPUCAP_TESTS_PINNED_H
#define GPUCAP_TESTS_PINNED_H

#include "shim/base/cudadefs.h"

#include <string.h>

/* Pinned (device-resident) memory located on device dev, no shareable handle. */
static inline CUmemAllocationProp pinned_prop(int dev) {
  CUmemAllocationProp p;
  memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  return p;
}

#endif
