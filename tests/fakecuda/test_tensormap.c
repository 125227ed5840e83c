/* TAP test of the fake driver's Tensor Memory Access descriptors: cuTensorMapEncodeTiled accepts
 * what cuda.h allows (the shape cuBLAS encodes for a GEMM tile) and refuses each requirement it
 * lists with CUDA_ERROR_INVALID_VALUE, writing nothing; a descriptor passed to a kernel makes the
 * launch touch the tensor's memory; cuTensorMapReplaceAddress keeps the layout's alignment.
 */
#include <stdint.h>
#include <string.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/fakecuda/testlib.h"
#include "tests/tap.h"

/* A 2D float tensor of 256 x 128 with 64 x 32 boxes: the kind of tile cuBLAS encodes. */
struct tile {
  CUtensorMapDataType type;
  cuuint32_t rank;
  CUdeviceptr addr;
  cuuint64_t dim[5], stride[4];
  cuuint32_t box[5], estride[5];
  CUtensorMapInterleave il;
  CUtensorMapSwizzle sw;
  CUtensorMapL2promotion l2;
  CUtensorMapFloatOOBfill oob;
};

static struct tile tile_of(CUdeviceptr a) {
  struct tile t = {.type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                   .rank = 2,
                   .addr = a,
                   .dim = {256, 128},
                   .stride = {256 * 4},
                   .box = {32, 32},
                   .estride = {1, 1},
                   .il = CU_TENSOR_MAP_INTERLEAVE_NONE,
                   .sw = CU_TENSOR_MAP_SWIZZLE_128B,
                   .l2 = CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                   .oob = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE};
  return t;
}

static CUresult encode(CUtensorMap *m, const struct tile *t) {
  return cuTensorMapEncodeTiled(m, t->type, t->rank, (void *)(uintptr_t)t->addr, t->dim, t->stride,
                                t->box, t->estride, t->il, t->sw, t->l2, t->oob);
}

/* Encoding t must fail with INVALID_VALUE and leave the descriptor untouched. */
static void refused(CUtensorMap *m, const struct tile *t, const char *why) {
  memset(m, 0xa5, sizeof *m);
  TAP_EQ(encode(m, t), CUDA_ERROR_INVALID_VALUE, "refused: %s", why);
  tap_ok(m->opaque[0] == 0xa5a5a5a5a5a5a5a5ULL, "... nothing written");
}

static void requirements(CUdeviceptr a) {
  static CUtensorMap m;
  struct tile t = tile_of(a);
  CK(encode(&m, &t));
  tap_ok(m.opaque[0] == a, "the descriptor holds the tensor's address");

  t = tile_of(a + 8);
  refused(&m, &t, "an address not 16-byte aligned");
  t = tile_of(a);
  t.rank = 0;
  refused(&m, &t, "rank 0");
  t.rank = 6;
  refused(&m, &t, "rank 6");
  t = tile_of(a);
  t.il = CU_TENSOR_MAP_INTERLEAVE_16B;
  refused(&m, &t, "an interleaved layout of rank 2");
  t = tile_of(a);
  t.dim[1] = 0;
  refused(&m, &t, "an empty dimension");
  t = tile_of(a);
  t.stride[0] = 1000;
  refused(&m, &t, "a stride not a multiple of 16");
  t.stride[0] = (cuuint64_t)1 << 40;
  refused(&m, &t, "a stride of 2^40");
  t = tile_of(a);
  t.box[1] = 257;
  refused(&m, &t, "a box of 257");
  t = tile_of(a);
  t.box[0] = 2;
  t.sw = CU_TENSOR_MAP_SWIZZLE_NONE;
  refused(&m, &t, "an inner box of 8 bytes (not a multiple of 16)");
  t = tile_of(a);
  t.sw = CU_TENSOR_MAP_SWIZZLE_64B;
  refused(&m, &t, "an inner box of 128 bytes under a 64-byte swizzle");
  t = tile_of(a);
  t.estride[1] = 9;
  refused(&m, &t, "an element stride of 9");
  t = tile_of(a);
  t.type = CU_TENSOR_MAP_DATA_TYPE_INT32;
  t.oob = CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
  refused(&m, &t, "a NaN fill of integers");
  t = tile_of(a);
  t.type = (CUtensorMapDataType)16;
  refused(&m, &t, "an unknown data type");
  t = tile_of(a);
  t.rank = 3;
  t.dim[2] = 4;
  t.stride[1] = 256 * 128 * 4;
  t.box[2] = 1;
  t.estride[2] = 1;
  t.il = CU_TENSOR_MAP_INTERLEAVE_32B;
  t.sw = CU_TENSOR_MAP_SWIZZLE_64B;
  refused(&m, &t, "a 32-byte interleave without the 32-byte swizzle");
  t.sw = CU_TENSOR_MAP_SWIZZLE_32B;
  CK(encode(&m, &t));
  TAP_EQ(cuTensorMapReplaceAddress(&m, (void *)(uintptr_t)(a + 16)), CUDA_ERROR_INVALID_VALUE,
         "a 32-byte interleaved layout keeps its 32-byte address alignment");
  CK(cuTensorMapReplaceAddress(&m, (void *)(uintptr_t)(a + 32)));
  tap_ok(m.opaque[0] == a + 32, "... and takes an aligned one");
  char raw[sizeof(CUtensorMap) + 64];
  CUtensorMap *odd = (CUtensorMap *)(void *)(((uintptr_t)raw + 63) / 64 * 64 + 32);
  t = tile_of(a);
  TAP_EQ(encode(odd, &t), CUDA_ERROR_INVALID_VALUE, "a descriptor not 64-byte aligned");
  TAP_EQ(encode(NULL, &t), CUDA_ERROR_INVALID_VALUE, "no descriptor");
}

/* A kernel given the descriptor (a 128-byte parameter) touches the tensor's memory. */
static void launch(CUdeviceptr a) {
  static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                            ".visible .entry tma(.param .align 64 .b8 map[128]) { ret; }\n";
  CUmodule mod;
  CUfunction f;
  CK(cuModuleLoadData(&mod, ptx));
  CK(cuModuleGetFunction(&f, mod, "tma"));
  static CUtensorMap m;
  struct tile t = tile_of(a);
  CK(encode(&m, &t));
  void *args[] = {&m};
  CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
  TAP_EQ(fakecudaClaim(a, 4), 1, "a launch with the descriptor is pending work on the tensor");
  CK(cuCtxSynchronize());
  CK(cuModuleUnload(mod));
}

int main(void) {
  CUcontext ctx;
  CUdeviceptr a;
  static CUtensorMap m;
  struct tile t = tile_of(0x10000);
  TAP_EQ(encode(&m, &t), CUDA_ERROR_NOT_INITIALIZED, "before cuInit");
  CK(cuInit(0));
  TAP_EQ(encode(&m, &t), CUDA_ERROR_INVALID_CONTEXT, "without a current context");
  CK(cuCtxCreate_v2(&ctx, 0, 0));
  CK(cuMemAlloc_v2(&a, 256 * 128 * 4));
  requirements(a);
  launch(a);
  CK(cuMemFree_v2(a));
  CK(cuCtxDestroy_v2(ctx));
  return tap_done();
}
