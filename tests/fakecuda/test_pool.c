/* TAP test of the fake driver's stream-ordered memory pools and managed-memory hints on one
 * 1 GiB device: created pools (their checks, size limit, current pool, destruction with
 * allocations outstanding), attributes (release threshold and what a pool retains, the
 * high-water marks, read-only figures), access, trimming, a device reset; prefetch and advice.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/tap.h"
#include "tests/fakecuda/testlib.h"

static uint64_t attr(CUmemoryPool p, CUmemPool_attribute a) {
  uint64_t v = 0;
  cuMemPoolGetAttribute(p, a, &v);
  return v;
}

static CUmemPoolProps props_of(int dev) {
  CUmemPoolProps p;
  memset(&p, 0, sizeof p);
  p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  return p;
}

static void creation(void) {
  CUmemoryPool p = NULL, def = NULL, cur = NULL;
  CUmemPoolProps pr = props_of(0);
  TAP_EQ(cuMemPoolCreate(NULL, &pr), CUDA_ERROR_INVALID_VALUE, "create into NULL");
  TAP_EQ(cuMemPoolCreate(&p, NULL), CUDA_ERROR_INVALID_VALUE, "create without properties");
  pr.allocType = CU_MEM_ALLOCATION_TYPE_MANAGED;
  TAP_EQ(cuMemPoolCreate(&p, &pr), CUDA_ERROR_INVALID_VALUE, "allocation type must be PINNED");
  pr = props_of(3);
  TAP_EQ(cuMemPoolCreate(&p, &pr), CUDA_ERROR_INVALID_VALUE, "device 3 of 1");
  pr = props_of(0);
  pr.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
  TAP_EQ(cuMemPoolCreate(&p, &pr), CUDA_ERROR_INVALID_VALUE, "HOST_NUMA_CURRENT location");
  pr.location.type = CU_MEM_LOCATION_TYPE_HOST;
  TAP_EQ(cuMemPoolCreate(&p, &pr), CUDA_ERROR_NOT_SUPPORTED, "host pools are not modelled");
  pr = props_of(0);
  pr.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  TAP_EQ(cuMemPoolCreate(&p, &pr), CUDA_ERROR_NOT_SUPPORTED,
         "shareable pools: the device reports no handle types");
  pr = props_of(0);
  pr.reserved[53] = 1;
  TAP_EQ(cuMemPoolCreate(&p, &pr), CUDA_ERROR_INVALID_VALUE, "reserved bytes must be 0");
  pr = props_of(0);
  pr.usage = 0x4;
  TAP_EQ(cuMemPoolCreate(&p, &pr), CUDA_ERROR_INVALID_VALUE, "unknown usage bit");

  pr = props_of(0);
  pr.maxSize = 8 * MiB;
  CK(cuMemPoolCreate(&p, &pr));
  CK(cuDeviceGetDefaultMemPool(&def, 0));
  tap_ok(p != NULL && p != def, "a created pool is not the default pool");
  CUdeviceptr a = 0, b = 0;
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuMemAllocFromPoolAsync(&a, 6 * MiB, p, s));
  TAP_EQ(cuMemAllocFromPoolAsync(&b, 4 * MiB, p, s), CUDA_ERROR_OUT_OF_MEMORY,
         "past the pool's maxSize: OUT_OF_MEMORY");
  CUmemoryPool owner = NULL;
  CK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a));
  tap_ok(owner == p, "MEMPOOL_HANDLE is the pool it came from");

  /* The device's current pool serves cuMemAllocAsync. */
  CK(cuDeviceGetMemPool(&cur, 0));
  tap_ok(cur == def, "the current pool is the default pool at first");
  TAP_EQ(cuDeviceSetMemPool(0, (CUmemoryPool)&owner), CUDA_ERROR_INVALID_VALUE,
         "set an unknown pool");
  TAP_EQ(cuDeviceSetMemPool(1, p), CUDA_ERROR_INVALID_DEVICE, "set on device 1 of 1");
  CK(cuDeviceSetMemPool(0, p));
  CK(cuDeviceGetMemPool(&cur, 0));
  tap_ok(cur == p, "cuDeviceGetMemPool answers the pool set");
  CK(cuMemAllocAsync(&b, MiB, s));
  CK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, b));
  tap_ok(owner == p, "cuMemAllocAsync allocates from the current pool");
  TAP_EQ(attr(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 7 * MiB, "USED_MEM_CURRENT");

  /* Destroyed with allocations outstanding: they stay valid; the device's pool reverts. */
  TAP_EQ(cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE, "the default pool cannot be destroyed");
  CK(cuMemPoolDestroy(p));
  TAP_EQ(cuMemPoolDestroy(p), CUDA_ERROR_INVALID_VALUE, "destroy twice");
  CK(cuDeviceGetMemPool(&cur, 0));
  tap_ok(cur == def, "destroying the current pool makes the default one current");
  TAP_EQ(cuMemAllocFromPoolAsync(&a, MiB, p, s), CUDA_ERROR_INVALID_VALUE,
         "allocate from a destroyed pool");
  TAP_EQ(used(), 7 * MiB, "its allocations still hold their memory");
  CK(cuMemFreeAsync(b, s));
  CK(cuMemFreeAsync(a, s));
  CK(cuStreamSynchronize(s));
  TAP_EQ(used(), 0, "freed, a destroyed pool's memory goes back to the device");
  CK(cuStreamDestroy_v2(s));
}

