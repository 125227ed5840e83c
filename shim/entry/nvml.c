/* NVML's memory figures and process lists as the program should see them: the cap as total, the
 * budget's (or the process's) use as used, computed by cap_shape, the arithmetic behind
 * cuMemGetInfo, so CUDA and NVML never disagree. Hooked: nvmlDeviceGetMemoryInfo (and _v2) and
 * nvmlDeviceGetComputeRunningProcesses (v1, _v2, _v3), both as exported names (programs linked
 * with -lnvidia-ml) and through dlsym (pynvml, NCCL, PyTorch dlopen the library). Nothing is
 * loaded and nothing printed for a program that does not call NVML. NVML's types are declared
 * here (gpucap builds without NVIDIA's headers). No lock of its own; the real functions are
 * remembered in atomics.
 */
#include "shim/accounting/cap.h"
#include "shim/context/ctx.h"
#include "shim/base/export.h"
#include "shim/entry/route.h"
#include "shim/entry/nvml.h"
#include "shim/accounting/overhead.h"
#include "shim/base/real.h"
#include "shim/accounting/runinfo.h"
#include "shim/base/settings.h"
#include "shim/accounting/share.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

enum { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_INSUFFICIENT_SIZE = 7 };
enum { NVML_ERROR_FUNCTION_NOT_FOUND = 13 };
#define NO_INSTANCE 0xFFFFFFFFu /* no MIG instance */
#define PROCS_MAX 128

typedef nvmlReturn_t mem_fn(nvmlDevice_t, void *);
typedef nvmlReturn_t procs_fn(nvmlDevice_t, unsigned int *, void *);
typedef nvmlReturn_t uuid_fn(nvmlDevice_t, char *, unsigned int);
typedef nvmlReturn_t index_fn(nvmlDevice_t, unsigned int *);

/* The hooked functions in shim/entry/nvml.def's order, then the helpers gpucap calls itself. */
enum which {
#define NVML(name) W_##name,
#include "shim/entry/nvml.def"
#undef NVML
  UUID,
  INDEX,
  NFNS,
  NHOOKED = UUID,
  MEM = W_nvmlDeviceGetMemoryInfo,
  MEM2 = W_nvmlDeviceGetMemoryInfo_v2,
  PROC1 = W_nvmlDeviceGetComputeRunningProcesses,
  PROC2 = W_nvmlDeviceGetComputeRunningProcesses_v2,
  PROC3 = W_nvmlDeviceGetComputeRunningProcesses_v3,
};
static const char *const names[NFNS] = {
#define NVML(name) #name,
#include "shim/entry/nvml.def"
#undef NVML
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetIndex",
};
static void *_Atomic reals[NFNS];

/* The real function `w`: the one dlsym found for the program, else the next definition after
 * gpucap (a program linked with -lnvidia-ml), else, for the helpers, the sibling in the library
 * that holds the memory query. */
static void *real_fn(enum which w) {
  void *p = atomic_load_explicit(&reals[w], memory_order_acquire);
  if (p) {
    return p;
  }
  real_dlsym_init();
  p = gpucap_real_dlsym(RTLD_NEXT, names[w]);
  Dl_info info;
  void *anchor = atomic_load(&reals[MEM]) ? atomic_load(&reals[MEM]) : atomic_load(&reals[MEM2]);
  if (!p && w >= NHOOKED && anchor && dladdr(anchor, &info) && info.dli_fname) {
    void *h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD); /* loaded: loads nothing */
    if (h) {
      p = gpucap_real_dlsym(h, names[w]);
      dlclose(h);
    }
  }
  if (p) {
    atomic_store_explicit(&reals[w], p, memory_order_release);
  }
  return p;
}

/* Stores the function at p in *fn (a pointer to a function pointer of `size` bytes): ISO C has
 * no cast between object and function pointers, dlsym's answer is one. */
static void as_fn(void *p, void *fn, size_t size) {
  memcpy(fn, &p, size);
}

