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
#include "core/limits.h"

#include <stddef.h>
#include <stdint.h>

/* cap value meaning "no cap on this device" (the shim's CAP_NONE). */
#define REPORT_NO_CAP UINT64_MAX
/* largest_request value meaning "not known" (a report written before gpucap measured it). */
#define REPORT_UNKNOWN UINT64_MAX

/* Bytes that always hold report_format_size's text and its NUL ("1023.9 KiB", "16.0 EiB"). */
#define REPORT_SIZE_MAX 16

/* Sizes of the fields of report_run_t, NUL included; longer values are cut. */
#define REPORT_HOST_MAX 256
#define REPORT_COMMAND_MAX 4096 /* the arguments, each NUL-terminated, as /proc/PID/cmdline */
#define REPORT_ENDED_MAX 16
#define REPORT_GPU_NAME_MAX 256
#define REPORT_UUID_MAX 48 /* "GPU-" and 36 characters */
#define REPORT_JOB_MAX 12
#define REPORT_JOB_KEY_MAX 32
#define REPORT_JOB_VALUE_MAX 128
#define REPORT_NOTES_MAX 8
#define REPORT_NOTE_MAX 256
#define REPORT_LIBS_MAX 96 /* lines of the per-library ledger, all devices together */
#define REPORT_LIB_NAME_MAX 64
#define REPORT_VERDICTS 6 /* kinds of refusal: report_verdict_name */
#define REPORT_CAUSES 4   /* where the driver's memory grew: report_cause_name */

/* Bytes that always hold the full text or JSON report of n rows, NUL included, whatever the
 * rows and the run hold and for a GPUCAP_VERSION under 100 characters
 * (tests/unit/test_report.c checks both against worst-case rows and runs). */
#define REPORT_TEXT_MAX(n)                                                                         \
  (1536 + 320 * (size_t)(n) + REPORT_NOTES_MAX * (REPORT_NOTE_MAX + 16) +                          \
   REPORT_LIBS_MAX * (REPORT_LIB_NAME_MAX + 64) + GPUCAP_MAX_DEVICES * 1280)
#define REPORT_JSON_MAX(n) (REPORT_RUN_JSON_MAX + 1920 * (size_t)(n))
#define REPORT_RUN_JSON_MAX                                                                        \
  (1024 + 6 * REPORT_HOST_MAX + 10 * REPORT_COMMAND_MAX +                                          \
   GPUCAP_MAX_DEVICES * (6 * REPORT_GPU_NAME_MAX + 6 * REPORT_UUID_MAX + 64) +                     \
   REPORT_JOB_MAX * (6 * REPORT_JOB_KEY_MAX + 6 * REPORT_JOB_VALUE_MAX + 16) +                     \
   REPORT_NOTES_MAX * (6 * REPORT_NOTE_MAX + 16) +                                                 \
   REPORT_LIBS_MAX * (6 * REPORT_LIB_NAME_MAX + 192) + GPUCAP_MAX_DEVICES * 1536)

/* A device as the driver described it while the program ran. */
typedef struct report_gpu {
  int device;                     /* CUDA ordinal */
  char name[REPORT_GPU_NAME_MAX]; /* "" when unknown */
  char uuid[REPORT_UUID_MAX];     /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", "" when unknown */
} report_gpu_t;

/* One library's bytes on one device (the per-library ledger). */
typedef struct report_lib {
  int device;
  int program;                    /* nonzero: the program's own executable */
  char name[REPORT_LIB_NAME_MAX]; /* "libcublas", the program's name, "unknown" */
  uint64_t current, peak;         /* bytes it holds at exit, and at most */
} report_lib_t;

/* A device's totals: what the program held, the driver's own memory for the process, the whole
 * at its peak, the right size, the refusals by verdict. */
