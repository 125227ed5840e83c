/* The end of the process: the exit path (shim/exit.c) that withdraws IPC exports, writes the
 * buffered trace and the exit report, run once from a destructor (normal exit) or from
 * gpucap's handler of a terminating signal the program does not handle.
 *
 * At exit another thread may hold any lock, or the exiting thread itself may (a signal handler
 * that calls exit() interrupted it): the exit path never blocks on a lock. It takes each one
 * with exit_lock, which gives up after a bounded wait, and says what it skipped instead of
 * writing nothing.
 */
#ifndef GPUCAP_SHIM_EXIT_H
#define GPUCAP_SHIM_EXIT_H

#include <pthread.h>
#include <stdbool.h>

/* How long, in all, the exit path may wait for locks other threads hold. */
#define EXIT_WAIT_MS 100

/* Takes m for the exit path (or before an exec): tries until EXIT_WAIT_MS after the exit path
 * (or the exec) began, sleeping briefly between tries, then gives up. Returns true iff m is
 * now held by the caller. Async-signal-safe. */
bool exit_lock(pthread_mutex_t *m);

/* For the exit path's other waits: sleeps a moment and returns true, or returns false at once
 * when the EXIT_WAIT_MS are spent. Async-signal-safe. */
bool exit_wait(void);

/* Adds one line to the exit report's notes: something the report or the trace could not
 * include, and why ("the trace lost ..."). At most REPORT_NOTES_MAX lines are kept. Called
 * only on the exit path. Async-signal-safe in practice (vsnprintf of integers and strings). */
__attribute__((format(printf, 1, 2))) void exit_note(const char *fmt, ...);

/* From gpucap's handler of a terminating signal (shim/signals.c): runs the exit path, ended by
 * that signal (`name`), and returns true: the caller then lets the signal end the process. If
 * the exit path is already running (a destructor, or another thread's handler), returns false
 * at once: the exit path lets the signal end the process when it is done (signals_die).
 * Async-signal-safe in practice (see report_format_text). */
bool exit_by_signal(int sig, const char *name);

/* Called by the exec family's wrappers (shim/exec.c) before the process image is replaced: the
 * buffered trace is written. Never blocks longer than EXIT_WAIT_MS. */
void exit_before_exec(void);

#endif
