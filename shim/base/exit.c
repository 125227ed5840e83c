/* The exit path's bounded waits and its notes (see shim/base/exit.h). */
#include "shim/base/exit.h"

#include "shim/base/fork.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static report_run_t run;
static _Atomic int64_t deadline; /* CLOCK_MONOTONIC ns: exit_lock gives up then */
static atomic_bool exiting;      /* exit() is running the atexit handlers */
static pthread_once_t armed = PTHREAD_ONCE_INIT;

static void mark_exiting(void) {
  atomic_store(&exiting, true);
}

static void arm(void) {
  atexit(mark_exiting); /* if it cannot be registered, contexts ended at exit look ended before */
}

void exit_arm(void) {
  pthread_once(&armed, arm);
}

bool exit_started(void) {
  return atomic_load(&exiting);
}

static int64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void exit_begin(void) {
  atomic_store(&deadline, monotonic_ns() + (int64_t)EXIT_WAIT_MS * 1000000);
}

bool exit_wait(void) {
  if (monotonic_ns() >= atomic_load(&deadline)) {
    return false;
  }
  struct timespec pause = {0, 200000};
  nanosleep(&pause, NULL);
  return true;
}

bool exit_lock(pthread_mutex_t *m) {
  while (pthread_mutex_trylock(m) != 0) {
    if (!exit_wait()) {
      return false;
    }
  }
  return true;
}

void exit_note(const char *fmt, ...) {
  if (run.nnotes >= REPORT_NOTES_MAX) {
    return;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(run.notes[run.nnotes++], REPORT_NOTE_MAX, fmt, ap);
  va_end(ap);
}

report_run_t *exit_run(void) {
  return &run;
}

/* In a fork child: no note of the parent's. */
static void fork_child(void) {
  run.nnotes = 0;
}
FORK_CHILD(fork_child)