typedef struct report_usage {
  int device;
  uint64_t current, peak; /* held by the program (the libraries' sum) at exit, and at most */
  uint64_t driver;        /* the driver's own memory for the process (contexts, modules, local
                           * memory, page rounding) as last measured; REPORT_UNKNOWN */
  uint64_t driver_peak;   /* ... its peak; REPORT_UNKNOWN when never measured */
  uint64_t driver_cause_peak[REPORT_CAUSES]; /* ... by where it was seen growing, each at its
                                              * own peak (report_cause_name) */
  int measured_by;    /* 1: NVML's figure for the process, 2: deltas of cuMemGetInfo around
                       * the calls that change it, otherwise not measured */
  int covers_process; /* nonzero: the cap covered the process (GPUCAP_CAP_COVERS=process) */
  /* The peak of everything the device held for the process, and its split then: the program's
   * allocations, what gpucap's pools held beyond them, the driver's own memory. */
  uint64_t whole_peak, at_peak_allocations, at_peak_slack, at_peak_driver;
  uint64_t right_size; /* the smallest cap that would have let the run finish;
                        * REPORT_UNKNOWN when the run was refused memory */
  uint64_t refusals[REPORT_VERDICTS];
  /* Oversubscription (GPUCAP_OVERSUBSCRIBE): the spill budget (0: none), the bytes spilled to
   * host memory beyond the cap at exit and at most, and the allocations that spilled. */
  uint64_t spill_budget, spilled, peak_spilled, spilled_allocs;
} report_usage_t;

/* The name of refusal verdict v (0..REPORT_VERDICTS-1): "cap_full", "fragmentation",
 * "device_full", "other_pools", "capture", "spill_full"; "unknown" otherwise. */
const char *report_verdict_name(int v);

/* "context", "modules", "limits", "other" for c in 0..REPORT_CAUSES-1; "unknown"
 * otherwise. */
const char *report_cause_name(int c);

/* The right size for a run that held at most `peak` bytes while the driver used `driver`
 * (REPORT_UNKNOWN: not measured, counted as 0): their sum rounded up to a multiple of 2 MiB. */
uint64_t report_right_size(uint64_t peak, uint64_t driver);

/* The process the report is about. Every field may be left zero: unknown. */
typedef struct report_run {
  long pid;                         /* <= 0: unknown */
  char host[REPORT_HOST_MAX];       /* the host name */
  char command[REPORT_COMMAND_MAX]; /* the arguments, each followed by a NUL */
  size_t command_len;               /* bytes of command used */
  int64_t start_ns, end_ns;         /* Unix time in nanoseconds; 0: unknown */
  char ended_by[REPORT_ENDED_MAX];  /* "exit", or the signal's name ("SIGTERM") */
  int njob;                         /* job identifiers (Slurm, Kubernetes), in order */
  struct {
    char key[REPORT_JOB_KEY_MAX];     /* "slurm_job_id" */
    char value[REPORT_JOB_VALUE_MAX]; /* as the scheduler set it */
  } job[REPORT_JOB_MAX];
  int ngpus;
  report_gpu_t gpus[GPUCAP_MAX_DEVICES];
  int nnotes; /* what the report could not include, and why */
  char notes[REPORT_NOTES_MAX][REPORT_NOTE_MAX];
  int nlibs; /* the per-library ledger, by device */
  report_lib_t libs[REPORT_LIBS_MAX];
  int nusage; /* one per device that held memory or was refused, in device order */
  report_usage_t usage[GPUCAP_MAX_DEVICES];
} report_run_t;

/* One pool as it stands at exit. */
typedef struct report_row {
  int device;    /* CUDA ordinal */
  int context;   /* 0-based index of the pool's context among the contexts of that device */
  int arena;     /* which of the context's pools (GPUCAP_ARENAS), from 0 */
  int pooled;    /* nonzero: served by the BFC pool; 0: pass-through (GPUCAP_POOL=off) */
  int destroyed; /* nonzero: the context was destroyed before exit; the stats are the pool's
                  * as the driver freed it (in use: blocks the program still held then) */
  /* A VMM-backed pool (vmm nonzero): its address space, the bytes it mapped and unmapped over
   * its life, and its driver calls cuMemMap and cuMemUnmap (one per unit); 0 otherwise. */
  int vmm;
  uint64_t cap;             /* the device cap in bytes, or REPORT_NO_CAP */
  uint64_t largest_request; /* the largest single request the pool could serve at that moment:
                             * its largest free chunk, or its wholly free regions plus its
                             * room to grow under bytes_limit (bfc_alloc steps 3 and 5), the
                             * larger; REPORT_UNKNOWN when not known */
  /* vmm's figures (above): zero for a pool of regions */
  uint64_t address_space_bytes, mapped_bytes_total, released_bytes_total;
  uint64_t driver_map_calls, driver_unmap_calls;
  bfc_stats_t stats; /* bfc_stats() of the pool. For a pass-through row the pool-only
                      * counters (scope POOL in core/stats.def) are reported as 0
                      * whatever they hold; the caller fills the others from what it
                      * counted. */
} report_row_t;

