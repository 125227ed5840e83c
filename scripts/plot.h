/* plot: draws an allocation trace (tracecsv) as a self-contained SVG timeline: bytes in use
 * over time as a step line, refused allocations as marks, and optional horizontal lines for
 * the cap and the pool's peak size, with axes in human units, a title and a legend.
 *
 * The SVG has no scripts, external fonts, images or links, so any browser or viewer shows it
 * as is. Long traces are drawn at the resolution of the picture (per half-pixel column, the
 * level on entry, the minimum, the maximum and the level on exit), so the file stays small.
 */
#ifndef GPUCAP_SCRIPTS_PLOT_H
#define GPUCAP_SCRIPTS_PLOT_H

#include "scripts/tracecsv.h"

#include <stddef.h>
#include <stdint.h>

typedef struct plot_opts {
  const char *title;     /* NULL: "Device memory over time" */
  const char *source;    /* shown under the title (the trace's file name); may be NULL */
  uint64_t cap;          /* 0: no cap line */
  uint64_t peak_pool;    /* 0: no pool line */
  const char *pool_name; /* label of the pool line: "peak pool" */
} plot_opts_t;

/* Renders the events into a malloc'ed, NUL-terminated SVG document (*svg, *len; freed by the
 * caller). Fails iff memory runs out (-ENOMEM). O(n). */
int plot_svg(const tracecsv_event_t *ev, size_t n, const plot_opts_t *opts, char **svg,
             size_t *len);

/* `gpucap plot`: argv[0] is "plot". Returns the exit status. */
int plot_main(int argc, char **argv);

#endif
