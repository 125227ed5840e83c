/* Messages to stderr for the shim: prefix, stack buffer, one write(2), errno untouched; and
 * safe creation of the files settings name, remembering which file each output setting got so
 * that two settings never write one file. Verbosity is a relaxed atomic so any thread may log
 * at any time; the list of created files is append-only, each entry published with a release
 * store.
 */
#include "shim/base/log.h"

#include "config/parse.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static atomic_int verbosity;
static struct timespec loaded; /* when this program image started (a fork child keeps it) */

__attribute__((constructor)) static void log_start(void) {
  clock_gettime(CLOCK_REALTIME, &loaded);
}

/* The regular files the output settings created, for the same-file check. */
#define OUTPUTS 8
static struct output {
  dev_t dev;
  ino_t ino;
  const char *setting;
  atomic_bool ready;
} outputs[OUTPUTS];
static atomic_int noutputs;

void log_set_verbosity(int level) {
  atomic_store_explicit(&verbosity, level, memory_order_relaxed);
}

int log_write_fd(int fd, const char *text, size_t len, size_t *done) {
  int saved = errno;
  int err = 0;
  size_t at = 0;
  while (at < len && err == 0) {
    ssize_t n = write(fd, text + at, len - at);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    at += (size_t)n;
  }
  if (done != NULL) {
    *done = at;
  }
  errno = saved;
  return err;
}

void log_write_raw(const char *text, size_t len) {
  log_write_fd(STDERR_FILENO, text, len, NULL);
}

/* The output setting that already created the file st names, or NULL. */
static const char *created_by(const struct stat *st) {
  int n = atomic_load_explicit(&noutputs, memory_order_acquire);
  for (int i = 0; i < n && i < OUTPUTS; i++) {
    if (atomic_load_explicit(&outputs[i].ready, memory_order_acquire) &&
        outputs[i].dev == st->st_dev && outputs[i].ino == st->st_ino) {
      return outputs[i].setting;
    }
  }
  return NULL;
}

static void remember(const char *setting, const struct stat *st) {
  int i = atomic_fetch_add_explicit(&noutputs, 1, memory_order_acq_rel);
  if (i < OUTPUTS) {
    outputs[i].dev = st->st_dev;
    outputs[i].ino = st->st_ino;
    outputs[i].setting = setting;
    atomic_store_explicit(&outputs[i].ready, true, memory_order_release);
  }
}

/* Whether path is a symbolic link, and its owner in *owner. */
static bool link_of(const char *path, uid_t *owner) {
  struct stat lst;
  if (lstat(path, &lst) != 0 || !S_ISLNK(lst.st_mode)) {
    return false;
  }
  *owner = lst.st_uid;
  return true;
}

/* "output" or "error" when the regular file st is where fd 1 or 2 writes, else NULL. */
static const char *std_stream_of(const struct stat *st) {
  static const char *const names[] = {"output", "error"};
  for (int fd = STDOUT_FILENO; fd <= STDERR_FILENO; fd++) {
    struct stat f;
    if (fstat(fd, &f) == 0 && S_ISREG(f.st_mode) && f.st_dev == st->st_dev &&
        f.st_ino == st->st_ino) {
      return names[fd - STDOUT_FILENO];
    }
  }
  return NULL;
}

/* Whether the regular file st was written after this program started: then another process
 * (a sibling, a fork child, the parent) wrote it, and this one is about to replace it. The
 * file's time comes from the kernel's coarse clock, never later than the write: a file written
 * just before the start is never taken for one written after. */
static bool written_since_start(const struct stat *st) {
  return st->st_size > 0 &&
         (st->st_mtim.tv_sec > loaded.tv_sec ||
          (st->st_mtim.tv_sec == loaded.tv_sec && st->st_mtim.tv_nsec > loaded.tv_nsec));
}

/* Says that `full` (setting's `path`) replaces what another process wrote, with the fix: the
 * path with `.%p` before its extension. */
