/* Memory and processes: device memory (v1 and v2), BAR1, and the compute, graphics and MPS
 * process lists (v1, v2, v3), plus the look-ups of the fake CUDA driver in this process.
 *
 * NVML reports a device's memory across every process. With FAKECUDA_MACHINE that is the
 * machine's ledger (fk_machine.h): used is what every live process of the machine holds there
 * (dead ones reclaimed first), and the compute processes are the machine's live processes holding
 * memory or a context on the device, each with its bytes. Without it the fake knows one process,
 * this one: what the fake CUDA driver loaded here holds (its fakecudaDeviceUsage hook) is the
 * device's used memory, and this process is the one compute process while it holds memory or a
 * context there. Either way used + free is total and free never underflows. Reserved memory is
 * 0: the driver's own memory for each process (contexts, module code) is in its used figure, so
 * NVML's free equals cuMemGetInfo's free at every moment.
 *
 * Locking: the driver look-ups go through the loader (dlopen/dlsym), so they run before
 * nv_enter, without nv.lock; everything else runs under it.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "tests/fakecuda/nvml/nv.h"

/* ---- The fake CUDA driver in this process. ---- */

typedef CUresult (*usage_fn)(int, size_t *, int *);
typedef CUresult (*version_fn)(int *);

void nv_cuda_usage(int dev, struct nv_usage *u) {
  u->used = 0;
  u->contexts = 0;
  if (dev < 0) {
    return;
  }
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (h == NULL) {
    return;
  }
  void *sym = dlsym(h, "fakecudaDeviceUsage");
  usage_fn fn;
  memcpy(&fn, &sym, sizeof fn);
  size_t used;
  int contexts;
  if (fn != NULL && fn(dev, &used, &contexts) == CUDA_SUCCESS) {
    u->used = used;
    u->contexts = contexts;
  }
  dlclose(h);
}

nvmlReturn_t nv_cuda_version(int *version) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (h == NULL) {
    return NVML_ERROR_LIBRARY_NOT_FOUND;
  }
  void *sym = dlsym(h, "cuDriverGetVersion");
  version_fn fn;
  memcpy(&fn, &sym, sizeof fn);
  nvmlReturn_t rc = NVML_ERROR_FUNCTION_NOT_FOUND;
  if (fn != NULL) {
    rc = fn(version) == CUDA_SUCCESS ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
  }
  dlclose(h);
  return rc;
}

/* ---- Memory. ---- */

/* Fills total, used and free of device d, from the machine when there is one, else from u (this
 * process's use): used never above total. */
static void figures(int d, const struct nv_usage *u, unsigned long long *total,
                    unsigned long long *used, unsigned long long *free_bytes) {
  uint64_t held = u->used;
  if (nv.machine.l != NULL) {
    struct fk_machine_usage mu;
    fk_machine_usage(&nv.machine, d, &mu);
    held = mu.used;
  }
  *total = nv.cfg.mem[d];
  *used = held < *total ? held : *total;
  *free_bytes = *total - *used;
}

static nvmlReturn_t memory_v1(nvmlDevice_t device, const struct nv_usage *u, nvmlMemory_t *m) {
  int d = nv_dev(device);
  if (d < 0 || m == NULL) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  figures(d, u, &m->total, &m->used, &m->free);
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
  struct nv_usage u;
  nv_cuda_usage(nv_slot(device), &u);
  NV_BODY(NV_NEED_INIT, memory_v1(device, &u, memory));
}

static nvmlReturn_t memory_v2(nvmlDevice_t device, const struct nv_usage *u, nvmlMemory_v2_t *m) {
  int d = nv_dev(device);
  if (d < 0 || m == NULL) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (m->version != nvmlMemory_v2) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  figures(d, u, &m->total, &m->used, &m->free);
  m->reserved = 0;
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
  struct nv_usage u;
  nv_cuda_usage(nv_slot(device), &u);
  NV_BODY(NV_NEED_INIT, memory_v2(device, &u, memory));
}

