/* The shared budget's file (contract and layout in budget.h). Creation is race-free: the
 * first process writes a whole budget into an unnamed file (O_TMPFILE in /dev/shm) and links
 * it in place; whoever loses the race opens the winner's, so nobody ever maps half a budget.
 * Liveness is the pid and its start time together, read from /proc/PID/stat: a pid that is gone,
 * a zombie (its device memory is already freed) or a pid reused by a later process is dead.
 */
#include "shim/accounting/budget.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ThreadSanitizer's timed lock counts an EOWNERDEAD as a failure (its plain lock does not):
 * tell it that the lock is held. */
#if defined(__SANITIZE_THREAD__)
#define TSAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN_BUILD 1
#endif
#endif
#ifdef TSAN_BUILD
#include <sanitizer/tsan_interface.h>
#define TSAN_NOTE_LOCKED(m)                                                                        \
  (__tsan_mutex_pre_lock((m), __tsan_mutex_try_lock),                                              \
   __tsan_mutex_post_lock((m), __tsan_mutex_try_lock, 0))
#else
#define TSAN_NOTE_LOCKED(m) ((void)(m))
#endif

void budget_path(const char *name, unsigned uid, char *buf, size_t len) {
  (void)snprintf(buf, len, "%s/%s%u.%s", BUDGET_DIR, BUDGET_PREFIX, uid, name);
}

/* State (field 3) and start time (field 22) of pid; false when /proc has no such process. */
static bool proc_stat(pid_t pid, char *state, uint64_t *start) {
  char path[64], buf[1024];
  (void)snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) {
    return false;
  }
  buf[n] = '\0';
  char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
  if (!p || p[1] != ' ') {
    return false;
  }
  *state = p[2];
  p += 2; /* field 3 */
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) {
      return false;
    }
    p++;
  }
  *start = strtoull(p, NULL, 10);
  return true;
}

uint64_t budget_start_of(pid_t pid) {
  char state = '?';
  uint64_t start = 0;
  if (pid <= 0 || !proc_stat(pid, &state, &start) || state == 'Z' || state == 'X') {
    return 0;
  }
  return start;
}

uint64_t budget_pidns(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* One wait for the lock lasts at most this long before it is tried again (see budget_lock). */
#define LOCK_SLICE_NS 50000000

int budget_lock(struct budget *l) {
  /* A holder killed between its release's store and the wake that follows can leave waiters
   * asleep on a free lock: the kernel's robust-list cleanup wakes one only while the lock word
   * still reads free, and a process that took and released the lock in between has cleared the
   * waiters flag. So each wait is bounded and retried; an ordinary release still wakes a waiter
   * at once. (The deadline is on the realtime clock, the one the timed lock takes; a clock set
   * back only lengthens a wait that was lost anyway.) */
  int rc;
  do {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += LOCK_SLICE_NS;
    if (until.tv_nsec >= 1000000000) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000;
    }
    rc = pthread_mutex_timedlock(&l->lock, &until);
  } while (rc == ETIMEDOUT);
  if (rc == EOWNERDEAD) {
    TSAN_NOTE_LOCKED(&l->lock);
    /* The holder died inside: at most its own slot is half-written, and it is dead, so the
     * next reclaim frees that slot. */
    l->recoveries++;
    pthread_mutex_consistent(&l->lock);
    rc = 0;
  }
  return rc == 0 ? 0 : -ENOTRECOVERABLE;
}

void budget_unlock(struct budget *l) {
  pthread_mutex_unlock(&l->lock);
}

unsigned budget_reclaim(struct budget *l, pid_t self_pid, uint64_t self_start) {
  unsigned live = 0;
  for (unsigned i = 0; i < BUDGET_SLOTS; i++) {
    struct budget_slot *s = &l->slot[i];
    if (s->pid == 0) {
      continue;
    }
    bool before_exec = self_pid != 0 && s->pid == self_pid && s->start == self_start;
    if (before_exec || budget_start_of(s->pid) != s->start) {
      s->pid = 0;
      l->reclaimed++;
    } else {
      live++;
    }
  }
  return live;
}

