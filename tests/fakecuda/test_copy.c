/* TAP test of the fake driver's shaped copies on two 256 MiB devices with host backing: 2D and
 * 3D copies between host, device and CUDA arrays (bytes, pitches, offsets and the checks
 * cuda.h documents), 2D memsets, synchronous copies that stay pending between device memory
 * (reused too early, they corrupt data as on a GPU), and peer copies between the devices.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/tap.h"
#include "tests/fakecuda/testlib.h"

static CUcontext ctx[2];

static unsigned char at(size_t x, size_t y, size_t z) {
  return (unsigned char)(x * 7 + y * 13 + z * 29 + 1);
}

/* A 2D copy of w x h bytes between linear operands: host pointers or device addresses. */
static CUDA_MEMCPY2D copy2d(CUmemorytype st, uintptr_t src, size_t spitch, CUmemorytype dt,
                            uintptr_t dst, size_t dpitch, size_t w, size_t h) {
  CUDA_MEMCPY2D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = st;
  c.srcHost = st == CU_MEMORYTYPE_HOST ? (const void *)src : NULL;
  c.srcDevice = st == CU_MEMORYTYPE_HOST ? 0 : (CUdeviceptr)src;
  c.srcPitch = spitch;
  c.dstMemoryType = dt;
  c.dstHost = dt == CU_MEMORYTYPE_HOST ? (void *)dst : NULL;
  c.dstDevice = dt == CU_MEMORYTYPE_HOST ? 0 : (CUdeviceptr)dst;
  c.dstPitch = dpitch;
  c.WidthInBytes = w;
  c.Height = h;
  return c;
}

static void two_d(void) {
  enum { W = 300, H = 40 };
  static unsigned char host[W * H], back[W * H];
  for (size_t y = 0; y < H; y++) {
    for (size_t x = 0; x < W; x++) {
      host[y * W + x] = at(x, y, 0);
    }
  }
  CUdeviceptr d = 0;
  size_t pitch = 0;
  CK(cuMemAllocPitch_v2(&d, &pitch, W, H, 4));
  CUDA_MEMCPY2D c =
      copy2d(CU_MEMORYTYPE_HOST, (uintptr_t)host, W, CU_MEMORYTYPE_DEVICE, d, pitch, W, H);
  CK(cuMemcpy2D_v2(&c));
  const unsigned char *dev = (const unsigned char *)(uintptr_t)d;
  tap_ok(dev[pitch * 5 + 7] == at(7, 5, 0) && dev[pitch * (H - 1) + W - 1] == at(W - 1, H - 1, 0),
         "host to device: each row at the pitch");
  /* A window: 100 x 10 from (20, 3) of the device to (0, 0) of the host. */
  CUDA_MEMCPY2D w =
      copy2d(CU_MEMORYTYPE_UNIFIED, d, pitch, CU_MEMORYTYPE_HOST, (uintptr_t)back, 100, 100, 10);
  w.srcXInBytes = 20;
  w.srcY = 3;
  CK(cuMemcpy2DUnaligned_v2(&w));
  tap_ok(back[0] == at(20, 3, 0) && back[9 * 100 + 99] == at(119, 12, 0), "a window, unified");

  CUDA_MEMCPY2D bad = c;
  bad.dstPitch = W - 1;
  TAP_EQ(cuMemcpy2D_v2(&bad), CUDA_ERROR_INVALID_VALUE, "pitch below the width");
  bad = c;
  bad.dstXInBytes = pitch - W + 1;
  TAP_EQ(cuMemcpy2D_v2(&bad), CUDA_ERROR_INVALID_VALUE, "X + width past the pitch");
  bad = c;
  bad.dstY = 1;
  TAP_EQ(cuMemcpy2D_v2(&bad), CUDA_ERROR_INVALID_VALUE, "rows past the allocation");
  bad = copy2d(CU_MEMORYTYPE_DEVICE, (uintptr_t)host, W, CU_MEMORYTYPE_HOST, (uintptr_t)back, W, W,
               H);
  TAP_EQ(cuMemcpy2D_v2(&bad), CUDA_ERROR_INVALID_VALUE, "DEVICE type for host memory");
  bad.srcMemoryType = (CUmemorytype)9;
  TAP_EQ(cuMemcpy2D_v2(&bad), CUDA_ERROR_INVALID_VALUE, "memory type 9");
  TAP_EQ(cuMemcpy2D_v2(NULL), CUDA_ERROR_INVALID_VALUE, "NULL parameters");
  bad = c;
  bad.Height = 0;
  CK(cuMemcpy2D_v2(&bad));

  /* 2D memset of a column band; D16 needs aligned rows. */
  CK(cuMemsetD2D8_v2(d + 10, pitch, 0xab, 5, H));
  CK(cuCtxSynchronize());
  tap_ok(dev[10] == 0xab && dev[pitch * (H - 1) + 14] == 0xab && dev[15] == at(15, 0, 0) &&
             dev[9] == at(9, 0, 0),
         "cuMemsetD2D8 writes only its band");
  TAP_EQ(cuMemsetD2D16_v2(d + 1, pitch, 1, 4, 2), CUDA_ERROR_INVALID_VALUE, "D16 misaligned");
  TAP_EQ(cuMemsetD2D32_v2(d, 8, 1, 4, 2), CUDA_ERROR_INVALID_VALUE, "pitch below the width");
  CK(cuMemsetD2D32Async(d, pitch, 0x01020304, W / 4, H, NULL));
  TAP_EQ(fakecudaPendingWork(), H, "an asynchronous 2D memset is one item per row");
  CK(cuCtxSynchronize());
  uint32_t v;
  memcpy(&v, dev + pitch * 7 + 8, 4);
  TAP_EQ(v, 0x01020304u, "cuMemsetD2D32Async");

  /* Device to device stays pending: the source rewritten before a sync is what arrives. */
  CUdeviceptr e = 0;
  size_t epitch = 0;
  CK(cuMemAllocPitch_v2(&e, &epitch, W, H, 4));
  CUDA_MEMCPY2D dd = copy2d(CU_MEMORYTYPE_DEVICE, d, pitch, CU_MEMORYTYPE_DEVICE, e, epitch, W, H);
  CK(cuMemcpy2D_v2(&dd));
  TAP_EQ(fakecudaPendingWork(), H, "a device-to-device 2D copy is queued, one item per row");
  memset((void *)(uintptr_t)d, 0x77, pitch * H); /* the host writes the source meanwhile */
  CK(cuCtxSynchronize());
  tap_ok(((unsigned char *)(uintptr_t)e)[epitch * 3] == 0x77,
         "a queued copy reads its source when it runs");
  CK(cuMemFree_v2(d));
  CK(cuMemFree_v2(e));
}

