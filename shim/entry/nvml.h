/* NVML's memory figures and process lists under gpucap (shim/entry/nvml.c; the hooked names are
 * shim/entry/nvml.def). Entry layer: called from gpucap's dlsym.
 */
#ifndef GPUCAP_SHIM_NVML_H
#define GPUCAP_SHIM_NVML_H

#include "shim/accounting/nvmlq.h"
#include "shim/base/real.h"

/* The hooks (shim/entry/nvml.def), with nvml.h's signatures. */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos);

/* The dlsym decision for an NVML name: gpucap's hook when `name` is hooked and glibc's lookup
 * on `handle` lands in libnvidia-ml (whose function is then the one the hook calls); NULL
 * otherwise (the caller then lets glibc answer). Loads nothing; safe while sanitizer runtimes
 * initialise. */
SHIM_UNINSTRUMENTED void *nvml_dlsym(void *handle, const char *name);

#endif
