/* The fakes' diagnostic line writer (see fk_line.h): a stack buffer and one write(2). */
#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "tests/fakecuda/fk_line.h"

void fk_vline(int fd, const char *prefix, const char *fmt, va_list ap) {
  char buf[512];
  int n = snprintf(buf, sizeof buf, "%s", prefix);
  if (n < 0 || (size_t)n > sizeof buf - 2) {
    n = (int)sizeof buf - 2;
  }
  int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof buf - 2) {
    len = sizeof buf - 2;
  }
  buf[len++] = '\n';
  int saved = errno;
  ssize_t w = write(fd, buf, len);
  (void)w;
  errno = saved;
}