static void warn_replaced(const char *setting, const char *path, const char *full) {
  const char *base = strrchr(path, '/');
  base = base != NULL ? base + 1 : path;
  const char *dot = strrchr(base, '.');
  int stem = (int)(dot != NULL && dot != base ? (size_t)(dot - path) : strlen(path));
  log_msg(LOG_WARN,
          "%s: '%s' was written by another process since this one started, and is replaced now; "
          "to keep each process's, put %%p (its pid) in the name: %.*s.%%p%s",
          setting, full, stem, path, path + stem);
}

int log_create(const char *setting, const char *path, char *full, size_t fullcap) {
  int saved = errno;
  struct stat st;
  if (cfg_expand_path(path, (long)getpid(), full, fullcap) != 0) {
    log_msg(LOG_WARN, "%s: '%s' is too long once %%p is expanded", setting, path);
    errno = saved;
    return -1;
  }
  /* O_NONBLOCK: a FIFO planted at the path fails (ENXIO) instead of blocking forever. A file
   * this call creates is ours whoever the filesystem says owns it (root squashing); an existing
   * one is opened without O_TRUNC and emptied only once it is known to be ours to write. */
  const int flags = O_WRONLY | O_CLOEXEC | O_NONBLOCK;
  int fd = open(full, flags | O_NOFOLLOW | O_CREAT | O_EXCL, 0666);
  bool created = fd >= 0;
  if (fd < 0 && errno == EEXIST) {
    fd = open(full, flags | O_NOFOLLOW);
  }
  uid_t link_owner = 0;
  if (fd < 0 && errno == ELOOP && link_of(full, &link_owner)) {
    /* A link of the user's own or root's (/dev/stdout) is followed, and one to nothing creates
     * the file where it points; what it reaches passes the checks below like any file. */
    fd = link_owner == geteuid() || link_owner == 0 ? open(full, flags | O_CREAT, 0666) : -2;
  }
  const char *other = NULL;
  const char *stream = NULL;
  if (fd == -2) {
    fd = -1;
    log_msg(LOG_WARN,
            "%s: '%s' is a symbolic link of another user (uid %u): not followed (it may have "
            "been planted)",
            setting, full, (unsigned)link_owner);
  } else if (fd < 0) {
    log_msg(LOG_WARN, "%s: cannot create '%s': %s", setting, full, strerror(errno));
  } else if (fstat(fd, &st) != 0) {
    log_msg(LOG_WARN, "%s: cannot examine '%s': %s", setting, full, strerror(errno));
  } else if (!created && S_ISREG(st.st_mode) && st.st_uid != geteuid()) {
    log_msg(LOG_WARN, "%s: '%s' belongs to user %u, not to this user (%u): not written", setting,
            full, (unsigned)st.st_uid, (unsigned)geteuid());
  } else if (!created && S_ISREG(st.st_mode) && (other = created_by(&st)) != NULL) {
    log_msg(LOG_WARN,
            "%s: '%s' is the file %s writes: not written (give each setting its "
            "own path)",
            setting, full, other);
  } else if (!created && S_ISREG(st.st_mode) && (stream = std_stream_of(&st)) != NULL) {
    log_msg(LOG_WARN,
            "%s: '%s' is the file the program's standard %s goes to: not written (it would "
            "overwrite what the program wrote)",
            setting, full, stream);
  } else if (!created && S_ISREG(st.st_mode) && ftruncate(fd, 0) != 0) {
    log_msg(LOG_WARN, "%s: cannot empty '%s': %s", setting, full, strerror(errno));
  } else {
    if (S_ISREG(st.st_mode)) {
      remember(setting, &st);
    }
    if (!created && S_ISREG(st.st_mode) && written_since_start(&st)) {
      warn_replaced(setting, path, full);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    errno = saved;
    return fd;
  }
  if (fd >= 0) {
    close(fd);
  }
  errno = saved;
  return -1;
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
