/* TAP test of the fake driver's initialisation, devices, attributes and contexts (primary and
 * created, the per-thread current-context stack), with two devices of 16 and 8 GiB.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/tap.h"

#define GiB ((size_t)1 << 30)
#define CK(call) TAP_EQ((call), CUDA_SUCCESS, "%s", #call)

/* A catch-all entry point without semantics (declared here: not in our headers). */
CUresult cuGraphicsUnregisterResource(void *resource);

static void before_init(void) {
  int v = 0;
  TAP_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS, "cuDriverGetVersion works before cuInit");
  TAP_EQ(v, 13000, "driver version 13000");
  TAP_EQ(cuDriverGetVersion(NULL), CUDA_ERROR_INVALID_VALUE, "cuDriverGetVersion(NULL)");
  int n;
  TAP_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED, "cuDeviceGetCount before cuInit");
  CUcontext c;
  TAP_EQ(cuCtxGetCurrent(&c), CUDA_ERROR_NOT_INITIALIZED, "cuCtxGetCurrent before cuInit");
  CUdeviceptr p;
  TAP_EQ(cuMemAlloc_v2(&p, 1), CUDA_ERROR_NOT_INITIALIZED, "cuMemAlloc_v2 before cuInit");
  TAP_EQ(cuGraphicsUnregisterResource(NULL), CUDA_ERROR_NOT_INITIALIZED, "catch-all before cuInit");
  TAP_EQ(cuInit(1), CUDA_ERROR_INVALID_VALUE, "cuInit(1): INVALID_VALUE");
  TAP_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED,
         "... and the driver stays uninitialised");
  TAP_EQ(cuInit(0), CUDA_SUCCESS, "cuInit(0)");
  TAP_EQ(cuInit(0), CUDA_SUCCESS, "cuInit(0) again");
  TAP_EQ(cuGraphicsUnregisterResource(NULL), CUDA_ERROR_NOT_SUPPORTED,
         "catch-all after cuInit: NOT_SUPPORTED");
  TAP_EQ(fakecudaCalls("cuInit"), 3, "fakecudaCalls counts every call, failed ones too");
}

