/* Error names and descriptions (cuGetErrorName, cuGetErrorString) and the driver's error log
 * (cuLogs*: CUDA 12.9).
 *
 * Names are the enumerators of <cuda.h>. Descriptions are the strings the real driver returns
 * for the codes programs commonly print, and a shortened form of <cuda.h>'s documentation for
 * the rest. An unknown code answers CUDA_ERROR_INVALID_VALUE and sets the string to NULL; both
 * work before cuInit, as the driver's do.
 *
 * The log: every entry point that fails (other than with CUDA_ERROR_NOT_READY, which is an
 * answer, not a failure) appends one line "NAME failed: DESCRIPTION (CODE)" to a buffer of
 * 25600 bytes (the driver's documented size; the oldest lines are dropped) and passes it to the
 * registered callbacks at level error. Iterators count lines. Under fk.lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fakecuda/fk.h"

static const struct {
  CUresult code;
  const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_PROFILER_DISABLED, "CUDA_ERROR_PROFILER_DISABLED",
     "profiler is not initialized for this run"},
    {CUDA_ERROR_PROFILER_NOT_INITIALIZED, "CUDA_ERROR_PROFILER_NOT_INITIALIZED",
     "this error return is deprecated as of CUDA 5.0"},
    {CUDA_ERROR_PROFILER_ALREADY_STARTED, "CUDA_ERROR_PROFILER_ALREADY_STARTED",
     "this error return is deprecated as of CUDA 5.0"},
    {CUDA_ERROR_PROFILER_ALREADY_STOPPED, "CUDA_ERROR_PROFILER_ALREADY_STOPPED",
     "this error return is deprecated as of CUDA 5.0"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
     "API call requires a newer CUDA driver"},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE",
     "requested CUDA device is unavailable at the current time"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_DEVICE_NOT_LICENSED, "CUDA_ERROR_DEVICE_NOT_LICENSED",
     "the Grid license is not applied"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT",
     "this indicated that the context being supplied as a parameter to the API call was..."},
    {CUDA_ERROR_MAP_FAILED, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {CUDA_ERROR_UNMAP_FAILED, "CUDA_ERROR_UNMAP_FAILED", "unmapping of buffer object failed"},
    {CUDA_ERROR_ARRAY_IS_MAPPED, "CUDA_ERROR_ARRAY_IS_MAPPED",
     "the specified array is currently mapped and thus cannot be destroyed"},
    {CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {CUDA_ERROR_ALREADY_ACQUIRED, "CUDA_ERROR_ALREADY_ACQUIRED", "resource already acquired"},
    {CUDA_ERROR_NOT_MAPPED, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
    {CUDA_ERROR_NOT_MAPPED_AS_ARRAY, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY",
     "a mapped resource is not available for access as an array"},
    {CUDA_ERROR_NOT_MAPPED_AS_POINTER, "CUDA_ERROR_NOT_MAPPED_AS_POINTER",
     "a mapped resource is not available for access as a pointer"},
    {CUDA_ERROR_ECC_UNCORRECTABLE, "CUDA_ERROR_ECC_UNCORRECTABLE",
     "uncorrectable ECC error encountered"},
    {CUDA_ERROR_UNSUPPORTED_LIMIT, "CUDA_ERROR_UNSUPPORTED_LIMIT",
     "limit is not supported on this architecture"},
    {CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
     "the CUcontext passed to the API call can only be bound to a single CPU thread at a..."},
    {CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
     "peer access is not supported between these two devices"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT",
     "an error with OpenGL or DirectX context"},
    {CUDA_ERROR_NVLINK_UNCORRECTABLE, "CUDA_ERROR_NVLINK_UNCORRECTABLE",
     "an uncorrectable NVLink error was detected during the execution"},
    {CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
     "the PTX JIT compiler library was not found"},
    {CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
     "the provided PTX was compiled with an unsupported toolchain"},
    {CUDA_ERROR_JIT_COMPILATION_DISABLED, "CUDA_ERROR_JIT_COMPILATION_DISABLED",
     "the PTX JIT compilation was disabled"},
    {CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY",
     "the CUexecAffinityType passed to the API call is not supported by the active device"},
    {CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC",
     "the code to be compiled by the PTX JIT contains unsupported call to cudaDeviceSynchronize"},
    {CUDA_ERROR_CONTAINED, "CUDA_ERROR_CONTAINED",
     "an exception occurred on the device that is now contained by the GPU's error..."},
    {CUDA_ERROR_INVALID_SOURCE, "CUDA_ERROR_INVALID_SOURCE", "the device kernel source is invalid"},
    {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
     "a link to a shared object failed to resolve"},
    {CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
     "initialization of a shared object failed"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM",
     "OS call failed or operation not supported on this OS"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
     "the operation cannot be performed in the present state"},
    {CUDA_ERROR_LOSSY_QUERY, "CUDA_ERROR_LOSSY_QUERY",
     "an attempt was made to introspect an object in a way that would discard semantically..."},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT",
     "the launch timed out and was terminated"},
    {CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING",
     "a kernel launch that uses an incompatible texturing mode"},
    {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
     "peer access is already enabled"},
    {CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
     "peer access has not been enabled"},
    {CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
     "cannot set while device is active in this process"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_ASSERT, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
    {CUDA_ERROR_TOO_MANY_PEERS, "CUDA_ERROR_TOO_MANY_PEERS",
     "the hardware resources required to enable peer access have been exhausted for one or..."},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_HARDWARE_STACK_ERROR, "CUDA_ERROR_HARDWARE_STACK_ERROR",
     "while executing a kernel, the device encountered a stack error"},
    {CUDA_ERROR_ILLEGAL_INSTRUCTION, "CUDA_ERROR_ILLEGAL_INSTRUCTION",
     "an illegal instruction was encountered"},
    {CUDA_ERROR_MISALIGNED_ADDRESS, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {CUDA_ERROR_INVALID_ADDRESS_SPACE, "CUDA_ERROR_INVALID_ADDRESS_SPACE",
     "while executing a kernel, the device encountered an instruction which can only operate..."},
    {CUDA_ERROR_INVALID_PC, "CUDA_ERROR_INVALID_PC",
     "while executing a kernel, the device program counter wrapped its address space"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
     "too many blocks in cooperative launch"},
    {CUDA_ERROR_TENSOR_MEMORY_LEAK, "CUDA_ERROR_TENSOR_MEMORY_LEAK",
     "an exception occurred on the device while exiting a kernel using tensor memory: the..."},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_SYSTEM_NOT_READY, "CUDA_ERROR_SYSTEM_NOT_READY",
     "the system is not yet ready to start any CUDA work"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "there is a mismatch between the versions of the display driver and the CUDA driver"},
    {CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
     "the system was upgraded to run with forward compatibility but the visible hardware..."},
    {CUDA_ERROR_MPS_CONNECTION_FAILED, "CUDA_ERROR_MPS_CONNECTION_FAILED",
     "the MPS client failed to connect to the MPS control daemon or the MPS server"},
    {CUDA_ERROR_MPS_RPC_FAILURE, "CUDA_ERROR_MPS_RPC_FAILURE",
     "the remote procedural call between the MPS server and the MPS client failed"},
    {CUDA_ERROR_MPS_SERVER_NOT_READY, "CUDA_ERROR_MPS_SERVER_NOT_READY",
     "the MPS server is not ready to accept new MPS client requests"},
    {CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED",
     "the hardware resources required to create MPS client have been exhausted"},
    {CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED",
     "the the hardware resources required to support device connections have been exhausted"},
    {CUDA_ERROR_MPS_CLIENT_TERMINATED, "CUDA_ERROR_MPS_CLIENT_TERMINATED",
     "the MPS client has been terminated by the server"},
    {CUDA_ERROR_CDP_NOT_SUPPORTED, "CUDA_ERROR_CDP_NOT_SUPPORTED",
     "the module is using CUDA Dynamic Parallelism, but the current configuration, like MPS,..."},
    {CUDA_ERROR_CDP_VERSION_MISMATCH, "CUDA_ERROR_CDP_VERSION_MISMATCH",
     "a module contains an unsupported interaction between different versions of CUDA..."},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_MERGE, "CUDA_ERROR_STREAM_CAPTURE_MERGE",
     "operation would result in a merge of separate capture sequences"},
    {CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
     "capture was not ended in the same stream as it began"},
    {CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
     "capturing stream has unjoined work"},
    {CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
     "dependency created on uncaptured work in another stream"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {CUDA_ERROR_CAPTURED_EVENT, "CUDA_ERROR_CAPTURED_EVENT",
     "operation not permitted on an event last recorded in a capturing stream"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {CUDA_ERROR_TIMEOUT, "CUDA_ERROR_TIMEOUT",
     "the timeout specified for the wait operation has lapsed"},
    {CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
     "the graph update was not performed because it included changes which violated..."},
    {CUDA_ERROR_EXTERNAL_DEVICE, "CUDA_ERROR_EXTERNAL_DEVICE",
     "an async error has occurred in a device outside of CUDA. If CUDA was waiting for an..."},
    {CUDA_ERROR_INVALID_CLUSTER_SIZE, "CUDA_ERROR_INVALID_CLUSTER_SIZE",
     "indicates a kernel launch error due to cluster misconfiguration"},
    {CUDA_ERROR_FUNCTION_NOT_LOADED, "CUDA_ERROR_FUNCTION_NOT_LOADED",
     "indiciates a function handle is not loaded when calling an API that requires a loaded..."},
    {CUDA_ERROR_INVALID_RESOURCE_TYPE, "CUDA_ERROR_INVALID_RESOURCE_TYPE",
     "one or more resources passed in are not valid resource types for the operation"},
    {CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION",
     "one or more resources are insufficient or non-applicable for the operation"},
    {CUDA_ERROR_KEY_ROTATION, "CUDA_ERROR_KEY_ROTATION",
     "an error happened during the key rotation sequence"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult describe(CUresult error, const char **out, int text) {
  if (out == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
    if (errors[i].code == error) {
      *out = text ? errors[i].text : errors[i].name;
      return CUDA_SUCCESS;
    }
  }
  *out = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

FK_API CUresult cuGetErrorName(CUresult error, const char **pStr) {
  FK_BODY(FK_ANYTIME, describe(error, pStr, 0));
}

FK_API CUresult cuGetErrorString(CUresult error, const char **pStr) {
  FK_BODY(FK_ANYTIME, describe(error, pStr, 1));
}

/* ---- The error log. ---- */

