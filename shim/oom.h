/* What gpucap prints when a pool refuses an allocation: one warning, the pool's memory-state
 * report and the setting that would help. Makes no driver call (the cap is cached by then) and
 * takes no lock; the caller prints once per burst of failures.
 */
#ifndef GPUCAP_SHIM_OOM_H
#define GPUCAP_SHIM_OOM_H

#include "core/bfc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Prints the refusal of `bytes` on device dev: the warning, report (the pool's
 * bfc_format_report text, NUL-terminated within len) and a hint chosen from s (the pool's
 * stats then), driver_full (the driver itself refused a region for want of memory, or the
 * device's free memory was less than the region) and others_hold (then: what other processes
 * and the driver held, when known; else 0). */
void oom_print(int dev, size_t bytes, const char *report, size_t len, const bfc_stats_t *s,
               bool driver_full, uint64_t others_hold);

#endif