static void devices(void) {
  int n = 0;
  CK(cuDeviceGetCount(&n));
  TAP_EQ(n, 2, "two devices");
  TAP_EQ(cuDeviceGetCount(NULL), CUDA_ERROR_INVALID_VALUE, "cuDeviceGetCount(NULL)");
  CUdevice d = -1;
  CK(cuDeviceGet(&d, 1));
  TAP_EQ(d, 1, "cuDeviceGet(1)");
  TAP_EQ(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet(2): INVALID_DEVICE");
  TAP_EQ(cuDeviceGet(&d, -1), CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet(-1): INVALID_DEVICE");
  TAP_EQ(cuDeviceGet(NULL, 0), CUDA_ERROR_INVALID_VALUE, "cuDeviceGet(NULL)");

  char name[64];
  CK(cuDeviceGetName(name, sizeof name, 0));
  tap_ok(strcmp(name, "Fake CUDA Device 0") == 0, "device name: %s", name);
  CK(cuDeviceGetName(name, 5, 1));
  tap_ok(strcmp(name, "Fake") == 0, "a short buffer truncates the name");
  TAP_EQ(cuDeviceGetName(name, 0, 0), CUDA_ERROR_INVALID_VALUE, "name length 0");
  TAP_EQ(cuDeviceGetName(name, 64, 7), CUDA_ERROR_INVALID_DEVICE, "name of device 7");

  CUuuid u0, u1, u0b;
  CK(cuDeviceGetUuid_v2(&u0, 0));
  CK(cuDeviceGetUuid_v2(&u1, 1));
  CK(cuDeviceGetUuid(&u0b, 0));
  tap_ok(memcmp(&u0, &u1, sizeof u0) != 0, "UUIDs differ between devices");
  tap_ok(memcmp(&u0, &u0b, sizeof u0) == 0, "cuDeviceGetUuid and _v2 agree");
  TAP_EQ(cuDeviceGetUuid_v2(NULL, 0), CUDA_ERROR_INVALID_VALUE, "UUID into NULL");

  size_t total = 0;
  CK(cuDeviceTotalMem_v2(&total, 0));
  TAP_EQ(total, 16 * GiB, "device 0: 16 GiB");
  CK(cuDeviceTotalMem_v2(&total, 1));
  TAP_EQ(total, 8 * GiB, "device 1: 8 GiB (FAKECUDA_MEMORY per device)");
  unsigned total32 = 0;
  CK(cuDeviceTotalMem(&total32, 0));
  TAP_EQ(total32, 0xffffffffu, "legacy cuDeviceTotalMem clamps to 4 GiB - 1");
  TAP_EQ(cuDeviceTotalMem_v2(&total, 2), CUDA_ERROR_INVALID_DEVICE, "total of device 2");

  static const struct {
    CUdevice_attribute attr;
    int value;
    const char *what;
  } attrs[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9, "compute capability major 9"},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0, "compute capability minor 0"},
      {CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512, "texture alignment 512"},
      {CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32, "texture pitch alignment 32"},
      {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1, "unified addressing"},
      {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1, "managed memory"},
      {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1, "concurrent managed access"},
      {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1, "VMM supported"},
      {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1, "memory pools supported"},
      {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32, "warp size 32"},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132, "132 SMs (H100)"},
      {CU_DEVICE_ATTRIBUTE_INTEGRATED, 0, "discrete"},
      {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1, "can map host memory"},
      {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1,
       "POSIX file-descriptor shareable handles"},
      {(CUdevice_attribute)128, 0, "no fabric handles"}, /* HANDLE_TYPE_FABRIC_SUPPORTED */
  };
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
    int v = -7;
    CUresult rc = cuDeviceGetAttribute(&v, attrs[i].attr, 0);
    tap_ok(rc == CUDA_SUCCESS && v == attrs[i].value, "attribute: %s (got %d)", attrs[i].what, v);
  }
  int v;
  TAP_EQ(cuDeviceGetAttribute(&v, (CUdevice_attribute)0, 0), CUDA_ERROR_INVALID_VALUE,
         "attribute 0: INVALID_VALUE");
  TAP_EQ(cuDeviceGetAttribute(&v, (CUdevice_attribute)148, 0), CUDA_ERROR_INVALID_VALUE,
         "attribute CU_DEVICE_ATTRIBUTE_MAX: INVALID_VALUE");
  TAP_EQ(cuDeviceGetAttribute(&v, (CUdevice_attribute)147, 0), CUDA_SUCCESS, "attribute 147");
  TAP_EQ(cuDeviceGetAttribute(NULL, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_ERROR_INVALID_VALUE,
         "attribute into NULL");
  TAP_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 9), CUDA_ERROR_INVALID_DEVICE,
         "attribute of device 9");
  int b0, b1;
  cuDeviceGetAttribute(&b0, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0);
  cuDeviceGetAttribute(&b1, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1);
  tap_ok(b0 != b1, "PCI bus ids differ");
  int major, minor;
  CK(cuDeviceComputeCapability(&major, &minor, 1));
  tap_ok(major == 9 && minor == 0, "cuDeviceComputeCapability 9.0");
  char bus[32];
  CK(cuDeviceGetPCIBusId(bus, sizeof bus, 1));
  CUdevice back = -1;
  CK(cuDeviceGetByPCIBusId(&back, bus));
  TAP_EQ(back, 1, "cuDeviceGetByPCIBusId(%s)", bus);
  CUmemoryPool p0, p0b, p1;
  CK(cuDeviceGetDefaultMemPool(&p0, 0));
  CK(cuDeviceGetMemPool(&p0b, 0));
  CK(cuDeviceGetDefaultMemPool(&p1, 1));
  tap_ok(p0 == p0b && p0 != p1 && p0 != NULL, "one default memory pool per device");
}

