/* Tensor Memory Access descriptors of the fake driver: cuTensorMapEncodeTiled and
 * cuTensorMapReplaceAddress (cuBLAS 12.x/13.x encodes them when it creates a handle on a
 * compute capability 9.0 device). Each call checks every requirement cuda.h lists and writes the
 * fake's own 128-byte encoding: the global address in the first quadword (where a kernel
 * launch's parameter scan finds it, so a kernel given the descriptor touches the tensor's
 * memory) and the address alignment the layout requires in the second; the rest is zero. The
 * real encoding is opaque. Runs under fk.lock.
 */
#include <stdint.h>
#include <string.h>

#include "tests/fakecuda/fk.h"

#define TM_MAX_RANK 5
#define TM_MAX_BOX 256
#define TM_MAX_ELEMENT_STRIDE 8
#define TM_MAX_DIM ((uint64_t)1 << 32)
#define TM_MAX_STRIDE ((uint64_t)1 << 40)

/* Bytes of one element; 0 for the packed types, whose sizes are counted in bits. */
static unsigned element_bytes(CUtensorMapDataType t) {
  switch (t) {
  case CU_TENSOR_MAP_DATA_TYPE_UINT8:
    return 1;
  case CU_TENSOR_MAP_DATA_TYPE_UINT16:
  case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
  case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
    return 2;
  case CU_TENSOR_MAP_DATA_TYPE_UINT32:
  case CU_TENSOR_MAP_DATA_TYPE_INT32:
  case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
  case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
  case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
  case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
    return 4;
  case CU_TENSOR_MAP_DATA_TYPE_UINT64:
  case CU_TENSOR_MAP_DATA_TYPE_INT64:
  case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
    return 8;
  default:
    return 0;
  }
}

static int is_float(CUtensorMapDataType t) {
  return t == CU_TENSOR_MAP_DATA_TYPE_FLOAT16 || t == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 ||
         t == CU_TENSOR_MAP_DATA_TYPE_FLOAT64 || t == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 ||
         t == CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ || t == CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 ||
         t == CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ;
}

/* The two packed types that lay 16 values out in 16 bytes. */
static int is_packed16(CUtensorMapDataType t) {
  return t == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B || t == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B;
}

/* The span a swizzle mode shuffles within (the most the box's inner dimension may take). */
static unsigned swizzle_span(CUtensorMapSwizzle s) {
  switch (s) {
  case CU_TENSOR_MAP_SWIZZLE_32B:
    return 32;
  case CU_TENSOR_MAP_SWIZZLE_64B:
    return 64;
  default:
    return 128;
  }
}

/* The swizzle modes a packed type supports (cuda.h lists them). */
static int swizzle_allowed(CUtensorMapDataType t, CUtensorMapSwizzle s) {
  if (t == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B) {
    return s == CU_TENSOR_MAP_SWIZZLE_NONE || s == CU_TENSOR_MAP_SWIZZLE_128B ||
           s == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B || s == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B;
  }
  if (t == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B) {
    return s == CU_TENSOR_MAP_SWIZZLE_NONE || s == CU_TENSOR_MAP_SWIZZLE_128B ||
           s == CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B;
  }
  return 1;
}

/* The alignment the global address and the strides need for this layout. */
static unsigned address_align(CUtensorMapDataType t, CUtensorMapInterleave il) {
  return il == CU_TENSOR_MAP_INTERLEAVE_32B || is_packed16(t) ? 32 : 16;
}

static int enums_valid(CUtensorMapDataType t, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                       CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  return (unsigned)t <= CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B &&
         (unsigned)il <= CU_TENSOR_MAP_INTERLEAVE_32B &&
         (unsigned)sw <= CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B &&
         (unsigned)l2 <= CU_TENSOR_MAP_L2_PROMOTION_L2_256B &&
         (unsigned)oob <= CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
}