/* Whether addr lies in NVIDIA's NVML (libnvidia-ml.so*, or a stand-in of that name). */
SHIM_UNINSTRUMENTED static bool in_nvml(void *addr) {
  Dl_info info;
  if (!dladdr(addr, &info) || !info.dli_fname) {
    return false;
  }
  const char *base = strrchr(info.dli_fname, '/');
  base = base ? base + 1 : info.dli_fname;
  return strncmp(base, "libnvidia-ml.so", 15) == 0;
}

static void *hook_of(enum which w);

SHIM_UNINSTRUMENTED void *nvml_dlsym(void *handle, const char *name) {
  int w = 0;
  while (w < NHOOKED && strcmp(names[w], name) != 0) {
    w++;
  }
  if (w == NHOOKED) {
    return NULL;
  }
  void *found = gpucap_real_dlsym(handle, name);
  void *hook = hook_of((enum which)w);
  if (!found || found == hook || !in_nvml(found)) {
    return found == hook ? hook : NULL; /* NULL: glibc answers through the tail jump */
  }
  void *none = NULL;
  atomic_compare_exchange_strong(&reals[w], &none, found);
  return hook;
}

/* The device's UUID as NVML writes it; "" when unknown. */
static void uuid_of(nvmlDevice_t d, char *buf, unsigned len) {
  uuid_fn *f = NULL;
  as_fn(real_fn(UUID), &f, sizeof f);
  if (!f || f(d, buf, len) != NVML_SUCCESS) {
    buf[0] = '\0';
  }
}

/* The CUDA ordinal of the device of this UUID in a process whose driver gpucap has adopted, -1
 * when there is none (or the driver is not initialised). */
static int ordinal_of(const char *uuid) {
  int n = 0;
  int dev = share_ordinal(uuid);
  if (dev >= 0 || !uuid[0] || !real.cuDeviceGetCount || !real.cuDeviceGetUuid_v2 ||
      real.cuDeviceGetCount(&n) != CUDA_SUCCESS) {
    return dev;
  }
  for (int i = 0; i < n && i < GPUCAP_MAX_DEVICES; i++) {
    CUuuid u;
    char s[48];
    if (real.cuDeviceGetUuid_v2(&u, (CUdevice)i) == CUDA_SUCCESS) {
      runinfo_format_uuid(&u, s, sizeof s);
      if (strcmp(s, uuid) == 0) {
        return i;
      }
    }
  }
  return -1;
}

/* Rewrites NVML's (free, total) of device d; used is then total - free. */
static void shape(nvmlDevice_t d, unsigned long long *free_bytes, unsigned long long *total_bytes,
                  unsigned long long *used) {
  char uuid[96];
  uint64_t f = *free_bytes, t = *total_bytes;
  uuid_of(d, uuid, sizeof uuid);
  int dev = ordinal_of(uuid);
  if (dev >= 0) { /* a CUDA process: exactly what its cuMemGetInfo says */
    overhead_measure(dev);
    cap_view(dev, ctx_idle_bytes(dev), t, &f, &t);
  } else {
    /* No CUDA here (an NVML tool): the budget's figures, else the cap of the device with NVML's
     * index as its ordinal (right unless CUDA_VISIBLE_DEVICES reorders them). */
    uint64_t cap = CAP_NONE, room = UINT64_MAX;
    unsigned index = 0;
    index_fn *ix = NULL;
    as_fn(real_fn(INDEX), &ix, sizeof ix);
    if (!share_peek(uuid, &cap, &room) && ix && ix(d, &index) == NVML_SUCCESS) {
      cap = settings_valid() ? cfg_device_cap(settings_get(), (int)index, t) : 0;
    }
    cap_shape(cap, 0, 0, room, &f, &t);
  }
  *free_bytes = f;
  *total_bytes = t;
  *used = t - f;
}

