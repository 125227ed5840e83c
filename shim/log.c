/* Messages to stderr for the shim: prefix, stack buffer, one write(2), errno untouched.
 * Verbosity is a relaxed atomic so any thread may log at any time.
 */
#include "shim/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static atomic_int verbosity;

void log_set_verbosity(int level) {
  atomic_store_explicit(&verbosity, level, memory_order_relaxed);
}

void log_write_raw(const char *text, size_t len) {
  int saved = errno;
  while (len > 0) {
    ssize_t n = write(STDERR_FILENO, text, len);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    text += n;
    len -= (size_t)n;
  }
  errno = saved;
}

void log_msg(enum log_level level, const char *fmt, ...) {
  if (level > atomic_load_explicit(&verbosity, memory_order_relaxed)) {
    return;
  }
  int saved = errno;
  char buf[1024];
  const char *prefix = level == LOG_ERROR  ? "gpucap: error: "
                       : level == LOG_WARN ? "gpucap: warning: "
                                           : "gpucap: ";
  size_t n = strlen(prefix);
  memcpy(buf, prefix, n);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
  va_end(ap);
  if (m > 0) {
    n += (size_t)m < sizeof buf - n - 1 ? (size_t)m : sizeof buf - n - 2;
  }
  buf[n++] = '\n';
  log_write_raw(buf, n);
  errno = saved;
}