/* Every requirement of cuTensorMapEncodeTiled's documentation; 1 when they all hold. */
static int tiled_valid(CUtensorMapDataType t, cuuint32_t rank, uintptr_t addr,
                       const cuuint64_t *dim, const cuuint64_t *stride, const cuuint32_t *box,
                       const cuuint32_t *estride, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                       CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  if (!enums_valid(t, il, sw, l2, oob) || rank == 0 || rank > TM_MAX_RANK ||
      (il != CU_TENSOR_MAP_INTERLEAVE_NONE && rank < 3) || dim == NULL || box == NULL ||
      estride == NULL || (rank > 1 && stride == NULL)) {
    return 0;
  }
  unsigned align = address_align(t, il);
  if (addr % align != 0) {
    return 0;
  }
  for (cuuint32_t i = 0; i < rank; i++) {
    if (dim[i] == 0 || dim[i] > TM_MAX_DIM || box[i] == 0 || box[i] > TM_MAX_BOX ||
        estride[i] == 0 || estride[i] > TM_MAX_ELEMENT_STRIDE) {
      return 0;
    }
    if (i + 1 < rank && (stride[i] % align != 0 || stride[i] >= TM_MAX_STRIDE)) {
      return 0;
    }
  }
  if ((is_packed16(t) && dim[0] % 128 != 0) ||
      (t == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B && dim[0] % 2 != 0) ||
      (is_packed16(t) && box[0] != 128) || !swizzle_allowed(t, sw) ||
      (t == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B && il != CU_TENSOR_MAP_INTERLEAVE_NONE) ||
      (il == CU_TENSOR_MAP_INTERLEAVE_32B && sw != CU_TENSOR_MAP_SWIZZLE_32B) ||
      (oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA && !is_float(t))) {
    return 0;
  }
  /* The box's inner dimension in bytes (the packed types: 16 values per 8 or 16 bytes). */
  unsigned long long inner = (unsigned long long)box[0] * element_bytes(t);
  if (t == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B) {
    inner = box[0] / 2;
  } else if (is_packed16(t)) {
    inner = box[0];
  }
  if (il == CU_TENSOR_MAP_INTERLEAVE_NONE &&
      (inner % 16 != 0 || (sw != CU_TENSOR_MAP_SWIZZLE_NONE && inner > swizzle_span(sw)))) {
    return 0;
  }
  return 1;
}

static CUresult encode_tiled(CUtensorMap *map, CUtensorMapDataType t, cuuint32_t rank, void *addr,
                             const cuuint64_t *dim, const cuuint64_t *stride, const cuuint32_t *box,
                             const cuuint32_t *estride, CUtensorMapInterleave il,
                             CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
                             CUtensorMapFloatOOBfill oob) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (map == NULL || (uintptr_t)map % 64 != 0 ||
      !tiled_valid(t, rank, (uintptr_t)addr, dim, stride, box, estride, il, sw, l2, oob)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  memset(map, 0, sizeof *map);
  map->opaque[0] = (cuuint64_t)(uintptr_t)addr;
  map->opaque[1] = address_align(t, il);
  return CUDA_SUCCESS;
}

/* A new address under the alignment the descriptor's layout requires (16 bytes for a
 * descriptor this driver did not encode). */
static CUresult replace_address(CUtensorMap *map, void *addr) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (map == NULL || (uintptr_t)map % 64 != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  cuuint64_t align = map->opaque[1] == 32 ? 32 : 16;
  if ((uintptr_t)addr % align != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  map->opaque[0] = (cuuint64_t)(uintptr_t)addr;
  return CUDA_SUCCESS;
}

FK_API CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
                                       cuuint32_t tensorRank, void *globalAddress,
                                       const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
                                       const cuuint32_t *boxDim, const cuuint32_t *elementStrides,
                                       CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                       CUtensorMapL2promotion l2Promotion,
                                       CUtensorMapFloatOOBfill oobFill) {
  FK_BODY(FK_NEED_INIT, encode_tiled(tensorMap, tensorDataType, tensorRank, globalAddress,
                                     globalDim, globalStrides, boxDim, elementStrides, interleave,
                                     swizzle, l2Promotion, oobFill));
}

FK_API CUresult cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress) {
  FK_BODY(FK_NEED_INIT, replace_address(tensorMap, globalAddress));
}
