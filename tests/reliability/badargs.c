/* badargs: hostile arguments to every entry point gpucap hooks, as a program would pass them.
 * Linked with -lcuda (the fake). Prints one `LABEL RC` line per call (flushed, so a crash names
 * the call that caused it) for tests/reliability/badinput.sh, which runs it without gpucap,
 * with gpucap and GPUCAP_POOL=off, and with the pool, and requires the same answers: gpucap
 * must return the driver's own error code for a NULL, invalid or interior pointer, a size of
 * 0 or SIZE_MAX, a bad handle, flag, version or ordinal, and never crash. The calls run before
 * cuInit, with no current context, and with one; the pointers include live, freed, interior
 * and never-allocated addresses. Lines whose label starts with `~` describe pooled blocks,
 * where gpucap answers for the block by design (docs/design.md, pointer identity); the script
 * checks those separately. usage: badargs
 */
#include "shim/base/cudadefs.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define BOGUS ((CUdeviceptr)0xdead0000ull)

static CUdeviceptr block, freed, odd; /* odd: 5000 bytes, not a multiple of the granularity */
static CUstream stream;

static void show(const char *label, CUresult rc) {
  printf("%s %d\n", label, (int)rc);
  fflush(stdout);
}

/* Every hooked entry point with bad arguments; `phase` prefixes the labels. */
static void matrix(const char *phase) {
  char l[128];
  CUdeviceptr p = 0;
  CUdeviceptr_v1 p1 = 0;
  size_t f = 0, t = 0, pitch = 0;
  unsigned int f1 = 0, t1 = 0, pitch1 = 0;
  void *pfn = NULL;
  CUdriverProcAddressQueryResult qs;
#define SHOW(name, call)                                                                           \
  do {                                                                                             \
    snprintf(l, sizeof l, "%s:%s", phase, name);                                                   \
    show(l, call);                                                                                 \
  } while (0)

  SHOW("alloc_v2(NULL,16)", cuMemAlloc_v2(NULL, 16));
  SHOW("alloc_v2(p,0)", cuMemAlloc_v2(&p, 0));
  SHOW("alloc_v2(NULL,0)", cuMemAlloc_v2(NULL, 0));
  SHOW("alloc_v2(p,SIZE_MAX)", cuMemAlloc_v2(&p, SIZE_MAX));
  SHOW("alloc_v2(p,SIZE_MAX-255)", cuMemAlloc_v2(&p, SIZE_MAX - 255));
  SHOW("alloc_v2(p,2^62)", cuMemAlloc_v2(&p, (size_t)1 << 62));
  SHOW("alloc_v1(NULL,16)", cuMemAlloc(NULL, 16));
  SHOW("alloc_v1(p,0)", cuMemAlloc(&p1, 0));
  SHOW("alloc_v1(p,UINT_MAX)", cuMemAlloc(&p1, UINT_MAX));
  SHOW("free_v2(0)", cuMemFree_v2(0));
  SHOW("free_v2(1)", cuMemFree_v2(1));
  SHOW("free_v2(bogus)", cuMemFree_v2(BOGUS));
  SHOW("free_v2(UINT64_MAX)", cuMemFree_v2(~(CUdeviceptr)0));
  SHOW("free_v2(host)", cuMemFree_v2((CUdeviceptr)(uintptr_t)&p));
  SHOW("free_v2(freed)", cuMemFree_v2(freed));
  SHOW("free_v2(block+1)", cuMemFree_v2(block ? block + 1 : BOGUS + 1));
  SHOW("free_v2(block+256)", cuMemFree_v2(block ? block + 256 : BOGUS + 256));
  SHOW("free_v1(0)", cuMemFree(0));
  SHOW("free_v1(bogus)", cuMemFree((CUdeviceptr_v1)0xdead0000u));
  SHOW("getinfo_v2(NULL,NULL)", cuMemGetInfo_v2(NULL, NULL));
  SHOW("getinfo_v2(f,NULL)", cuMemGetInfo_v2(&f, NULL));
  SHOW("getinfo_v2(NULL,t)", cuMemGetInfo_v2(NULL, &t));
  SHOW("getinfo_v1(NULL,NULL)", cuMemGetInfo(NULL, NULL));
  SHOW("getinfo_v1(f,NULL)", cuMemGetInfo(&f1, NULL));
  SHOW("getinfo_v1(NULL,t)", cuMemGetInfo(NULL, &t1));
  SHOW("totalmem_v2(NULL,0)", cuDeviceTotalMem_v2(NULL, 0));
  SHOW("totalmem_v2(b,-1)", cuDeviceTotalMem_v2(&t, -1));
  SHOW("totalmem_v2(b,1)", cuDeviceTotalMem_v2(&t, 1));
  SHOW("totalmem_v2(b,64)", cuDeviceTotalMem_v2(&t, 64));
  SHOW("totalmem_v2(b,INT_MAX)", cuDeviceTotalMem_v2(&t, INT_MAX));
  SHOW("totalmem_v2(b,INT_MIN)", cuDeviceTotalMem_v2(&t, INT_MIN));
  SHOW("totalmem_v1(NULL,0)", cuDeviceTotalMem(NULL, 0));
  SHOW("totalmem_v1(b,-1)", cuDeviceTotalMem(&t1, -1));
  SHOW("totalmem_v1(b,64)", cuDeviceTotalMem(&t1, 64));
  SHOW("pitch_v2(NULL,pitch,64,2,4)", cuMemAllocPitch_v2(NULL, &pitch, 64, 2, 4));
  SHOW("pitch_v2(p,NULL,64,2,4)", cuMemAllocPitch_v2(&p, NULL, 64, 2, 4));
  SHOW("pitch_v2(p,pitch,0,2,4)", cuMemAllocPitch_v2(&p, &pitch, 0, 2, 4));
  SHOW("pitch_v2(p,pitch,64,0,4)", cuMemAllocPitch_v2(&p, &pitch, 64, 0, 4));
  SHOW("pitch_v2(p,pitch,64,2,0)", cuMemAllocPitch_v2(&p, &pitch, 64, 2, 0));
  SHOW("pitch_v2(p,pitch,64,2,3)", cuMemAllocPitch_v2(&p, &pitch, 64, 2, 3));
  SHOW("pitch_v2(p,pitch,64,2,32)", cuMemAllocPitch_v2(&p, &pitch, 64, 2, 32));
  SHOW("pitch_v2(p,pitch,SIZE_MAX,2,4)", cuMemAllocPitch_v2(&p, &pitch, SIZE_MAX, 2, 4));
  SHOW("pitch_v2(p,pitch,64,SIZE_MAX,4)", cuMemAllocPitch_v2(&p, &pitch, 64, SIZE_MAX, 4));
  SHOW("pitch_v2(p,pitch,2^31,2^31,4)",
       cuMemAllocPitch_v2(&p, &pitch, (size_t)1 << 31, (size_t)1 << 31, 4));
  SHOW("pitch_v1(NULL,pitch,64,2,4)", cuMemAllocPitch(NULL, &pitch1, 64, 2, 4));
  SHOW("pitch_v1(p,pitch,UINT_MAX,UINT_MAX,4)",
       cuMemAllocPitch(&p1, &pitch1, UINT_MAX, UINT_MAX, 4));
  SHOW("addrrange(NULL,NULL,bogus)", cuMemGetAddressRange_v2(NULL, NULL, BOGUS));
  SHOW("addrrange(b,s,0)", cuMemGetAddressRange_v2(&p, &f, 0));
  SHOW("addrrange(b,s,freed)", cuMemGetAddressRange_v2(&p, &f, freed));
  SHOW("addrrange(b,s,UINT64_MAX)", cuMemGetAddressRange_v2(&p, &f, ~(CUdeviceptr)0));
  SHOW("addrrange(b,s,odd+4999)", cuMemGetAddressRange_v2(&p, &f, odd ? odd + 4999 : BOGUS));
  SHOW("addrrange(b,s,odd+5000)", cuMemGetAddressRange_v2(&p, &f, odd ? odd + 5000 : BOGUS));
  SHOW("ptrattr(v,RANGE_START,odd+5000)",
       cuPointerGetAttribute(&p, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, odd ? odd + 5000 : BOGUS));
  CUipcMemHandle hv;
  SHOW("ipc(h,odd+5000)", cuIpcGetMemHandle(&hv, odd ? odd + 5000 : BOGUS));
  SHOW("ptrattr(NULL,RANGE_START,bogus)",
       cuPointerGetAttribute(NULL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, BOGUS));
  SHOW("ptrattr(v,9999,bogus)", cuPointerGetAttribute(&p, (CUpointer_attribute)9999, BOGUS));
  SHOW("ptrattr(v,RANGE_SIZE,0)", cuPointerGetAttribute(&f, CU_POINTER_ATTRIBUTE_RANGE_SIZE, 0));
  SHOW("ptrattr(v,RANGE_SIZE,freed)",
       cuPointerGetAttribute(&f, CU_POINTER_ATTRIBUTE_RANGE_SIZE, freed));
  SHOW("ptrattrs(0,NULL,NULL,bogus)", cuPointerGetAttributes(0, NULL, NULL, BOGUS));
  {
    CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                    (CUpointer_attribute)9999};
    void *data[2] = {&p, &f};
    SHOW("ptrattrs(2,{start,9999},data,block)", cuPointerGetAttributes(2, attrs, data, block));
    SHOW("ptrattrs(1,attrs,NULL,block)", cuPointerGetAttributes(1, attrs, NULL, block));
    SHOW("ptrattrs(1,NULL,data,block)", cuPointerGetAttributes(1, NULL, data, block));
    /* The values too: freed memory is unknown memory, whoever allocated it. */
    unsigned int type = 7, ordinal = 7;
    CUpointer_attribute what[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void *into[2] = {&type, &ordinal};
    SHOW("ptrattrs(type+ordinal,freed)", cuPointerGetAttributes(2, what, into, freed));
    SHOW("ptrattrs(freed):type", (CUresult)type);
    SHOW("ptrattrs(freed):ordinal", (CUresult)ordinal);
  }
  SHOW("allocasync(NULL,16,s)", cuMemAllocAsync(NULL, 16, stream));
  SHOW("allocasync(p,0,s)", cuMemAllocAsync(&p, 0, stream));
  SHOW("allocasync(p,SIZE_MAX,s)", cuMemAllocAsync(&p, SIZE_MAX, stream));
  SHOW("allocasync_ptsz(p,0,NULL)", cuMemAllocAsync_ptsz(&p, 0, NULL));
  SHOW("allocfrompool(p,16,NULL,s)", cuMemAllocFromPoolAsync(&p, 16, NULL, stream));
  SHOW("allocfrompool_ptsz(NULL,16,NULL,NULL)", cuMemAllocFromPoolAsync_ptsz(NULL, 16, NULL, NULL));
  SHOW("freeasync(0,s)", cuMemFreeAsync(0, stream));
  SHOW("freeasync(bogus,s)", cuMemFreeAsync(BOGUS, stream));
  SHOW("freeasync(freed,s)", cuMemFreeAsync(freed, stream));
  SHOW("freeasync(block+256,s)", cuMemFreeAsync(block ? block + 256 : BOGUS, stream));
  SHOW("freeasync_ptsz(bogus,NULL)", cuMemFreeAsync_ptsz(BOGUS, NULL));
  SHOW("managed(NULL,16,GLOBAL)", cuMemAllocManaged(NULL, 16, CU_MEM_ATTACH_GLOBAL));
  SHOW("managed(p,0,GLOBAL)", cuMemAllocManaged(&p, 0, CU_MEM_ATTACH_GLOBAL));
  SHOW("managed(p,16,0)", cuMemAllocManaged(&p, 16, 0));
  SHOW("managed(p,16,0xff)", cuMemAllocManaged(&p, 16, 0xff));
  SHOW("managed(p,SIZE_MAX,GLOBAL)", cuMemAllocManaged(&p, SIZE_MAX, CU_MEM_ATTACH_GLOBAL));
  {
    CUmemGenericAllocationHandle h = 0;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    SHOW("memcreate(NULL,2MiB,prop,0)", cuMemCreate(NULL, 2 << 20, &prop, 0));
    SHOW("memcreate(h,0,prop,0)", cuMemCreate(&h, 0, &prop, 0));
    SHOW("memcreate(h,2MiB,NULL,0)", cuMemCreate(&h, 2 << 20, NULL, 0));
    SHOW("memcreate(h,1,prop,0)", cuMemCreate(&h, 1, &prop, 0));
    SHOW("memcreate(h,2MiB,prop,1)", cuMemCreate(&h, 2 << 20, &prop, 1));
    SHOW("memcreate(h,SIZE_MAX&~2MiB,prop,0)",
         cuMemCreate(&h, SIZE_MAX & ~(size_t)((2 << 20) - 1), &prop, 0));
    prop.location.id = -1;
    SHOW("memcreate(h,2MiB,dev -1,0)", cuMemCreate(&h, 2 << 20, &prop, 0));
    prop.location.id = 1;
    SHOW("memcreate(h,2MiB,dev 1,0)", cuMemCreate(&h, 2 << 20, &prop, 0));
    prop.location.id = 64;
    SHOW("memcreate(h,2MiB,dev 64,0)", cuMemCreate(&h, 2 << 20, &prop, 0));
    prop.location.id = INT_MAX;
    SHOW("memcreate(h,2MiB,dev INT_MAX,0)", cuMemCreate(&h, 2 << 20, &prop, 0));
    prop.location.id = 0;
    prop.location.type = CU_MEM_LOCATION_TYPE_INVALID;
    SHOW("memcreate(h,2MiB,loc invalid,0)", cuMemCreate(&h, 2 << 20, &prop, 0));
    SHOW("memrelease(0)", cuMemRelease(0));
    SHOW("memrelease(bogus)", cuMemRelease(0xdead0000ull));
    SHOW("memimport(NULL,0,fd)",
         cuMemImportFromShareableHandle(NULL, NULL, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    SHOW("memimport(h,stdin,fd)",
         cuMemImportFromShareableHandle(&h, (void *)(intptr_t)0,
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    SHOW("memimport(h,-1,fd)",
         cuMemImportFromShareableHandle(&h, (void *)(intptr_t)-1,
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    SHOW("memimport(h,-1,fabric)",
         cuMemImportFromShareableHandle(&h, (void *)(intptr_t)-1, CU_MEM_HANDLE_TYPE_FABRIC));
    SHOW("memimport(h,-1,~0)",
         cuMemImportFromShareableHandle(&h, (void *)(intptr_t)-1, (CUmemAllocationHandleType)~0u));
  }
  SHOW("ipc(NULL,block)", cuIpcGetMemHandle(NULL, block));
  SHOW("ipc(h,0)", cuIpcGetMemHandle((CUipcMemHandle *)(void *)l, 0));
  SHOW("ipc(h,bogus)", cuIpcGetMemHandle((CUipcMemHandle *)(void *)l, BOGUS));
  CUipcMemHandle junk;
  memset(&junk, 0x5a, sizeof junk);
  SHOW("ipcopen_v2(NULL,junk,1)", cuIpcOpenMemHandle_v2(NULL, junk, 1));
  SHOW("ipcopen_v2(p,junk,1)", cuIpcOpenMemHandle_v2(&p, junk, 1));
  SHOW("ipcopen_v2(p,junk,~0)", cuIpcOpenMemHandle_v2(&p, junk, ~0u));
  SHOW("ipcopen_v1(p,junk,0)", cuIpcOpenMemHandle(&p, junk, 0));
  SHOW("ipcclose(0)", cuIpcCloseMemHandle(0));
  SHOW("ipcclose(bogus)", cuIpcCloseMemHandle(BOGUS));
  SHOW("ipcclose(block)", cuIpcCloseMemHandle(block ? block : BOGUS));
  {
    CUarray a = NULL;
    CUmipmappedArray m = NULL;
    CUDA_ARRAY_DESCRIPTOR d2 = {
        .Width = 16, .Height = 16, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 3};
    CUDA_ARRAY3D_DESCRIPTOR d3 = {
        .Width = 16, .Height = 16, .Depth = 4, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    SHOW("array_v2(NULL,d)", cuArrayCreate_v2(NULL, &d2));
    SHOW("array_v2(a,NULL)", cuArrayCreate_v2(&a, NULL));
    SHOW("array_v2(a,3 channels)", cuArrayCreate_v2(&a, &d2));
    d2.NumChannels = 1;
    d2.Format = (CUarray_format)0xffff;
    SHOW("array_v2(a,format 0xffff)", cuArrayCreate_v2(&a, &d2));
    d2.Format = CU_AD_FORMAT_FLOAT;
    d2.Width = d2.Height = SIZE_MAX;
    SHOW("array_v2(a,SIZE_MAX x SIZE_MAX)", cuArrayCreate_v2(&a, &d2));
    SHOW("array3d(NULL,d)", cuArray3DCreate_v2(NULL, &d3));
    SHOW("array3d(a,NULL)", cuArray3DCreate_v2(&a, NULL));
    d3.Flags = ~0u;
    SHOW("array3d(a,flags ~0)", cuArray3DCreate_v2(&a, &d3));
    d3.Flags = 0;
    d3.Depth = SIZE_MAX;
    SHOW("array3d(a,depth SIZE_MAX)", cuArray3DCreate_v2(&a, &d3));
    d3.Flags = CUDA_ARRAY3D_DEFERRED_MAPPING;
    SHOW("array3d(a,deferred depth SIZE_MAX)", cuArray3DCreate_v2(&a, &d3));
    SHOW("mipmap(NULL,d,1)", cuMipmappedArrayCreate(NULL, &d3, 1));
    SHOW("mipmap(m,NULL,1)", cuMipmappedArrayCreate(&m, NULL, 1));
    d3.Flags = 0;
    SHOW("mipmap(m,depth SIZE_MAX,UINT_MAX)", cuMipmappedArrayCreate(&m, &d3, UINT_MAX));
    SHOW("arraydestroy(NULL)", cuArrayDestroy(NULL));
    SHOW("arraydestroy(bogus)", cuArrayDestroy((CUarray)(uintptr_t)BOGUS));
    SHOW("mipmapdestroy(NULL)", cuMipmappedArrayDestroy(NULL));
    SHOW("mipmapdestroy(bogus)", cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)BOGUS));
  }
  SHOW("gpa(NULL,pfn,12000,0)", cuGetProcAddress(NULL, &pfn, 12000, 0));
  SHOW("gpa(cuMemAlloc,NULL,12000,0)", cuGetProcAddress("cuMemAlloc", NULL, 12000, 0));
  SHOW("gpa(cuMemAlloc,pfn,-1,0)", cuGetProcAddress("cuMemAlloc", &pfn, -1, 0));
  SHOW("gpa(cuMemAlloc,pfn,INT_MAX,0)", cuGetProcAddress("cuMemAlloc", &pfn, INT_MAX, 0));
  SHOW("gpa(cuMemAlloc,pfn,12000,4)", cuGetProcAddress("cuMemAlloc", &pfn, 12000, 4));
  SHOW("gpa(cuMemAlloc,pfn,12000,~0)", cuGetProcAddress("cuMemAlloc", &pfn, 12000, ~0ull));
  SHOW("gpa(empty,pfn,12000,0)", cuGetProcAddress("", &pfn, 12000, 0));
  SHOW("gpa(cuMemAlloc_v2,pfn,12000,0)", cuGetProcAddress("cuMemAlloc_v2", &pfn, 12000, 0));
  SHOW("gpa_v2(NULL,pfn,12000,0,qs)", cuGetProcAddress_v2(NULL, &pfn, 12000, 0, &qs));
  SHOW("gpa_v2(cuMemFree,NULL,12000,0,qs)", cuGetProcAddress_v2("cuMemFree", NULL, 12000, 0, &qs));
  SHOW("gpa_v2(cuMemFree,pfn,1000,0,NULL)", cuGetProcAddress_v2("cuMemFree", &pfn, 1000, 0, NULL));
  SHOW("gpa_v2(cuMemFree,pfn,12000,7,qs)", cuGetProcAddress_v2("cuMemFree", &pfn, 12000, 7, &qs));
  SHOW("ctxdestroy(NULL)", cuCtxDestroy_v2(NULL));
  SHOW("primaryrelease_v2(-1)", cuDevicePrimaryCtxRelease_v2(-1));
  SHOW("primaryrelease_v2(64)", cuDevicePrimaryCtxRelease_v2(64));
  SHOW("primaryrelease_v1(INT_MIN)", cuDevicePrimaryCtxRelease(INT_MIN));
  SHOW("primaryreset_v2(-1)", cuDevicePrimaryCtxReset_v2(-1));
  SHOW("primaryreset_v1(64)", cuDevicePrimaryCtxReset(64));
  /* dlsym: whether a lookup finds something must not change (which symbol is gpucap's job). */
  snprintf(l, sizeof l, "%s:dlsym(DEFAULT,empty)", phase);
  show(l, dlsym(RTLD_DEFAULT, "") != NULL);
  snprintf(l, sizeof l, "%s:dlsym(DEFAULT,cu)", phase);
  show(l, dlsym(RTLD_DEFAULT, "cu") != NULL);
  snprintf(l, sizeof l, "%s:dlsym(DEFAULT,cuMemAlloc_v2x)", phase);
  show(l, dlsym(RTLD_DEFAULT, "cuMemAlloc_v2x") != NULL);
  snprintf(l, sizeof l, "%s:dlsym(NEXT,cuMemAlloc_v2)", phase);
  show(l, dlsym(RTLD_NEXT, "cuMemAlloc_v2") != NULL);
#undef SHOW
}

/* Calls on pooled blocks whose answers gpucap gives for the block by design; the script
 * checks them against what docs/design.md promises. */
static void pooled(void) {
  CUdeviceptr base = 0, v = 0;
  size_t size = 0;
  CUipcMemHandle h = {0}; /* defined even where the export is refused */
  show("~addrrange(block+300)", cuMemGetAddressRange_v2(&base, &size, block + 300));
  printf("~addrrange_base_ok %d\n", base == block && size == 4096);
  show("~addrrange(block+8192)", cuMemGetAddressRange_v2(&base, &size, block + 8192));
  show("~ptrattr(RANGE_START,block+300)",
       cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, block + 300));
  printf("~ptrattr_base_ok %d\n", v == block);
  show("~ipc(h,block)", cuIpcGetMemHandle(&h, block));
  /* A gpucap handle naming an export that does not exist: another process (the pid at bytes
   * 8..11, shim/entry/ipc.c), which shares nothing, under a key it never had (16..23); for the
   * driver's own handle (pool=off) bytes it never wrote. */
  int32_t other = (int32_t)getppid();
  memcpy((char *)&h + 8, &other, sizeof other);
  memset((char *)&h + 16, 0x5a, 8);
  show("~ipcopen(p,unknown export,1)", cuIpcOpenMemHandle_v2(&v, h, 1));
  show("~freeasync(block,bogus stream)", cuMemFreeAsync(block, (CUstream)(uintptr_t)0x1234));
  fflush(stdout);
}

int main(void) {
  CUdevice dev = 0;
  CUcontext ctx = NULL;
  matrix("pre");
  show("init", cuInit(0));
  show("primaryretain", cuDevicePrimaryCtxRetain(&ctx, 0));
  show("setcurrent(NULL)", cuCtxSetCurrent(NULL));
  matrix("noctx");
  show("setcurrent", cuCtxSetCurrent(ctx));
  show("stream", cuStreamCreate(&stream, 0));
  /* block first: a driver reusing the freed address at once must not make freed == block */
  show("alloc block", cuMemAlloc_v2(&block, 4096));
  show("alloc freed", cuMemAlloc_v2(&freed, 4096));
  show("alloc odd", cuMemAlloc_v2(&odd, 5000));
  show("free freed", cuMemFree_v2(freed));
  matrix("ctx");
  CUcontext popped = NULL;
  show("popcurrent", cuCtxPopCurrent_v2(&popped));
  show("free(odd) with no current context", cuMemFree_v2(odd));
  show("pushcurrent", cuCtxPushCurrent_v2(popped));
  show("free(odd) again: it was kept", cuMemFree_v2(odd));
  show("primaryrelease(not retained twice)", cuDevicePrimaryCtxRelease_v2(dev));
  show("primaryretain again", cuDevicePrimaryCtxRetain(&ctx, 0));
  show("setcurrent again", cuCtxSetCurrent(ctx));
  show("alloc block again", cuMemAlloc_v2(&block, 4096));
  pooled();
  show("sync", cuCtxSynchronize());
  return 0;
}
