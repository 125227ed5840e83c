/* The RMM-format allocation trace. The file is created at the first event (shim/log.c's checks:
 * no symlink, no other user's file, no file another output setting writes), with the user's
 * umask; a failure to open it is reported once and tracing stops. Lines are formatted on the
 * stack and appended to a 64 KiB buffer under a mutex; the buffer is written when nearly full,
 * before an exec and at exit.
 * The file only ever holds whole lines: a write that fails (a full disk, a file size limit) is
 * cut back to the last whole line, one warning says so and tracing stops; the exit report notes
 * it. The exit path and an exec take the mutex with exit_lock and, if it stays busy, note what
 * they could not write instead of waiting.
 */
#include "shim/trace.h"

#include "core/report.h"
#include "shim/cap.h"
#include "shim/exit.h"
#include "shim/fork.h"
#include "shim/log.h"
#include "shim/settings.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define TRACE_BUF (64 * 1024)
#define HEADER "Thread,Time,Action,Pointer,Size,Stream\n"
#define HEADER_LEN (sizeof HEADER - 1)

enum { NOT_OPENED = 0, OPEN = 1, OFF = -1, FAILED = -2 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* This thread holds `lock` (so a signal handler running on it must not wait for it). */
static _Thread_local bool holding;
static int fd = -1;
static atomic_int state; /* NOT_OPENED, OPEN, OFF or FAILED; written locked */
static char path[PATH_MAX];
static char buf[TRACE_BUF];
static size_t used;           /* bytes in buf */
static atomic_ulong buffered; /* events in buf */
static atomic_ulong lost;     /* events never written after a failed write */
static uint64_t written;      /* bytes in the file, all whole lines */
static int fail_err;          /* errno of the failed write */
static int64_t fail_ns;       /* when it failed (Unix time) */

static void take(void) {
  pthread_mutex_lock(&lock);
  holding = true;
}

static void give(void) {
  holding = false;
  pthread_mutex_unlock(&lock);
}

static void open_trace(void) {
  const char *setting = settings_get()->trace;
  state = OFF;
  if (!setting[0]) {
    return;
  }
  fd = log_create("GPUCAP_TRACE", setting, path, sizeof path);
  if (fd < 0) {
    return;
  }
  state = OPEN;
  memcpy(buf, HEADER, HEADER_LEN);
  used = HEADER_LEN;
  written = 0;
}

/* Writes the buffer out; on failure cuts the file back to its last whole line and stops
 * tracing. Lock held, state OPEN. */
static void write_out(void) {
  size_t done = 0;
  int err = log_write_fd(fd, buf, used, &done);
  unsigned long events = atomic_exchange_explicit(&buffered, 0, memory_order_relaxed);
  if (err == 0) {
    written += used;
    used = 0;
    return;
  }
  size_t keep = done;
  while (keep > 0 && buf[keep - 1] != '\n') {
    keep--; /* the whole lines that reached the file stay */
  }
  for (size_t i = 0; i < keep; i++) {
    events -= buf[i] == '\n' && (written > 0 || i >= HEADER_LEN); /* the header is no event */
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  fail_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
  fail_err = err;
  (void)ftruncate(fd, (off_t)(written + keep)); /* fails harmlessly on a pipe or a device */
  close(fd);
  fd = -1;
  used = 0;
  atomic_fetch_add_explicit(&lost, events, memory_order_relaxed);
  atomic_store_explicit(&state, FAILED, memory_order_relaxed);
  log_msg(LOG_WARN,
          "GPUCAP_TRACE: cannot write '%s': %s; the trace stops here, at its last whole line "
          "(the exit report counts the events left out)",
          path, strerror(err));
}

void trace_event(enum trace_action action, uint64_t ptr, uint64_t size) {
  int st = atomic_load_explicit(&state, memory_order_relaxed);
  if (st < 0) {
    if (st == FAILED) {
      atomic_fetch_add_explicit(&lost, 1, memory_order_relaxed);
    }
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
                   (long)syscall(SYS_gettid), tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000,
                   names[action], ptr, size);
  take();
  if (state == NOT_OPENED) {
    open_trace();
  }
  if (state == OPEN && n > 0) {
    if (used + (size_t)n > sizeof buf) {
      write_out();
    }
    if (state == OPEN) {
      memcpy(buf + used, line, (size_t)n);
      used += (size_t)n;
      atomic_fetch_add_explicit(&buffered, 1, memory_order_relaxed);
    } else {
      atomic_fetch_add_explicit(&lost, 1, memory_order_relaxed);
    }
  }
  give();
  errno = saved;
}

bool trace_flush(void) {
  if (atomic_load_explicit(&state, memory_order_relaxed) != OPEN) {
    return true;
  }
  if (holding || !exit_lock(&lock)) {
    return false; /* this thread was interrupted holding it, or another one keeps it */
  }
  if (state == OPEN && used > 0) {
    write_out();
  }
  pthread_mutex_unlock(&lock);
  return true;
}

void trace_exit(void) {
  if (!trace_flush()) {
    exit_note("GPUCAP_TRACE: its last %lu events were not written: the trace was in use when "
              "the process ended",
              atomic_load_explicit(&buffered, memory_order_relaxed));
  }
  if (atomic_load_explicit(&state, memory_order_relaxed) == FAILED) {
    char when[40];
    report_format_time(fail_ns, when, sizeof when);
    exit_note("GPUCAP_TRACE: writing failed at %s (%s): the file ends there; %lu events were "
              "left out",
              when, strerror(fail_err), atomic_load_explicit(&lost, memory_order_relaxed));
  }
}

/* In a fork child: the trace starts over (the parent's events are the parent's). */
static void fork_child(void) {
  pthread_mutex_init(&lock, NULL);
  holding = false;
  /* A child whose parent had not opened the trace traces like any process (its own file with
   * %p); one whose parent had opened it must not create that file again over the parent's. */
  int st = atomic_load_explicit(&state, memory_order_relaxed);
  atomic_store_explicit(&state, st == NOT_OPENED ? NOT_OPENED : OFF, memory_order_relaxed);
  if (fd >= 0) {
    close(fd);
  }
  fd = -1;
  used = 0;
  written = 0;
  atomic_store_explicit(&buffered, 0, memory_order_relaxed);
  atomic_store_explicit(&lost, 0, memory_order_relaxed);
}
FORK_CHILD(fork_child)
