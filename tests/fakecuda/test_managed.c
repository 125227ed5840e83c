/* Where the fake driver keeps managed memory (README.md, "Managed memory"): pages on the host
 * until device work touches them, then resident on that device and counted in its used bytes
 * and peak; prefetches move them, advice keeps them where it says, a full device evicts managed
 * pages (least recently touched first) and never another allocation, and stream association
 * decides which kernels touch an allocation. Two devices of 64 MiB each. */
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/fakecuda/testlib.h"

#include <stdlib.h>
#include <string.h>

static CUcontext ctx[2];

static fakecuda_managed_t usage(int dev) {
  fakecuda_managed_t m;
  memset(&m, 0xff, sizeof m);
  fakecudaManagedUsage(dev, &m);
  return m;
}

/* A kernel on s given a pointer into [p, ...), run to completion. */
static void kernel(CUstream s, CUdeviceptr p) {
  CK(fakecudaEnqueueWork(s, p, 1));
  CK(cuStreamSynchronize(s));
}

static const CUmemLocation dev0 = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
static const CUmemLocation dev1 = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
static const CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};

static void first_touch(void) {
  CUdeviceptr m = 0;
  size_t before = used();
  CK(cuMemAllocManaged(&m, 4 * MiB + 1, CU_MEM_ATTACH_GLOBAL));
  TAP_EQ(usage(0).resident, 0ull, "a new managed allocation is on the host");
  TAP_EQ(used(), before, "and takes no device memory");
  fakecudaPeakBytes(0, 1);
  kernel(NULL, m + 4096);
  TAP_EQ(usage(0).resident, 4 * MiB + 4096ull, "a kernel's touch brings every page (4 KiB each)");
  TAP_EQ(used(), before + 4 * MiB + 4096, "counted in the device's used memory");
  tap_ok(fakecudaPeakBytes(0, 0) >= before + 4 * MiB + 4096, "and in its peak");
  TAP_EQ(usage(0).migrated_in, 4 * MiB + 4096ull, "migrated to the device");
  CK(cuMemPrefetchAsync_v2(m, MiB, host, 0, NULL));
  TAP_EQ(usage(0).resident, 3 * MiB + 4096ull, "a prefetch to the host takes its range back");
  TAP_EQ(usage(0).migrated_out, (unsigned long long)MiB, "migrated to the host");
  CK(cuMemPrefetchAsync(m, 4096, CU_DEVICE_CPU, NULL));
  TAP_EQ(usage(0).resident, 3 * MiB + 4096ull, "... and a page already there stays");
  CK(cuMemFree_v2(m));
  TAP_EQ(usage(0).resident, 0ull, "a free gives the pages back");
  TAP_EQ(used(), before, "and the device memory");
}

static void copies(void) {
  CUdeviceptr m = 0, d = 0;
  CK(cuMemAllocManaged(&m, 8 * MiB, CU_MEM_ATTACH_GLOBAL));
  CK(cuMemAlloc_v2(&d, MiB));
  char *buf = malloc(MiB);
  memset(buf, 1, MiB);
  CK(cuMemcpyHtoD_v2(m + MiB, buf, 8192));
  TAP_EQ(usage(0).resident, 8192ull, "a copy into managed memory brings the pages it writes");
  CK(cuMemcpyDtoD_v2(d, m + 2 * MiB + 100, 5000));
  CK(cuCtxSynchronize());
  TAP_EQ(usage(0).resident, 8192ull + 2 * 4096,
         "a copy out of it the pages it reads (rounded out)");
  CK(cuMemsetD8_v2(m + 4 * MiB, 0, MiB));
  CK(cuCtxSynchronize());
  TAP_EQ(usage(0).resident, 8192ull + 2 * 4096 + MiB, "a memset the pages it sets");
  CK(cuMemFree_v2(m));
  CK(cuMemFree_v2(d));
  free(buf);
}

