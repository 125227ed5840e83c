/* Waiting at the end of the process. At exit (or before an exec) another thread may hold any
 * lock, or the exiting thread itself may (a signal handler that calls exit() interrupted it): the
 * exit path (shim/entry/shutdown.c) never blocks on a lock. It takes each one with exit_lock, which
 * gives up after a bounded wait, and says what it skipped (exit_note) instead of writing nothing.
 * Any module may use these on its own exit work; they call nothing else in the shim.
 */
#ifndef GPUCAP_SHIM_EXIT_H
#define GPUCAP_SHIM_EXIT_H

#include "core/report.h"

#include <pthread.h>
#include <stdbool.h>

/* How long, in all, the exit path may wait for locks other threads hold. */
#define EXIT_WAIT_MS 100

/* Starts the EXIT_WAIT_MS clock: the exit path or an exec begins. Async-signal-safe. */
void exit_begin(void);

/* Registers, once, an atexit handler that marks the process as exiting (exit_started). Call it
 * after the CUDA runtime has started (at a context's first pooled allocation): handlers run
 * in the reverse order of registration, so this one runs before the runtime's own teardown,
 * which releases its primary contexts. Not async-signal-safe. */
void exit_arm(void);

/* True once exit() began running atexit handlers (after exit_arm). Async-signal-safe. */
bool exit_started(void);

/* Takes m for the exit path (or before an exec): tries until EXIT_WAIT_MS after exit_begin,
 * sleeping briefly between tries, then gives up. Returns true iff m is now held by the caller.
 * Async-signal-safe. */
bool exit_lock(pthread_mutex_t *m);

/* For the exit path's other waits: sleeps a moment and returns true, or returns false at once
 * when the EXIT_WAIT_MS are spent. Async-signal-safe. */
bool exit_wait(void);

/* Adds one line to the exit report's notes: something the report or the trace could not
 * include, and why ("the trace lost ..."). At most REPORT_NOTES_MAX lines are kept. Called
 * only on the exit path. Async-signal-safe in practice (vsnprintf of integers and strings). */
__attribute__((format(printf, 1, 2))) void exit_note(const char *fmt, ...);

/* The run the exit report describes: its notes so far (exit_note), the rest for the exit path
 * to fill. */
report_run_t *exit_run(void);

#endif
