/* TAP test of the fake driver's memory model on one 1 GiB device with host backing:
 * cuMemAlloc/Free/GetInfo, pitched, managed, pinned host and stream-ordered allocations,
 * address ranges, pointer attributes, the VMM API and IPC handles.
 */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/tap.h"
#include "tests/fakecuda/testlib.h"

static CUcontext ctx;

/* Runs fn in a child process; returns the signal that killed it, or 0. */
static int child_signal(void (*fn)(uintptr_t), uintptr_t arg) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL); /* a sanitizer's handler would turn the fault into exit(1) */
    fn(arg);
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

static void touch(uintptr_t p) {
  *(volatile char *)p = 1;
}

static void basic(void) {
  CUdeviceptr a = 0, b = 0, c = 0;
  size_t fr, tot;
  CK(cuMemGetInfo_v2(&fr, &tot));
  tap_ok(tot == GiB && fr == GiB, "cuMemGetInfo_v2: 1 GiB free of 1 GiB");
  unsigned fr32, tot32;
  CK(cuMemGetInfo(&fr32, &tot32));
  tap_ok(fr32 == GiB && tot32 == GiB, "legacy cuMemGetInfo");
  TAP_EQ(cuMemGetInfo_v2(NULL, &tot), CUDA_ERROR_INVALID_VALUE, "cuMemGetInfo_v2(NULL, ...)");
  TAP_EQ(cuMemAlloc_v2(&a, 0), CUDA_ERROR_INVALID_VALUE, "cuMemAlloc_v2 of 0 bytes");
  TAP_EQ(cuMemAlloc_v2(NULL, 1), CUDA_ERROR_INVALID_VALUE, "cuMemAlloc_v2 into NULL");
  CK(cuMemAlloc_v2(&a, 1000));
  CK(cuMemAlloc_v2(&b, 1));
  CK(cuMemAlloc_v2(&c, 3 * MiB));
  tap_ok(a % 512 == 0 && b % 512 == 0 && c % 512 == 0, "512-byte aligned addresses");
  tap_ok(b >= a + 1000 || a >= b + 1, "allocations do not overlap");
  TAP_EQ(used(), 1024 + 512 + 3 * MiB, "device memory is held in 512-byte units");
  memset((void *)(uintptr_t)a, 0x5a, 1000); /* FAKECUDA_BACKING=1: device bytes are host-visible */
  tap_ok(((unsigned char *)(uintptr_t)a)[999] == 0x5a, "backed allocations are readable/writable");

  TAP_EQ(cuMemAlloc_v2(&b, GiB), CUDA_ERROR_OUT_OF_MEMORY, "more than is free: OUT_OF_MEMORY");
  CUdeviceptr rest;
  size_t left = GiB - used();
  CK(cuMemAlloc_v2(&rest, left));
  TAP_EQ(used(), GiB, "exactly the free memory fits");
  CUdeviceptr one;
  TAP_EQ(cuMemAlloc_v2(&one, 1), CUDA_ERROR_OUT_OF_MEMORY, "then 1 byte does not");
  CK(cuMemFree_v2(rest));

  TAP_EQ(cuMemFree_v2(a + 8), CUDA_ERROR_INVALID_VALUE, "free of an interior pointer");
  TAP_EQ(cuMemFree_v2(0x1234), CUDA_ERROR_INVALID_VALUE, "free of an unknown pointer");
  CK(cuMemFree_v2(0));
  CK(cuMemFree_v2(a));
  TAP_EQ(cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE, "double free");
  CUdeviceptr a2;
  CK(cuMemAlloc_v2(&a2, 512));
  TAP_EQ(a2, a, "first fit: a freed address is reused");
  CK(cuMemFree_v2(a2));
  CK(cuMemFree_v2(b));
  CK(cuMemFree_v2(c));
  TAP_EQ(child_signal(touch, c + MiB), SIGSEGV,
         "a freed allocation's pages are gone (host access faults)");
  TAP_EQ(used(), 0, "everything freed");
}

