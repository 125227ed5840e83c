/* What gpucap says when it refuses an allocation: a verdict (why it was refused) with its
 * evidence and the one action that would help. The first refusal of the process prints one
 * short block (what was asked, the verdict and its evidence, the libraries holding the device's
 * memory, what helps, where the full dump went); the pool's full state (bins, occupancy map:
 * bfc_format_report) goes where GPUCAP_OOM_DUMP says, nowhere by default. Each of the next
 * OOM_SUMMARIES refusals prints one line; then one line says the rest are only counted (the
 * exit report has them). GPUCAP_REPORT=off (`gpucap run --quiet`) prints none of it (a dump
 * file is still written). The counts per device and verdict are kept for the exit report.
 * Thread-safe: atomics only, no lock, no driver call.
 */
#ifndef GPUCAP_SHIM_OOM_H
#define GPUCAP_SHIM_OOM_H

#include "core/bfc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define OOM_SUMMARIES 32

enum oom_verdict {
  OOM_CAP_FULL,    /* the cap is full of live allocations */
  OOM_FRAGMENTED,  /* enough bytes are free under the cap, no piece is large enough */
  OOM_DEVICE_FULL, /* the driver refused below the cap: the device itself is full */
  OOM_OTHER_POOLS, /* other contexts' pools hold idle memory that could not be returned */
  OOM_CAPTURE,     /* only freed blocks could serve, and a CUDA graph capture keeps them unsafe */
  OOM_SPILL_FULL,  /* beyond the cap, and beyond the spill budget (GPUCAP_OVERSUBSCRIBE) too */
  OOM_VERDICTS
};

/* What the refusal of `bytes` on device dev saw. */
typedef struct oom_facts {
  int dev;
  uint64_t bytes;       /* the request */
  uint64_t cap;         /* the device's cap, or CAP_NONE */
  uint64_t charged;     /* bytes charged to the device then */
  uint64_t driver;      /* the driver's own memory the cap counted then (GPUCAP_CAP_COVERS=process;
                         * else 0) */
  uint64_t free_bytes;  /* free in the refusing pool (0 for pass-through) */
  uint64_t largest;     /* its largest free piece (0 for pass-through) */
  uint64_t others_idle; /* idle bytes in the device's other pools */
  bool driver_full;     /* the driver itself refused for want of memory, or the device's free
                         * memory was less than the region */
  uint64_t others_hold; /* then: what other processes and the driver held, when known; else 0 */
  uint64_t in_capture;  /* bytes the refusing pool held deferred while a capture kept gpucap from
                         * synchronising (shim/context/capture.h); else 0 */
  uint64_t spill_max;   /* the spill budget (shim/accounting/spill.h) that also refused the request,
                         * which   was beyond the cap; else 0 */
  uint64_t spilled;     /* then: what that budget held */
} oom_facts_t;

/* The verdict for f. Pure. */
enum oom_verdict oom_judge(const oom_facts_t *f);

/* The verdict's name in the JSON report and the trace ("cap_full", "fragmentation",
 * "device_full", "other_pools", "capture", "spill_full"). */
const char *oom_verdict_name(enum oom_verdict v);

/* Counts one refusal and returns its rank in the process (0 for the first). */
uint64_t oom_rank(void);

/* Counts a refusal of device dev under verdict v (for the exit report). */
void oom_tally(int dev, enum oom_verdict v);

/* True iff the refusal of rank `rank` writes the pool's full state (the caller then formats it
 * with bfc_format_report while it holds the pool): the first refusal, when GPUCAP_OOM_DUMP
 * names a file, or stderr and GPUCAP_REPORT is not off. */
bool oom_wants_report(uint64_t rank);

/* Prints what the refusal of rank `rank` prints, and for the first writes the full dump
 * `report` (bfc_format_report text, NUL-terminated within len; NULL for none) where
 * GPUCAP_OOM_DUMP says. Called with no lock held. */
void oom_print(uint64_t rank, const oom_facts_t *f, enum oom_verdict v, const char *report,
               size_t len);

/* Refusals of device dev with verdict v so far. */
uint64_t oom_refusals(int dev, enum oom_verdict v);

#endif
