/* export: writes a trace (tracecsv) in the formats of viewers people already use:
 *
 *   torch-snapshot  the pickle that torch.cuda.memory._snapshot() returns and
 *                   torch.cuda.memory._dump_snapshot() writes: `segments` (gpucap's pool
 *                   regions, and each block the driver allocated on its own, as it stood at the
 *                   end of the trace, with their blocks) and `device_traces` (per device, every
 *                   event as segment_alloc, alloc, free_requested + free_completed,
 *                   segment_free or oom), which PyTorch's viewer (pytorch.org/memory_viz,
 *                   `python -m torch.cuda._memory_viz trace_plot`) draws;
 *   perfetto        Chrome's trace event JSON, which ui.perfetto.dev and chrome://tracing
 *                   open: per device a process with counter tracks `reserved`, `held` and
 *                   `requested` (bytes) and an instant event for each refused allocation.
 *
 * Each event's "frames" name the trace's file, its line and its thread, since the trace does
 * not record call stacks.
 */
#ifndef GPUCAP_SCRIPTS_EXPORT_H
#define GPUCAP_SCRIPTS_EXPORT_H

#include "scripts/tracecsv.h"

#include <stddef.h>

/* The torch snapshot of ev[0..n) as a malloc'ed pickle (*out, *len). `source` names the trace
 * in the frames (its base name), and info's library names (info may be NULL) the library of
 * each block. Fails iff memory runs out (-ENOMEM) or the trace has more devices than
 * TIMELINE_MAX_DEVICES (-E2BIG). O(n log n). */
int export_torch(const tracecsv_event_t *ev, size_t n, const tracecsv_info_t *info,
                 const char *source, unsigned char **out, size_t *len);

/* The Chrome/Perfetto trace event JSON of ev[0..n) as a malloc'ed string (*out, *len). Fails
 * as export_torch. O(n). */
int export_perfetto(const tracecsv_event_t *ev, size_t n, const char *source, char **out,
                    size_t *len);

/* `gpucap export`: argv[0] is "export". Returns the exit status. */
int export_main(int argc, char **argv);

#endif
