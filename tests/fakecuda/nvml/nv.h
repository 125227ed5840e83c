/* Internal interface between the modules of the fake NVML (tests/fakecuda/nvml/nv_*.c), the
 * libnvidia-ml.so.1 that sits beside the fake CUDA driver in build/fakecuda.
 *
 * Invariants: every exported entry point runs nv_enter() first and nv_leave() last, so its body
 * runs under the one global lock nv.lock, and nothing below may be called without it unless its
 * contract says so. The only work done outside the lock is asking the loader for the fake CUDA
 * driver (nv_cuda_*), because dlopen takes the loader's own lock. Device handles are pointers
 * into the static array nv.dev: never freed, so a handle stays recognisable for the life of the
 * process; a handle of a device beyond FAKECUDA_DEVICES is rejected like any foreign pointer.
 * The devices are the fake CUDA driver's, read from the same FAKECUDA_* settings by the same
 * parser (tests/fakecuda/fk_env.c), with the same UUIDs, PCI bus ids and names. With
 * FAKECUDA_MACHINE the devices' memory and processes are the machine's (fk_machine.h): the
 * ledger is mapped from the first nvmlInit* to the last nvmlShutdown, read only under nv.lock
 * (its own lock innermost), and this library never takes a slot in it.
 */
#ifndef GPUCAP_TESTS_FAKECUDA_NVML_NV_H
#define GPUCAP_TESTS_FAKECUDA_NVML_NV_H

#include <pthread.h>
#include <stddef.h>

#include "tests/fakecuda/fk.h"
#include "tests/fakecuda/fk_machine.h"
#include "tests/fakecuda/nvml/nvmldefs.h"

#define NV_API __attribute__((visibility("default")))

/* The display driver that ships with CUDA 13.0 (the fake CUDA driver's cuDriverGetVersion). */
#define NV_DRIVER_VERSION "580.65.06"

struct nvmlDevice_st {
  int index;
};

struct nv_global {
  pthread_mutex_t lock;
  struct fk_config cfg;      /* the FAKECUDA_* settings; fail[] holds FAKENVML_FAIL */
  int cfg_error;             /* a setting was malformed: every entry point fails */
  unsigned refs;             /* successful nvmlInit* calls not yet matched by nvmlShutdown */
  struct fk_machine machine; /* FAKECUDA_MACHINE: its ledger, mapped while refs > 0 (no slot) */
  struct nvmlDevice_st dev[FK_MAX_DEVICES];
  unsigned long long calls[FK_MAX_EXPORTS];
};

extern struct nv_global nv;

/* ---- Entry and exit (nv_core.c). ---- */

enum { NV_ANYTIME = 0, NV_NEED_INIT = 1 };

/* Takes the lock (always), reads the settings on first use, counts the call of `fn` and applies
 * FAKENVML_FAIL. Returns NVML_SUCCESS to go on, or the code the entry point must return at once:
 * the injected failure, NVML_ERROR_UNKNOWN for a malformed setting, NVML_ERROR_UNINITIALIZED
 * (need_init) while no nvmlInit* is in effect. */
nvmlReturn_t nv_enter(const char *fn, int need_init);

/* Logs the call with FAKECUDA_TRACE, releases the lock; returns rc. */
nvmlReturn_t nv_leave(nvmlReturn_t rc);

#define NV_BODY(need, expr)                                                                        \
  do {                                                                                             \
    nvmlReturn_t nv_rc_ = nv_enter(__func__, (need));                                              \
    if (nv_rc_ == NVML_SUCCESS) {                                                                  \
      nv_rc_ = (expr);                                                                             \
    }                                                                                              \
    return nv_leave(nv_rc_);                                                                       \
  } while (0)

/* Message to stderr prefixed "fakenvml: ". No lock needed. */
__attribute__((format(printf, 1, 2))) void nv_log(const char *fmt, ...);

/* Copies the NUL-terminated s into buf of length len: NVML_ERROR_INVALID_ARGUMENT for a NULL
 * buf, NVML_ERROR_INSUFFICIENT_SIZE (nothing written) when s and its NUL do not fit. */
nvmlReturn_t nv_string(char *buf, unsigned int len, const char *s);

/* ---- Devices (nv_dev.c). ---- */

/* The index of a handle of a device that exists (below FAKECUDA_DEVICES), or -1. */
int nv_dev(nvmlDevice_t h);

/* The index h points at in nv.dev, or -1; compares addresses only, so it needs no lock and is
 * safe for any pointer (for the look-ups made outside the lock). */
int nv_slot(nvmlDevice_t h);

/* Fills the PCI identity of device dev: the legacy part (busIdLegacy and the five numbers) and,
 * unless legacy_only, busId. */
void nv_pci_fill(int dev, nvmlPciInfo_t *pci, int legacy_only);

/* The figures of the modelled board: an H100 for compute capability 9.0 and above, an A100
 * below (as the fake CUDA driver's attributes). */
struct nv_board {
  unsigned pci_device_id, pci_subsystem_id;  /* device << 16 | vendor, as NVML packs them */
  unsigned sm_clock, mem_clock, video_clock; /* MHz */
  unsigned power_limit, power_draw;          /* mW */
  unsigned pcie_gen, pcie_width, pcie_speed; /* pcie_speed: NVML_PCIE_LINK_MAX_SPEED_* */
  unsigned long long bar1;                   /* BAR1 aperture, bytes */
};
const struct nv_board *nv_board(void);

/* ---- The fake CUDA driver in this process (nv_mem.c). Call WITHOUT the lock. ---- */

/* What this process holds on device dev according to the fake CUDA driver loaded in it (its
 * fakecudaDeviceUsage hook): zeros when no libcuda.so.1 is loaded, it is not the fake, it is not
 * initialised, or dev is out of range. */
struct nv_usage {
  size_t used;  /* device memory in use, bytes */
  int contexts; /* live contexts */
};
void nv_cuda_usage(int dev, struct nv_usage *u);

/* cuDriverGetVersion of the libcuda.so.1 the loader finds (loading it if needed, as NVIDIA's
 * library does): NVML_SUCCESS and *version, or NVML_ERROR_LIBRARY_NOT_FOUND,
 * NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_UNKNOWN (the call failed). */
nvmlReturn_t nv_cuda_version(int *version);

#endif
