/* Oversubscription (GPUCAP_OVERSUBSCRIBE, GPUCAP_SPILL; docs/design.md, "Beyond the card"):
 * each device's spill budget, host memory that managed memory (and, with GPUCAP_SPILL, device
 * allocations the cap refuses) may take beyond the cap, kept on the host by advice. This module
 * keeps the budgets' charges, the address ranges spilled (so that the program's own prefetches
 * and advice cannot bring them to a device: shim/entry/managed.c) and the exit report's figures.
 * Thread-safe: charges are CAS loops on atomics, as the cap's; the ranges are a sorted array
 * under one mutex, never held across a driver call, read without it while none exists. A fork
 * child starts with nothing spilled.
 */
#ifndef GPUCAP_SHIM_SPILL_H
#define GPUCAP_SHIM_SPILL_H

#include "shim/base/cudadefs.h"

#include <stdbool.h>
#include <stdint.h>

/* Device dev's spill budget in bytes from the settings (0: none; also for dev < 0). */
uint64_t spill_budget(int dev);

/* True iff dev can keep managed memory on the host while its kernels run
 * (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS; without it the driver moves every managed
 * allocation to the device at a launch). Asks the driver once per device, saying once when not.
 */
bool spill_possible(int dev);

/* True iff a device allocation the cap refuses on dev is spilled (GPUCAP_SPILL on, a budget,
 * and spill_possible). */
bool spill_devices(int dev);

/* Charges `bytes` to dev's spill budget iff they fit; returns true iff charged. Lock-free. */
bool spill_charge(int dev, uint64_t bytes);

/* Returns a charge of spill_charge. Lock-free. */
void spill_credit(int dev, uint64_t bytes);

/* Bytes charged to dev's spill budget now. */
uint64_t spill_used(int dev);

/* Records that [base + kept, base + bytes) of the allocation at base is spilled for dev (kept:
 * its part under the cap), and counts one spilled allocation. Returns the range's id (never 0),
 * or 0 iff host memory ran out (nothing recorded). O(ranges). */
uint64_t spill_remember(uint64_t base, uint64_t kept, uint64_t bytes, int dev);

/* Forgets the spilled range `id` (its allocation was freed); nothing for 0 or an id forgotten
 * already. By id, not address: once the driver has freed an allocation its address may be
 * handed out again, and spilled again, before the first is forgotten. O(ranges). */
void spill_forget(uint64_t id);

/* The parts of [p, p + n) outside every spilled range, in address order, into out[0 .. max)
 * as (start, length) pairs; returns their number, and in *spilled the bytes inside spilled
 * ranges (0 with one part, the whole range, when nothing is spilled: no lock taken then). Parts
 * beyond the first max are left out (max >= 1). O(log ranges + parts). */
int spill_outside(uint64_t p, uint64_t n, uint64_t out[][2], int max, uint64_t *spilled);

/* Advises the driver to keep [p, p + n) of managed memory on the host, where device dev reads
 * and writes it across the bus: preferred location the host, accessed by dev (cuda.h: a page at
 * its preferred location that the device can map is not migrated). Returns the driver's first
 * error. */
CUresult spill_keep_on_host(uint64_t p, uint64_t n, int dev);

/* The exit report's figures of device dev: its budget, the bytes spilled now and at most, and
 * the allocations spilled so far. */
typedef struct spill_counts {
  uint64_t budget, now, peak, allocs;
} spill_counts_t;
void spill_counts(int dev, spill_counts_t *out);

#endif
