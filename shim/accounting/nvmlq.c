/* NVML queried by gpucap (see nvmlq.h). The library is opened once (pthread_once): the program's
 * copy if loaded (RTLD_NOLOAD), else a private one (RTLD_LOCAL); its functions are looked up in
 * that handle, so they are NVML's own and never gpucap's hooks of the same names. The NVML device
 * of each CUDA ordinal is found by UUID once and remembered.
 */
#include "shim/accounting/nvmlq.h"

#include "core/limits.h"
#include "shim/base/real.h"
#include "shim/accounting/runinfo.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

enum { NVML_SUCCESS = 0, NVML_ERROR_INSUFFICIENT_SIZE = 7 };
#define PROCS_MAX 256
#define NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFull /* NVML_VALUE_NOT_AVAILABLE as usedGpuMemory */

typedef nvmlReturn_t init_fn(void);
typedef nvmlReturn_t by_uuid_fn(const char *, nvmlDevice_t *);
typedef nvmlReturn_t procs_fn(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v2_t *);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static by_uuid_fn *by_uuid;
static procs_fn *procs;
static nvmlDevice_t _Atomic handles[GPUCAP_MAX_DEVICES]; /* NULL: not found yet */

/* Stores dlsym's answer in a function pointer of `size` bytes (ISO C has no such cast). */
static void as_fn(void *p, void *fn, size_t size) {
  memcpy(fn, &p, size);
}

static void open_nvml(void) {
  real_dlsym_init();
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!h) {
    h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  }
  init_fn *init = NULL;
  if (!h) {
    return;
  }
  as_fn(gpucap_real_dlsym(h, "nvmlInit_v2"), &init, sizeof init);
  as_fn(gpucap_real_dlsym(h, "nvmlDeviceGetHandleByUUID"), &by_uuid, sizeof by_uuid);
  /* v3 and v2 entries have one layout; v3 is what current drivers fill in. */
  as_fn(gpucap_real_dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3"), &procs, sizeof procs);
  if (!procs) {
    as_fn(gpucap_real_dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v2"), &procs, sizeof procs);
  }
  if (!init || !by_uuid || !procs || init() != NVML_SUCCESS) {
    by_uuid = NULL;
    procs = NULL; /* no usable NVML; the handle stays open, as a loaded NVML would */
  }
}

/* NVML's handle of CUDA device dev, or NULL. */
static nvmlDevice_t handle_of(int dev) {
  nvmlDevice_t d = atomic_load_explicit(&handles[dev], memory_order_acquire);
  CUuuid u;
  char uuid[64];
  if (d || !real.cuDeviceGetUuid_v2 || real.cuDeviceGetUuid_v2(&u, (CUdevice)dev) != CUDA_SUCCESS) {
    return d;
  }
  runinfo_format_uuid(&u, uuid, sizeof uuid);
  if (by_uuid(uuid, &d) != NVML_SUCCESS) {
    return NULL;
  }
  atomic_store_explicit(&handles[dev], d, memory_order_release);
  return d;
}

int nvmlq_process_bytes(int dev, uint64_t *bytes) {
  if (dev < 0 || dev >= GPUCAP_MAX_DEVICES) {
    return -ENODEV;
  }
  int saved = errno;
  pthread_once(&once, open_nvml);
  errno = saved;
  if (!procs) {
    return -ENOSYS;
  }
  nvmlDevice_t d = handle_of(dev);
  if (!d) {
    return -ENODEV;
  }
  nvmlProcessInfo_v2_t list[PROCS_MAX];
  unsigned n = PROCS_MAX;
  nvmlReturn_t rc = procs(d, &n, list);
  errno = saved;
  if (rc != NVML_SUCCESS) {
    return rc == NVML_ERROR_INSUFFICIENT_SIZE ? -E2BIG : -ENOSYS;
  }
  unsigned pid = (unsigned)getpid();
  for (unsigned i = 0; i < n && i < PROCS_MAX; i++) {
    if (list[i].pid == pid && list[i].usedGpuMemory != NOT_AVAILABLE) {
      *bytes = list[i].usedGpuMemory;
      return 0;
    }
  }
  return -ENOENT;
}