static void primary(void) {
  CUcontext c = (CUcontext)&c;
  CK(cuCtxGetCurrent(&c));
  tap_ok(c == NULL, "no current context at first");
  CUdeviceptr p;
  size_t fr, tot;
  TAP_EQ(cuMemAlloc_v2(&p, 1), CUDA_ERROR_INVALID_CONTEXT, "cuMemAlloc_v2 without a context");
  TAP_EQ(cuMemGetInfo_v2(&fr, &tot), CUDA_ERROR_INVALID_CONTEXT,
         "cuMemGetInfo_v2 without a context");
  TAP_EQ(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT, "cuCtxSynchronize without a context");
  CUdevice d;
  TAP_EQ(cuCtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT, "cuCtxGetDevice without a context");
  TAP_EQ(cuCtxPopCurrent_v2(&c), CUDA_ERROR_INVALID_CONTEXT, "pop from an empty stack");
  CK(cuCtxSetCurrent(NULL));

  unsigned flags = 99;
  int active = 99;
  CK(cuDevicePrimaryCtxGetState(0, &flags, &active));
  tap_ok(flags == 0 && active == 0, "primary context: inactive, flags 0");
  TAP_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT,
         "release of a never-retained primary context: INVALID_CONTEXT");
  TAP_EQ(cuDevicePrimaryCtxSetFlags_v2(0, 3), CUDA_ERROR_INVALID_VALUE,
         "SetFlags SPIN|YIELD: INVALID_VALUE");
  TAP_EQ(cuDevicePrimaryCtxSetFlags_v2(0, 0x100), CUDA_ERROR_INVALID_VALUE,
         "SetFlags 0x100: INVALID_VALUE");
  CK(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_BLOCKING_SYNC));
  TAP_EQ(cuDevicePrimaryCtxSetFlags(5, 0), CUDA_ERROR_INVALID_DEVICE, "SetFlags on device 5");

  CUcontext pc = NULL, pc2 = NULL;
  CK(cuDevicePrimaryCtxRetain(&pc, 0));
  CK(cuDevicePrimaryCtxRetain(&pc2, 0));
  tap_ok(pc != NULL && pc == pc2, "retain twice: the same primary context");
  CK(cuDevicePrimaryCtxGetState(0, &flags, &active));
  tap_ok(active == 1 && flags == CU_CTX_SCHED_BLOCKING_SYNC, "retained: active, flags kept");
  TAP_EQ(cuDevicePrimaryCtxSetFlags(0, 0), CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE,
         "v1 SetFlags on an active primary context: PRIMARY_CONTEXT_ACTIVE");
  CK(cuDevicePrimaryCtxSetFlags_v2(0, 0));
  TAP_EQ(cuMemAlloc_v2(&p, 1), CUDA_ERROR_INVALID_CONTEXT,
         "retained but not current: INVALID_CONTEXT");
  CK(cuCtxSetCurrent(pc));
  CK(cuCtxGetCurrent(&c));
  tap_ok(c == pc, "cuCtxSetCurrent / cuCtxGetCurrent");
  d = -1;
  CK(cuCtxGetDevice(&d));
  TAP_EQ(d, 0, "cuCtxGetDevice: 0");
  CK(cuMemAlloc_v2(&p, (size_t)1 << 20));
  CK(cuMemGetInfo_v2(&fr, &tot));
  TAP_EQ(tot - fr, (size_t)1 << 20, "1 MiB in use");
  CK(cuDevicePrimaryCtxRelease(0));
  CK(cuDevicePrimaryCtxGetState(0, &flags, &active));
  TAP_EQ(active, 1, "one release of two: still active");
  CUdeviceptr base;
  CK(cuMemGetAddressRange_v2(&base, NULL, p));
  CK(cuDevicePrimaryCtxRelease_v2(0));
  CK(cuDevicePrimaryCtxGetState(0, &flags, &active));
  TAP_EQ(active, 0, "last release: inactive");
  TAP_EQ(cuMemAlloc_v2(&p, 1), CUDA_ERROR_CONTEXT_IS_DESTROYED,
         "the released primary context is still current: CONTEXT_IS_DESTROYED");
  TAP_EQ(cuCtxGetDevice(&d), CUDA_ERROR_CONTEXT_IS_DESTROYED,
         "cuCtxGetDevice: CONTEXT_IS_DESTROYED");
  CK(cuDevicePrimaryCtxRetain(&pc, 0));
  CK(cuMemGetInfo_v2(&fr, &tot));
  TAP_EQ(fr, tot, "releasing the last reference freed the context's memory");
  TAP_EQ(cuMemGetAddressRange_v2(&base, NULL, p), CUDA_ERROR_NOT_FOUND, "... the pointer is gone");

  CK(cuMemAlloc_v2(&p, 4096));
  CK(cuDevicePrimaryCtxReset_v2(0));
  CK(cuDevicePrimaryCtxGetState(0, &flags, &active));
  TAP_EQ(active, 0, "reset: inactive");
  CK(cuDevicePrimaryCtxRetain(&pc, 0));
  CK(cuMemGetInfo_v2(&fr, &tot));
  TAP_EQ(fr, tot, "reset freed the memory");
  CK(cuDevicePrimaryCtxRelease_v2(0));
  CK(cuDevicePrimaryCtxRelease_v2(0)); /* reset did not drop the first reference */
  TAP_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT, "one release too many");
  CK(cuDevicePrimaryCtxRetain(&pc, 0));
  CK(cuCtxSetCurrent(NULL));
  CK(cuCtxGetCurrent(&c));
  tap_ok(c == NULL, "cuCtxSetCurrent(NULL) pops the current context");
}

