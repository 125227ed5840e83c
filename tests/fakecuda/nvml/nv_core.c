/* The fake NVML's spine: the global state and its lock, entry and exit of every entry point
 * (settings, call counting, FAKENVML_FAIL, the init check, FAKECUDA_TRACE), the generated
 * catch-all's body, reference-counted initialisation, error strings and the system queries.
 *
 * Locking: nv.lock guards everything in `nv`; nv_enter takes it, nv_leave drops it. The settings
 * are read once (pthread_once) outside the lock. fork: the prepare handler takes the lock so a
 * child never inherits it mid-call; the child keeps the parent's initialisation, as a child of a
 * process using NVIDIA's library does.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/fakecuda/fk_line.h"
#include "tests/fakecuda/nvml/nv.h"

struct nv_global nv = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static int trace_fd = -1;      /* FAKECUDA_TRACE: where each call is logged */
static const char *current_fn; /* the entry point holding the lock (for the trace) */

void nv_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fk_vline(2, "fakenvml: ", fmt, ap);
  va_end(ap);
}

__attribute__((format(printf, 1, 2))) static void trace(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fk_vtrace(trace_fd, "fakenvml", fmt, ap);
  va_end(ap);
}

/* ---- Settings: the fake CUDA driver's parser, read through two views of the environment. ---- */

/* The settings NVML shares with the fake driver. FAKECUDA_FAIL and FAKECUDA_LATENCY name the
 * driver's exports and FAKECUDA_STATS / FAKECUDA_STUB are the driver's own: this library does
 * not see them. */
static const char *shared_env(const char *name) {
  if (strcmp(name, "FAKECUDA_FAIL") == 0 || strcmp(name, "FAKECUDA_LATENCY") == 0 ||
      strcmp(name, "FAKECUDA_STATS") == 0 || strcmp(name, "FAKECUDA_STUB") == 0) {
    return NULL;
  }
  return fk_getenv(name);
}

/* FAKENVML_FAIL alone, presented to the parser as FAKECUDA_FAIL (same grammar; the names are
 * looked up in this library's export table). */
static const char *fail_env(const char *name) {
  return strcmp(name, "FAKECUDA_FAIL") == 0 ? fk_getenv("FAKENVML_FAIL") : NULL;
}

static void parse_config(void) {
  char err[256];
  struct fk_config fails;
  if (fk_env_parse(&nv.cfg, shared_env, err, sizeof err) != 0) {
    nv_log("error: %s; every NVML call will fail with NVML_ERROR_UNKNOWN", err);
    nv.cfg_error = 1;
    return;
  }
  if (fk_env_parse(&fails, fail_env, err, sizeof err) != 0) {
    const char *var = "FAKECUDA_FAIL";
    size_t n = strlen(var);
    nv_log("error: FAKENVML_FAIL%s; every NVML call will fail with NVML_ERROR_UNKNOWN",
           strncmp(err, var, n) == 0 ? err + n : err);
    nv.cfg_error = 1;
    return;
  }
  nv.cfg.nfail = fails.nfail;
  memcpy(nv.cfg.fail, fails.fail, sizeof fails.fail);
  for (int d = 0; d < FK_MAX_DEVICES; d++) {
    nv.dev[d].index = d;
  }
  trace_fd = fk_trace_open(nv.cfg.trace_path, "fakenvml");
}

/* ---- Entry and exit. ---- */

nvmlReturn_t nv_enter(const char *fn, int need_init) {
  pthread_once(&cfg_once, parse_config);
  pthread_mutex_lock(&nv.lock);
  current_fn = fn;
  int idx = fk_export_index(fn);
  unsigned long long n = idx >= 0 && idx < FK_MAX_EXPORTS ? ++nv.calls[idx] : 0;
  if (nv.cfg_error) {
    return NVML_ERROR_UNKNOWN;
  }
  for (int i = 0; i < nv.cfg.nfail; i++) {
    if (nv.cfg.fail[i].export_index == idx && nv.cfg.fail[i].nth == n) {
      return (nvmlReturn_t)nv.cfg.fail[i].code;
    }
  }
  if (need_init && nv.refs == 0) {
    return NVML_ERROR_UNINITIALIZED;
  }
  return NVML_SUCCESS;
}

nvmlReturn_t nv_leave(nvmlReturn_t rc) {
  trace("%s = %d", current_fn, (int)rc);
  pthread_mutex_unlock(&nv.lock);
  return rc;
}

/* The body of every generated catch-all (gen.awk). */
int fk_catchall(const char *name) {
  nvmlReturn_t rc = nv_enter(name, NV_NEED_INIT);
  return (int)nv_leave(rc == NVML_SUCCESS ? NVML_ERROR_NOT_SUPPORTED : rc);
}