static void three_d_and_arrays(void) {
  enum { X = 64, Y = 8, Z = 5 };
  static unsigned char host[X * Y * Z], back[X * Y * Z];
  for (size_t z = 0; z < Z; z++) {
    for (size_t y = 0; y < Y; y++) {
      for (size_t x = 0; x < X; x++) {
        host[(z * Y + y) * X + x] = at(x, y, z);
      }
    }
  }
  CUarray a = NULL;
  CUDA_ARRAY3D_DESCRIPTOR desc = {X / 4, Y, Z, CU_AD_FORMAT_FLOAT, 1, 0};
  CK(cuArray3DCreate_v2(&a, &desc));
  CUDA_MEMCPY3D up;
  memset(&up, 0, sizeof up);
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = host;
  up.srcPitch = X;
  up.srcHeight = Y;
  up.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  up.dstArray = a;
  up.WidthInBytes = X;
  up.Height = Y;
  up.Depth = Z;
  CK(cuMemcpy3D_v2(&up));
  /* Slice 2..3, rows 1..6, bytes 8..39 of the array to a pitched device buffer. */
  CUdeviceptr d = 0;
  CK(cuMemAlloc_v2(&d, 64 * 6 * 2));
  CUDA_MEMCPY3D mid;
  memset(&mid, 0, sizeof mid);
  mid.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  mid.srcArray = a;
  mid.srcXInBytes = 8;
  mid.srcY = 1;
  mid.srcZ = 2;
  mid.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  mid.dstDevice = d;
  mid.dstPitch = 64;
  mid.dstHeight = 6;
  mid.WidthInBytes = 32;
  mid.Height = 6;
  mid.Depth = 2;
  CK(cuMemcpy3D_v2(&mid));
  const unsigned char *dev = (const unsigned char *)(uintptr_t)d;
  tap_ok(dev[0] == at(8, 1, 2) && dev[64 * 6 + 64 * 5 + 31] == at(39, 6, 3),
         "array to device: the box at its offsets");
  CUDA_MEMCPY3D down = up;
  down.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  down.srcArray = a;
  down.srcHost = NULL;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = back;
  down.dstPitch = X;
  down.dstHeight = Y;
  down.dstArray = NULL;
  CK(cuMemcpy3DAsync_v2(&down, NULL));
  tap_ok(memcmp(host, back, sizeof host) == 0, "host to array and back, every byte");

  CUDA_MEMCPY3D bad = mid;
  bad.srcXInBytes = 2;
  TAP_EQ(cuMemcpy3D_v2(&bad), CUDA_ERROR_INVALID_VALUE, "X not a multiple of the element size");
  bad = mid;
  bad.srcZ = 4;
  TAP_EQ(cuMemcpy3D_v2(&bad), CUDA_ERROR_INVALID_VALUE, "slices past the array");
  bad = mid;
  bad.WidthInBytes = 60;
  TAP_EQ(cuMemcpy3D_v2(&bad), CUDA_ERROR_INVALID_VALUE, "bytes past the array's row");
  bad = mid;
  bad.dstHeight = 5;
  TAP_EQ(cuMemcpy3D_v2(&bad), CUDA_ERROR_INVALID_VALUE, "slice height below the height");
  bad = mid;
  bad.srcLOD = 1;
  TAP_EQ(cuMemcpy3D_v2(&bad), CUDA_ERROR_INVALID_VALUE, "LOD 1");
  bad = mid;
  bad.reserved0 = &bad;
  TAP_EQ(cuMemcpy3D_v2(&bad), CUDA_ERROR_INVALID_VALUE, "reserved0 not NULL");
  CK(cuArrayDestroy(a));
  TAP_EQ(cuMemcpy3D_v2(&mid), CUDA_ERROR_INVALID_HANDLE, "a destroyed array");
  CUDA_ARRAY3D_DESCRIPTOR deferred = desc;
  deferred.Flags = CUDA_ARRAY3D_DEFERRED_MAPPING;
  CK(cuArray3DCreate_v2(&a, &deferred));
  bad = up;
  bad.dstArray = a;
  TAP_EQ(cuMemcpy3D_v2(&bad), CUDA_ERROR_INVALID_VALUE, "a deferred-mapping array (unmapped)");
  CK(cuArrayDestroy(a));
  CK(cuMemFree_v2(d));
}