static CUcontext shared_ctx;
static pthread_barrier_t barrier;
static CUresult thread_rc[2];

static void *other_thread(void *arg) {
  (void)arg;
  CUcontext c;
  cuCtxGetCurrent(&c);
  thread_rc[0] = c == NULL ? cuCtxSetCurrent(shared_ctx) : CUDA_ERROR_UNKNOWN;
  pthread_barrier_wait(&barrier); /* main destroys the context now */
  pthread_barrier_wait(&barrier);
  CUdeviceptr p;
  thread_rc[1] = cuMemAlloc_v2(&p, 1);
  return NULL;
}

static void created(void) {
  CUcontext c1 = NULL, c2 = NULL, pc = NULL, top = NULL;
  TAP_EQ(cuCtxCreate_v2(NULL, 0, 0), CUDA_ERROR_INVALID_VALUE, "cuCtxCreate_v2(NULL)");
  TAP_EQ(cuCtxCreate_v2(&c1, 0x100, 0), CUDA_ERROR_INVALID_VALUE, "cuCtxCreate_v2 flags 0x100");
  TAP_EQ(cuCtxCreate_v2(&c1, 0, 2), CUDA_ERROR_INVALID_DEVICE, "cuCtxCreate_v2 on device 2");
  CK(cuCtxCreate_v2(&c1, CU_CTX_SCHED_YIELD, 1));
  CK(cuCtxGetCurrent(&top));
  tap_ok(top == c1, "a created context becomes current");
  unsigned flags = 0;
  CK(cuCtxGetFlags(&flags));
  TAP_EQ(flags, CU_CTX_SCHED_YIELD, "cuCtxGetFlags");
  CUdevice d = -1;
  CK(cuCtxGetDevice(&d));
  TAP_EQ(d, 1, "created on device 1");
  CK(cuDevicePrimaryCtxRetain(&pc, 0));
  CK(cuCtxPushCurrent_v2(pc));
  CK(cuCtxGetDevice(&d));
  TAP_EQ(d, 0, "push: the primary context of device 0 is current");
  CK(cuCtxGetDevice_v2(&d, c1));
  TAP_EQ(d, 1, "cuCtxGetDevice_v2 of an explicit context");
  unsigned long long id1 = 0, id2 = 0;
  CK(cuCtxGetId(c1, &id1));
  CK(cuCtxGetId(NULL, &id2));
  tap_ok(id1 != 0 && id1 != id2, "context ids are unique");
  CK(cuCtxPopCurrent_v2(&top));
  tap_ok(top == pc, "pop returns the popped context");
  CK(cuCtxGetCurrent(&top));
  tap_ok(top == c1, "... and the previous one is current again");
  TAP_EQ(cuCtxPushCurrent_v2(NULL), CUDA_ERROR_INVALID_CONTEXT, "push NULL: INVALID_CONTEXT");

  CUctxCreateParams params = {0};
  TAP_EQ(cuCtxCreate_v4(&c2, &params, 0, 0), CUDA_ERROR_INVALID_VALUE,
         "cuCtxCreate_v4 with neither affinity nor CIG parameters");
  CUctxCigParam cig = {CIG_DATA_TYPE_NV_BLOB, NULL};
  params.cigParams = &cig;
  TAP_EQ(cuCtxCreate_v4(&c2, &params, 0, 0), CUDA_ERROR_NOT_SUPPORTED, "CIG: NOT_SUPPORTED");
  CUexecAffinityParam aff = {CU_EXEC_AFFINITY_TYPE_SM_COUNT, {{16}}};
  params.cigParams = NULL;
  params.execAffinityParams = &aff;
  params.numExecAffinityParams = 1;
  CK(cuCtxCreate_v4(&c2, &params, 0, 0));
  CK(cuCtxDestroy_v2(c2));
  TAP_EQ(cuCtxCreate_v3(&c2, NULL, -1, 0, 0), CUDA_ERROR_INVALID_VALUE,
         "cuCtxCreate_v3 numParams -1");
  CK(cuCtxCreate_v3(&c2, &aff, 1, 0, 0));
  CK(cuCtxDestroy_v2(c2));
  CK(cuCtxCreate_v4(&c2, NULL, 0, 1));
  CK(cuCtxGetCurrent(&top));
  tap_ok(top == c2, "cuCtxCreate_v4(NULL params) pushes the new context");

  size_t fr, tot;
  CUdeviceptr p;
  CK(cuMemAlloc_v2(&p, (size_t)1 << 20));
  CK(cuMemGetInfo_v2(&fr, &tot));
  TAP_EQ(tot - fr, (size_t)1 << 20, "device 1: 1 MiB in use");
  CK(cuCtxDestroy_v2(c2));
  CK(cuCtxGetCurrent(&top));
  tap_ok(top == c1, "destroying the current context pops it");
  CK(cuMemGetInfo_v2(&fr, &tot));
  TAP_EQ(fr, tot, "destroy freed its memory (both contexts are on device 1)");
  TAP_EQ(cuCtxDestroy_v2(c2), CUDA_ERROR_INVALID_CONTEXT, "destroy twice: INVALID_CONTEXT");
  TAP_EQ(cuCtxDestroy_v2(NULL), CUDA_ERROR_INVALID_VALUE, "destroy NULL: INVALID_VALUE");
  TAP_EQ(cuCtxDestroy_v2(pc), CUDA_ERROR_INVALID_CONTEXT,
         "destroy a primary context: INVALID_CONTEXT");
  TAP_EQ(cuCtxSetCurrent(c2), CUDA_ERROR_INVALID_CONTEXT, "make a destroyed context current");
  TAP_EQ(cuCtxSynchronize_v2(c2), CUDA_ERROR_CONTEXT_IS_DESTROYED,
         "synchronize a destroyed context");
  CK(cuCtxSynchronize_v2(NULL));
  int least = 1, greatest = 1;
  CK(cuCtxGetStreamPriorityRange(&least, &greatest));
  tap_ok(least == 0 && greatest == -5, "stream priorities 0 (least) .. -5 (greatest)");

  /* A context current to another thread and destroyed here: CONTEXT_IS_DESTROYED there. */
  CUcontext c3;
  CK(cuCtxCreate_v2(&c3, 0, 0));
  shared_ctx = c3;
  pthread_t t;
  pthread_barrier_init(&barrier, NULL, 2);
  pthread_create(&t, NULL, other_thread, NULL);
  pthread_barrier_wait(&barrier);
  CK(cuCtxDestroy_v2(c3));
  pthread_barrier_wait(&barrier);
  pthread_join(t, NULL);
  pthread_barrier_destroy(&barrier);
  TAP_EQ(thread_rc[0], CUDA_SUCCESS, "a new thread starts with no context; it sets one");
  TAP_EQ(thread_rc[1], CUDA_ERROR_CONTEXT_IS_DESTROYED,
         "destroyed while current in another thread: CONTEXT_IS_DESTROYED there");
  CK(cuCtxGetCurrent(&top));
  tap_ok(top == c1, "the destroying thread's stack is intact");
  CK(cuCtxDestroy_v2(c1));
  CK(cuDevicePrimaryCtxRelease_v2(0));
}

int main(void) {
  setenv("FAKECUDA_DRIVER_MEMORY", "off", 1); /* exact figures: test_driver.c has the driver's */
  setenv("FAKECUDA_DEVICES", "2", 1);
  setenv("FAKECUDA_MEMORY", "0:16GiB,1:8GiB", 1);
  before_init();
  devices();
  primary();
  created();
  return tap_done();
}