nvmlReturn_t nv_string(char *buf, unsigned int len, const char *s) {
  if (buf == NULL) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  size_t n = strlen(s);
  if (n >= len) {
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  memcpy(buf, s, n + 1);
  return NVML_SUCCESS;
}

/* ---- Initialisation: reference counted. ---- */

/* FAKECUDA_MACHINE: maps the machine's ledger (creating it when no process has yet: an idle
 * machine), as NVIDIA's library opens the device files at init. A ledger that disagrees with this
 * process's settings is the library/driver mismatch nvidia-smi reports. */
static nvmlReturn_t machine_open(void) {
  if (nv.cfg.machine[0] == '\0' || nv.cfg.ndev == 0) {
    return NVML_SUCCESS;
  }
  char err[512];
  int rc = fk_machine_open(nv.cfg.machine, &nv.cfg, &nv.machine, err, sizeof err);
  if (rc == 0) {
    return NVML_SUCCESS;
  }
  nvmlReturn_t r = rc == -EPROTO ? NVML_ERROR_LIB_RM_VERSION_MISMATCH : NVML_ERROR_UNKNOWN;
  nv_log("error: %s; nvmlInit fails with %s", err,
         r == NVML_ERROR_UNKNOWN ? "NVML_ERROR_UNKNOWN" : "NVML_ERROR_LIB_RM_VERSION_MISMATCH");
  return r;
}

static nvmlReturn_t init(unsigned flags) {
  /* Unknown flag bits are ignored (nvml.h lists no error for them). */
  if (nv.cfg.ndev == 0 && !(flags & NVML_INIT_FLAG_NO_GPUS)) {
    return NVML_ERROR_GPU_NOT_FOUND;
  }
  if (nv.refs == 0) {
    nvmlReturn_t rc = machine_open();
    if (rc != NVML_SUCCESS) {
      return rc;
    }
  }
  nv.refs++;
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlInit(void) {
  NV_BODY(NV_ANYTIME, init(0));
}

NV_API nvmlReturn_t nvmlInit_v2(void) {
  NV_BODY(NV_ANYTIME, init(0));
}

NV_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  NV_BODY(NV_ANYTIME, init(flags));
}

static nvmlReturn_t shutdown_once(void) {
  if (--nv.refs == 0) {
    fk_machine_close(&nv.machine);
  }
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlShutdown(void) {
  NV_BODY(NV_NEED_INIT, shutdown_once());
}

/* ---- Error strings: NVIDIA's library's wording where it is known (the strings every NVML
 * binding repeats, and nvidia-smi's "Failed to initialize NVML: No supported GPUs were found"
 * for code 28), the header's description for the other codes added since. ---- */

static const char *error_string(nvmlReturn_t r) {
  switch (r) {
  case NVML_SUCCESS:
    return "Success";
  case NVML_ERROR_UNINITIALIZED:
    return "Uninitialized";
  case NVML_ERROR_INVALID_ARGUMENT:
    return "Invalid Argument";
  case NVML_ERROR_NOT_SUPPORTED:
    return "Not Supported";
  case NVML_ERROR_NO_PERMISSION:
    return "Insufficient Permissions";
  case NVML_ERROR_ALREADY_INITIALIZED:
    return "Already Initialized";
  case NVML_ERROR_NOT_FOUND:
    return "Not Found";
  case NVML_ERROR_INSUFFICIENT_SIZE:
    return "Insufficient Size";
  case NVML_ERROR_INSUFFICIENT_POWER:
    return "Insufficient External Power";
  case NVML_ERROR_DRIVER_NOT_LOADED:
    return "Driver Not Loaded";
  case NVML_ERROR_TIMEOUT:
    return "Timeout";
  case NVML_ERROR_IRQ_ISSUE:
    return "Interrupt Request Issue";
  case NVML_ERROR_LIBRARY_NOT_FOUND:
    return "NVML Shared Library Not Found";
  case NVML_ERROR_FUNCTION_NOT_FOUND:
    return "Function Not Found";
  case NVML_ERROR_CORRUPTED_INFOROM:
    return "Corrupted infoROM";
  case NVML_ERROR_GPU_IS_LOST:
    return "GPU is lost";
  case NVML_ERROR_RESET_REQUIRED:
    return "GPU requires restart";
  case NVML_ERROR_OPERATING_SYSTEM:
    return "The operating system has blocked the request.";
  case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
    return "RM has detected an NVML/RM version mismatch.";
  case NVML_ERROR_IN_USE:
    return "In use by another client";
  case NVML_ERROR_MEMORY:
    return "Insufficient Memory";
  case NVML_ERROR_NO_DATA:
    return "No data";
  case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
    return "The requested vgpu operation is not available on target device, because ECC is "
           "enabled";
  case NVML_ERROR_INSUFFICIENT_RESOURCES:
    return "Ran out of critical resources, other than memory";
  case NVML_ERROR_FREQ_NOT_SUPPORTED:
    return "The requested frequency is not supported";
  case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
    return "The provided version is invalid/unsupported";
  case NVML_ERROR_DEPRECATED:
    return "The requested functionality has been deprecated";
  case NVML_ERROR_NOT_READY:
    return "The system is not ready for the request";
  case NVML_ERROR_GPU_NOT_FOUND:
    return "No supported GPUs were found";
  case NVML_ERROR_INVALID_STATE:
    return "Resource not in correct state to perform requested operation";
  case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED:
    return "Reset not supported for given device/parameters";
  default:
    return "Unknown Error";
  }
}

/* Works before nvmlInit and never fails (it takes no lock: the strings are constant). */
NV_API const char *nvmlErrorString(nvmlReturn_t result) {
  return error_string(result);
}

/* ---- The system. ---- */

NV_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
  NV_BODY(NV_NEED_INIT, nv_string(version, length, NV_DRIVER_VERSION));
}

/* The NVML version is the API version and the driver's ("13.580.65.06"); nvml.h lists no
 * NVML_ERROR_UNINITIALIZED for it. */
NV_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
  NV_BODY(NV_ANYTIME, nv_string(version, length, "13." NV_DRIVER_VERSION));
}