static void peer(void) {
  CUdeviceptr d0 = 0, d1 = 0;
  CK(cuMemAlloc_v2(&d0, MiB));
  CK(cuCtxPushCurrent_v2(ctx[1]));
  CK(cuMemAlloc_v2(&d1, MiB));
  CK(cuCtxPopCurrent_v2(&(CUcontext){0}));
  CK(cuMemsetD8Async(d0, 0x3c, MiB, NULL));
  TAP_EQ(fakecudaPendingWork(), 1, "a memset queued on device 0");
  CK(cuMemcpyPeer(d1, ctx[1], d0, ctx[0], MiB));
  TAP_EQ(fakecudaPendingWork(), 0, "cuMemcpyPeer waits for the work of both contexts");
  tap_ok(((unsigned char *)(uintptr_t)d1)[MiB - 1] == 0x3c, "the bytes arrived on device 1");
  TAP_EQ(cuMemcpyPeer(d1, NULL, d0, ctx[0], MiB), CUDA_ERROR_INVALID_CONTEXT, "NULL context");
  TAP_EQ(cuMemcpyPeer(d1, ctx[1], d0, ctx[0], 2 * MiB), CUDA_ERROR_INVALID_VALUE,
         "past the allocations");
  CK(cuMemcpyPeerAsync(d0, ctx[0], d1, ctx[1], MiB, NULL));
  TAP_EQ(fakecudaPendingWork(), 1, "cuMemcpyPeerAsync is queued on its stream");
  CK(cuCtxSynchronize());
  CK(cuMemFree_v2(d0));
  CK(cuCtxPushCurrent_v2(ctx[1]));
  CK(cuMemFree_v2(d1));
  CK(cuCtxPopCurrent_v2(&(CUcontext){0}));
}

int main(void) {
  setenv("FAKECUDA_DRIVER_MEMORY", "off", 1); /* exact figures: test_driver.c has the driver's */
  setenv("FAKECUDA_BACKING", "1", 1);
  setenv("FAKECUDA_MEMORY", "256MiB", 1);
  setenv("FAKECUDA_DEVICES", "2", 1);
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx[0], 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx[1], 1) != CUDA_SUCCESS || cuCtxSetCurrent(ctx[0])) {
    tap_ok(0, "setup");
    return tap_done();
  }
  two_d();
  three_d_and_arrays();
  peer();
  TAP_EQ(used(), 0, "no device memory left in use");
  TAP_EQ(fakecudaHazards(), 0, "no hazards");
  TAP_EQ(fakecudaCalls("cuMemcpy2D_v2") > 0, 1, "the calls are counted");
  cuDevicePrimaryCtxRelease_v2(0);
  cuDevicePrimaryCtxRelease_v2(1);
  return tap_done();
}