#define LOG_BYTES 25600

struct CUlogsCallbackEntry_st {
  CUlogsCallback fn;
  void *data;
  struct CUlogsCallbackEntry_st *next;
};

static char log_buf[LOG_BYTES]; /* whole lines, each ending in '\n' */
static size_t log_len;
static unsigned log_first, log_next; /* numbers of the oldest kept and the next line */
static struct CUlogsCallbackEntry_st *callbacks;

void fk_log_failure(const char *fn, CUresult rc) {
  if (rc == CUDA_SUCCESS || rc == CUDA_ERROR_NOT_READY) {
    return;
  }
  const char *text = NULL;
  describe(rc, &text, 1);
  char line[256];
  int n = snprintf(line, sizeof line, "%s failed: %s (%d)\n", fn, text ? text : "unknown", (int)rc);
  size_t len = n < 0 ? 0 : (size_t)n >= sizeof line ? sizeof line - 1 : (size_t)n;
  while (log_len + len > LOG_BYTES && log_len > 0) { /* drop the oldest line */
    char *eol = memchr(log_buf, '\n', log_len);
    size_t cut = eol ? (size_t)(eol - log_buf) + 1 : log_len;
    memmove(log_buf, log_buf + cut, log_len - cut);
    log_len -= cut;
    log_first++;
  }
  memcpy(log_buf + log_len, line, len);
  log_len += len;
  log_next++;
  for (struct CUlogsCallbackEntry_st *c = callbacks; c != NULL; c = c->next) {
    c->fn(c->data, CU_LOG_LEVEL_ERROR, line, len - 1);
  }
}