uint64_t budget_used(const struct budget *l, unsigned d) {
  uint64_t sum = 0;
  for (unsigned i = 0; i < BUDGET_SLOTS; i++) {
    if (l->slot[i].pid != 0) {
      sum += l->slot[i].used[d];
    }
  }
  return sum;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

uint64_t budget_reserved(const struct budget *l, unsigned d, int slot) {
  const struct budget_device *e = &l->dev[d];
  uint64_t sum = 0;
  int w = e->want_slot;
  if (w >= 0 && w < (int)BUDGET_SLOTS && w != slot && l->slot[w].pid != 0 &&
      now_ns() < e->want_ns) {
    sum = e->want;
  }
  for (unsigned i = 0; i < BUDGET_SLOTS; i++) {
    const struct budget_slot *s = &l->slot[i];
    if (s->pid != 0 && (int)i != slot && s->used[d] < l->dev[d].min) {
      sum += l->dev[d].min - s->used[d];
    }
  }
  return sum;
}

uint64_t budget_headroom(const struct budget *l, unsigned d, int slot) {
  uint64_t taken = budget_used(l, d);
  uint64_t reserved = budget_reserved(l, d, slot);
  uint64_t cap = l->dev[d].cap;
  if (taken >= cap || reserved >= cap - taken) {
    return 0;
  }
  return cap - taken - reserved;
}

bool budget_admit(struct budget *l, unsigned d, int slot, uint64_t bytes) {
  struct budget_device *e = &l->dev[d];
  if (bytes > budget_headroom(l, d, slot)) {
    int w = e->want_slot;
    bool held = w >= 0 && w < (int)BUDGET_SLOTS && w != slot && l->slot[w].pid != 0 &&
                now_ns() < e->want_ns;
    if (!held) { /* another process's request keeps its place until it is met or expires */
      e->want = bytes;
      e->want_slot = slot;
      e->want_ns = now_ns() + BUDGET_WANT_NS;
    }
    return false;
  }
  if (e->want_slot == slot) {
    e->want_slot = -1; /* the asker got memory: nothing held back any more */
  }
  l->slot[slot].used[d] += bytes;
  uint64_t now = budget_used(l, d);
  if (now > l->dev[d].peak) {
    l->dev[d].peak = now;
  }
  return true;
}

int budget_find(const struct budget *l, const char *uuid) {
  for (unsigned d = 0; d < BUDGET_DEVICES; d++) {
    if (l->dev[d].uuid[0] && strncmp(l->dev[d].uuid, uuid, BUDGET_UUID_MAX) == 0) {
      return (int)d;
    }
  }
  return -1;
}

/* ---------------------------------------------------------------- opening */

__attribute__((format(printf, 4, 5))) static int fail(int rc, char *err, size_t errlen,
                                                      const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return rc;
}

static int os_error(const char *path, const char *what, char *err, size_t errlen) {
  int e = errno;
  return fail(-e, err, errlen, "budget file %s: %s: %s", path, what, strerror(e));
}

static int check(const char *path, int fd, struct budget **out, char *err, size_t errlen) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return os_error(path, "fstat", err, errlen);
  }
  const char *why = NULL;
  if (!S_ISREG(st.st_mode)) {
    why = "not a regular file";
  } else if (st.st_uid != geteuid()) {
    why = "owned by another user";
  } else if ((st.st_mode & 07777) != 0600) {
    why = "not mode 0600";
  } else if (st.st_size != (off_t)sizeof(struct budget)) {
    why = "not the size of a budget file of this gpucap version";
  }
  if (why) {
    return fail(-EPROTO, err, errlen, "budget file %s: %s", path, why);
  }
  struct budget *l = mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (l == MAP_FAILED) {
    return os_error(path, "mmap", err, errlen);
  }
  if (memcmp(l->magic, BUDGET_MAGIC, sizeof l->magic) != 0) {
    why = "not a gpucap budget file (bad magic)";
  } else if (l->version != BUDGET_VERSION || l->size != sizeof *l || l->nslots != BUDGET_SLOTS ||
             l->ndevices != BUDGET_DEVICES) {
    why = "made by another gpucap version (layout differs)";
  } else if (l->uid != (uint32_t)geteuid()) {
    why = "made for another user";
  }
  if (why) {
    munmap(l, sizeof *l);
    return fail(-EPROTO, err, errlen, "budget file %s: %s", path, why);
  }
  *out = l;
  return 0;
}

int budget_unnamed(size_t size, void **map) {
  int fd = open(BUDGET_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return -1;
  }
  void *m = MAP_FAILED;
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)size) != 0 ||
      (m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  *map = m;
  return fd;
}

/* Writes a whole budget into an unnamed file and links it at path. Returns 0 (created and
 * mapped), 1 (another process linked one first: open that), or a negative errno. */
static int create(const char *path, const char *name, const char *settings, struct budget **out,
                  char *err, size_t errlen) {
  struct budget *l = NULL;
  int fd = budget_unnamed(sizeof *l, (void **)&l);
  if (fd < 0) {
    return os_error(path, "cannot create it", err, errlen);
  }
  memcpy(l->magic, BUDGET_MAGIC, sizeof l->magic);
  l->version = BUDGET_VERSION;
  l->size = sizeof *l;
  l->uid = (uint32_t)geteuid();
  l->nslots = BUDGET_SLOTS;
  l->ndevices = BUDGET_DEVICES;
  l->pidns = budget_pidns();
  (void)snprintf(l->name, sizeof l->name, "%s", name);
  (void)snprintf(l->settings, sizeof l->settings, "%s", settings);
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&l->lock, &attr);
  pthread_mutexattr_destroy(&attr);
  char self[64];
  (void)snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  int rc = linkat(AT_FDCWD, self, AT_FDCWD, path, AT_SYMLINK_FOLLOW) == 0 ? 0
           : errno == EEXIST                                              ? 1
                             : os_error(path, "cannot link it", err, errlen);
  close(fd);
  if (rc != 0) {
    munmap(l, sizeof *l);
  } else {
    *out = l;
  }
  return rc;
}

int budget_open(const char *name, bool make, const char *settings, struct budget **out, char *err,
                size_t errlen) {
  int saved = errno;
  char path[256];
  budget_path(name, (unsigned)geteuid(), path, sizeof path);
  int rc = 1;
  for (int tries = 0; rc == 1 && tries < 4; tries++) {
    int fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      rc = check(path, fd, out, err, errlen);
      close(fd);
    } else if (errno == ELOOP) {
      rc = fail(-EPROTO, err, errlen, "budget file %s: a symbolic link", path);
    } else if (errno != ENOENT) {
      rc = os_error(path, "cannot open it", err, errlen);
    } else if (!make) {
      rc = fail(-ENOENT, err, errlen, "budget file %s: no such budget", path);
    } else {
      rc = create(path, name, settings, out, err, errlen); /* 1: lost the race, open it */
    }
  }
  if (rc == 1) {
    rc = fail(-EAGAIN, err, errlen, "budget file %s: appears and disappears", path);
  }
  errno = saved;
  return rc;
}

void budget_close(struct budget *l) {
  if (l) {
    munmap(l, sizeof *l);
  }
}
