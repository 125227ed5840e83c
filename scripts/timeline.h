/* timeline: a trace (tracecsv) replayed per device into the three figures of device memory
 * over time, which `gpucap plot` draws and `gpucap export` writes:
 *
 *   requested  the bytes the program asked for, summed over the blocks it holds;
 *   held       the bytes those blocks hold (each rounded up to its chunk: requested or more);
 *   reserved   the bytes gpucap holds from the driver: its pool regions, plus each block that
 *              is not in a region (pass-through, stream-ordered), which the driver allocated
 *              on its own, less what of it was spilled to host memory (the Spilled column).
 *              This is what the cap limits.
 *
 * A trace without gpucap's columns (RMM's own) has no regions and no chunk sizes: there held is
 * requested and reserved is held, all on device -1. Also the region set (regions of one device,
 * sorted by address) that the exports share. No state; results are the caller's.
 */
#ifndef GPUCAP_SCRIPTS_TIMELINE_H
#define GPUCAP_SCRIPTS_TIMELINE_H

#include "scripts/tracecsv.h"

#include <stddef.h>
#include <stdint.h>

#define TIMELINE_MAX_DEVICES 64

/* The figures of one device after one of its events. */
typedef struct tl_point {
  int64_t ns;
  uint64_t requested, held, reserved;
  uint64_t refused; /* for a refused request, its size; else 0 */
  size_t event;     /* index of the event in the trace */
  char verdict[16]; /* for a refused request, the trace's verdict ("" when none) */
} tl_point_t;

typedef struct tl_device {
  int dev; /* -1: events whose device the trace does not give */
  tl_point_t *pts;
  size_t npts;
  uint64_t peak_requested, peak_held, peak_reserved;
  int64_t peak_held_ns;
  size_t allocs, frees, refusals, reserves, releases;
  uint64_t fail_hi; /* the highest held + refused request */
} tl_device_t;

typedef struct timeline {
  tl_device_t dev[TIMELINE_MAX_DEVICES]; /* in order of device ordinal, -1 last */
  int ndev;
  int64_t end_ns;           /* time of the last event */
  size_t unmatched_frees;   /* frees of blocks the trace never allocated (ignored) */
  size_t unmatched_regions; /* releases of regions never reserved (ignored) */
} timeline_t;

/* Replays ev[0..n) into tl (zeroed first). Fails iff the trace names more than
 * TIMELINE_MAX_DEVICES devices (-E2BIG) or memory runs out (-ENOMEM); tl is then empty.
 * O(n log regions + n log blocks). */
int timeline_build(const tracecsv_event_t *ev, size_t n, timeline_t *tl);

/* Reads and parses the trace file at `path` ("-": standard input) for the command `cmd`
 * (plot, export) into *ev, *n and *info as tracecsv_parse does, warning when its last line was
 * cut. Fails iff the file cannot be read or is not a trace (returns -1 after printing an error
 * naming cmd, the path and the line); 0 on success. O(file size). */
int timeline_load(const char *cmd, const char *path, tracecsv_event_t **ev, size_t *n,
                  tracecsv_info_t *info);

/* Frees what timeline_build allocated. */
void timeline_free(timeline_t *tl);

/* The regions of one device: [base, base + size), sorted by base, never overlapping. */
typedef struct tl_region {
  uint64_t base, size;
} tl_region_t;

typedef struct tl_regions {
  tl_region_t *r;
  size_t n, cap;
} tl_regions_t;

/* Adds [base, base + size); 0, or -ENOMEM. O(n). */
int tl_regions_add(tl_regions_t *s, uint64_t base, uint64_t size);

/* Removes the region that starts at base; true iff there was one. O(n). */
bool tl_regions_remove(tl_regions_t *s, uint64_t base, uint64_t *size);

/* The index of the region holding addr, or -1. O(log n). */
long tl_regions_find(const tl_regions_t *s, uint64_t addr);

void tl_regions_free(tl_regions_t *s);

#endif