/* BAR1 maps device memory for the CPU and peers; nothing in the fake maps through it. */
static nvmlReturn_t bar1(nvmlDevice_t device, nvmlBAR1Memory_t *m) {
  if (nv_dev(device) < 0 || m == NULL) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  m->bar1Total = nv_board()->bar1;
  m->bar1Free = m->bar1Total;
  m->bar1Used = 0;
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory) {
  NV_BODY(NV_NEED_INIT, bar1(device, bar1Memory));
}

/* ---- Processes. ---- */

enum { ENTRY_V1, ENTRY_V2 };       /* nvmlProcessInfo_v1_t, or nvmlProcessInfo_v2_t (= v3's) */
enum { KIND_COMPUTE, KIND_OTHER }; /* compute processes, or graphics / MPS ones */

/* The compute processes of device d into list (room for FK_MACHINE_SLOTS): the machine's, else
 * this process when u says it holds memory or a context there. Returns how many. */
static unsigned compute_processes(int d, const struct nv_usage *u, struct fk_machine_proc *list) {
  if (nv.machine.l != NULL) {
    return fk_machine_processes(&nv.machine, d, list, FK_MACHINE_SLOTS);
  }
  if (u->used == 0 && u->contexts == 0) {
    return 0;
  }
  list[0] = (struct fk_machine_proc){.pid = getpid(), .used = u->used};
  return 1;
}

/* The list of one kind: *count in, the entries needed or written out. u NULL: a kind with no
 * process in the fake (graphics, MPS). infos may be NULL only to ask for the count. Nothing is
 * written to infos unless it all fits. */
static nvmlReturn_t processes(nvmlDevice_t device, const struct nv_usage *u, unsigned *count,
                              void *infos, int entry) {
  int d = nv_dev(device);
  if (d < 0 || count == NULL || (infos == NULL && *count != 0)) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  struct fk_machine_proc list[FK_MACHINE_SLOTS];
  unsigned n = u != NULL ? compute_processes(d, u, list) : 0;
  if (*count < n) {
    *count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned i = 0; i < n; i++) {
    if (entry == ENTRY_V1) {
      nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)infos + i;
      p->pid = (unsigned)list[i].pid;
      p->usedGpuMemory = list[i].used;
    } else {
      nvmlProcessInfo_v2_t *p = (nvmlProcessInfo_v2_t *)infos + i;
      p->pid = (unsigned)list[i].pid;
      p->usedGpuMemory = list[i].used;
      p->gpuInstanceId = 0xFFFFFFFFu; /* MIG is off */
      p->computeInstanceId = 0xFFFFFFFFu;
    }
  }
  *count = n;
  return NVML_SUCCESS;
}

/* Each process-list entry point: the compute lists ask the fake driver first (outside the lock),
 * the graphics and MPS ones are always empty. */
#define NV_PROCESSES(name, type, kind, entry)                                                      \
  NV_API nvmlReturn_t name(nvmlDevice_t device, unsigned int *infoCount, type *infos) {            \
    struct nv_usage u;                                                                             \
    if (kind == KIND_COMPUTE) {                                                                    \
      nv_cuda_usage(nv_slot(device), &u);                                                          \
    }                                                                                              \
    NV_BODY(NV_NEED_INIT,                                                                          \
            processes(device, kind == KIND_COMPUTE ? &u : NULL, infoCount, infos, entry));         \
  }

NV_PROCESSES(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, KIND_COMPUTE, ENTRY_V1)
NV_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, KIND_COMPUTE, ENTRY_V2)
NV_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t, KIND_COMPUTE, ENTRY_V2)
NV_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t, KIND_OTHER, ENTRY_V1)
NV_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t, KIND_OTHER, ENTRY_V2)
NV_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t, KIND_OTHER, ENTRY_V2)
NV_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t, KIND_OTHER, ENTRY_V1)
NV_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, KIND_OTHER, ENTRY_V2)
NV_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t, KIND_OTHER, ENTRY_V2)