GPUCAP_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
  mem_fn *f = NULL;
  as_fn(real_fn(MEM), &f, sizeof f);
  nvmlReturn_t rc = f ? f(device, memory) : NVML_ERROR_FUNCTION_NOT_FOUND;
  if (rc == NVML_SUCCESS) {
    shape(device, &memory->free, &memory->total, &memory->used);
  }
  return rc;
}

GPUCAP_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device,
                                                      nvmlMemory_v2_t *memory) {
  mem_fn *f = NULL;
  as_fn(real_fn(MEM2), &f, sizeof f);
  nvmlReturn_t rc = f ? f(device, memory) : NVML_ERROR_FUNCTION_NOT_FOUND;
  if (rc == NVML_SUCCESS) {
    unsigned long long used;
    shape(device, &memory->free, &memory->total, &used);
    /* v2 splits used into reserved (the driver's own) and used; the cap's view has one figure */
    memory->reserved = used < memory->reserved ? used : memory->reserved;
    memory->used = used - memory->reserved;
  }
  return rc;
}

/* The processes the program should see on device d: its budget's, else itself when it holds
 * memory there. */
static unsigned processes(nvmlDevice_t d, struct share_proc *out, unsigned cap) {
  char uuid[96];
  uuid_of(d, uuid, sizeof uuid);
  int dev = ordinal_of(uuid);
  if (dev >= 0) {
    overhead_measure(dev); /* its own figure as the driver holds it now */
  }
  if (share_active()) {
    if (dev >= 0) {
      cap_bind(dev, 0); /* a CUDA process asking joins the budget there, as get-info does */
    }
    return share_processes(uuid, out, cap);
  }
  if (dev < 0 || cap_used(dev) + overhead_bytes(dev) == 0) {
    return 0;
  }
  /* What the device holds for it: the charges and the driver's own memory for it. */
  out[0] = (struct share_proc){getpid(), cap_used(dev) + overhead_bytes(dev)};
  return 1;
}

/* The size protocol of nvml.h, the driver's own checks first (initialised, a valid handle). */
static nvmlReturn_t list(enum which w, nvmlDevice_t d, unsigned int *count, void *infos) {
  procs_fn *f = NULL;
  as_fn(real_fn(w), &f, sizeof f);
  unsigned int zero = 0;
  nvmlReturn_t rc = f ? f(d, &zero, NULL) : NVML_ERROR_FUNCTION_NOT_FOUND;
  if (rc != NVML_SUCCESS && rc != NVML_ERROR_INSUFFICIENT_SIZE) {
    return rc;
  }
  if (!count || (!infos && *count > 0)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  struct share_proc p[PROCS_MAX];
  unsigned n = processes(d, p, PROCS_MAX);
  n = n > PROCS_MAX ? PROCS_MAX : n;
  if (*count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned i = 0; i < n; i++) {
    if (w == PROC1) {
      ((nvmlProcessInfo_v1_t *)infos)[i] = (nvmlProcessInfo_v1_t){(unsigned)p[i].pid, p[i].bytes};
    } else {
      ((nvmlProcessInfo_v2_t *)infos)[i] =
          (nvmlProcessInfo_v2_t){(unsigned)p[i].pid, p[i].bytes, NO_INSTANCE, NO_INSTANCE};
    }
  }
  *count = n;
  return NVML_SUCCESS;
}

GPUCAP_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                                unsigned int *infoCount,
                                                                nvmlProcessInfo_v1_t *infos) {
  return list(PROC1, device, infoCount, infos);
}

GPUCAP_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                                   unsigned int *infoCount,
                                                                   nvmlProcessInfo_v2_t *infos) {
  return list(PROC2, device, infoCount, infos);
}

GPUCAP_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                                   unsigned int *infoCount,
                                                                   nvmlProcessInfo_v2_t *infos) {
  return list(PROC3, device, infoCount, infos);
}

static void *hook_of(enum which w) {
  void (*const hooks[NHOOKED])(void) = {
#define NVML(name) (void (*)(void)) name,
#include "shim/entry/nvml.def"
#undef NVML
  };
  return route_fn_ptr(hooks[w]);
}
