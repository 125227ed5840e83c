/* Pointer identity for pooled blocks. The driver describes a pooled block as part of its pool
 * region, so cuMemGetAddressRange_v2 and the RANGE_START_ADDR / RANGE_SIZE pointer attributes
 * are answered for the block the program allocated (its base and the size it asked for); an
 * address inside a pool region that the program does not hold is answered as unknown memory.
 * A block opened from another gpucap process (shim/entry/ipc.h) is described the same way.
 */
#include "shim/entry/prologue.h"
#include "shim/entry/ipc.h"
#include "shim/context/ctx.h"
#include "shim/base/real.h"

/* Where addr lies: a pooled block or an imported one (CTX_BLOCK, with its base and size),
 * pool memory nobody holds, or elsewhere. */
static enum ctx_where locate(uint64_t addr, uint64_t *base, uint64_t *size) {
  enum ctx_where where = ctx_block(addr, base, size);
  if (where == CTX_OUTSIDE && ipc_imported_block(addr, base, size)) {
    where = CTX_BLOCK;
  }
  return where;
}

GPUCAP_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize,
                                               CUdeviceptr dptr) {
  uint64_t base, size;
  HOOK_PROLOGUE(real.cuMemGetAddressRange_v2);
  switch (locate(dptr, &base, &size)) {
  case CTX_BLOCK:
    if (pbase) {
      *pbase = base;
    }
    if (psize) {
      *psize = size;
    }
    return CUDA_SUCCESS;
  case CTX_NOT_HELD:
    return CUDA_ERROR_NOT_FOUND; /* what the driver answers for memory nobody allocated */
  default:
    return real.cuMemGetAddressRange_v2(pbase, psize, dptr);
  }
}

/* Rewrites one attribute value for a pooled address; returns false when it is not a range
 * attribute (the driver's answer stands). */
static bool patch(CUpointer_attribute attribute, void *data, enum ctx_where where, uint64_t base,
                  uint64_t size) {
  if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) {
    *(CUdeviceptr *)data = where == CTX_BLOCK ? base : 0;
    return true;
  }
  if (attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE) {
    *(size_t *)data = where == CTX_BLOCK ? (size_t)size : 0;
    return true;
  }
  return false;
}

GPUCAP_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                             CUdeviceptr ptr) {
  uint64_t base, size;
  HOOK_PROLOGUE(real.cuPointerGetAttribute);
  enum ctx_where where = locate(ptr, &base, &size);
  if (where == CTX_NOT_HELD) {
    return CUDA_ERROR_INVALID_VALUE; /* the driver's answer for memory nobody allocated */
  }
  CUresult rc = real.cuPointerGetAttribute(data, attribute, ptr);
  if (rc == CUDA_SUCCESS && where == CTX_BLOCK && data) {
    patch(attribute, data, where, base, size);
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                              CUpointer_attribute *attributes, void **data,
                                              CUdeviceptr ptr) {
  uint64_t base, size;
  HOOK_PROLOGUE(real.cuPointerGetAttributes);
  enum ctx_where where = locate(ptr, &base, &size);
  if (where == CTX_NOT_HELD) {
    /* Memory nobody holds: the driver's answer for an address it knows nothing of (its
     * defaults, unknown memory type, device ordinal -2), never the pool region's. */
    return real.cuPointerGetAttributes(numAttributes, attributes, data, 0);
  }
  CUresult rc = real.cuPointerGetAttributes(numAttributes, attributes, data, ptr);
  if (rc == CUDA_SUCCESS && where != CTX_OUTSIDE && attributes && data) {
    for (unsigned int i = 0; i < numAttributes; i++) {
      if (data[i]) {
        patch(attributes[i], data[i], where, base, size);
      }
    }
  }
  return rc;
}