static void pitch(void) {
  CUdeviceptr p, base;
  size_t pp = 0, size = 0;
  TAP_EQ(cuMemAllocPitch_v2(&p, &pp, 100, 10, 3), CUDA_ERROR_INVALID_VALUE, "ElementSizeBytes 3");
  TAP_EQ(cuMemAllocPitch_v2(&p, &pp, 0, 10, 4), CUDA_ERROR_INVALID_VALUE, "width 0");
  TAP_EQ(cuMemAllocPitch_v2(&p, NULL, 10, 10, 4), CUDA_ERROR_INVALID_VALUE, "pitch into NULL");
  CK(cuMemAllocPitch_v2(&p, &pp, 100, 10, 4));
  TAP_EQ(pp, 512, "pitch of 100 bytes: 512");
  CK(cuMemGetAddressRange_v2(&base, &size, p + 4000));
  tap_ok(base == p && size == 5120, "the block is pitch x height (%zu)", size);
  CK(cuMemFree_v2(p));
  CK(cuMemAllocPitch_v2(&p, &pp, 513, 3, 16));
  TAP_EQ(pp, 1024, "pitch of 513 bytes: 1024");
  CK(cuMemFree_v2(p));
}

static void managed_and_host(void) {
  CUdeviceptr m;
  TAP_EQ(cuMemAllocManaged(&m, 4096, 0), CUDA_ERROR_INVALID_VALUE, "managed flags 0");
  TAP_EQ(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_SINGLE), CUDA_ERROR_INVALID_VALUE,
         "managed flags SINGLE");
  TAP_EQ(cuMemAllocManaged(&m, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE,
         "managed 0 bytes");
  CK(cuMemAllocManaged(&m, 10000, CU_MEM_ATTACH_GLOBAL));
  TAP_EQ(used(), 0, "managed memory does not reduce device free memory");
  ((char *)(uintptr_t)m)[9999] = 7;
  unsigned v = 0;
  CK(cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_IS_MANAGED, m));
  TAP_EQ(v, 1, "IS_MANAGED");
  CK(cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, m));
  TAP_EQ(v, CU_MEMORYTYPE_DEVICE, "managed memory type: DEVICE");
  void *hp = NULL;
  CK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, m + 1));
  tap_ok(hp == (void *)(uintptr_t)(m + 1), "managed HOST_POINTER is the pointer");
  CK(cuMemFree_v2(m));

  void *h = NULL;
  TAP_EQ(cuMemHostAlloc(&h, 100, 8), CUDA_ERROR_INVALID_VALUE, "cuMemHostAlloc flags 8");
  TAP_EQ(cuMemHostAlloc(&h, 0, 0), CUDA_ERROR_INVALID_VALUE, "cuMemHostAlloc of 0 bytes");
  CK(cuMemHostAlloc(&h, 100, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  memset(h, 1, 100);
  CK(cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h));
  TAP_EQ(v, CU_MEMORYTYPE_HOST, "pinned memory type: HOST");
  CUdeviceptr dp = 0;
  CK(cuMemHostGetDevicePointer_v2(&dp, h, 0));
  tap_ok(dp == (CUdeviceptr)(uintptr_t)h, "unified addressing: device pointer == host pointer");
  unsigned hf = 0;
  CK(cuMemHostGetFlags(&hf, h));
  TAP_EQ(hf, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP, "cuMemHostGetFlags");
  TAP_EQ(cuMemFree_v2((CUdeviceptr)(uintptr_t)h), CUDA_ERROR_INVALID_VALUE,
         "cuMemFree_v2 of pinned host memory");
  TAP_EQ(cuMemFreeHost((char *)h + 1), CUDA_ERROR_INVALID_VALUE,
         "cuMemFreeHost of an interior pointer");
  CK(cuMemFreeHost(NULL));
  CK(cuMemFreeHost(h));
  TAP_EQ(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost twice");
  CK(cuMemAllocHost_v2(&h, 64));
  CK(cuMemFreeHost(h));
}

static void attributes(void) {
  CUdeviceptr a, b;
  CK(cuMemAlloc_v2(&a, 10000));
  CK(cuMemAlloc_v2(&b, 100));
  CUcontext c = NULL;
  unsigned v = 0;
  int ord = -1;
  CUdeviceptr dp = 0, start = 0;
  size_t size = 0;
  unsigned long long id1 = 0, id2 = 0;
  CK(cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, a + 5));
  tap_ok(c == ctx, "CONTEXT");
  CK(cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a + 5));
  TAP_EQ(v, CU_MEMORYTYPE_DEVICE, "MEMORY_TYPE DEVICE");
  CK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, a + 5));
  TAP_EQ(dp, a + 5, "DEVICE_POINTER");
  CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a + 5));
  TAP_EQ(ord, 0, "DEVICE_ORDINAL");
  CK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a + 5));
  CK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, a + 5));
  tap_ok(start == a && size == 10000, "RANGE_START_ADDR / RANGE_SIZE");
  CK(cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_IS_MANAGED, a));
  TAP_EQ(v, 0, "IS_MANAGED 0");
  CK(cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_MAPPED, a));
  TAP_EQ(v, 1, "MAPPED 1");
  CK(cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, a));
  TAP_EQ(v, 1, "IS_LEGACY_CUDA_IPC_CAPABLE for cuMemAlloc memory");
  CK(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, a));
  CK(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, b));
  tap_ok(id1 != 0 && id1 != id2, "BUFFER_ID unique per allocation");
  void *hp;
  TAP_EQ(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, a), CUDA_ERROR_INVALID_VALUE,
         "HOST_POINTER of device memory: INVALID_VALUE");
  TAP_EQ(cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 0x1000),
         CUDA_ERROR_INVALID_VALUE, "unknown pointer: INVALID_VALUE");
  TAP_EQ(cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a + 10000),
         CUDA_ERROR_INVALID_VALUE, "one past the end: INVALID_VALUE");
  TAP_EQ(cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a), CUDA_ERROR_INVALID_VALUE,
         "data NULL");
  TAP_EQ(cuPointerGetAttribute(&v, (CUpointer_attribute)99, a), CUDA_ERROR_INVALID_VALUE,
         "unknown attribute");

  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_CONTEXT,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  unsigned mt = 77;
  int dord = 77;
  CUcontext dc = (CUcontext)&dc;
  size_t rs = 77;
  void *data[] = {&mt, &dord, &dc, &rs};
  CK(cuPointerGetAttributes(4, attrs, data, a + 1));
  tap_ok(mt == CU_MEMORYTYPE_DEVICE && dord == 0 && dc == ctx && rs == 10000,
         "cuPointerGetAttributes of device memory");
  int x;
  CK(cuPointerGetAttributes(4, attrs, data, (CUdeviceptr)(uintptr_t)&x));
  tap_ok(mt == 0 && dord == -2 && dc == NULL && rs == 0,
         "cuPointerGetAttributes of unknown memory: SUCCESS, type 0, ordinal -2, NULL context");
  CUpointer_attribute p2p = CU_POINTER_ATTRIBUTE_P2P_TOKENS;
  TAP_EQ(cuPointerGetAttributes(1, &p2p, data, a), CUDA_ERROR_INVALID_VALUE,
         "cuPointerGetAttributes of an unlisted attribute");

  CUdeviceptr base = 0;
  size_t sz = 0;
  CK(cuMemGetAddressRange_v2(&base, &sz, b + 99));
  tap_ok(base == b && sz == 100, "cuMemGetAddressRange_v2 of an interior pointer");
  CK(cuMemGetAddressRange_v2(NULL, &sz, b));
  TAP_EQ(cuMemGetAddressRange_v2(&base, &sz, b + 100), CUDA_ERROR_NOT_FOUND,
         "address range one past the end: NOT_FOUND");
  TAP_EQ(cuMemGetAddressRange_v2(&base, &sz, (CUdeviceptr)(uintptr_t)&x), CUDA_ERROR_NOT_FOUND,
         "address range of host memory: NOT_FOUND");
  CUcontext popped;
  CK(cuCtxPopCurrent_v2(&popped));
  TAP_EQ(cuMemGetAddressRange_v2(&base, &sz, b), CUDA_ERROR_INVALID_CONTEXT,
         "address range without a context: INVALID_CONTEXT");
  TAP_EQ(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, a),
         CUDA_ERROR_INVALID_CONTEXT, "DEVICE_POINTER without a context: INVALID_CONTEXT");
  CK(cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a));
  CK(cuCtxPushCurrent_v2(popped));
  CK(cuMemFree_v2(a));
  CK(cuMemFree_v2(b));
}