static void retention(void) {
  CUmemoryPool p = NULL;
  CUmemPoolProps pr = props_of(0);
  CK(cuMemPoolCreate(&p, &pr));
  TAP_EQ(attr(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 0, "release threshold 0 by default");
  int v = -1;
  CK(cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &v));
  TAP_EQ(v, 1, "opportunistic reuse enabled by default");
  v = 0;
  CK(cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &v));
  CK(cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &v));
  TAP_EQ(v, 0, "... and can be disabled");
  TAP_EQ(cuMemPoolGetAttribute(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, NULL),
         CUDA_ERROR_INVALID_VALUE, "get into NULL");
  TAP_EQ(cuMemPoolGetAttribute(p, (CUmemPool_attribute)9, &v), CUDA_ERROR_INVALID_VALUE,
         "attribute 9");
  uint64_t x = 5;
  TAP_EQ(cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &x), CUDA_ERROR_INVALID_VALUE,
         "USED_MEM_CURRENT is read-only");
  TAP_EQ(cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &x), CUDA_ERROR_INVALID_VALUE,
         "a high-water mark can only be reset to 0");

  uint64_t keep = 4 * MiB;
  CK(cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a = 0, b = 0;
  CK(cuMemAllocFromPoolAsync(&a, 6 * MiB, p, s));
  CK(cuMemFreeAsync(a, s));
  CK(cuStreamSynchronize(s));
  TAP_EQ(attr(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), 0, "nothing used after the free");
  TAP_EQ(attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 4 * MiB,
         "the pool keeps its release threshold");
  TAP_EQ(used(), 4 * MiB, "retained memory is the device's memory in use");
  TAP_EQ(attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 6 * MiB, "RESERVED_MEM_HIGH");
  TAP_EQ(attr(p, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 6 * MiB, "USED_MEM_HIGH");
  CK(cuMemAllocFromPoolAsync(&b, 3 * MiB, p, s));
  TAP_EQ(used(), 4 * MiB, "an allocation takes retained memory first");
  CK(cuMemFreeAsync(b, s));
  CK(cuStreamSynchronize(s));
  x = 0;
  CK(cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &x));
  TAP_EQ(attr(p, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 0, "USED_MEM_HIGH reset to what is used");
  CK(cuMemPoolTrimTo(p, 1 * MiB));
  TAP_EQ(attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), 1 * MiB, "trimmed down to what it keeps");
  CK(cuMemPoolTrimTo(p, 0));
  TAP_EQ(used(), 0, "trimmed to 0: the device has it all back");
  TAP_EQ(cuMemPoolTrimTo((CUmemoryPool)&x, 0), CUDA_ERROR_INVALID_VALUE, "trim an unknown pool");

  /* A device reset frees stream-ordered memory and what pools retain. */
  CK(cuMemAllocFromPoolAsync(&a, 3 * MiB, p, s));
  CK(cuMemFreeAsync(a, s));
  CK(cuStreamSynchronize(s));
  CK(cuStreamDestroy_v2(s));
  CK(cuMemAllocAsync(&b, 2 * MiB, NULL));
  TAP_EQ(used(), 5 * MiB, "retained and allocated before the reset");
  CK(cuDevicePrimaryCtxReset_v2(0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, 0));
  CK(cuCtxSetCurrent(ctx));
  TAP_EQ(used(), 0, "a device reset releases it all");
  CK(cuDevicePrimaryCtxRelease_v2(0));
  CK(cuMemPoolDestroy(p));
}

