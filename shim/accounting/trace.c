/* The allocation trace. Each event takes a ticket from one atomic counter where its outcome is
 * decided (shim/pool/pool.c takes it under the pool's lock), so the tickets are in the order of the
 * operations. The event is stored, unformatted, in the ring slot of its ticket; whoever flushes
 * formats the slots in ticket order, stopping at the first slot not yet filled, into a 64 KiB
 * buffer that is appended to the file when full. A writer whose slot is still held by a row
 * not yet written flushes (or waits for the flusher) first, so the ring never reorders.
 * Recording an event costs a counter increment and a few stores: no lock, no formatting, no
 * I/O; trace_poll, called with no lock held, does the formatting and writing once a quarter of
 * the ring is waiting.
 * The file is created at the first poll after the first event (shim/base/log.c's checks: no
 * symlink, no other user's file, no file another output setting writes), with the user's umask;
 * a failure to create it is reported once and tracing stops. The file only ever holds whole
 * lines: a write that fails (a full disk, a file size limit) is cut back to the last whole
 * line, one warning says so and tracing stops; the exit report notes it. The exit path and an
 * exec take the flush lock with exit_lock and, if it stays busy, note what they could not write
 * instead of waiting. Times of day use the time zone offset read at the last poll (never
 * localtime on the exit path, which a signal may run).
 */
#include "shim/accounting/trace.h"

#include "core/report.h"
#include "shim/accounting/cap.h"
#include "shim/base/exit.h"
#include "shim/base/fork.h"
#include "shim/accounting/ledger.h"
#include "shim/base/log.h"
#include "shim/base/settings.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define TRACE_BUF (64 * 1024)
#define RING 4096          /* events recorded and not yet formatted, at most */
#define POLL_AT (RING / 4) /* trace_poll writes once this many are waiting */
#define HEADER "Thread,Time,Action,Pointer,Size,Stream,Device,Event,Held,Verdict,Library,Spilled\n"
#define HEADER_LEN (sizeof HEADER - 1)

/* NOT_OPENED: no event yet; ARMED: events recorded, the file not created yet. */
enum { NOT_OPENED = 0, OPEN = 1, ARMED = 2, OFF = TRACE_STATE_OFF, FAILED = -2 };

struct slot {
  _Atomic uint64_t ticket; /* the ticket whose event this slot holds, once it is stored */
  int64_t ns;              /* CLOCK_REALTIME */
  uint64_t ptr, size, held, stream;
  uint64_t spilled;    /* of held, the bytes spilled to host memory (shim/accounting/spill.h) */
  const char *verdict; /* a refusal's (static text), or NULL */
  int32_t tid;
  int16_t dev;
  int16_t lib; /* the ledger's library, -1 for none */
  uint8_t action;
} __attribute__((aligned(64))); /* one cache line: writers on other cores share none */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* the flusher's */
/* This thread holds `lock` (so a signal handler running on it must not wait for it). */
static _Thread_local bool holding;
static _Thread_local int32_t my_tid;
static _Thread_local uint64_t my_stream;
static _Thread_local uint64_t my_spilled;
static struct slot ring[RING];
static _Atomic uint64_t issued;  /* tickets handed out; the first is 1 */
static _Atomic uint64_t drained; /* every ticket up to this one is formatted or dropped */
static int fd = -1;
atomic_int trace_state; /* NOT_OPENED, ARMED, OPEN, OFF or FAILED; changed under `lock` but
                            NOT_OPENED -> ARMED/OFF, which is idempotent */
static char path[PATH_MAX];
static char buf[TRACE_BUF];
static size_t used;                            /* bytes in buf */
static atomic_ulong buffered;                  /* rows in buf */
static atomic_ulong lost;                      /* events never written after a failed write */
static uint64_t written;                       /* bytes in the file, all whole lines */
static int fail_err;                           /* errno of the failed write */
static int64_t fail_ns;                        /* when it failed (Unix time) */
static _Atomic long tz_offset;                 /* seconds east of UTC, at the last poll */
static atomic_bool capped[GPUCAP_MAX_DEVICES]; /* the device's cap row is recorded */