static void async_pool(void) {
  CUstream s1, s2;
  CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a, b;
  TAP_EQ(cuMemAllocAsync(&a, 0, s1), CUDA_ERROR_INVALID_VALUE, "cuMemAllocAsync of 0 bytes");
  TAP_EQ(cuMemAllocAsync(&a, 10, (CUstream)0x4321), CUDA_ERROR_INVALID_HANDLE, "bad stream");
  CK(cuMemAllocAsync(&a, 100 * MiB, s1));
  TAP_EQ(used(), 100 * MiB, "stream-ordered allocations count against device memory");
  CUmemoryPool pool = NULL, def = NULL;
  CK(cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a));
  CK(cuDeviceGetDefaultMemPool(&def, 0));
  tap_ok(pool == def && pool != NULL, "MEMPOOL_HANDLE is the device's default pool");
  CUcontext owner = (CUcontext)&owner;
  CK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, a));
  tap_ok(owner == NULL, "pool memory belongs to no context");
  CK(cuMemFreeAsync(a, s1));
  TAP_EQ(cuMemFreeAsync(a, s1), CUDA_ERROR_INVALID_VALUE, "cuMemFreeAsync twice");
  TAP_EQ(used(), 100 * MiB, "a stream-ordered free is pending until the stream completes");
  TAP_EQ(fakecudaPendingWork(), 1, "one pending item (the free)");
  CK(cuStreamSynchronize(s1));
  TAP_EQ(used(), 0, "released when the stream's work completes");

  /* The pool reuses memory freed earlier in the same stream when it needs it. */
  CK(cuMemAllocAsync(&a, 700 * MiB, s1));
  CK(cuMemFreeAsync(a, s1));
  CK(cuMemAllocAsync(&b, 700 * MiB, s1));
  TAP_EQ(used(), 700 * MiB, "same-stream reuse of a pending free");
  TAP_EQ(cuMemAllocAsync(&a, 700 * MiB, s2), CUDA_ERROR_OUT_OF_MEMORY,
         "another stream cannot have it: OUT_OF_MEMORY");
  CK(cuMemAllocFromPoolAsync(&a, 1 * MiB, def, s2));
  TAP_EQ(cuMemAllocFromPoolAsync(&a, 1, (CUmemoryPool)&owner, s2), CUDA_ERROR_INVALID_VALUE,
         "cuMemAllocFromPoolAsync from an unknown pool");
  CK(cuMemFreeAsync_ptsz(a, s2));

  /* cuMemFree_v2 of stream-ordered memory does not synchronise. */
  CK(fakecudaEnqueueWork(s2, b, 16));
  CK(cuMemFree_v2(b));
  TAP_EQ(fakecudaPendingWork(), 2, "cuMemFree_v2 of pool memory leaves other work pending");
  CK(cuStreamSynchronize(s2));
  TAP_EQ(used(), 0, "all pool memory returned");

  /* Destroying a created context does not free pool memory. */
  CUcontext c2;
  CK(cuCtxCreate_v2(&c2, 0, 0));
  CK(cuMemAllocAsync(&a, 2 * MiB, NULL));
  CK(cuCtxDestroy_v2(c2));
  TAP_EQ(used(), 2 * MiB, "cuCtxDestroy leaves cuMemAllocAsync memory alone");
  CK(cuMemFree_v2(a));
  CK(cuStreamDestroy_v2(s1));
  CK(cuStreamDestroy_v2(s2));
}

