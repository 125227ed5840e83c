/* The per-process cap: settings loaded once from config/, each device's limit, and the bytes
 * charged against it. "Charged" means bytes gpucap obtained from the driver for the program.
 * Under GPUCAP_CAP_COVERS=process (the default) the cap also covers the driver's own memory for
 * the process (its "overhead", measured by shim/accounting/overhead.c and set here): admission is
 * then within the cap less the overhead, and what the program sees counts it as used. Devices are
 * CUDA ordinals as the process sees them (the CUdevice of the current context). All functions are
 * thread-safe; charges are lock-free atomics.
 */
#ifndef GPUCAP_SHIM_CAP_H
#define GPUCAP_SHIM_CAP_H

#include "core/limits.h"
#include "shim/base/cudadefs.h"

#include <stdbool.h>
#include <stdint.h>

#define CAP_NONE UINT64_MAX

/* The ordinal of the calling thread's current context's device in *dev. Fails (returning the
 * driver's error) iff there is no usable current context or the driver failed. */
CUresult cap_current_device(int *dev);

/* True iff rc, from a context query, means "no usable context" (not initialised, no current
 * context, context destroyed): the driver can then allocate nothing, so it may answer the
 * program's call itself. Any other failure must be returned to the program as is: an
 * allocation gpucap cannot attribute to a device is never made uncapped. */
bool cap_no_context(CUresult rc);

/* Device dev's first use, once: computes its cap, the smallest of gpucap's settings' and the
 * caps the cluster set (settings_found: each a margin under its line), then a shared budget's,
 * whose entry for dev this process joins here (shim/accounting/share.h); and learns what the
 * exit report will say of dev (shim/accounting/runinfo.h). `physical_total` is the device's real
 * total memory when the caller already knows it, else 0 (then the driver is asked). The first
 * call asks the driver for dev's PCI bus id when a discovered source is keyed by one; every later
 * call is one atomic load. Made where a device is first used: its charges and credits, the
 * overhead set for it, get-info (cap_view), cuDeviceTotalMem, a pool's setup, the first overhead
 * check, NVML's process list. Thread-safe (concurrent first calls compute the same cap). */
void cap_bind(int dev, uint64_t physical_total);

/* Device dev's cap in bytes, or CAP_NONE: no cap, or dev not bound yet (cap_bind). One atomic
 * load. */
uint64_t cap_limit(int dev);

/* Device dev's guarantee from the cluster (dmem.min, NVIDIA_GPU_MEMORY_REQUEST): above it the
 * pools give their idle memory back at once. CAP_NONE when there is none or before dev's cap is
 * computed. One atomic load. */
uint64_t cap_guarantee(int dev);

/* True iff the cap covers the process (GPUCAP_CAP_COVERS=process), not only its allocations. */
bool cap_covers_process(void);

/* Charges `bytes` to dev iff the charge stays within the cap (less the overhead, when the cap
 * covers the process); returns true iff charged. */
bool cap_charge(int dev, uint64_t bytes);

/* What cap_charge would admit on dev now (the cap less the charges and the overhead it counts;
 * UINT64_MAX without a cap); a shared budget may admit less. */
uint64_t cap_room(int dev);

/* Charges `bytes` the driver has already taken for the program, over the cap if it must (the
 * charge follows the driver: graph memory mapped beyond what was admitted, by rounding). */
void cap_add(int dev, uint64_t bytes);
/* Returns a previous charge. */
void cap_credit(int dev, uint64_t bytes);

/* Bytes currently charged to dev. */
uint64_t cap_used(int dev);

/* Successful charges of dev so far (cap_charge and cap_add): a measurement can tell whether
 * anything was charged since it last looked. */
uint64_t cap_charges(int dev);

/* The driver's own memory for this process on dev as last measured (shim/accounting/overhead.h sets
 * it): the cap's admission and view count it when the cap covers the process, and a shared budget's
 * slot holds it beside the charges either way. cap_set_overhead returns the previous figure. */
uint64_t cap_overhead(int dev);
uint64_t cap_set_overhead(int dev, uint64_t bytes);

/* Of dev's charges, those of managed memory (passthru_settle_managed, passthru_spill's part under
 * the cap): the driver places its pages on demand, so the device may hold less than them, and a
 * measurement of the driver's own memory cannot take the charges as all held
 * (shim/accounting/overhead.c). */
void cap_managed_add(int dev, uint64_t bytes);
void cap_managed_sub(int dev, uint64_t bytes);
uint64_t cap_managed(int dev);

/* The overhead the cap counts: cap_overhead(dev) when the cap covers the process, else 0. */
uint64_t cap_counted_overhead(int dev);

/* What the device held for the process at the peak of charges + overhead (the whole): the whole,
 * and of it the charges and the overhead. All 0 before anything was charged or measured. */
struct cap_peak {
  uint64_t whole, charged, overhead;
};
void cap_peak(int dev, struct cap_peak *out);

/* Rewrites a driver's (free, total) answer for dev as the program should see it. `idle` is
 * bytes gpucap holds from the driver for dev without the program holding them (free and
 * deferred pool chunks): they count as free, since gpucap hands them out on request.
 * `physical` is the device's real total from a 64-bit query, or 0 when the answer came from
 * the legacy 32-bit ABI (clamped: the cap is then computed from cuDeviceTotalMem_v2).
 * total = min(cap, *total_bytes); free = min(cap - (charged - idle), real free + idle), never
 * above total, never negative. Without a cap only the idle bytes are added back. */
void cap_view(int dev, uint64_t idle, uint64_t physical, uint64_t *free_bytes,
              uint64_t *total_bytes);

/* The arithmetic of cap_view, shared with NVML's figures (shim/entry/nvml.c) so CUDA and NVML can
 * never disagree: `limit` the cap (CAP_NONE: none), `held` bytes the program holds under it,
 * `idle` bytes held for it unused, `room` what a shared budget still admits for this process
 * (UINT64_MAX: no budget); *free_bytes and *total_bytes the device's figures in, the program's
 * out: total = min(limit, total); free = min(limit - held, free + idle, room + idle, total). */
void cap_shape(uint64_t limit, uint64_t held, uint64_t idle, uint64_t room, uint64_t *free_bytes,
               uint64_t *total_bytes);

#endif
