/* One diagnostic line of the fake libraries (the fake CUDA driver and the fake NVML), written
 * without allocating and without any lock, so it is safe from every entry point, a destructor
 * or a fork handler. Shared by tests/fakecuda/fk_core.c and tests/fakecuda/nvml/nv_core.c.
 */
#ifndef GPUCAP_TESTS_FAKECUDA_FK_LINE_H
#define GPUCAP_TESTS_FAKECUDA_FK_LINE_H

#include <stdarg.h>

/* Writes prefix, the formatted text and a newline to fd with one write(2), through a 512-byte
 * stack buffer (longer lines are cut); errno is preserved, write errors are ignored. O(length). */
void fk_vline(int fd, const char *prefix, const char *fmt, va_list ap);

#endif