static void give(void) {
  holding = false;
  pthread_mutex_unlock(&lock);
}

static void read_zone(void) {
  struct tm tm;
  time_t now = time(NULL);
  if (localtime_r(&now, &tm) != NULL) {
    atomic_store_explicit(&tz_offset, tm.tm_gmtoff, memory_order_relaxed);
  }
}

/* The first event: is there a trace to write? Idempotent, lock-free. */
static int decide(void) {
  int want = settings_get()->trace[0] ? ARMED : OFF;
  int expect = NOT_OPENED;
  if (want == ARMED) {
    read_zone();
  }
  atomic_compare_exchange_strong(&trace_state, &expect, want);
  return atomic_load_explicit(&trace_state, memory_order_relaxed);
}

/* Creates the file. Lock held, state ARMED. */
static void open_trace(void) {
  fd = log_create("GPUCAP_TRACE", settings_get()->trace, path, sizeof path);
  if (fd < 0) {
    atomic_store(&trace_state, OFF);
    return;
  }
  memcpy(buf, HEADER, HEADER_LEN);
  used = HEADER_LEN;
  written = 0;
  atomic_store(&trace_state, OPEN);
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
  atomic_store_explicit(&trace_state, FAILED, memory_order_relaxed);
  log_msg(LOG_WARN,
          "GPUCAP_TRACE: cannot write '%s': %s; the trace stops here, at its last whole line "
          "(the exit report counts the events left out)",
          path, strerror(err));
}

/* One row, RMM's six columns then gpucap's six. Region and cap rows are `allocate failure` in
 * RMM's Action column: RMM's readers know only its three actions and its replay skips failures,
 * so they read the trace as RMM's own; gpucap's Event column says what the row is. A library's
 * name is written with every byte a CSV field or a reader could take for structure (a comma, a
 * quote, a control byte) as '_'. */
static int format_row(const struct slot *s, char *line, size_t cap) {
  static const char *const rmm[] = {"allocate",         "allocate failure", "free",
                                    "allocate failure", "allocate failure", "allocate failure"};
  static const char *const ours[] = {"alloc", "refused", "free", "reserve", "release", "cap"};
  char lib[LEDGER_NAME_MAX];
  const char *name = ledger_name(s->lib);
  size_t k = 0;
  for (; name != NULL && name[k] != '\0' && k < sizeof lib - 1; k++) {
    unsigned char ch = (unsigned char)name[k];
    lib[k] = ch < 0x20 || ch == 0x7f || ch == ',' || ch == '"' ? '_' : (char)ch;
  }
  lib[k] = '\0';
  int64_t sec = s->ns / 1000000000 + atomic_load_explicit(&tz_offset, memory_order_relaxed);
  int64_t day = ((sec % 86400) + 86400) % 86400;
  return snprintf(line, cap,
                  "%d,%02d:%02d:%02d.%06ld,%s,0x%" PRIx64 ",%" PRIu64 ",0x%" PRIx64
                  ",%d,%s,%" PRIu64 ",%s,%s,%" PRIu64 "\n",
                  s->tid, (int)(day / 3600), (int)(day / 60 % 60), (int)(day % 60),
                  (long)(s->ns % 1000000000 / 1000), rmm[s->action], s->ptr, s->size, s->stream,
                  s->dev, ours[s->action], s->held, s->verdict ? s->verdict : "", lib, s->spilled);
}

/* Formats the filled slots in ticket order into the buffer (writing it when full), up to the
 * first slot not filled yet. Lock held. */