static void advice(void) {
  CUdeviceptr m = 0;
  CK(cuMemAllocManaged(&m, 2 * MiB, CU_MEM_ATTACH_GLOBAL));
  CK(cuMemAdvise_v2(m, MiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
  CK(cuMemAdvise_v2(m, MiB, CU_MEM_ADVISE_SET_ACCESSED_BY, dev0));
  kernel(NULL, m);
  TAP_EQ(usage(0).resident, (unsigned long long)MiB,
         "preferred location host + accessed by the device: that half stays on the host");
  CK(cuMemPrefetchAsync_v2(m, 2 * MiB, host, 0, NULL));
  CK(cuMemAdvise_v2(m, 2 * MiB, CU_MEM_ADVISE_UNSET_ACCESSED_BY, dev0));
  kernel(NULL, m);
  TAP_EQ(usage(0).resident, (unsigned long long)MiB,
         "preferred location host alone: at its preferred location, the device maps it");
  CK(cuMemPrefetchAsync_v2(m, 2 * MiB, host, 0, NULL));
  CK(cuMemAdvise_v2(m, 2 * MiB, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, host));
  CK(cuMemAdvise_v2(m, 2 * MiB, CU_MEM_ADVISE_SET_ACCESSED_BY, dev0));
  kernel(NULL, m);
  TAP_EQ(usage(0).resident, 0ull, "accessed by the device alone: mapped, nothing migrates");
  CK(cuMemAdvise_v2(m, 2 * MiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, dev0));
  kernel(NULL, m);
  TAP_EQ(usage(0).resident, 2 * MiB + 0ull,
         "preferred location the device overrides accessed-by: the pages come");
  CK(cuMemPrefetchAsync_v2(m, 2 * MiB, host, 0, NULL));
  CK(cuMemAdvise_v2(m, 2 * MiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
  CK(cuMemPrefetchAsync_v2(m, MiB, dev0, 0, NULL));
  TAP_EQ(usage(0).resident, (unsigned long long)MiB,
         "a prefetch migrates whatever the preferred location (cuda.h)");
  CK(cuMemFree_v2(m));
}

static void read_mostly(void) {
  CUdeviceptr m = 0, d = 0;
  CK(cuMemAllocManaged(&m, MiB, CU_MEM_ATTACH_GLOBAL));
  CK(cuMemAlloc_v2(&d, MiB));
  CK(cuMemAdvise_v2(m, MiB, CU_MEM_ADVISE_SET_READ_MOSTLY, dev0));
  CK(cuMemAdvise_v2(m, MiB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host));
  CK(cuMemAdvise_v2(m, MiB, CU_MEM_ADVISE_SET_ACCESSED_BY, dev0));
  CK(cuMemcpyDtoD_v2(d, m, MiB));
  CK(cuCtxSynchronize());
  TAP_EQ(usage(0).resident, (unsigned long long)MiB,
         "read-mostly overrides the other advice: a read makes a copy on the device");
  CK(cuCtxSetCurrent(ctx[1]));
  CK(cuMemPrefetchAsync_v2(m, MiB, dev1, 0, NULL));
  TAP_EQ(usage(1).resident, (unsigned long long)MiB, "a prefetch to device 1 copies it there too");
  TAP_EQ(usage(0).resident, (unsigned long long)MiB, "and device 0 keeps its copy");
  CK(cuCtxSetCurrent(ctx[0]));
  CK(cuMemcpyDtoD_v2(m, d, 4096));
  CK(cuCtxSynchronize());
  TAP_EQ(usage(1).resident, MiB - 4096ull, "a write invalidates the other copies of its page");
  TAP_EQ(usage(0).resident, (unsigned long long)MiB, "the writer's copy is the page now");
  CK(cuMemAdvise_v2(m, MiB, CU_MEM_ADVISE_UNSET_READ_MOSTLY, dev0));
  TAP_EQ(usage(0).resident + usage(1).resident, 4096ull,
         "unset read-mostly collapses the copies into one");
  CK(cuMemFree_v2(m));
  CK(cuMemFree_v2(d));
  TAP_EQ(usage(0).resident + usage(1).resident, 0ull, "nothing left on either device");
}

static void full_device(void) {
  CUdeviceptr a = 0, b = 0, big = 0, d = 0;
  size_t before = used();
  CK(cuMemAllocManaged(&a, 24 * MiB, CU_MEM_ATTACH_GLOBAL));
  CK(cuMemAllocManaged(&b, 24 * MiB, CU_MEM_ATTACH_GLOBAL));
  kernel(NULL, a);
  kernel(NULL, b);
  TAP_EQ(usage(0).resident, 48 * MiB + 0ull, "two managed allocations on the device");
  CK(cuMemAllocManaged(&big, 40 * MiB, CU_MEM_ATTACH_GLOBAL));
  fakecudaPeakBytes(0, 1);
  kernel(NULL, big);
  TAP_EQ(usage(0).resident, 64 * MiB - before + 0ull, "a third fills the device by evicting");
  tap_ok(fakecudaPeakBytes(0, 0) <= 64 * MiB, "the device never holds more than its memory");
  CK(cuMemPrefetchAsync_v2(big, 40 * MiB, host, 0, NULL));
  kernel(NULL, a);
  kernel(NULL, b);
  CK(cuMemAlloc_v2(&d, 40 * MiB));
  tap_ok(usage(0).resident <= 24 * MiB - before,
         "cuMemAlloc of 40 MiB on a device full of managed pages is served: they are evicted");
  CK(cuMemPrefetchAsync_v2(a, 24 * MiB, dev0, 0, NULL));
  tap_ok(usage(0).resident <= 24 * MiB - before, "managed pages never evict a cuMemAlloc block");
  CK(cuMemFree_v2(d));
  kernel(NULL, b);
  kernel(NULL, a);
  CK(cuMemAllocManaged(&d, 8 * MiB, CU_MEM_ATTACH_GLOBAL));
  kernel(NULL, d);
  TAP_EQ(usage(0).resident, 48 * MiB + 8 * MiB + 0ull, "room for a, b and an 8 MiB one");
  kernel(NULL, big); /* 40 MiB where 8 are free: b (touched first) goes, then 8 MiB of a */
  CK(cuMemPrefetchAsync_v2(big, 40 * MiB, host, 0, NULL));
  TAP_EQ(usage(0).resident, 24 * MiB + 0ull, "the rest of a and d stayed");
  CK(cuMemPrefetchAsync_v2(d, 8 * MiB, dev0, 0, NULL));
  TAP_EQ(usage(0).resident, 24 * MiB + 0ull, "d, touched last, was not evicted");
  CK(cuMemPrefetchAsync_v2(b, 24 * MiB, dev0, 0, NULL));
  TAP_EQ(usage(0).resident, 48 * MiB + 0ull, "b, touched first, was evicted whole");
  CK(cuMemFree_v2(a));
  CK(cuMemFree_v2(b));
  CK(cuMemFree_v2(big));
  CK(cuMemFree_v2(d));
  TAP_EQ(used(), before, "everything given back");
}

static void association(void) {
  CUdeviceptr m = 0, h = 0, d = 0;
  CUstream s1 = NULL, s2 = NULL;
  CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CK(cuMemAllocManaged(&h, MiB, CU_MEM_ATTACH_HOST));
  kernel(s1, h);
  TAP_EQ(usage(0).resident, 0ull, "an allocation attached to the host: a kernel leaves it there");
  CK(cuMemAllocManaged(&m, MiB, CU_MEM_ATTACH_GLOBAL));
  CK(cuStreamAttachMemAsync(s1, m, 0, CU_MEM_ATTACH_SINGLE));
  kernel(s2, m);
  TAP_EQ(usage(0).resident, 0ull, "attached to s1: a kernel on s2 leaves it");
  kernel(s1, m);
  TAP_EQ(usage(0).resident, (unsigned long long)MiB, "a kernel on s1 brings it");
  CK(cuStreamAttachMemAsync(s2, h, MiB, CU_MEM_ATTACH_GLOBAL));
  kernel(s2, h);
  TAP_EQ(usage(0).resident, 2 * MiB + 0ull, "attached globally again: any stream's kernel");
  CK(cuMemAlloc_v2(&d, MiB));
  TAP_EQ(cuStreamAttachMemAsync(s1, m, 4096, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE,
         "part of an allocation");
  TAP_EQ(cuStreamAttachMemAsync(NULL, m, 0, CU_MEM_ATTACH_SINGLE), CUDA_ERROR_INVALID_VALUE,
         "singly to the NULL stream");
  TAP_EQ(cuStreamAttachMemAsync(s1, m, 0, 3), CUDA_ERROR_INVALID_VALUE, "flags 3");
  TAP_EQ(cuStreamAttachMemAsync(s1, d, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE,
         "cuMemAlloc memory");
  TAP_EQ(cuStreamAttachMemAsync((CUstream)0x4321, m, 0, CU_MEM_ATTACH_GLOBAL),
         CUDA_ERROR_INVALID_HANDLE, "a bad stream");
  CK(cuMemPrefetchAsync_v2(m, MiB, host, 0, NULL));
  CK(cuStreamAttachMemAsync(s2, m, 0, CU_MEM_ATTACH_SINGLE));
  CK(cuStreamDestroy_v2(s2));
  kernel(s1, m);
  TAP_EQ(usage(0).resident, 2 * MiB + 0ull,
         "its stream destroyed, the association reverts to the allocation's own (global)");
  CK(cuMemFree_v2(m));
  CK(cuMemFree_v2(h));
  CK(cuMemFree_v2(d));
  CK(cuStreamDestroy_v2(s1));
}

static void other_device(void) {
  CUdeviceptr m = 0;
  CK(cuMemAllocManaged(&m, 2 * MiB, CU_MEM_ATTACH_GLOBAL));
  kernel(NULL, m);
  CK(cuCtxSetCurrent(ctx[1]));
  kernel(NULL, m);
  TAP_EQ(usage(1).resident, 2 * MiB + 0ull, "a kernel on device 1 takes the pages there");
  TAP_EQ(usage(0).resident, 0ull, "from device 0");
  CK(cuCtxSetCurrent(ctx[0]));
  CK(cuMemFree_v2(m));
  TAP_EQ(usage(1).resident, 0ull, "freed from device 1 too");
}

static void batches(void) {
  CUdeviceptr m = 0, d = 0;
  CUstream s = NULL;
  CK(cuStreamCreate(&s, 0));
  CK(cuMemAllocManaged(&m, 4 * MiB, CU_MEM_ATTACH_GLOBAL));
  CK(cuMemAlloc_v2(&d, MiB));
  CUdeviceptr ptrs[3] = {m, m + MiB, m + 2 * MiB};
  size_t sizes[3] = {MiB, MiB, 2 * MiB};
  CUmemLocation locs[2] = {dev0, host};
  size_t idxs[2] = {0, 2};
  CK(cuMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 2, 0, s));
  TAP_EQ(usage(0).resident, 2 * MiB + 0ull, "a batch: the first two ranges to the device");
  locs[1] = dev0;
  CK(cuMemPrefetchBatchAsync_ptsz(ptrs, sizes, 3, locs, idxs, 2, 0, s));
  TAP_EQ(usage(0).resident, 4 * MiB + 0ull, "the third too");
  CK(cuMemDiscardBatchAsync(ptrs, sizes, 1, 0, s));
  TAP_EQ(usage(0).resident, 3 * MiB + 0ull, "a discard gives the device memory back");
  CK(cuMemDiscardAndPrefetchBatchAsync(ptrs + 2, sizes + 2, 1, locs, idxs, 1, 0, s));
  TAP_EQ(usage(0).resident, 3 * MiB + 0ull, "discard and prefetch: the pages on the device again");
  TAP_EQ(cuMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 2, 0, NULL), CUDA_ERROR_INVALID_VALUE,
         "not on the legacy NULL stream");
  idxs[0] = 1;
  TAP_EQ(cuMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 2, 0, s), CUDA_ERROR_INVALID_VALUE,
         "the first location applies from 0");
  idxs[0] = 0;
  idxs[1] = 3;
  TAP_EQ(cuMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 2, 0, s), CUDA_ERROR_INVALID_VALUE,
         "locations apply below count");
  idxs[1] = 2;
  TAP_EQ(cuMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 2, 1, s), CUDA_ERROR_INVALID_VALUE,
         "flags 1");
  ptrs[1] = d;
  TAP_EQ(cuMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 2, 0, s), CUDA_ERROR_INVALID_VALUE,
         "a range of cuMemAlloc memory");
  TAP_EQ(usage(0).resident, 3 * MiB + 0ull, "a refused batch moves nothing");
  CK(cuMemFree_v2(m));
  CK(cuMemFree_v2(d));
  CK(cuStreamDestroy_v2(s));
}

int main(void) {
  setenv("FAKECUDA_MEMORY", "64MiB", 1);
  setenv("FAKECUDA_DEVICES", "2", 1);
  setenv("FAKECUDA_DRIVER_MEMORY", "off", 1); /* exact figures: test_driver.c has the driver's */
  CK(cuInit(0));
  CK(cuDevicePrimaryCtxRetain(&ctx[0], 0));
  CK(cuDevicePrimaryCtxRetain(&ctx[1], 1));
  CK(cuCtxSetCurrent(ctx[0]));
  TAP_EQ(fakecudaManagedUsage(2, NULL), CUDA_ERROR_INVALID_DEVICE, "usage of device 2 of 2");
  TAP_EQ(fakecudaManagedUsage(0, NULL), CUDA_ERROR_INVALID_VALUE, "usage into NULL");
  first_touch();
  copies();
  advice();
  read_mostly();
  full_device();
  association();
  other_device();
  batches();
  TAP_EQ(fakecudaHazards(), 0ull, "no hazards");
  return tap_done();
}
