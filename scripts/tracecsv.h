/* tracecsv: reads an allocation trace in RAPIDS RMM's CSV log format, as GPUCAP_TRACE writes it
 * (one file per process; every device of the process together, since the format has no
 * device column):
 *
 *   Thread,Time,Action,Pointer,Size,Stream
 *   12345,14:03:07.123456,allocate,0x7f2a00000000,1048576,0x0
 *
 * Time is the wall-clock time of day (HH:MM:SS with up to 9 fractional digits); Action is
 * `allocate`, `allocate failure` or `free`. No state; the result is the caller's.
 */
#ifndef GPUCAP_SCRIPTS_TRACECSV_H
#define GPUCAP_SCRIPTS_TRACECSV_H

#include <stddef.h>
#include <stdint.h>

typedef enum tracecsv_action {
  TRACECSV_ALLOC,
  TRACECSV_FAILURE,
  TRACECSV_FREE,
} tracecsv_action_t;

typedef struct tracecsv_event {
  int64_t ns; /* nanoseconds since the first event; never decreases from one event to the next */
  tracecsv_action_t action;
  uint64_t ptr;  /* 0 for a failure */
  uint64_t size; /* bytes the program asked for (freed blocks: the size they were asked with) */
} tracecsv_event_t;

/* Parses text[0..len) into a malloc'ed array of events (*events, freed by the caller; NULL
 * when there are none) and their number (*n). The first line must be RMM's header; blank lines
 * and a trailing '\r' on a line are ignored. Every line of a trace ends in a newline, so text
 * that ends without one was cut while it was written (a full disk, a killed process): that last
 * line is left out, and *cut (when cut is not NULL) is set to its number, else to 0.
 * Times are made relative to the first event; a time more than 12 hours before the previous one
 * is taken to have crossed midnight, and an earlier one within 12 hours, or a later one by more
 * than 23 hours (an earlier one across midnight), is moved up to the previous one (threads stamp
 * events before they take the trace lock), so the times never decrease.
 * Fails iff the header is not RMM's, a line is not six fields with a valid time, action,
 * hexadecimal pointer and decimal size, or the times cross midnight more than 100 000 times
 * (-EINVAL; err gets "line N: what is wrong"), or memory runs out (-ENOMEM). On failure
 * *events is NULL and *n is 0. O(len). */
int tracecsv_parse(const char *text, size_t len, tracecsv_event_t **events, size_t *n, size_t *cut,
                   char *err, size_t errlen);

#endif
