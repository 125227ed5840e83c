/* NVML as gpucap itself asks it: what NVML says this process holds on a device (the figure
 * nvidia-smi shows for it), the measure of the driver's own memory behind GPUCAP_CAP_COVERS
 * (shim/accounting/overhead.h). Also NVML's types, declared here as shim/base/cudadefs.h declares
 * CUDA's (layouts of nvml.h), for the NVML hooks too (shim/entry/nvml.h).
 *
 * NVML is the program's when it has loaded it, else gpucap loads libnvidia-ml.so.1 itself (and
 * calls nvmlInit_v2 once, never nvmlShutdown) the first time a figure is asked for, which happens
 * only once the process uses a device. Thread-safe; no lock held across NVML's calls.
 */
#ifndef GPUCAP_SHIM_NVMLQ_H
#define GPUCAP_SHIM_NVMLQ_H

#include <stdint.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned int version;
  unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_v2_t;

/* What NVML lists this process (getpid()) as holding on CUDA device dev, in *bytes. Returns 0;
 * -ENOSYS when there is no usable NVML (not installed, its initialisation failed, a function
 * missing: then never again); -ENOENT when NVML does not list this process on that device (a
 * process in a container sees the host's pids there; nothing held there) or has no figure for
 * it; -E2BIG when more processes use the device than gpucap reads (256); -ENODEV when NVML does
 * not know the device (matched by UUID). O(processes on the device). */
int nvmlq_process_bytes(int dev, uint64_t *bytes);

#endif