static void drain(void) {
  uint64_t t = atomic_load_explicit(&drained, memory_order_relaxed) + 1;
  for (;; t++) {
    struct slot *s = &ring[t % RING];
    if (atomic_load_explicit(&s->ticket, memory_order_acquire) != t) {
      break;
    }
    int st = atomic_load_explicit(&trace_state, memory_order_relaxed);
    if (s->action != TRACE_NONE && st == OPEN) {
      char line[192];
      int n = format_row(s, line, sizeof line);
      if (n > 0 && used + (size_t)n > sizeof buf) {
        write_out();
      }
      if (atomic_load_explicit(&trace_state, memory_order_relaxed) == OPEN && n > 0) {
        memcpy(buf + used, line, (size_t)n);
        used += (size_t)n;
        atomic_fetch_add_explicit(&buffered, 1, memory_order_relaxed);
      } else {
        atomic_fetch_add_explicit(&lost, 1, memory_order_relaxed);
      }
    } else if (s->action != TRACE_NONE && st == FAILED) {
      atomic_fetch_add_explicit(&lost, 1, memory_order_relaxed);
    }
    atomic_store_explicit(&drained, t, memory_order_release);
  }
}

/* Creates the file if this is the first write, then drains. Lock held. */
static void flush_locked(void) {
  if (atomic_load_explicit(&trace_state, memory_order_relaxed) == ARMED) {
    open_trace();
  }
  drain();
}

bool trace_on(void) {
  int st = atomic_load_explicit(&trace_state, memory_order_relaxed);
  if (st == NOT_OPENED) {
    st = decide();
  }
  return st > 0;
}

uint64_t trace_ticket(void) {
  int st = atomic_load_explicit(&trace_state, memory_order_relaxed);
  if (st == NOT_OPENED) {
    st = decide();
  }
  if (st <= 0) {
    if (st == FAILED) {
      atomic_fetch_add_explicit(&lost, 1, memory_order_relaxed);
    }
    return 0;
  }
  return atomic_fetch_add_explicit(&issued, 1, memory_order_relaxed) + 1;
}

static void fill(uint64_t ticket, enum trace_action action, int dev, uint64_t ptr, uint64_t size,
                 uint64_t held, const char *verdict, int lib) {
  if (ticket == 0) {
    return;
  }
  int saved = errno;
  /* The slot is free once the row RING tickets earlier is drained. Whoever waits drains (the
   * slots before it are filled, or about to be, by threads that wait for nothing meanwhile). */
  while (ticket - atomic_load_explicit(&drained, memory_order_acquire) > RING) {
    if (atomic_load_explicit(&trace_state, memory_order_relaxed) == FAILED) {
      break; /* nothing is written any more: the row is lost either way */
    }
    if (!holding && pthread_mutex_trylock(&lock) == 0) {
      holding = true;
      flush_locked();
      give();
    }
    sched_yield();
  }
  struct slot *s = &ring[ticket % RING];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (my_tid == 0) {
    my_tid = (int32_t)syscall(SYS_gettid);
  }
  s->ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
  s->ptr = ptr;
  s->size = size;
  s->held = held;
  s->verdict = verdict;
  s->stream = my_stream;
  s->spilled = my_spilled;
  s->tid = my_tid;
  s->dev = (int16_t)(dev < -1 || dev > INT16_MAX ? -1 : dev);
  s->lib = (int16_t)(lib < 0 || lib >= LEDGER_LIBS ? -1 : lib);
  s->action = (uint8_t)action;
  atomic_store_explicit(&s->ticket, ticket, memory_order_release);
  errno = saved;
}

/* After the first event of device dev: a row with its cap (Size; 2^64-1 for none). The cap is
 * known by then (the event's charge or refusal computed it). */
static void cap_row(uint64_t ticket, int dev) {
  if (ticket != 0 && dev >= 0 && dev < GPUCAP_MAX_DEVICES &&
      !atomic_load_explicit(&capped[dev], memory_order_relaxed) &&
      !atomic_exchange_explicit(&capped[dev], true, memory_order_relaxed)) {
    fill(trace_ticket(), TRACE_CAP, dev, 0, cap_limit(dev), 0, NULL, -1);
  }
}

