/* The RMM-format allocation trace. The file is created at the first event, without following
 * a symlink planted at the path and with the user's umask; a failure to open it is reported
 * once and tracing stops. Lines are formatted on the stack and appended to a 64 KiB buffer
 * under a mutex; the buffer is written when nearly full and at exit.
 */
#include "shim/trace.h"

#include "config/cfg.h"
#include "shim/cap.h"
#include "shim/log.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define TRACE_BUF (64 * 1024)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int fd = -1;
static atomic_int state; /* 0: not opened yet, 1: open, -1: off or failed; written locked */
static char buf[TRACE_BUF];
static size_t used;

static void open_trace(void) {
  const char *path = cap_settings()->trace;
  state = -1;
  if (!path[0]) {
    return;
  }
  fd = log_create("GPUCAP_TRACE", path);
  if (fd < 0) {
    return;
  }
  state = 1;
  static const char header[] = "Thread,Time,Action,Pointer,Size,Stream\n";
  memcpy(buf, header, sizeof header - 1);
  used = sizeof header - 1;
}

void trace_event(enum trace_action action, uint64_t ptr, uint64_t size) {
  if (atomic_load_explicit(&state, memory_order_relaxed) < 0) {
    return;
  }
  int saved = errno;
  static const char *const names[] = {"allocate", "allocate failure", "free"};
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  localtime_r(&ts.tv_sec, &tm);
  char line[160];
  int n = snprintf(line, sizeof line, "%ld,%02d:%02d:%02d.%06ld,%s,%#" PRIx64 ",%" PRIu64 ",0x0\n",
                   (long)syscall(SYS_gettid), tm.tm_hour, tm.tm_min, tm.tm_sec,
                   ts.tv_nsec / 1000, names[action], ptr, size);
  pthread_mutex_lock(&lock);
  if (state == 0) {
    open_trace();
  }
  if (state > 0 && n > 0) {
    if (used + (size_t)n > sizeof buf) {
      log_write_fd(fd, buf, used);
      used = 0;
    }
    memcpy(buf + used, line, (size_t)n);
    used += (size_t)n;
  }
  pthread_mutex_unlock(&lock);
  errno = saved;
}

void trace_flush(void) {
  pthread_mutex_lock(&lock);
  if (state > 0 && used > 0) {
    log_write_fd(fd, buf, used);
    used = 0;
  }
  pthread_mutex_unlock(&lock);
}

void trace_fork_child(void) {
  pthread_mutex_init(&lock, NULL);
  atomic_store_explicit(&state, -1, memory_order_relaxed);
  used = 0;
  fd = -1;
}
