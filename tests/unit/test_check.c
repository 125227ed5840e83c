/* The checked build's preconditions (shim/base/check.h) catch what they name: a device ordinal out
 * of range and a mutex the caller should hold but nobody does abort with one `gpucap: error:`
 * line; valid calls pass. Each failing case runs in a child process, judged from outside by its
 * exit status and its stderr. */
#define GPUCAP_CHECKED 1
#include "shim/base/check.h"

#include "tests/tap.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;

enum which { DEVICE_OK, DEVICE_NEGATIVE, DEVICE_PAST_END, HELD_YES, HELD_NO };

static void run(enum which w) {
  switch (w) {
  case DEVICE_OK:
    CHECK_DEVICE(GPUCAP_MAX_DEVICES - 1);
    break;
  case DEVICE_NEGATIVE:
    CHECK_DEVICE(-1);
    break;
  case DEVICE_PAST_END:
    CHECK_DEVICE(GPUCAP_MAX_DEVICES);
    break;
  case HELD_YES:
    pthread_mutex_lock(&m);
    CHECK_HELD(&m);
    pthread_mutex_unlock(&m);
    break;
  case HELD_NO:
    CHECK_HELD(&m);
    break;
  }
}

/* Runs w in a child; returns its wait status, its stderr in err. */
static int child(enum which w, char *err, size_t cap) {
  int fds[2];
  if (pipe(fds) != 0) {
    return -1;
  }
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    run(w);
    _exit(0);
  }
  close(fds[1]);
  size_t len = 0;
  ssize_t n;
  while (len + 1 < cap && (n = read(fds[0], err + len, cap - 1 - len)) > 0) {
    len += (size_t)n;
  }
  err[len] = '\0';
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

static bool aborted(int status) {
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

int main(void) {
  char err[512];
  int st = child(DEVICE_OK, err, sizeof err);
  tap_ok(WIFEXITED(st) && WEXITSTATUS(st) == 0 && !err[0], "the last device ordinal passes");
  st = child(DEVICE_NEGATIVE, err, sizeof err);
  tap_ok(aborted(st) && strstr(err, "gpucap: error: internal check failed: (-1) >= 0"),
         "a negative device ordinal aborts, naming the condition");
  st = child(DEVICE_PAST_END, err, sizeof err);
  tap_ok(aborted(st) && strstr(err, "internal check failed") && strstr(err, "test_check.c"),
         "device GPUCAP_MAX_DEVICES aborts, naming the file");
  st = child(HELD_YES, err, sizeof err);
  tap_ok(WIFEXITED(st) && WEXITSTATUS(st) == 0 && !err[0], "a held mutex passes");
  st = child(HELD_NO, err, sizeof err);
  tap_ok(aborted(st) && strstr(err, "check_held(&m)"), "a mutex nobody holds aborts");
  return tap_done();
}