static nvmlReturn_t cuda_version(int *out, nvmlReturn_t found, int version, int fallback) {
  if (out == NULL) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (found != NVML_SUCCESS && !fallback) {
    return found;
  }
  *out = found == NVML_SUCCESS ? version : FK_DRIVER_VERSION;
  return NVML_SUCCESS;
}

/* Both ask the libcuda.so.1 the loader finds (outside the lock); v1 falls back to the CUDA
 * version this NVML belongs to when there is none, as nvml.h says. Neither needs nvmlInit. */
NV_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
  int v = 0;
  nvmlReturn_t found = cudaDriverVersion ? nv_cuda_version(&v) : NVML_SUCCESS;
  NV_BODY(NV_ANYTIME, cuda_version(cudaDriverVersion, found, v, 1));
}

NV_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
  int v = 0;
  nvmlReturn_t found = cudaDriverVersion ? nv_cuda_version(&v) : NVML_SUCCESS;
  NV_BODY(NV_ANYTIME, cuda_version(cudaDriverVersion, found, v, 0));
}

/* The process's command name as /proc shows it: argv[0] of its command line, or its comm for a
 * process without one, cut to length (nvml.h: "cropped to provided length"). */
static nvmlReturn_t process_name(unsigned pid, char *name, unsigned length) {
  if (name == NULL || length == 0) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  char path[64], buf[4096];
  ssize_t n = -1;
  const char *files[] = {"cmdline", "comm"};
  for (int i = 0; i < 2 && n <= 0; i++) {
    snprintf(path, sizeof path, "/proc/%u/%s", pid, files[i]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return errno == EACCES ? NVML_ERROR_NO_PERMISSION : NVML_ERROR_NOT_FOUND;
    }
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
  }
  if (n <= 0) {
    return NVML_ERROR_NOT_FOUND;
  }
  buf[n] = '\0';
  buf[strcspn(buf, "\n")] = '\0';
  size_t len = strnlen(buf, length - 1);
  memcpy(name, buf, len);
  name[len] = '\0';
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
  NV_BODY(NV_NEED_INIT, process_name(pid, name, length));
}

/* Confidential computing is off: no CC environment, the feature disabled, no multi-GPU mode. */
static nvmlReturn_t cc_state(nvmlConfComputeSystemState_t *state) {
  if (state == NULL) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  state->environment = NVML_CC_SYSTEM_ENVIRONMENT_UNAVAILABLE;
  state->ccFeature = NVML_CC_SYSTEM_FEATURE_DISABLED;
  state->devToolsMode = NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF;
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlSystemGetConfComputeState(nvmlConfComputeSystemState_t *state) {
  NV_BODY(NV_NEED_INIT, cc_state(state));
}

/* settings points at a v1 or v2 structure; its version says which (max_version: the newest the
 * entry point takes). */
static nvmlReturn_t cc_settings(nvmlSystemConfComputeSettings_v2_t *settings, int max_version) {
  if (settings == NULL) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  unsigned v = settings->version;
  if (v != nvmlSystemConfComputeSettings_v1 &&
      (max_version < 2 || v != nvmlSystemConfComputeSettings_v2)) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  settings->environment = NVML_CC_SYSTEM_ENVIRONMENT_UNAVAILABLE;
  settings->ccFeature = NVML_CC_SYSTEM_FEATURE_DISABLED;
  settings->devToolsMode = NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF;
  settings->multiGpuMode = NVML_CC_SYSTEM_MULTIGPU_NONE;
  if (v == nvmlSystemConfComputeSettings_v2) {
    settings->tdispState = NVML_CC_SYSTEM_TDISP_STATE_DISABLED;
  }
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlSystemGetConfComputeSettings(nvmlSystemConfComputeSettings_t *settings) {
  NV_BODY(NV_NEED_INIT, cc_settings((nvmlSystemConfComputeSettings_v2_t *)(void *)settings, 1));
}

NV_API nvmlReturn_t nvmlSystemGetConfComputeSettings_v2(nvmlSystemConfComputeSettings_v2_t *s) {
  NV_BODY(NV_NEED_INIT, cc_settings(s, 2));
}

/* ---- Process life. ---- */

static void atfork_prepare(void) {
  pthread_mutex_lock(&nv.lock);
}

static void atfork_release(void) {
  pthread_mutex_unlock(&nv.lock);
}

__attribute__((constructor)) static void nv_load(void) {
  pthread_atfork(atfork_prepare, atfork_release, atfork_release);
}
