/* The driver's own memory for this process on each device (its "overhead"): what the device holds
 * for the process beyond gpucap's charges — its contexts with their local memory, printf FIFO and
 * heap, the code of its modules, its allocations' rounding to the driver's pages. Measured where
 * the driver says it, and set in shim/accounting/cap.h, whose admission and view count it when the
 * cap covers the process (GPUCAP_CAP_COVERS=process, the default).
 *
 * Measured, per device, by the first method that answers:
 *   nvml    NVML's figure for this process (what nvidia-smi lists for it, shim/accounting/nvmlq.h)
 * less the charges: everything, exactly, whatever made it; deltas  the fall in cuMemGetInfo's free
 * memory across each call gpucap sees change the driver's memory (contexts made and destroyed,
 * modules and libraries loaded and unloaded, cuCtxSetLimit), less the charges made meanwhile; a
 * process's first context, made with none current, is measured as what the device shows in use
 * beyond the charges right after it (exact alone on the device, more beside other processes). When:
 * a device's first allocation; after each of those calls; at every get-info (cuMemGetInfo, NVML's
 * memory queries); before a refusal; and, near the cap (charges + overhead within its last eighth,
 * at least 64 MiB), before each allocation once anything was charged since the last measurement.
 * What the driver takes without a call gpucap sees (a launch that loads code lazily or needs a
 * deeper stack) is counted from the next measurement on. Thread-safe: per-device atomics;
 * measurements run with no gpucap lock held.
 */
#ifndef GPUCAP_SHIM_OVERHEAD_H
#define GPUCAP_SHIM_OVERHEAD_H

#include "shim/base/cudadefs.h"

#include <stdbool.h>
#include <stdint.h>

enum overhead_method { OVERHEAD_UNMEASURED, OVERHEAD_NVML, OVERHEAD_DELTAS };

/* Where growth of the driver's memory was seen: around a context's creation, a module or library
 * load, a limit set, or at another measurement (pages, lazy loading at a launch, a deeper stack
 * for a kernel). */
enum overhead_cause {
  OVERHEAD_CONTEXT,
  OVERHEAD_MODULES,
  OVERHEAD_LIMITS,
  OVERHEAD_OTHER,
  OVERHEAD_CAUSES
};

/* Bytes of device dev the driver holds for this process beyond gpucap's charges, as last
 * measured (0 before the first measurement, or for a bad ordinal). Under a driver-enforced limit
 * L on the process (MPS, dmem), gpucap's cap for allocations should stay below
 * L - overhead_bytes(dev). Lock-free, O(1). */
uint64_t overhead_bytes(int dev);

/* At an allocation on dev, before it is admitted (no lock held): measures when dev was never
 * measured, or near the cap once anything was charged since the last measurement (above).
 * Otherwise a few relaxed loads. */
void overhead_check(int dev);

/* Measures dev's overhead now (get-info). No lock held. */
void overhead_measure(int dev);

/* Before a refusal on dev: measures again; true iff the overhead turned out smaller than counted,
 * so the refused allocation may fit now. */
bool overhead_recheck(int dev);

/* Around a driver call on dev that may change the driver's own memory: overhead_before just
 * before it, overhead_after just after (with its result); `teardown` for a call that can only
 * give memory back (by deltas its measure is then never growth, nor a creation's a shrinking,
 * whatever the charges did meanwhile). The change is measured and attributed
 * to `cause`; when it brings the process over its cap one warning names `call` (gpucap cannot
 * refuse what the driver takes for itself: allocations are refused until the process is back
 * under its cap). dev < 0: nothing is done. `reserved` bytes that the caller charged for the call
 * (a prediction, shim/entry/limit.c) are left out of the charges while measuring. */
struct overhead_call {
  int dev;
  bool teardown; /* the call can only give memory back (a destroy, an unload) */
  bool known;    /* free_before was read */
  uint64_t free_before, charged_before, reserved;
};
void overhead_before(struct overhead_call *c, int dev, bool teardown);
void overhead_after(struct overhead_call *c, enum overhead_cause cause, const char *call,
                    CUresult rc);

/* For the exit report: how dev's overhead was measured, and where it was seen growing, each
 * cause at its own peak. */
struct overhead_figures {
  enum overhead_method method;
  uint64_t peak;                        /* the overhead's own peak */
  uint64_t cause_peak[OVERHEAD_CAUSES]; /* by cause */
};
void overhead_figures(int dev, struct overhead_figures *out);

/* "nvml", "deltas" or "unmeasured". */
const char *overhead_method_name(enum overhead_method m);

/* "context", "modules", "limits", "other". */
const char *overhead_cause_name(enum overhead_cause c);

#endif