/* Writes `bytes` for humans: binary units with one decimal, "0 B", "1023 B", "1.5 KiB",
 * "256.0 MiB", "16.0 EiB" (rounded half up; a value that rounds to 1024.0 of a unit moves to
 * the next unit: 1048575 -> "1.0 MiB"). buf may be NULL iff cap == 0; the text is NUL-
 * terminated and truncated to cap - 1 bytes when cap > 0. Returns the length of the full text
 * (snprintf semantics); REPORT_SIZE_MAX bytes always suffice. Never fails. O(1); reentrant,
 * thread-safe. */
size_t report_format_size(uint64_t bytes, char *buf, size_t cap);

/* Writes the human report: a header line `gpucap: memory report (pid N)` (without "(pid N)"
 * when the pid is unknown; with ", ended by SIGTERM" when run->ended_by names a signal), then
 * two right-aligned tables of one line per row (sizes; then fragmentation, activity and OOMs;
 * a destroyed context's row is labelled `d:c*`), then a two-line legend (three when a row is
 * destroyed), then one `  note: ` line per note of the run; every line is under 100 columns
 * while the counts have at most 7 digits and the notes under 90 characters. With no rows
 * (n <= 0 or rows == NULL) it writes the header, "no device memory was allocated" and the
 * notes. run may be NULL (nothing known). buf may be NULL iff cap == 0; the output is
 * NUL-terminated and truncated to cap - 1 bytes when cap > 0. Returns the length of the full
 * output (snprintf semantics), at most REPORT_TEXT_MAX(n) - 1. Never fails. O(n); reentrant,
 * thread-safe while nobody writes the rows. Async-signal-safe in practice: only integer and
 * string conversions of vsnprintf, which glibc performs without locks or malloc. */
size_t report_format_text(const report_row_t *rows, int n, const report_run_t *run, char *buf,
                          size_t cap);

/* Writes the JSON report: one object with the run ("gpucap_version", "pid", "hostname",
 * "command", "start_time", "end_time", "ended_by", "job", "gpus", "complete", "notes") and
 * "devices": [one object per row, in row order], indented by two spaces, ending in a newline
 * (docs/report.md lists every key and where it comes from). Integers are exact; fractions
 * have six decimals; times are RFC 3339 in UTC with milliseconds; unknown values are null;
 * strings are escaped and invalid UTF-8 becomes U+FFFD, so the output is valid JSON for any
 * rows and run. A NaN or negative fragmentation is written as 0 and one above 1 (infinity
 * included) as 1. With no rows (n <= 0 or rows == NULL) "devices" is []. Same buffer rules,
 * return value and safety as report_format_text; the full length is at most
 * REPORT_JSON_MAX(n) - 1. O(n + size of the run). */
size_t report_format_json(const report_row_t *rows, int n, const report_run_t *run, char *buf,
                          size_t cap);

/* Writes t (Unix time in nanoseconds, >= 0) as RFC 3339 UTC with milliseconds
 * ("2026-11-22T09:05:03.042Z") into buf[cap] (NUL-terminated when cap > 0). Returns the length
 * of the full text (24 for years 1970 to 9999). No locale, no time-zone lock: safe in a signal
 * handler. */
size_t report_format_time(int64_t t, char *buf, size_t cap);

#endif
