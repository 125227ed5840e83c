/* GPUCAP_TRACE: every allocation event, in RAPIDS RMM's CSV log format
 * (`Thread,Time,Action,Pointer,Size,Stream`), so RMM's replay benchmark and gpucap-replay can
 * read it. Events are buffered in memory and written in large appends, before an exec and at
 * exit; the file only ever holds whole lines. Thread-safe (one mutex around the buffer); a
 * no-op when GPUCAP_TRACE is unset.
 */
#ifndef GPUCAP_SHIM_TRACE_H
#define GPUCAP_SHIM_TRACE_H

#include <stdbool.h>
#include <stdint.h>

enum trace_action { TRACE_ALLOC, TRACE_ALLOC_FAILURE, TRACE_FREE };

/* Records one event: the block's address (0 for a failure) and the bytes asked for. */
void trace_event(enum trace_action action, uint64_t ptr, uint64_t size);

/* Writes out whatever is buffered, taking the lock with exit_lock (shim/exit.h). Returns false
 * iff the lock stayed busy (the buffer is then left as it is). Async-signal-safe. */
bool trace_flush(void);

/* On the exit path: trace_flush, then an exit note for anything the trace lost (events left in
 * a buffer that stayed busy, or after a write failed). */
void trace_exit(void);

#endif
