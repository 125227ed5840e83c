/* gpucap's handler of SIGTERM and SIGINT, and the interposed ways to set a signal's action
 * (see shim/base/signals.h). Which of the two signals gpucap holds is one atomic flag each; changes
 * to their actions, the program's and gpucap's, are serialised by a bounded spin flag (never a
 * mutex: sigaction is async-signal-safe, so a program may call it from a handler that
 * interrupted one of these). The wrappers run before sanitizer runtimes have initialised (they
 * set their own handlers through sigaction), so they and everything they call are not
 * instrumented, and the next definitions are found with atomics rather than pthread_once.
 */
#include "shim/base/signals.h"

#include "shim/base/export.h"
#include "shim/base/real.h"

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* glibc declares it only for old X/Open: */
sighandler_t bsd_signal(int sig, sighandler_t handler);

typedef int sigaction_fn(int, const struct sigaction *, struct sigaction *);
typedef sighandler_t signal_fn(int, sighandler_t);

static const int caught[] = {SIGTERM, SIGINT};
static const char *const names[] = {"SIGTERM", "SIGINT"};
#define NCAUGHT (sizeof caught / sizeof caught[0])
static bool ours[NCAUGHT]; /* gpucap's handler is the action (__atomic) */
static bool changing;      /* an action of a caught signal is being changed (__atomic) */
static sigaction_fn *next_sigaction;
static signal_fn *next_signal, *next_bsd_signal, *next_sysv_signal;

SHIM_UNINSTRUMENTED static int slot(int sig) {
  for (size_t i = 0; i < NCAUGHT; i++) {
    if (caught[i] == sig) {
      return (int)i;
    }
  }
  return -1;
}

SHIM_UNINSTRUMENTED static bool held(int i) {
  return i >= 0 && __atomic_load_n(&ours[i], __ATOMIC_ACQUIRE);
}

/* The next definitions (glibc's), found on first use; racing threads store the same values. */
SHIM_UNINSTRUMENTED static void resolve(void) {
  if (__atomic_load_n(&next_sigaction, __ATOMIC_ACQUIRE)) {
    return;
  }
  real_dlsym_init();
  void *p = gpucap_real_dlsym(RTLD_NEXT, "signal");
  __atomic_store_n((void **)&next_signal, p, __ATOMIC_RELAXED);
  p = gpucap_real_dlsym(RTLD_NEXT, "bsd_signal");
  __atomic_store_n((void **)&next_bsd_signal, p, __ATOMIC_RELAXED);
  p = gpucap_real_dlsym(RTLD_NEXT, "sysv_signal");
  __atomic_store_n((void **)&next_sysv_signal, p, __ATOMIC_RELAXED);
  p = gpucap_real_dlsym(RTLD_NEXT, "sigaction");
  __atomic_store_n((void **)&next_sigaction, p, __ATOMIC_RELEASE);
}

/* Bounded: a handler that interrupted a change on its own thread goes on after a while. */
SHIM_UNINSTRUMENTED static void change_begin(void) {
  for (int i = 0; i < 10000 && __atomic_test_and_set(&changing, __ATOMIC_ACQUIRE); i++) {
    sched_yield();
  }
}

SHIM_UNINSTRUMENTED static void change_end(void) {
  __atomic_clear(&changing, __ATOMIC_RELEASE);
}

void signals_die(int sig) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  next_sigaction(sig, &dfl, NULL);
  raise(sig); /* blocked inside the handler: delivered, by default, as it returns */
}

/* The exit path's entry for a terminating signal (shim/entry/shutdown.h), set once from a
 * constructor. */
static bool (*_Atomic on_end)(int sig, const char *name);

void signals_on_end(bool (*fn)(int sig, const char *name)) {
  atomic_store(&on_end, fn);
}

static void on_signal(int sig) {
  int saved = errno;
  int i = slot(sig);
  bool (*end)(int, const char *) = atomic_load(&on_end);
  if (!end || end(sig, i >= 0 ? names[i] : "signal")) {
    signals_die(sig);
  }
  errno = saved;
}

void signals_arm(void) {
  resolve();
  if (!next_sigaction) {
    return;
  }
  for (size_t i = 0; i < NCAUGHT; i++) {
    struct sigaction cur, mine;
    memset(&mine, 0, sizeof mine);
    mine.sa_handler = on_signal;
    mine.sa_flags = SA_RESTART; /* should it return (see shutdown_by_signal): no EINTR */
    sigfillset(&mine.sa_mask);  /* nothing else runs on this thread while the report is written */
    change_begin();
    if (!held((int)i) && next_sigaction(caught[i], NULL, &cur) == 0 &&
        !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL &&
        next_sigaction(caught[i], &mine, NULL) == 0) {
      __atomic_store_n(&ours[i], true, __ATOMIC_RELEASE);
    }
    change_end();
  }
}

SHIM_UNINSTRUMENTED GPUCAP_EXPORT int sigaction(int sig, const struct sigaction *act,
                                                struct sigaction *oldact) {
  int i = slot(sig);
  resolve();
  if (!next_sigaction) {
    errno = ENOSYS;
    return -1;
  }
  if (!held(i)) {
    return next_sigaction(sig, act, oldact);
  }
  change_begin();
  int rc = 0;
  if (!held(i)) {
    rc = next_sigaction(sig, act, oldact);
  } else {
    if (act) {
      rc = next_sigaction(sig, act, NULL);
      __atomic_store_n(&ours[i], rc != 0, __ATOMIC_RELEASE); /* the program's replaces ours */
    }
    if (rc == 0 && oldact) {
      memset(oldact, 0, sizeof *oldact); /* what the program would have seen */
      oldact->sa_handler = SIG_DFL;
    }
  }
  change_end();
  return rc;
}

/* signal(), bsd_signal() and sysv_signal() of a caught signal: the program's handler replaces
 * gpucap's, and the previous handler it sees is SIG_DFL. */
SHIM_UNINSTRUMENTED static sighandler_t set_handler(signal_fn **nextp, int sig,
                                                    sighandler_t handler) {
  int i = slot(sig);
  resolve();
  signal_fn *next = __atomic_load_n(nextp, __ATOMIC_RELAXED);
  if (!next) {
    errno = ENOSYS;
    return SIG_ERR;
  }
  if (!held(i)) {
    return next(sig, handler);
  }
  change_begin();
  bool mine = held(i);
  sighandler_t prev = next(sig, handler);
  if (mine && prev != SIG_ERR) {
    __atomic_store_n(&ours[i], false, __ATOMIC_RELEASE);
    prev = SIG_DFL;
  }
  change_end();
  return prev;
}

SHIM_UNINSTRUMENTED GPUCAP_EXPORT sighandler_t signal(int sig, sighandler_t handler) {
  return set_handler(&next_signal, sig, handler);
}

SHIM_UNINSTRUMENTED GPUCAP_EXPORT sighandler_t bsd_signal(int sig, sighandler_t handler) {
  return set_handler(&next_bsd_signal, sig, handler);
}

SHIM_UNINSTRUMENTED GPUCAP_EXPORT sighandler_t sysv_signal(int sig, sighandler_t handler) {
  return set_handler(&next_sysv_signal, sig, handler);
}
