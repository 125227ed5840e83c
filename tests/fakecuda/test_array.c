/* TAP test of the fake driver's CUDA arrays and mipmapped arrays on one 1 GiB device: the
 * descriptor checks, the layout rule's device memory, descriptors, mipmap levels, deferred
 * mapping, handle validation and destruction with the owning context.
 */
#include <stdlib.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/tap.h"
#include "tests/fakecuda/testlib.h"

static CUcontext ctx;

static CUDA_ARRAY3D_DESCRIPTOR desc3(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch,
                                     unsigned flags) {
  CUDA_ARRAY3D_DESCRIPTOR d3 = {
      .Width = w, .Height = h, .Depth = d, .Format = f, .NumChannels = ch, .Flags = flags};
  return d3;
}

/* cuArray3DCreate's answer for a descriptor, destroying the array when one was made. */
static CUresult try3d(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch, unsigned fl) {
  CUDA_ARRAY3D_DESCRIPTOR d3 = desc3(w, h, d, f, ch, fl);
  CUarray a = NULL;
  CUresult rc = cuArray3DCreate_v2(&a, &d3);
  if (rc == CUDA_SUCCESS) {
    cuArrayDestroy(a);
  }
  return rc;
}

/* Device bytes a successful cuArray3DCreate takes (the array is destroyed again). */
static size_t bytes3d(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch, unsigned fl) {
  CUDA_ARRAY3D_DESCRIPTOR d3 = desc3(w, h, d, f, ch, fl);
  CUarray a = NULL;
  size_t before = used();
  if (cuArray3DCreate_v2(&a, &d3) != CUDA_SUCCESS) {
    return 0;
  }
  size_t after = used();
  cuArrayDestroy(a);
  return after - before;
}

