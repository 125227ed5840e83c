/* The one place where gpucap installs signal handlers, deliberately (docs/design.md, "Signals"):
 * SIGTERM and SIGINT end most jobs (Slurm's time limit and scancel, a pod's stop, Ctrl-C), and
 * with their default disposition no destructor runs, so the exit report and the last trace
 * buffer would be lost. gpucap catches them only while the program leaves them at the default,
 * and stays invisible: the program's sigaction() and signal() (interposed here) still report
 * the default, any action the program sets replaces gpucap's, and the process still ends by the
 * signal, with the status and core-dump rules of its default action.
 */
#ifndef GPUCAP_SHIM_SIGNALS_H
#define GPUCAP_SHIM_SIGNALS_H

#include <stdbool.h>

/* At the first use of CUDA that reaches gpucap (shim/accounting/runinfo.c): installs gpucap's
 * handler for SIGTERM and for SIGINT if, and only if, the signal's disposition is the default then.
 * The handler runs the exit path (the function signals_on_end set), restores the default and
 * re-raises the signal. Idempotent; thread-safe. */
void signals_arm(void);

/* Sets what the handler runs first: fn(sig, its name) returns true when the caller should end
 * the process now (false: someone else will). Called once, from the exit path's constructor
 * (shim/entry/shutdown.c), so that this file calls nothing above it. Async-signal-safe to read. */
void signals_on_end(bool (*fn)(int sig, const char *name));

/* Ends the process by `sig` as its default action would: restores the default disposition and
 * raises it (inside gpucap's handler, where it is blocked, it is delivered as the handler
 * returns). Async-signal-safe. */
void signals_die(int sig);

#endif
