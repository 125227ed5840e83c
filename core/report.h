/* report: the exit report, one row per pool (one pool per CUDA context), formatted as a human
 * table for stderr and as one JSON document (layout and every field: docs/report.md).
 *
 * Pure formatting into the caller's buffer with snprintf semantics: no malloc, no stdio stream,
 * no locale-dependent conversion (fractions are printed from integers, so the JSON stays valid
 * whatever LC_NUMERIC the program chose), no locks, errno left as found. Every function is
 * reentrant and thread-safe on distinct buffers; the rows are only read.
 */
#ifndef GPUCAP_CORE_REPORT_H
#define GPUCAP_CORE_REPORT_H

#include "core/bfc.h"

#include <stddef.h>
#include <stdint.h>

/* cap value meaning "no cap on this device" (the shim's CAP_NONE). */
#define REPORT_NO_CAP UINT64_MAX

/* Bytes that always hold report_format_size's text and its NUL ("1023.9 KiB", "16.0 EiB"). */
#define REPORT_SIZE_MAX 16

/* Bytes that always hold the full text or JSON report of n rows, NUL included, whatever the
 * rows and pid hold and for a GPUCAP_VERSION under 100 characters (tests/unit/test_report.c
 * checks both against worst-case rows). */
#define REPORT_TEXT_MAX(n) (1152 + 320 * (size_t)(n))
#define REPORT_JSON_MAX(n) (256 + 1536 * (size_t)(n))

/* One pool as it stands at exit. */
typedef struct report_row {
  int device;        /* CUDA ordinal */
  int context;       /* 0-based index of the pool's context among the contexts of that device */
  int pooled;        /* nonzero: served by the BFC pool; 0: pass-through (GPUCAP_POOL=off) */
  int destroyed;     /* nonzero: the context was destroyed before exit; the stats are the pool's
                      * as the driver freed it (in use: blocks the program still held then) */
  uint64_t cap;      /* the device cap in bytes, or REPORT_NO_CAP */
  bfc_stats_t stats; /* bfc_stats() of the pool. For a pass-through row the pool-only fields
                      * (pool_bytes, peak_pool_bytes, largest_free_block_bytes, free_bytes,
                      * fragmentation, deferred_bytes, num_deferred, num_free_chunks,
                      * num_regions, num_eagain, num_retired) are reported as 0 whatever they
                      * hold; the caller fills the others from what it counted. */
} report_row_t;

/* Writes `bytes` for humans: binary units with one decimal, "0 B", "1023 B", "1.5 KiB",
 * "256.0 MiB", "16.0 EiB" (rounded half up; a value that rounds to 1024.0 of a unit moves to
 * the next unit: 1048575 -> "1.0 MiB"). buf may be NULL iff cap == 0; the text is NUL-
 * terminated and truncated to cap - 1 bytes when cap > 0. Returns the length of the full text
 * (snprintf semantics); REPORT_SIZE_MAX bytes always suffice. Never fails. O(1); reentrant,
 * thread-safe. */
size_t report_format_size(uint64_t bytes, char *buf, size_t cap);

/* Writes the human report: a header line `gpucap: memory report (pid N)` (without "(pid N)"
 * when pid <= 0), then two right-aligned tables of one line per row (sizes; then
 * fragmentation, activity and OOMs; a destroyed context's row is labelled `d:c*`), then a
 * two-line legend (three when a row is destroyed); every line is under 100 columns
 * while the counts have at most 7 digits. With no rows (n <= 0 or rows == NULL) it writes the
 * header and "no device memory was allocated". buf may be NULL iff cap == 0; the output is
 * NUL-terminated and truncated to cap - 1 bytes when cap > 0. Returns the length of the full
 * output (snprintf semantics), at most REPORT_TEXT_MAX(n) - 1. Never fails. O(n); reentrant,
 * thread-safe while nobody writes the rows. */
size_t report_format_text(const report_row_t *rows, int n, long pid, char *buf, size_t cap);

/* Writes the JSON report: one object {"gpucap_version", "pid", "devices": [one object per
 * row, in row order]}, indented by two spaces, ending in a newline. Keys follow TensorFlow's
 * AllocatorStats where it has one; integers are exact; fragmentation and utilization have six
 * decimals; pid is null when pid <= 0 and cap_bytes null for REPORT_NO_CAP; a NaN or negative
 * fragmentation is written as 0 and one above 1 (infinity included) as 1, so the output is
 * valid JSON for any rows. With no rows (n <= 0 or rows == NULL) "devices" is []. Same buffer
 * rules and return value as report_format_text; the full length is at most
 * REPORT_JSON_MAX(n) - 1. Never fails. O(n); reentrant, thread-safe while nobody writes the
 * rows. */
size_t report_format_json(const report_row_t *rows, int n, long pid, char *buf, size_t cap);

#endif
