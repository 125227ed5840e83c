/* tracecsv: reads an allocation trace: RAPIDS RMM's CSV log format, as RMM's logging adaptor
 * writes it, or as GPUCAP_TRACE writes it, RMM's six columns followed by gpucap's own
 * (docs/report.md, "The allocation trace"):
 *
 *   Thread,Time,Action,Pointer,Size,Stream,Device,Event,Held,Verdict,Library,Spilled
 *   12345,14:03:07.123456,allocate failure,0x7f2a00000000,2147483648,0x0,0,reserve,2147483648,,,0
 *   12345,14:03:07.123460,allocate,0x7f2a00000000,1048576,0x0,0,alloc,1048576,,libcublas,0
 *   12345,14:03:07.123467,allocate failure,(nil),4194304,0x0,0,refused,0,cap_full,train,0
 *   12345,14:03:07.123468,allocate failure,0x0,2147483648,0x0,0,cap,0,,,0
 *
 * The one reader of traces: `gpucap plot` and `gpucap export` (scripts/) and the replay
 * benchmark (tests/bench/replay.c) share it. Time is the wall-clock time of day (HH:MM:SS with
 * up to 9 fractional digits); Action is `allocate`, `allocate failure` or `free`; Pointer is
 * hexadecimal or RMM's `(nil)`. No state; the result is the caller's.
 */
#ifndef GPUCAP_SCRIPTS_TRACECSV_H
#define GPUCAP_SCRIPTS_TRACECSV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum tracecsv_action {
  TRACECSV_ALLOC,   /* a block handed out */
  TRACECSV_FAILURE, /* a request refused */
  TRACECSV_FREE,    /* a block freed */
  TRACECSV_RESERVE, /* a pool region reserved from the driver (gpucap's Event column) */
  TRACECSV_RELEASE, /* a pool region returned to the driver (gpucap's Event column) */
  TRACECSV_CAP,     /* a device's cap (gpucap's Event column): kept in tracecsv_info_t, never
                     * returned as an event */
} tracecsv_action_t;

#define TRACECSV_LIBS 64        /* library names a trace's info keeps; later ones read as none */
#define TRACECSV_LIB_MAX 64     /* bytes of a library name, its NUL included */
#define TRACECSV_CAP_DEVICES 64 /* devices whose cap a trace's info keeps */
#define TRACECSV_NO_CAP UINT64_MAX

typedef struct tracecsv_event {
  int64_t ns; /* nanoseconds since the first event; never decreases from one event to the next */
  tracecsv_action_t action;
  int dev;          /* the Device column; -1 when the trace has none or does not know */
  uint32_t line;    /* the event's line in the file (the header is line 1) */
  uint64_t thread;  /* the Thread column (0 when it is not a number) */
  uint64_t ptr;     /* the block's or region's address; 0 for a failure */
  uint64_t size;    /* bytes asked for (frees: what the block was asked with; regions: size) */
  uint64_t held;    /* bytes the block holds (its chunk); the Size when the trace does not say */
  uint64_t stream;  /* the Stream column */
  char verdict[16]; /* a refusal's Verdict column ("fragmentation"); "" when none */
  int16_t lib;      /* the Library column: an index into tracecsv_info_t.libs; -1 when none */
  uint64_t spilled; /* the Spilled column: of held, bytes in host memory beyond the cap; 0 when
                     * the trace has none */
} tracecsv_event_t;

typedef struct tracecsv_info {
  bool gpucap; /* the trace has gpucap's Device, Event and Held columns */
  size_t cut;  /* the number of a last line cut while it was written (left out), else 0 */
  int max_dev; /* the largest Device seen, -1 when none */
  int nlibs;   /* the distinct Library names, in order of first sight */
  char libs[TRACECSV_LIBS][TRACECSV_LIB_MAX];
  uint64_t caps_known;                /* bit d: a `cap` row gave device d's cap */
  uint64_t cap[TRACECSV_CAP_DEVICES]; /* that cap in bytes, TRACECSV_NO_CAP for none */
} tracecsv_info_t;

/* Parses text[0..len) into a malloc'ed array of events (*events, freed by the caller; NULL when
 * there are none), their number (*n) and what the trace is (*info, may be NULL). The first line
 * must be a header that starts with RMM's six columns; gpucap's Device, Event, Held, Verdict,
 * Library and Spilled may follow in any order (a trace of an older gpucap lacks some), and other
 * columns are ignored. Library names are kept in
 * info (the first TRACECSV_LIBS of them; without info, none). Blank lines and a trailing '\r' on a
 * line are ignored. Every line of a trace ends in a newline, so text that ends without one was cut
 * while it was written (a full disk, a killed process): that last line is left out and
 * info->cut is set to its number. A `cap` row (its Size the device's cap, 2^64-1 for none) is
 * not an event: it goes into info (the last one of a device wins; devices from
 * TRACECSV_CAP_DEVICES up are left out).
 * Times are made relative to the first event; a time more than 12 hours before the previous one
 * is taken to have crossed midnight, and an earlier one within 12 hours, or a later one by more
 * than 23 hours (an earlier one across midnight), is moved up to the previous one (threads stamp
 * events before they write them), so the times never decrease.
 * Fails iff the header is not RMM's, a line does not have the header's number of fields, a
 * field is not valid (a time, an action, a hexadecimal or `(nil)` pointer, a decimal size, a
 * hexadecimal stream, a device from -1 to 65535, a gpucap event that agrees with the Action (a
 * `cap` row's device from 0), a
 * verdict of at most 15 lowercase letters and '_' or empty, a library name of at most 63 bytes
 * with no control byte or '"', a decimal Spilled not above Held),
 * or the times cross midnight more than 100 000 times (-EINVAL; err gets "line N: what is
 * wrong"), or memory runs out (-ENOMEM). On failure *events is NULL and *n is 0. O(len). */
int tracecsv_parse(const char *text, size_t len, tracecsv_event_t **events, size_t *n,
                   tracecsv_info_t *info, char *err, size_t errlen);

#endif
