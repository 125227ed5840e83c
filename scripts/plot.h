/* plot: draws an allocation trace (tracecsv) as a self-contained SVG timeline, one panel per
 * device: the pool (the bytes gpucap holds from the driver), the bytes in use by the program's
 * blocks and the bytes it requested, over time (scripts/timeline.h), refused allocations as
 * marks, and the device's cap as a line ("cap unknown" when nothing said it), with axes in
 * human units, a title and a legend.
 *
 * The SVG has no scripts, external fonts, images or links, so any browser or viewer shows it
 * as is. Long traces are drawn at the resolution of the picture (per half-pixel column, the
 * level on entry, the minimum, the maximum and the level on exit), so the file stays small.
 */
#ifndef GPUCAP_SCRIPTS_PLOT_H
#define GPUCAP_SCRIPTS_PLOT_H

#include "scripts/timeline.h"
#include "scripts/tracecsv.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A cap known to be none (the run had no cap on the device); 0 is a cap not known. */
#define PLOT_NO_CAP UINT64_MAX

typedef struct plot_opts {
  const char *title;  /* NULL: "Device memory over time" */
  const char *source; /* shown under the title (the trace's file name); may be NULL */
  uint64_t cap;       /* a cap line on every panel; 0: none given (then dev_cap decides) */
  uint64_t dev_cap[TIMELINE_MAX_DEVICES]; /* cap of device ordinal i; 0: not known;
                                           * PLOT_NO_CAP: the device had none */
  uint64_t unknown_cap; /* cap of the events whose device is not recorded, the same way */
  /* A trace without gpucap's columns (RMM's own) has one panel, with only the bytes requested:
   * the pool's peak size, from a report, may then be drawn as a line. 0: none. */
  uint64_t peak_pool;
  const char *pool_name; /* label of that line: "peak pool" */
  bool gpucap;           /* the trace has gpucap's columns (tracecsv_info_t.gpucap) */
} plot_opts_t;

/* Renders the events into a malloc'ed, NUL-terminated SVG document (*svg, *len; freed by the
 * caller). Fails iff memory runs out (-ENOMEM) or the trace has more devices than
 * TIMELINE_MAX_DEVICES (-E2BIG). O(n). */
int plot_svg(const tracecsv_event_t *ev, size_t n, const plot_opts_t *opts, char **svg,
             size_t *len);

/* `gpucap plot`: argv[0] is "plot". Returns the exit status. */
int plot_main(int argc, char **argv);

#endif
