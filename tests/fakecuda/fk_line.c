/* The fakes' shared diagnostics (see fk_line.h): a stack buffer and one write(2) per line. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

void fk_vtrace(int fd, const char *who, const char *fmt, va_list ap) {
  if (fd < 0) {
    return;
  }
  char prefix[64];
  snprintf(prefix, sizeof prefix, "%s: trace: [%d] ", who, (int)gettid());
  fk_vline(fd, prefix, fmt, ap);
}

int fk_trace_open(const char *path, const char *who) {
  if (strcmp(path, "1") == 0) {
    return 2;
  }
  if (path[0] == '\0') {
    return -1;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    char buf[1200];
    snprintf(buf, sizeof buf, "%s: warning: cannot open FAKECUDA_TRACE file %s: %s\n", who, path,
             strerror(errno));
    ssize_t w = write(2, buf, strlen(buf));
    (void)w;
  }
  return fd;
}

const char *fk_getenv(const char *name) {
  const char *v = getenv(name);
  return (v != NULL && v[0] != '\0') ? v : NULL;
}