static void checks(void) {
  CUarray a = NULL;
  CUDA_ARRAY_DESCRIPTOR d2 = {
      .Width = 16, .Height = 16, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
  CUDA_ARRAY3D_DESCRIPTOR d3 = desc3(16, 16, 0, CU_AD_FORMAT_FLOAT, 1, 0);
  TAP_EQ(cuArrayCreate_v2(NULL, &d2), CUDA_ERROR_INVALID_VALUE, "cuArrayCreate_v2 into NULL");
  TAP_EQ(cuArrayCreate_v2(&a, NULL), CUDA_ERROR_INVALID_VALUE, "cuArrayCreate_v2 of NULL");
  TAP_EQ(cuArray3DCreate_v2(NULL, &d3), CUDA_ERROR_INVALID_VALUE, "cuArray3DCreate_v2 into NULL");
  TAP_EQ(cuArray3DCreate_v2(&a, NULL), CUDA_ERROR_INVALID_VALUE, "cuArray3DCreate_v2 of NULL");
  d2.Width = 0;
  TAP_EQ(cuArrayCreate_v2(&a, &d2), CUDA_ERROR_INVALID_VALUE, "width 0");
  d2.Width = 16;
  d2.NumChannels = 3;
  TAP_EQ(cuArrayCreate_v2(&a, &d2), CUDA_ERROR_INVALID_VALUE, "3 channels");
  d2.NumChannels = 1;
  d2.Format = (CUarray_format)0x07;
  TAP_EQ(cuArrayCreate_v2(&a, &d2), CUDA_ERROR_INVALID_VALUE, "a format cuda.h does not define");
  d2.Format = CU_AD_FORMAT_BC1_UNORM;
  TAP_EQ(cuArrayCreate_v2(&a, &d2), CUDA_ERROR_NOT_SUPPORTED, "block-compressed: not modelled");
  TAP_EQ(try3d(32769, 1, 0, CU_AD_FORMAT_FLOAT, 1, 0), CUDA_ERROR_INVALID_VALUE,
         "wider than the device's limit");
  TAP_EQ(try3d(32768, 0, 0, CU_AD_FORMAT_FLOAT, 1, 0), CUDA_SUCCESS, "as wide as the limit");
  TAP_EQ(try3d(16, 0, 4, CU_AD_FORMAT_FLOAT, 1, 0), CUDA_ERROR_INVALID_VALUE,
         "width x 0 x depth without LAYERED");
  TAP_EQ(try3d(16, 16, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED), CUDA_ERROR_INVALID_VALUE,
         "LAYERED with no layers");
  TAP_EQ(try3d(16, 16, 5, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP), CUDA_ERROR_INVALID_VALUE,
         "a cubemap of 5 faces");
  TAP_EQ(try3d(16, 8, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP), CUDA_ERROR_INVALID_VALUE,
         "a cubemap with width != height");
  TAP_EQ(try3d(16, 16, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP), CUDA_SUCCESS, "a cubemap");
  TAP_EQ(try3d(16, 16, 13, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_LAYERED),
         CUDA_ERROR_INVALID_VALUE, "a layered cubemap of 13 faces");
  TAP_EQ(try3d(16, 16, 12, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_LAYERED),
         CUDA_SUCCESS, "a layered cubemap of 12 faces");
  TAP_EQ(try3d(16, 16, 4, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_TEXTURE_GATHER),
         CUDA_ERROR_INVALID_VALUE, "texture gather on a 3D array");
  TAP_EQ(try3d(16, 16, 0, CU_AD_FORMAT_FLOAT, 1, 0x200), CUDA_ERROR_INVALID_VALUE,
         "an unknown flag");
  TAP_EQ(try3d(16, 16, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_SPARSE), CUDA_ERROR_NOT_SUPPORTED,
         "sparse arrays: not supported by the device");
  TAP_EQ(try3d(32768, 32768, 0, CU_AD_FORMAT_FLOAT, 4, 0), CUDA_ERROR_OUT_OF_MEMORY,
         "16 GiB on a 1 GiB device: OUT_OF_MEMORY");
  TAP_EQ(used(), 0, "failed creations hold nothing");
}

static void layouts(void) {
  CUarray a = NULL, b = NULL;
  CUDA_ARRAY_DESCRIPTOR d2 = {
      .Width = 1000, .Height = 100, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
  CK(cuArrayCreate_v2(&a, &d2));
  TAP_EQ(used(), 4096 * 100, "1000 x 100 floats: rows of 4000 bytes padded to 4096");
  d2.Height = 0;
  CK(cuArrayCreate_v2(&b, &d2));
  TAP_EQ(used(), 4096 * 101, "a 1D array of 1000 floats: one row");
  CUDA_ARRAY_DESCRIPTOR got2;
  CUDA_ARRAY3D_DESCRIPTOR got3;
  CK(cuArrayGetDescriptor_v2(&got2, a));
  tap_ok(got2.Width == 1000 && got2.Height == 100 && got2.Format == CU_AD_FORMAT_FLOAT &&
             got2.NumChannels == 1,
         "cuArrayGetDescriptor_v2 describes it");
  CK(cuArray3DGetDescriptor_v2(&got3, b));
  tap_ok(got3.Width == 1000 && got3.Height == 0 && got3.Depth == 0 && got3.Flags == 0,
         "cuArray3DGetDescriptor_v2 of a 1D array: height and depth 0");
  TAP_EQ(cuArrayGetDescriptor_v2(NULL, a), CUDA_ERROR_INVALID_VALUE, "descriptor into NULL");
  CK(cuArrayDestroy(a));
  CK(cuArrayDestroy(b));
  TAP_EQ(used(), 0, "destroying them frees their memory");
  TAP_EQ(cuArrayDestroy(a), CUDA_ERROR_INVALID_HANDLE, "destroying it again: INVALID_HANDLE");
  TAP_EQ(cuArrayGetDescriptor_v2(&got2, a), CUDA_ERROR_INVALID_HANDLE,
         "a destroyed array has no descriptor");
  TAP_EQ(cuArrayDestroy((CUarray)&got2), CUDA_ERROR_INVALID_HANDLE, "an unknown handle");
  TAP_EQ(cuArrayDestroy(NULL), CUDA_ERROR_INVALID_HANDLE, "a NULL handle");

  TAP_EQ(bytes3d(100, 50, 10, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0), 512 * 50 * 10,
         "3D: 100 x 50 x 10 uchar4, rows of 400 bytes padded to 512");
  TAP_EQ(bytes3d(64, 64, 8, CU_AD_FORMAT_FLOAT, 2, CUDA_ARRAY3D_LAYERED), 512 * 64 * 8,
         "2D layered: 64 x 64 float2, 8 layers");
  TAP_EQ(bytes3d(300, 0, 3, CU_AD_FORMAT_HALF, 1, CUDA_ARRAY3D_LAYERED), 1024 * 3,
         "1D layered: 300 halfs, 3 layers");
  TAP_EQ(bytes3d(64, 64, 6, CU_AD_FORMAT_SIGNED_INT16, 1, CUDA_ARRAY3D_CUBEMAP), 512 * 64 * 6,
         "a cubemap: 6 faces");
  CUDA_ARRAY3D_DESCRIPTOR d3 = desc3(64, 64, 4, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_SURFACE_LDST);
  CK(cuArray3DCreate_v2(&a, &d3));
  CK(cuArray3DGetDescriptor_v2(&got3, a));
  tap_ok(got3.Width == 64 && got3.Height == 64 && got3.Depth == 4 &&
             got3.Format == CU_AD_FORMAT_FLOAT && got3.NumChannels == 1 &&
             got3.Flags == CUDA_ARRAY3D_SURFACE_LDST,
         "cuArray3DGetDescriptor_v2 returns the descriptor");
  CK(cuArrayDestroy(a));
}

static void mipmaps(void) {
  CUmipmappedArray m = NULL, m2 = NULL;
  CUarray level = NULL;
  CUDA_ARRAY3D_DESCRIPTOR d = desc3(256, 256, 0, CU_AD_FORMAT_FLOAT, 1, 0), got;
  TAP_EQ(cuMipmappedArrayCreate(NULL, &d, 3), CUDA_ERROR_INVALID_VALUE, "mipmap into NULL");
  TAP_EQ(cuMipmappedArrayCreate(&m, NULL, 3), CUDA_ERROR_INVALID_VALUE, "mipmap of NULL");
  d.NumChannels = 3;
  TAP_EQ(cuMipmappedArrayCreate(&m, &d, 3), CUDA_ERROR_INVALID_VALUE, "mipmap of 3 channels");
  d.NumChannels = 1;
  CK(cuMipmappedArrayCreate(&m, &d, 20));
  /* 256 x 256 floats, clamped to 9 levels: 1024 x 256 bytes, then 512-byte rows for
   * 128 + 64 + ... + 1 rows. */
  TAP_EQ(used(), 1024 * 256 + 512 * 255, "the sum of its 9 levels");
  CK(cuMipmappedArrayGetLevel(&level, m, 8));
  CK(cuArray3DGetDescriptor_v2(&got, level));
  tap_ok(got.Width == 1 && got.Height == 1 && got.Depth == 0, "level 8 is 1 x 1");
  TAP_EQ(cuMipmappedArrayGetLevel(&level, m, 9), CUDA_ERROR_INVALID_VALUE, "there is no level 9");
  TAP_EQ(cuMipmappedArrayGetLevel(NULL, m, 0), CUDA_ERROR_INVALID_VALUE, "level into NULL");
  CK(cuMipmappedArrayGetLevel(&level, m, 1));
  CK(cuArray3DGetDescriptor_v2(&got, level));
  tap_ok(got.Width == 128 && got.Height == 128, "level 1 is 128 x 128");
  TAP_EQ(cuArrayDestroy(level), CUDA_ERROR_INVALID_HANDLE,
         "a level cannot be destroyed on its own");
  TAP_EQ(used(), 1024 * 256 + 512 * 255, "  and its memory stays");

  d = desc3(16, 16, 4, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED);
  CK(cuMipmappedArrayCreate(&m2, &d, 0));
  TAP_EQ(cuMipmappedArrayGetLevel(&level, m2, 1), CUDA_ERROR_INVALID_VALUE,
         "0 levels asked: 1 level");
  CK(cuMipmappedArrayDestroy(m2));
  CK(cuMipmappedArrayCreate(&m2, &d, 5));
  CK(cuMipmappedArrayGetLevel(&level, m2, 4));
  CK(cuArray3DGetDescriptor_v2(&got, level));
  tap_ok(got.Width == 1 && got.Height == 1 && got.Depth == 4 && got.Flags == CUDA_ARRAY3D_LAYERED,
         "layers do not shrink with the levels");
  CK(cuMipmappedArrayDestroy(m2));

  CK(cuMipmappedArrayDestroy(m));
  TAP_EQ(used(), 0, "destroying the mipmapped array frees every level");
  TAP_EQ(cuArray3DGetDescriptor_v2(&got, level), CUDA_ERROR_INVALID_HANDLE,
         "its levels are gone with it");
  TAP_EQ(cuMipmappedArrayDestroy(m), CUDA_ERROR_INVALID_HANDLE, "destroying it again");
  TAP_EQ(cuMipmappedArrayGetLevel(&level, m, 0), CUDA_ERROR_INVALID_HANDLE,
         "no level of a destroyed mipmapped array");
}

static void deferred_mapping(void) {
  CUarray a = NULL, plain = NULL, level = NULL;
  CUmipmappedArray m = NULL;
  CUDA_ARRAY_MEMORY_REQUIREMENTS req;
  CUDA_ARRAY3D_DESCRIPTOR d =
      desc3(1024, 1024, 0, CU_AD_FORMAT_FLOAT, 4, CUDA_ARRAY3D_DEFERRED_MAPPING);
  CK(cuArray3DCreate_v2(&a, &d));
  TAP_EQ(used(), 0, "a deferred-mapping array takes no memory");
  CK(cuArrayGetMemoryRequirements(&req, a, 0));
  tap_ok(req.size == 16 * MiB && req.alignment == 2 * MiB,
         "its requirements: 16 MiB, 2 MiB aligned (%zu, %zu)", req.size, req.alignment);
  TAP_EQ(cuArrayGetMemoryRequirements(&req, a, 1), CUDA_ERROR_INVALID_VALUE, "an unknown device");
  TAP_EQ(cuArrayGetMemoryRequirements(NULL, a, 0), CUDA_ERROR_INVALID_VALUE,
         "requirements into NULL");
  d.Flags = 0;
  d.Width = 16;
  CK(cuArray3DCreate_v2(&plain, &d));
  TAP_EQ(cuArrayGetMemoryRequirements(&req, plain, 0), CUDA_ERROR_INVALID_VALUE,
         "requirements of an array without DEFERRED_MAPPING: INVALID_VALUE");
  CK(cuArrayDestroy(plain));
  CK(cuArrayDestroy(a));
  TAP_EQ(cuArrayGetMemoryRequirements(&req, a, 0), CUDA_ERROR_INVALID_VALUE,
         "requirements of a destroyed array");

  d = desc3(256, 256, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_DEFERRED_MAPPING);
  CK(cuMipmappedArrayCreate(&m, &d, 9));
  TAP_EQ(used(), 0, "a deferred-mapping mipmapped array takes no memory");
  CK(cuMipmappedArrayGetMemoryRequirements(&req, m, 0));
  TAP_EQ(req.size, 2 * MiB, "its requirements: its levels, rounded up to 2 MiB");
  CK(cuMipmappedArrayGetLevel(&level, m, 0));
  TAP_EQ(cuArrayGetMemoryRequirements(&req, level, 0), CUDA_ERROR_INVALID_VALUE,
         "a level has no requirements of its own");
  CK(cuMipmappedArrayDestroy(m));
  d.Flags = 0;
  CK(cuMipmappedArrayCreate(&m, &d, 9));
  TAP_EQ(cuMipmappedArrayGetMemoryRequirements(&req, m, 0), CUDA_ERROR_INVALID_VALUE,
         "requirements of a mipmapped array without DEFERRED_MAPPING");
  CK(cuMipmappedArrayDestroy(m));
}

static void contexts(void) {
  CUcontext c2 = NULL, popped = NULL;
  CUarray a = NULL, b = NULL;
  CUmipmappedArray m = NULL;
  CUDA_ARRAY3D_DESCRIPTOR d = desc3(512, 512, 0, CU_AD_FORMAT_FLOAT, 1, 0), got;
  CK(cuArray3DCreate_v2(&a, &d));
  CK(cuCtxPopCurrent_v2(&popped));
  TAP_EQ(cuArrayDestroy(a), CUDA_ERROR_INVALID_CONTEXT, "destroy with no current context");
  TAP_EQ(cuArray3DCreate_v2(&b, &d), CUDA_ERROR_INVALID_CONTEXT, "create with no current context");
  TAP_EQ(cuArray3DGetDescriptor_v2(&got, a), CUDA_ERROR_INVALID_CONTEXT,
         "descriptor with no current context");
  CK(cuCtxCreate_v2(&c2, 0, 0));
  CK(cuArray3DCreate_v2(&b, &d));
  CK(cuMipmappedArrayCreate(&m, &d, 3));
  CK(cuArrayDestroy(a)); /* any current context may destroy it */
  size_t held = used();
  CK(cuCtxDestroy_v2(c2));
  CK(cuCtxSetCurrent(ctx));
  TAP_EQ(used(), 0, "destroying a context frees its arrays (%zu bytes)", held);
  TAP_EQ(cuArrayDestroy(b), CUDA_ERROR_INVALID_HANDLE, "its array handles are dead");
  TAP_EQ(cuMipmappedArrayDestroy(m), CUDA_ERROR_INVALID_HANDLE, "and its mipmapped arrays");

  CK(cuArray3DCreate_v2(&a, &d));
  CK(cuDevicePrimaryCtxReset_v2(0));
  TAP_EQ(cuArrayDestroy(a), CUDA_ERROR_CONTEXT_IS_DESTROYED, "destroy in a reset context");
  CK(cuDevicePrimaryCtxRetain(&ctx, 0));
  TAP_EQ(used(), 0, "a primary context reset frees its arrays");
  TAP_EQ(cuArrayDestroy(a), CUDA_ERROR_INVALID_HANDLE, "  and the handle is dead");
  CK(cuDevicePrimaryCtxRelease_v2(0));
}

int main(void) {
  setenv("FAKECUDA_DRIVER_MEMORY", "off", 1); /* exact figures: test_driver.c has the driver's */
  CUarray a = NULL;
  CUDA_ARRAY_DESCRIPTOR d2 = {
      .Width = 16, .Height = 16, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
  setenv("FAKECUDA_MEMORY", "1GiB", 1);
  unsetenv("FAKECUDA_DEVICES");
  unsetenv("FAKECUDA_FAIL");
  TAP_EQ(cuArrayCreate_v2(&a, &d2), CUDA_ERROR_NOT_INITIALIZED, "before cuInit");
  CK(cuInit(0));
  TAP_EQ(cuArrayCreate_v2(&a, &d2), CUDA_ERROR_INVALID_CONTEXT, "before any context");
  if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    tap_ok(0, "setup");
    return tap_done();
  }
  checks();
  layouts();
  mipmaps();
  deferred_mapping();
  contexts();
  TAP_EQ(used(), 0, "no device memory left in use");
  cuDevicePrimaryCtxRelease_v2(0);
  return tap_done();
}
