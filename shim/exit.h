/* The end of the process: the exit path (shim/exit.c) that withdraws IPC exports, writes the
 * buffered trace and the exit report, run once from a destructor (normal exit).
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

/* Takes m for the exit path: tries until EXIT_WAIT_MS after the exit path began, sleeping
 * briefly between tries, then gives up. Returns true iff m is now held by the caller.
 * Async-signal-safe. */
bool exit_lock(pthread_mutex_t *m);

/* For the exit path's other waits: sleeps a moment and returns true, or returns false at once
 * when the EXIT_WAIT_MS are spent. Async-signal-safe. */
bool exit_wait(void);

/* Adds one line to the exit report's notes: something the report or the trace could not
 * include, and why ("the trace lost ..."). At most REPORT_NOTES_MAX lines are kept. Called
 * only on the exit path. Async-signal-safe in practice (vsnprintf of integers and strings). */
__attribute__((format(printf, 1, 2))) void exit_note(const char *fmt, ...);

#endif