static void vmm(void) {
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t g = 0;
  CK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  TAP_EQ(g, 2 * MiB, "granularity 2 MiB");
  TAP_EQ(cuMemGetAllocationGranularity(&g, &prop, (CUmemAllocationGranularity_flags)7),
         CUDA_ERROR_INVALID_VALUE, "granularity option 7");
  CUmemAllocationProp bad = prop;
  bad.location.id = 3;
  TAP_EQ(cuMemGetAllocationGranularity(&g, &bad, 0), CUDA_ERROR_INVALID_DEVICE,
         "granularity of device 3");
  bad = prop;
  bad.type = CU_MEM_ALLOCATION_TYPE_INVALID;
  TAP_EQ(cuMemGetAllocationGranularity(&g, &bad, 0), CUDA_ERROR_INVALID_VALUE,
         "allocation type INVALID");

  CUdeviceptr va = 0, va2 = 0;
  TAP_EQ(cuMemAddressReserve(&va, 0, 0, 0, 0), CUDA_ERROR_INVALID_VALUE, "reserve 0 bytes");
  TAP_EQ(cuMemAddressReserve(&va, 8 * MiB, 3, 0, 0), CUDA_ERROR_INVALID_VALUE, "alignment 3");
  TAP_EQ(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 1), CUDA_ERROR_INVALID_VALUE, "flags 1");
  CK(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
  TAP_EQ(va % (2 * MiB), 0, "reservations are granularity-aligned");
  CK(cuMemAddressReserve(&va2, 4 * MiB, 0, va + 8 * MiB, 0));
  TAP_EQ(va2, va + 8 * MiB, "a free hint address is honoured");
  TAP_EQ(used(), 0, "reserving address space uses no device memory");

  CUmemGenericAllocationHandle h = 0;
  TAP_EQ(cuMemCreate(&h, 3 * MiB, &prop, 0), CUDA_ERROR_INVALID_VALUE, "cuMemCreate of 3 MiB");
  TAP_EQ(cuMemCreate(&h, 4 * MiB, &prop, 1), CUDA_ERROR_INVALID_VALUE, "cuMemCreate flags 1");
  bad = prop;
  bad.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
  TAP_EQ(cuMemCreate(&h, 4 * MiB, &bad, 0), CUDA_ERROR_NOT_SUPPORTED,
         "fabric handles: NOT_SUPPORTED (descriptors: test_share)");
  TAP_EQ(cuMemCreate(&h, 2 * GiB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate beyond memory");
  CK(cuMemCreate(&h, 4 * MiB, &prop, 0));
  TAP_EQ(used(), 4 * MiB, "cuMemCreate charges device memory");
  CUmemAllocationProp got = {0};
  CK(cuMemGetAllocationPropertiesFromHandle(&got, h));
  tap_ok(got.location.id == 0 && got.type == CU_MEM_ALLOCATION_TYPE_PINNED,
         "properties from handle");

  TAP_EQ(cuMemMap(va, 4 * MiB, 2 * MiB, h, 0), CUDA_ERROR_INVALID_VALUE, "map at offset 2 MiB");
  TAP_EQ(cuMemMap(va + 1, 4 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE,
         "map at an unaligned address");
  TAP_EQ(cuMemMap(va, 6 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE,
         "map more than the handle holds");
  TAP_EQ(cuMemMap(va, 4 * MiB, 0, 12345, 0), CUDA_ERROR_INVALID_VALUE, "map an unknown handle");
  CK(cuMemMap(va, 4 * MiB, 0, h, 0));
  TAP_EQ(cuMemMap(va + 2 * MiB, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "map over a mapping");
  CK(cuMemMap(va2, 4 * MiB, 0, h, 0)); /* the same memory at a second address */
  TAP_EQ(used(), 4 * MiB, "a second mapping charges nothing");

  char buf[16] = "vmm-bytes";
  TAP_EQ(cuMemcpyHtoD_v2(va, buf, sizeof buf), CUDA_ERROR_INVALID_VALUE,
         "a copy before cuMemSetAccess: INVALID_VALUE");
  CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  TAP_EQ(cuMemSetAccess(va, 8 * MiB, &acc, 1), CUDA_ERROR_INVALID_VALUE,
         "cuMemSetAccess over an unmapped part");
  CUmemAccessDesc badacc = {{CU_MEM_LOCATION_TYPE_DEVICE, 4}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  TAP_EQ(cuMemSetAccess(va, 4 * MiB, &badacc, 1), CUDA_ERROR_INVALID_DEVICE, "access for device 4");
  CK(cuMemSetAccess(va, 4 * MiB, &acc, 1));
  CK(cuMemSetAccess(va2, 4 * MiB, &acc, 1));
  unsigned long long fl = 0;
  CK(cuMemGetAccess(&fl, &acc.location, va + 100));
  TAP_EQ(fl, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "cuMemGetAccess");
  CK(cuMemcpyHtoD_v2(va + 2 * MiB, buf, sizeof buf));
  char back[16] = {0};
  CK(cuMemcpyDtoH_v2(back, va2 + 2 * MiB, sizeof back));
  tap_ok(strcmp(back, "vmm-bytes") == 0, "two mappings of one handle share their bytes");
  TAP_EQ(cuMemcpyHtoD_v2(va + 4 * MiB - 4, buf, 8), CUDA_ERROR_INVALID_VALUE,
         "a copy running past the mapping");

  CUdeviceptr base = 0, start = 0;
  size_t size = 0, rsize = 0;
  CK(cuMemGetAddressRange_v2(&base, &size, va + 3 * MiB));
  tap_ok(base == va && size == 4 * MiB, "address range of VMM memory: the mapping");
  CK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + 3 * MiB));
  CK(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + 3 * MiB));
  tap_ok(start == va && rsize == 8 * MiB, "RANGE_START/SIZE of VMM memory: the reservation");
  unsigned mapped = 9;
  CK(cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, va + 5 * MiB));
  TAP_EQ(mapped, 0, "MAPPED 0 in the unmapped part of a reservation");
  TAP_EQ(cuMemGetAddressRange_v2(&base, &size, va + 5 * MiB), CUDA_ERROR_NOT_FOUND,
         "address range of an unmapped part: NOT_FOUND");

  CUmemGenericAllocationHandle h2 = 0;
  CK(cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)(va + 1)));
  TAP_EQ(h2, h, "cuMemRetainAllocationHandle");
  CK(cuMemRelease(h2));
  CK(cuMemRelease(h));
  TAP_EQ(used(), 4 * MiB, "released but still mapped: memory still held");
  TAP_EQ(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE, "release once too often");
  TAP_EQ(cuMemUnmap(va, 2 * MiB), CUDA_ERROR_INVALID_VALUE, "unmap part of a mapping");
  TAP_EQ(cuMemAddressFree(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE,
         "free a reservation still mapped");
  CK(cuMemUnmap(va, 4 * MiB));
  TAP_EQ(used(), 4 * MiB, "one mapping left: memory still held");
  CK(cuMemUnmap(va2, 4 * MiB));
  TAP_EQ(used(), 0, "released and unmapped: memory freed");
  TAP_EQ(cuMemAddressFree(va, 4 * MiB), CUDA_ERROR_INVALID_VALUE, "free with the wrong size");
  CK(cuMemAddressFree(va, 8 * MiB));
  CK(cuMemAddressFree(va2, 4 * MiB));
}

/* IPC within one process: what can be exported, and the handles an importer must refuse (the
 * exchange between two processes is tests/integ/ipc.sh). */
static void ipc(void) {
  CUipcMemHandle h, junk;
  CUdeviceptr d = 0, m = 0, a = 0, p = 0;
  CUstream s = NULL;
  CK(cuMemAlloc_v2(&d, 4096));
  CK(cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL));
  CK(cuMemAllocAsync(&a, 4096, s));
  CK(cuIpcGetMemHandle(&h, d));
  TAP_EQ(cuIpcGetMemHandle(NULL, d), CUDA_ERROR_INVALID_VALUE, "export into NULL");
  TAP_EQ(cuIpcGetMemHandle(&junk, m), CUDA_ERROR_INVALID_VALUE, "export managed memory");
  TAP_EQ(cuIpcGetMemHandle(&junk, a), CUDA_ERROR_INVALID_VALUE, "export stream-ordered memory");
  TAP_EQ(cuIpcGetMemHandle(&junk, d + 4096 + 512), CUDA_ERROR_INVALID_VALUE,
         "export an address nobody allocated");
  TAP_EQ(cuIpcOpenMemHandle_v2(&p, h, 0), CUDA_ERROR_INVALID_CONTEXT,
         "open a handle of this process");
  TAP_EQ(cuIpcOpenMemHandle_v2(&p, h, 2), CUDA_ERROR_INVALID_VALUE, "open with unknown flags");
  TAP_EQ(cuIpcOpenMemHandle_v2(NULL, h, 0), CUDA_ERROR_INVALID_VALUE, "open into NULL");
  memset(&junk, 0x5a, sizeof junk);
  TAP_EQ(cuIpcOpenMemHandle_v2(&p, junk, 0), CUDA_ERROR_INVALID_VALUE,
         "open bytes the driver never made");
  TAP_EQ(p, 0, "... no address handed out");
  TAP_EQ(cuIpcCloseMemHandle(d), CUDA_ERROR_INVALID_VALUE, "close memory that was not opened");
  CK(cuMemFree_v2(d));
  CK(cuMemFree_v2(m));
  CK(cuMemFreeAsync(a, s));
  CK(cuCtxSynchronize());
  TAP_EQ(cuIpcGetMemHandle(&junk, d), CUDA_ERROR_INVALID_VALUE, "export freed memory");
}

int main(void) {
  setenv("FAKECUDA_DRIVER_MEMORY", "off", 1); /* exact figures: test_driver.c has the driver's */
  setenv("FAKECUDA_BACKING", "1", 1);
  setenv("FAKECUDA_MEMORY", "1GiB", 1);
  unsetenv("FAKECUDA_DEVICES");
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
      cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    tap_ok(0, "setup");
    return tap_done();
  }
  basic();
  pitch();
  managed_and_host();
  attributes();
  async_pool();
  vmm();
  ipc();
  TAP_EQ(used(), 0, "no device memory left in use");
  cuDevicePrimaryCtxRelease_v2(0);
  return tap_done();
}