static void access(void) {
  CUmemoryPool def;
  CK(cuDeviceGetDefaultMemPool(&def, 0));
  CUmemLocation dev0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0}, host = {CU_MEM_LOCATION_TYPE_HOST, 0};
  CUmemAccess_flags f = CU_MEM_ACCESS_FLAGS_PROT_MAX;
  CK(cuMemPoolGetAccess(&f, def, &dev0));
  TAP_EQ(f, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "its own device reads and writes");
  CK(cuMemPoolGetAccess(&f, def, &host));
  TAP_EQ(f, CU_MEM_ACCESS_FLAGS_PROT_NONE, "the host does not");
  CUmemAccessDesc d = {dev0, CU_MEM_ACCESS_FLAGS_PROT_NONE};
  TAP_EQ(cuMemPoolSetAccess(def, &d, 1), CUDA_ERROR_INVALID_VALUE,
         "its own device's access cannot be revoked");
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CK(cuMemPoolSetAccess(def, &d, 1));
  d.location.id = 2;
  TAP_EQ(cuMemPoolSetAccess(def, &d, 1), CUDA_ERROR_INVALID_VALUE, "device 2 of 1");
  CUmemLocation dev2 = {CU_MEM_LOCATION_TYPE_DEVICE, 2};
  TAP_EQ(cuMemPoolGetAccess(&f, def, &dev2), CUDA_ERROR_INVALID_VALUE, "query device 2 of 1");
}

static void hints(void) {
  CUdeviceptr m = 0, d = 0;
  CK(cuMemAllocManaged(&m, 3 * MiB, CU_MEM_ATTACH_GLOBAL));
  CK(cuMemAlloc_v2(&d, MiB));
  CUmemLocation dev0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0}, host = {CU_MEM_LOCATION_TYPE_HOST, 0};
  CUmemLocation dev5 = {CU_MEM_LOCATION_TYPE_DEVICE, 5};
  CK(cuMemPrefetchAsync_v2(m, 3 * MiB, dev0, 0, NULL));
  CK(cuMemPrefetchAsync_v2(m + 4096, MiB, host, 0, NULL));
  CK(cuMemPrefetchAsync(m, 3 * MiB, CU_DEVICE_CPU, NULL));
  CK(cuMemPrefetchAsync_v2_ptsz(m, 3 * MiB, dev0, 0, NULL));
  TAP_EQ(cuMemPrefetchAsync_v2(m, 3 * MiB, dev5, 0, NULL), CUDA_ERROR_INVALID_DEVICE,
         "prefetch to device 5 of 1");
  TAP_EQ(cuMemPrefetchAsync(m, 3 * MiB, 5, NULL), CUDA_ERROR_INVALID_DEVICE,
         "prefetch to device 5 of 1 (CUDA 8 ABI)");
  TAP_EQ(cuMemPrefetchAsync_v2(m, 3 * MiB, dev0, 1, NULL), CUDA_ERROR_INVALID_VALUE, "flags 1");
  TAP_EQ(cuMemPrefetchAsync_v2(d, MiB, dev0, 0, NULL), CUDA_ERROR_INVALID_VALUE,
         "prefetch of cuMemAlloc memory");
  TAP_EQ(cuMemPrefetchAsync_v2(m, 5 * MiB, dev0, 0, NULL), CUDA_ERROR_INVALID_VALUE,
         "prefetch past the allocation");
  TAP_EQ(cuMemPrefetchAsync_v2(m, MiB, dev0, 0, (CUstream)0x4321), CUDA_ERROR_INVALID_HANDLE,
         "prefetch on a bad stream");
  CK(cuMemAdvise_v2(m, 3 * MiB, CU_MEM_ADVISE_SET_READ_MOSTLY, dev5)); /* location unused */
  CK(cuMemAdvise_v2(m, 3 * MiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
  CK(cuMemAdvise(m, 3 * MiB, CU_MEM_ADVISE_SET_ACCESSED_BY, 0));
  TAP_EQ(cuMemAdvise_v2(m, 3 * MiB, CU_MEM_ADVISE_SET_ACCESSED_BY, dev5), CUDA_ERROR_INVALID_DEVICE,
         "accessed by device 5 of 1");
  TAP_EQ(cuMemAdvise_v2(m, 3 * MiB, (CUmem_advise)7, dev0), CUDA_ERROR_INVALID_VALUE, "advice 7");
  TAP_EQ(cuMemAdvise_v2(d, MiB, CU_MEM_ADVISE_SET_READ_MOSTLY, dev0), CUDA_ERROR_INVALID_VALUE,
         "advice on cuMemAlloc memory");
  CK(cuMemFree_v2(m));
  CK(cuMemFree_v2(d));
}

int main(void) {
  setenv("FAKECUDA_DRIVER_MEMORY", "off", 1); /* exact figures: test_driver.c has the driver's */
  setenv("FAKECUDA_MEMORY", "1GiB", 1);
  unsetenv("FAKECUDA_DEVICES");
  CUcontext ctx;
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
      cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    tap_ok(0, "setup");
    return tap_done();
  }
  creation();
  retention();
  access();
  hints();
  TAP_EQ(used(), 0, "no device memory left in use");
  TAP_EQ(fakecudaHazards(), 0, "no hazards");
  cuDevicePrimaryCtxRelease_v2(0);
  return tap_done();
}
