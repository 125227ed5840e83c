/* GPUCAP_TRACE: every allocation event, in RAPIDS RMM's CSV log format
 * (`Thread,Time,Action,Pointer,Size,Stream`), so RMM's replay benchmark and gpucap-replay can
 * read it. Events are buffered in memory and written in large appends, and at exit.
 * Thread-safe (one mutex around the buffer); a no-op when GPUCAP_TRACE is unset.
 */
#ifndef GPUCAP_SHIM_TRACE_H
#define GPUCAP_SHIM_TRACE_H

#include <stdint.h>

enum trace_action { TRACE_ALLOC, TRACE_ALLOC_FAILURE, TRACE_FREE };

/* Records one event: the block's address (0 for a failure) and the bytes asked for. */
void trace_event(enum trace_action action, uint64_t ptr, uint64_t size);

/* Writes out whatever is buffered. Called at exit; safe to call any time. */
void trace_flush(void);

/* fork() support, in the child: a fresh lock; the child traces nothing (the file and the
 * buffered lines are the parent's). */
void trace_fork_child(void);

#endif