void trace_fill(uint64_t ticket, enum trace_action action, int dev, uint64_t ptr, uint64_t size,
                uint64_t held, int lib) {
  fill(ticket, action, dev, ptr, size, held, NULL, lib);
  cap_row(ticket, dev);
}

void trace_note_now(enum trace_action action, int dev, uint64_t ptr, uint64_t size, uint64_t held,
                    int lib) {
  uint64_t ticket = trace_ticket();
  fill(ticket, action, dev, ptr, size, held, NULL, lib);
  cap_row(ticket, dev);
}

void trace_refused(int dev, uint64_t size, const char *verdict, int lib) {
  uint64_t ticket = trace_ticket();
  fill(ticket, TRACE_ALLOC_FAILURE, dev, 0, size, 0, verdict, lib);
  cap_row(ticket, dev);
}

void trace_stream(uint64_t stream) {
  my_stream = stream;
}

void trace_spilled(uint64_t bytes) {
  my_spilled = bytes;
}

void trace_poll_rows(void) {
  int st = atomic_load_explicit(&trace_state, memory_order_relaxed);
  if (st <= 0 || (st == OPEN && atomic_load_explicit(&issued, memory_order_relaxed) -
                                        atomic_load_explicit(&drained, memory_order_relaxed) <
                                    POLL_AT)) {
    return;
  }
  int saved = errno;
  if (!holding && pthread_mutex_trylock(&lock) == 0) { /* someone else is writing: fine */
    holding = true;
    read_zone();
    flush_locked();
    if (atomic_load_explicit(&trace_state, memory_order_relaxed) == OPEN && used > TRACE_BUF / 2) {
      write_out();
    }
    give();
  }
  errno = saved;
}

bool trace_flush(void) {
  int st = atomic_load_explicit(&trace_state, memory_order_relaxed);
  if (st != OPEN && st != ARMED) {
    return true;
  }
  if (holding || !exit_lock(&lock)) {
    return false; /* this thread was interrupted holding it, or another one keeps it */
  }
  flush_locked();
  if (atomic_load_explicit(&trace_state, memory_order_relaxed) == OPEN && used > 0) {
    write_out();
  }
  pthread_mutex_unlock(&lock);
  return true;
}

void trace_exit(void) {
  if (!trace_flush()) {
    exit_note("GPUCAP_TRACE: its last %lu events were not written: the trace was in use when "
              "the process ended",
              atomic_load_explicit(&buffered, memory_order_relaxed) +
                  (unsigned long)(atomic_load(&issued) - atomic_load(&drained)));
  } else if (atomic_load(&issued) != atomic_load(&drained) &&
             atomic_load_explicit(&trace_state, memory_order_relaxed) == OPEN) {
    exit_note("GPUCAP_TRACE: its last %lu events were not written: another thread was "
              "recording one when the process ended",
              (unsigned long)(atomic_load(&issued) - atomic_load(&drained)));
  }
  if (atomic_load_explicit(&trace_state, memory_order_relaxed) == FAILED) {
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
  my_tid = 0; /* the child's only thread is a new one */
  my_stream = 0;
  my_spilled = 0;
  /* A child whose parent had recorded nothing traces like any process (its own file with %p;
   * the ring is untouched); one whose parent had must not create that file over the parent's. */
  int st = atomic_load_explicit(&trace_state, memory_order_relaxed);
  atomic_store_explicit(&trace_state, st == NOT_OPENED ? NOT_OPENED : OFF, memory_order_relaxed);
  if (fd >= 0) {
    close(fd);
  }
  fd = -1;
  used = 0;
  written = 0;
  atomic_store_explicit(&buffered, 0, memory_order_relaxed);
  atomic_store_explicit(&lost, 0, memory_order_relaxed);
  for (int dev = 0; dev < GPUCAP_MAX_DEVICES; dev++) {
    atomic_store_explicit(&capped[dev], false, memory_order_relaxed); /* a trace of its own */
  }
}
FORK_CHILD(fork_child)
