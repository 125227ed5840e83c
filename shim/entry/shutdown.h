/* The end of the process: the exit path that withdraws IPC exports, writes the buffered trace
 * and the exit report, run once from a destructor (normal exit) or from gpucap's handler of a
 * terminating signal the program does not handle (shim/base/signals.c), waiting for no lock longer
 * than EXIT_WAIT_MS (shim/base/exit.h).
 */
#ifndef GPUCAP_SHIM_SHUTDOWN_H
#define GPUCAP_SHIM_SHUTDOWN_H

#include <stdbool.h>

/* From gpucap's handler of a terminating signal (shim/base/signals.c): runs the exit path, ended by
 * that signal (`name`), and returns true: the caller then lets the signal end the process. If
 * the exit path is already running (a destructor, or another thread's handler), returns false
 * at once: the exit path lets the signal end the process when it is done (signals_die).
 * Async-signal-safe in practice (see report_format_text). */
bool shutdown_by_signal(int sig, const char *name);

/* Called by the exec family's wrappers (shim/entry/exec.c) before the process image is replaced:
 * the buffered trace is written. Never blocks longer than EXIT_WAIT_MS. */
void shutdown_before_exec(void);

#endif