static CUresult logs_register(CUlogsCallback fn, void *data, CUlogsCallbackHandle *out) {
  if (fn == NULL || out == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUlogsCallbackEntry_st *c = calloc(1, sizeof *c);
  if (c == NULL) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  c->fn = fn;
  c->data = data;
  c->next = callbacks;
  callbacks = c;
  *out = c;
  return CUDA_SUCCESS;
}

FK_API CUresult cuLogsRegisterCallback(CUlogsCallback callbackFunc, void *userData,
                                       CUlogsCallbackHandle *callback_out) {
  FK_BODY(FK_ANYTIME, logs_register(callbackFunc, userData, callback_out));
}

static CUresult logs_unregister(CUlogsCallbackHandle h) {
  for (struct CUlogsCallbackEntry_st **p = &callbacks; *p != NULL; p = &(*p)->next) {
    if (*p == h) {
      *p = h->next;
      free(h);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

FK_API CUresult cuLogsUnregisterCallback(CUlogsCallbackHandle callback) {
  FK_BODY(FK_ANYTIME, logs_unregister(callback));
}

static CUresult logs_current(CUlogIterator *it, unsigned flags) {
  if (it == NULL || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *it = log_next;
  return CUDA_SUCCESS;
}

FK_API CUresult cuLogsCurrent(CUlogIterator *iterator_out, unsigned int flags) {
  FK_BODY(FK_ANYTIME, logs_current(iterator_out, flags));
}

/* The kept lines from number *it on (all with it NULL): their offset and length in log_buf. */
static void log_span(const CUlogIterator *it, size_t *off, size_t *len) {
  unsigned from = it != NULL && *it > log_first ? *it : log_first;
  size_t o = 0;
  for (unsigned n = log_first; n < from && o < log_len; n++) {
    char *eol = memchr(log_buf + o, '\n', log_len - o);
    o = eol ? (size_t)(eol - log_buf) + 1 : log_len;
  }
  *off = o;
  *len = log_len - o;
}

static CUresult logs_to_memory(CUlogIterator *it, char *buf, size_t *size, unsigned flags) {
  if (buf == NULL || size == NULL || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t off, len;
  log_span(it, &off, &len);
  if (len == 0) {
    if (*size > 0) {
      buf[0] = '\0';
    }
    *size = 0;
    return CUDA_SUCCESS;
  }
  /* Keep the newest whole lines that fit with the terminating NUL. */
  while (len + 1 > *size) {
    char *eol = memchr(log_buf + off, '\n', len);
    if (eol == NULL || (size_t)(eol - log_buf) + 1 >= off + len) {
      *size = 0;
      return CUDA_ERROR_INVALID_VALUE; /* not even the last line fits */
    }
    size_t cut = (size_t)(eol - log_buf) + 1 - off;
    off += cut;
    len -= cut;
  }
  memcpy(buf, log_buf + off, len);
  buf[len] = '\0';
  *size = len;
  if (it != NULL) {
    *it = log_next;
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuLogsDumpToMemory(CUlogIterator *iterator, char *buffer, size_t *size,
                                   unsigned int flags) {
  FK_BODY(FK_ANYTIME, logs_to_memory(iterator, buffer, size, flags));
}

static CUresult logs_to_file(CUlogIterator *it, const char *path, unsigned flags) {
  if (path == NULL || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  FILE *f = fopen(path, "w");
  if (f == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t off, len;
  log_span(it, &off, &len);
  int ok = fwrite(log_buf + off, 1, len, f) == len;
  ok &= fclose(f) == 0;
  if (it != NULL) {
    *it = log_next;
  }
  return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FK_API CUresult cuLogsDumpToFile(CUlogIterator *iterator, const char *pathToFile,
                                 unsigned int flags) {
  FK_BODY(FK_ANYTIME, logs_to_file(iterator, pathToFile, flags));
}

void fk_logs_teardown(void) {
  while (callbacks != NULL) {
    struct CUlogsCallbackEntry_st *c = callbacks;
    callbacks = c->next;
    free(c);
  }
}
