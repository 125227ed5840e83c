/* TAP test of the fake driver's per-context settings (limits, cache and bank configuration, API
 * version), peer access between its two devices, and error names and strings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/fakecuda/testlib.h"
#include "tests/tap.h"

static void limits(void) {
  size_t v = 0;
  TAP_EQ(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE), CUDA_ERROR_INVALID_CONTEXT,
         "a limit without a current context");
  CUcontext c;
  CK(cuCtxCreate_v2(&c, 0, 0));
  CK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
  TAP_EQ(v, 1024, "default stack size");
  CK(cuCtxGetLimit(&v, CU_LIMIT_MALLOC_HEAP_SIZE));
  TAP_EQ(v, 8 << 20, "default device heap");
  CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 1000));
  CK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
  TAP_EQ(v, 1008, "a stack size is rounded up to 16 bytes");
  CK(cuCtxSetLimit(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, 4096));
  CK(cuCtxGetLimit(&v, CU_LIMIT_MAX_L2_FETCH_GRANULARITY));
  TAP_EQ(v, 128, "the L2 fetch granularity hint is clamped to 128");
  TAP_EQ(cuCtxGetLimit(&v, CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH), CUDA_ERROR_UNSUPPORTED_LIMIT,
         "no device-runtime sync depth on 9.0");
  TAP_EQ(cuCtxSetLimit(CU_LIMIT_CIG_ENABLED, 1), CUDA_ERROR_INVALID_VALUE,
         "a query-only limit cannot be set");
  TAP_EQ(cuCtxGetLimit(&v, (CUlimit)42), CUDA_ERROR_INVALID_VALUE, "an unknown limit");
  TAP_EQ(cuCtxGetLimit(NULL, CU_LIMIT_STACK_SIZE), CUDA_ERROR_INVALID_VALUE, "NULL output");

  CUfunc_cache cache = CU_FUNC_CACHE_PREFER_L1;
  CK(cuCtxGetCacheConfig(&cache));
  TAP_EQ(cache, CU_FUNC_CACHE_PREFER_NONE, "default cache preference");
  CK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED));
  CK(cuCtxGetCacheConfig(&cache));
  TAP_EQ(cache, CU_FUNC_CACHE_PREFER_SHARED, "the preference is kept");
  TAP_EQ(cuCtxSetCacheConfig((CUfunc_cache)7), CUDA_ERROR_INVALID_VALUE, "an unknown preference");
  unsigned api = 0;
  CK(cuCtxGetApiVersion(c, &api));
  TAP_EQ(api, 3020, "the API version of a context");
  CUcontext other;
  CK(cuCtxCreate_v2(&other, 0, 0));
  CK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
  TAP_EQ(v, 1024, "limits belong to their context");
  CK(cuCtxDestroy_v2(other));
  CK(cuCtxDestroy_v2(c));
}

static void peers(void) {
  int can = -1;
  CK(cuDeviceCanAccessPeer(&can, 0, 1));
  TAP_EQ(can, 1, "device 0 can access device 1");
  CK(cuDeviceCanAccessPeer(&can, 0, 0));
  TAP_EQ(can, 0, "a device is not its own peer");
  TAP_EQ(cuDeviceCanAccessPeer(&can, 0, 2), CUDA_ERROR_INVALID_DEVICE, "no device 2");
  int rank = -1;
  CK(cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1));
  TAP_EQ(rank, 1, "P2P access supported between the two");
  CUcontext c0, c1;
  CK(cuCtxCreate_v2(&c1, 0, 1));
  CK(cuCtxCreate_v2(&c0, 0, 0));
  CK(cuCtxEnablePeerAccess(c1, 0));
  TAP_EQ(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "enabled twice");
  CK(cuCtxDisablePeerAccess(c1));
  TAP_EQ(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "disabled twice");
  TAP_EQ(cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_INVALID_DEVICE, "a context of the same device");
  TAP_EQ(cuCtxEnablePeerAccess(c1, 1), CUDA_ERROR_INVALID_VALUE, "flags must be 0");
  CK(cuCtxDestroy_v2(c0));
  CK(cuCtxDestroy_v2(c1));
}

static void errors(void) {
  const char *s = NULL;
  CK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
  tap_ok(s != NULL && strcmp(s, "CUDA_ERROR_OUT_OF_MEMORY") == 0, "name of 2: %s", s);
  CK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
  tap_ok(s != NULL && strcmp(s, "out of memory") == 0, "string of 2: %s", s);
  CK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s));
  tap_ok(s != NULL && strcmp(s, "invalid argument") == 0, "string of 1: %s", s);
  TAP_EQ(cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE, "an unknown code");
  tap_ok(s == NULL, "... sets the string to NULL");
  TAP_EQ(cuGetErrorString(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE, "NULL output");
}

static int logged;
static char last_line[256];
static void on_log(void *data, CUlogLevel level, char *msg, size_t len) {
  (void)data;
  logged += level == CU_LOG_LEVEL_ERROR;
  snprintf(last_line, sizeof last_line, "%.*s", (int)len, msg);
}

static void logs(void) {
  CUlogIterator it = 0;
  CK(cuLogsCurrent(&it, 0));
  CUlogsCallbackHandle h;
  CK(cuLogsRegisterCallback(on_log, NULL, &h));
  CUdeviceptr p;
  TAP_EQ(cuMemAlloc_v2(&p, 1), CUDA_ERROR_INVALID_CONTEXT, "an allocation without a context");
  TAP_EQ(logged, 1, "a failure reaches the log callback");
  tap_ok(strcmp(last_line, "cuMemAlloc_v2 failed: invalid device context (201)") == 0,
         "... with the call and its error: %s", last_line);
  char buf[256];
  size_t n = sizeof buf;
  CK(cuLogsDumpToMemory(&it, buf, &n, 0));
  tap_ok(n > 0 && strstr(buf, "cuMemAlloc_v2 failed") != NULL, "the log holds it: %s", buf);
  n = sizeof buf;
  CK(cuLogsDumpToMemory(&it, buf, &n, 0));
  TAP_EQ(n, 0, "the iterator moved past it");
  n = 8;
  CUlogIterator from0 = 0;
  TAP_EQ(cuLogsDumpToMemory(&from0, buf, &n, 0), CUDA_ERROR_INVALID_VALUE,
         "a buffer too small for the newest line");
  TAP_EQ(logged, 2, "... and that failed dump was logged too");
  CK(cuLogsUnregisterCallback(h));
  TAP_EQ(cuLogsUnregisterCallback(h), CUDA_ERROR_INVALID_VALUE, "unregistering twice");
  TAP_EQ(cuMemAlloc_v2(&p, 1), CUDA_ERROR_INVALID_CONTEXT, "another failure");
  TAP_EQ(logged, 2, "... reaches no unregistered callback");
}

int main(void) {
  setenv("FAKECUDA_DEVICES", "2", 1); /* read at the first call */
  const char *s = NULL;
  CK(cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &s)); /* works before cuInit */
  CK(cuInit(0));
  logs();
  limits();
  peers();
  errors();
  return tap_done();
}
