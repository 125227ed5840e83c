/* What the fake libraries (the fake CUDA driver and the fake NVML) share for their diagnostics:
 * one line written without allocating and without any lock, so it is safe from every entry point,
 * a destructor or a fork handler; the FAKECUDA_TRACE destination and its lines; the rule that an
 * empty setting counts as unset. Used by tests/fakecuda/fk_core.c and
 * tests/fakecuda/nvml/nv_core.c.
 */
#ifndef GPUCAP_TESTS_FAKECUDA_FK_LINE_H
#define GPUCAP_TESTS_FAKECUDA_FK_LINE_H

#include <stdarg.h>

/* Writes prefix, the formatted text and a newline to fd with one write(2), through a 512-byte
 * stack buffer (longer lines are cut); errno is preserved, write errors are ignored. O(length). */
void fk_vline(int fd, const char *prefix, const char *fmt, va_list ap);

/* One trace line "WHO: trace: [TID] TEXT" to fd (nothing when fd < 0). */
void fk_vtrace(int fd, const char *who, const char *fmt, va_list ap);

/* Opens a FAKECUDA_TRACE destination: 2 (stderr) for "1", the file (created, appended to) for any
 * other non-empty path, -1 for "" or when the file cannot be opened (one line "WHO: warning: ..."
 * on stderr then). */
int fk_trace_open(const char *path, const char *who);

/* The value of environment variable name, or NULL when it is unset or empty. */
const char *fk_getenv(const char *name);

#endif
