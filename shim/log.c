/* Messages to stderr for the shim: prefix, stack buffer, one write(2), errno untouched; and
 * safe creation of the files settings name.
 * Verbosity is a relaxed atomic so any thread may log at any time.
 */
#include "shim/log.h"

#include "config/parse.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static atomic_int verbosity;

void log_set_verbosity(int level) {
  atomic_store_explicit(&verbosity, level, memory_order_relaxed);
}

bool log_write_fd(int fd, const char *text, size_t len) {
  int saved = errno;
  while (len > 0) {
    ssize_t n = write(fd, text, len);
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
  return len == 0;
}

void log_write_raw(const char *text, size_t len) {
  log_write_fd(STDERR_FILENO, text, len);
}

int log_create(const char *setting, const char *path) {
  int saved = errno;
  char full[PATH_MAX];
  int fd = -1;
  if (cfg_expand_path(path, (long)getpid(), full, sizeof full) != 0) {
    log_msg(LOG_WARN, "%s: '%s' is too long once %%p is expanded", setting, path);
  } else {
    /* O_NONBLOCK: a FIFO planted at the path fails (ENXIO) instead of blocking forever. */
    fd = open(full, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0666);
    if (fd < 0) {
      log_msg(LOG_WARN, "%s: cannot create '%s': %s", setting, full, strerror(errno));
    } else {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    }
  }
  errno = saved;
  return fd;
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
