/* smi: reads NVML the way nvidia-smi and pynvml do (dlopen("libnvidia-ml.so.1"), every function
 * through dlsym, nvmlInit_v2, a handle by index, the memory info and the compute processes), for
 * tests/integ/budget.sh. Not a TAP test itself.
 *
 *   smi                 prints "memory used=U free=F total=T", "memory2 used=U free=F total=T"
 *                       and "proc PID BYTES" for each compute process of device 0
 *   smi cuda BYTES      first takes BYTES with cuMemAlloc_v2 through a dlopen'ed libcuda.so.1,
 *                       then prints the same and "cuda free=F total=T" (cuMemGetInfo_v2), and
 *                       "agree" or "disagree" (NVML's free and total against CUDA's)
 *   smi none BYTES      takes BYTES through CUDA and never calls NVML: prints "nvml loaded"
 *                       or "nvml not loaded" (whether anything loaded libnvidia-ml.so.1)
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/nvml/nvmldefs.h"

/* dlsym's answer as a function pointer (ISO C has no cast between the two). */
#define SYM(h, name, fp) (memcpy(&(fp), &(void *){dlsym((h), (name))}, sizeof(fp)), (fp) != NULL)

static int cuda(const char *mode, size_t bytes, size_t *cfree, size_t *ctotal) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  CUresult (*init)(unsigned);
  CUresult (*retain)(CUcontext *, CUdevice);
  CUresult (*set)(CUcontext);
  CUresult (*alloc)(CUdeviceptr *, size_t);
  CUresult (*info)(size_t *, size_t *);
  CUcontext ctx;
  CUdeviceptr p;
  if (!h || !SYM(h, "cuInit", init) || !SYM(h, "cuDevicePrimaryCtxRetain", retain) ||
      !SYM(h, "cuCtxSetCurrent", set) || !SYM(h, "cuMemAlloc_v2", alloc) ||
      !SYM(h, "cuMemGetInfo_v2", info) || init(0) != CUDA_SUCCESS ||
      retain(&ctx, 0) != CUDA_SUCCESS || set(ctx) != CUDA_SUCCESS ||
      alloc(&p, bytes) != CUDA_SUCCESS || info(cfree, ctotal) != CUDA_SUCCESS) {
    printf("%s: cuda failed\n", mode);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "smi";
  size_t bytes = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
  size_t cfree = 0, ctotal = 0;
  if (strcmp(mode, "smi") != 0 && cuda(mode, bytes, &cfree, &ctotal) != 0) {
    return 1;
  }
  if (strcmp(mode, "none") == 0) {
    printf("nvml %s\n",
           dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD) ? "loaded" : "not loaded");
    return 0;
  }
  void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  nvmlReturn_t (*init)(void);
  nvmlReturn_t (*handle)(unsigned, nvmlDevice_t *);
  nvmlReturn_t (*mem)(nvmlDevice_t, nvmlMemory_t *);
  nvmlReturn_t (*mem2)(nvmlDevice_t, nvmlMemory_v2_t *);
  nvmlReturn_t (*procs)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *);
  nvmlDevice_t dev;
  nvmlMemory_t m;
  nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
  nvmlProcessInfo_t p[64];
  unsigned n = 64;
  if (!h || !SYM(h, "nvmlInit_v2", init) || !SYM(h, "nvmlDeviceGetHandleByIndex_v2", handle) ||
      !SYM(h, "nvmlDeviceGetMemoryInfo", mem) || !SYM(h, "nvmlDeviceGetMemoryInfo_v2", mem2) ||
      !SYM(h, "nvmlDeviceGetComputeRunningProcesses_v3", procs) || init() != NVML_SUCCESS ||
      handle(0, &dev) != NVML_SUCCESS || mem(dev, &m) != NVML_SUCCESS ||
      mem2(dev, &m2) != NVML_SUCCESS || procs(dev, &n, p) != NVML_SUCCESS) {
    printf("nvml failed\n");
    return 1;
  }
  printf("memory used=%llu free=%llu total=%llu\n", m.used, m.free, m.total);
  printf("memory2 used=%llu free=%llu total=%llu\n", m2.used + m2.reserved, m2.free, m2.total);
  for (unsigned i = 0; i < n; i++) {
    printf("proc %u %llu\n", p[i].pid, p[i].usedGpuMemory);
  }
  if (strcmp(mode, "cuda") == 0) {
    printf("cuda free=%zu total=%zu\n", cfree, ctotal);
    printf("%s\n", m.free == cfree && m.total == ctotal && m2.free == cfree ? "agree" : "disagree");
  }
  return 0;
}
