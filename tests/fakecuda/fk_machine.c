/* The machine ledger: one device shared by several processes (contract and layout in
 * fk_machine.h). Creation is race-free: the first process writes a complete ledger into an
 * unnamed file (O_TMPFILE in /dev/shm) and links it in place; whoever loses the race opens the
 * winner's. Every figure is derived from the slots under the robust lock, so a process killed at
 * any point (kill -9 inside the lock included) leaves at most its own slot half-written, and that
 * slot is reclaimed as soon as anyone looks: a slot is released by clearing its pid (one store)
 * and claimed by filling it before setting its pid. Liveness is read from /proc/PID/stat: the
 * process is there, not a zombie (the real driver frees a process's memory when its device files
 * close, before it becomes one), and started when the slot says (a reused pid is another process).
 */
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

#include "tests/fakecuda/fk_machine.h"

#ifdef __SANITIZE_THREAD__ /* the TSan build (GCC): its timed lock takes EOWNERDEAD for a failure  \
                            */
#include <sanitizer/tsan_interface.h>
#define TSAN_NOTE_LOCKED(m)                                                                        \
  (__tsan_mutex_pre_lock((m), __tsan_mutex_try_lock),                                              \
   __tsan_mutex_post_lock((m), __tsan_mutex_try_lock, 0))
#else
#define TSAN_NOTE_LOCKED(m) ((void)(m))
#endif

void fk_machine_path(const char *name, char *buf, size_t len) {
  (void)snprintf(buf, len, "%s/fakecuda.%u.%s", FK_MACHINE_DIR, (unsigned)geteuid(), name);
}

/* State (field 3) and start time (field 22) of process pid from /proc/PID/stat; -1 when it is
 * gone. The command name (field 2) may hold spaces and parentheses: fields count from the last
 * ')'. */
static int proc_stat(pid_t pid, char *state, uint64_t *start) {
  char path[40], buf[1024];
  (void)snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return -1;
  }
  ssize_t n;
  do {
    n = read(fd, buf, sizeof buf - 1);
  } while (n < 0 && errno == EINTR);
  close(fd);
  if (n <= 0) {
    return -1;
  }
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  if (p == NULL) {
    return -1;
  }
  int field = 2;
  char *save = NULL;
  for (char *tok = strtok_r(p + 1, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save)) {
    if (++field == 3) {
      *state = tok[0];
    } else if (field == 22) {
      *start = strtoull(tok, NULL, 10);
      return 0;
    }
  }
  return -1;
}

static int slot_alive(const struct fk_machine_slot *s) {
  char state = '?';
  uint64_t start = 0;
  return proc_stat(s->pid, &state, &start) == 0 && start == s->start && state != 'Z' &&
         state != 'X';
}

static uint32_t slots_seen(const struct fk_ledger *l) {
  return l->hi < FK_MACHINE_SLOTS ? l->hi : FK_MACHINE_SLOTS;
}

/* Takes the ledger's lock, each wait bounded and retried: a holder killed between its release's
 * store and the wake that follows, with another process taking and releasing the lock in
 * between, leaves waiters asleep on a free lock (the kernel's robust-list cleanup wakes one only
 * while the word still reads free). The real driver keeps these figures in the kernel. */
static void lock(struct fk_machine *m) {
  int rc;
  do {
    struct timespec until; /* the realtime clock: ThreadSanitizer knows no clocklock */
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 50000000; /* 50 ms */
    until.tv_sec += until.tv_nsec / 1000000000;
    until.tv_nsec %= 1000000000;
    rc = pthread_mutex_timedlock(&m->l->lock, &until);
  } while (rc == ETIMEDOUT);
  if (rc == EOWNERDEAD) {
    TSAN_NOTE_LOCKED(&m->l->lock);
    /* Its holder died inside. Nothing it may have half-done outlives it: the figures are sums
     * over slots, and its own slot is reclaimed below as a dead process's. */
    m->l->recoveries++;
    pthread_mutex_consistent(&m->l->lock);
  }
}

static void unlock(struct fk_machine *m) {
  pthread_mutex_unlock(&m->l->lock);
}

/* Frees the slots of processes that are gone (lock held). */
static void reclaim(struct fk_machine *m) {
  struct fk_ledger *l = m->l;
  int saved = errno;
  for (uint32_t i = 0; i < slots_seen(l); i++) {
    struct fk_machine_slot *s = &l->slots[i];
    if (s->pid != 0 && (int)i != m->slot && !slot_alive(s)) {
      s->pid = 0; /* its bytes leave the machine with it */
      l->reclaimed++;
    }
  }
  errno = saved;
}

/* The machine's use of dev: the sum over occupied slots (lock held). */
static uint64_t machine_used(const struct fk_ledger *l, int dev) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < slots_seen(l); i++) {
    if (l->slots[i].pid != 0) {
      sum += l->slots[i].used[dev];
    }
  }
  return sum;
}

/* ---- Opening and creating. ---- */

__attribute__((format(printf, 4, 5))) static int refuse(const struct fk_machine *m, char *err,
                                                        size_t errlen, const char *fmt, ...) {
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  (void)snprintf(err, errlen,
                 "machine ledger %s: %s; remove the file or name another FAKECUDA_MACHINE", m->path,
                 why);
  return -EPROTO;
}

static int os_error(const struct fk_machine *m, char *err, size_t errlen, const char *what) {
  int e = errno;
  (void)snprintf(err, errlen, "machine ledger %s: %s: %s", m->path, what, strerror(e));
  return e > 0 ? -e : -EIO;
}

/* The header a ledger made for cfg has. */
static void header_fill(struct fk_ledger *l, const struct fk_config *cfg) {
  memcpy(l->magic, FK_MACHINE_MAGIC, sizeof l->magic);
  l->version = FK_MACHINE_VERSION;
  l->size = (uint32_t)sizeof *l;
  l->uid = (uint32_t)geteuid();
  l->nslots = FK_MACHINE_SLOTS;
  l->ndev = cfg->ndev;
  l->cc_major = cfg->cc_major;
  l->cc_minor = cfg->cc_minor;
  for (int d = 0; d < cfg->ndev && d < FK_MAX_DEVICES; d++) {
    l->total[d] = cfg->mem[d];
  }
}

/* Checks a mapped ledger against what this process expects: its layout, and the devices cfg
 * describes (every process of a machine must describe the same ones). */
static int check(const struct fk_machine *m, const struct fk_ledger *l, const struct fk_config *cfg,
                 char *err, size_t errlen) {
  if (memcmp(l->magic, FK_MACHINE_MAGIC, sizeof l->magic) != 0) {
    return refuse(m, err, errlen, "not a fake CUDA machine ledger (bad magic)");
  }
  if (l->version != FK_MACHINE_VERSION) {
    return refuse(m, err, errlen, "ledger version %u, this driver speaks version %u", l->version,
                  FK_MACHINE_VERSION);
  }
  if (l->size != sizeof *l || l->nslots != FK_MACHINE_SLOTS || l->hi > FK_MACHINE_SLOTS) {
    return refuse(m, err, errlen, "malformed header (size %u, %u slots, %u used)", l->size,
                  l->nslots, l->hi);
  }
  if (l->uid != (uint32_t)geteuid()) {
    return refuse(m, err, errlen, "made by uid %u, not by this user (uid %u)", l->uid,
                  (unsigned)geteuid());
  }
  if (l->ndev != cfg->ndev) {
    return refuse(m, err, errlen, "made for FAKECUDA_DEVICES=%d, this process has %d", l->ndev,
                  cfg->ndev);
  }
  if (l->cc_major != cfg->cc_major || l->cc_minor != cfg->cc_minor) {
    return refuse(m, err, errlen, "made for FAKECUDA_CC=%d.%d, this process has %d.%d", l->cc_major,
                  l->cc_minor, cfg->cc_major, cfg->cc_minor);
  }
  for (int d = 0; d < cfg->ndev; d++) {
    if (l->total[d] != cfg->mem[d]) {
      return refuse(m, err, errlen,
                    "device %d has %llu bytes there (FAKECUDA_MEMORY), %llu in this process", d,
                    (unsigned long long)l->total[d], (unsigned long long)cfg->mem[d]);
    }
  }
  return 0;
}

/* Maps an opened ledger file after checking what it is. */
static int attach(struct fk_machine *m, int fd, const struct fk_config *cfg, char *err,
                  size_t errlen) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return os_error(m, err, errlen, "fstat");
  }
  if (!S_ISREG(st.st_mode)) {
    return refuse(m, err, errlen, "not a regular file");
  }
  if (st.st_uid != geteuid()) {
    return refuse(m, err, errlen, "owned by uid %u, not by this user (uid %u)", (unsigned)st.st_uid,
                  (unsigned)geteuid());
  }
  if ((st.st_mode & 07777) != 0600) {
    return refuse(m, err, errlen, "mode %04o, not 0600 (owner-only)",
                  (unsigned)(st.st_mode & 07777));
  }
  if ((size_t)st.st_size != sizeof(struct fk_ledger)) {
    return refuse(m, err, errlen, "%lld bytes, not the %zu of a version %u ledger",
                  (long long)st.st_size, sizeof(struct fk_ledger), FK_MACHINE_VERSION);
  }
  void *p = mmap(NULL, sizeof(struct fk_ledger), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return os_error(m, err, errlen, "mmap");
  }
  int rc = check(m, p, cfg, err, errlen);
  if (rc != 0) {
    munmap(p, sizeof(struct fk_ledger));
    return rc;
  }
  m->l = p;
  return 0;
}

/* Writes a complete ledger into an unnamed file and links it at m->path. Returns 0 (created and
 * mapped), 1 (another process linked one first: open that), or a negative errno. */
static int create(struct fk_machine *m, const struct fk_config *cfg, char *err, size_t errlen) {
  int fd = open(FK_MACHINE_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return os_error(m, err, errlen, "cannot create it");
  }
  struct fk_ledger *l = MAP_FAILED;
  if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)sizeof *l) != 0 ||
      (l = mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    int rc = os_error(m, err, errlen, "cannot create it");
    close(fd);
    return rc;
  }
  header_fill(l, cfg);
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(&l->lock, &attr);
  pthread_mutexattr_destroy(&attr);
  char self[64];
  (void)snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  int linked = linkat(AT_FDCWD, self, AT_FDCWD, m->path, AT_SYMLINK_FOLLOW);
  int rc = linked == 0 ? 0 : errno == EEXIST ? 1 : os_error(m, err, errlen, "cannot link it");
  close(fd);
  if (rc != 0) {
    munmap(l, sizeof *l);
  } else {
    m->l = l;
  }
  return rc;
}

int fk_machine_open(const char *name, const struct fk_config *cfg, struct fk_machine *m, char *err,
                    size_t errlen) {
  int saved = errno;
  memset(m, 0, sizeof *m);
  m->slot = -1;
  m->pid = getpid();
  fk_machine_path(name, m->path, sizeof m->path);
  char state;
  if (proc_stat(m->pid, &state, &m->start) != 0) {
    errno = ENOENT;
    int rc = os_error(m, err, errlen, "cannot read /proc/self/stat");
    errno = saved;
    return rc;
  }
  int rc = 1;
  for (int attempt = 0; rc == 1 && attempt < 8; attempt++) {
    int fd = open(m->path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      rc = attach(m, fd, cfg, err, errlen);
      close(fd);
    } else if (errno == ELOOP) {
      rc = refuse(m, err, errlen, "a symbolic link");
    } else if (errno == EISDIR) {
      rc = refuse(m, err, errlen, "not a regular file");
    } else if (errno != ENOENT) {
      rc = os_error(m, err, errlen, "cannot open it");
    } else {
      rc = create(m, cfg, err, errlen);
    }
  }
  if (rc == 1) {
    errno = EAGAIN;
    rc = os_error(m, err, errlen, "created and removed under us repeatedly");
  }
  errno = saved;
  return rc;
}

/* ---- Slots. ---- */

/* A free slot: the first unoccupied one seen, else the next never used; -1 (lock held). */
static int free_slot(const struct fk_ledger *l) {
  for (uint32_t i = 0; i < slots_seen(l); i++) {
    if (l->slots[i].pid == 0) {
      return (int)i;
    }
  }
  return l->hi < FK_MACHINE_SLOTS ? (int)l->hi : -1;
}

/* No slot is occupied (lock held). */
static int idle(const struct fk_ledger *l) {
  for (uint32_t i = 0; i < slots_seen(l); i++) {
    if (l->slots[i].pid != 0) {
      return 0;
    }
  }
  return 1;
}

int fk_machine_join(struct fk_machine *m) {
  struct fk_ledger *l = m->l;
  lock(m);
  reclaim(m);
  if (idle(l)) {
    /* No live process: whatever the ledger holds is a previous run's (processes killed, or a
     * test cut off); this process starts a new one, with figures of its own. */
    memset(l->peak, 0, sizeof l->peak);
    l->reclaimed = 0;
    l->recoveries = 0;
    l->hi = 0;
  }
  for (uint32_t i = 0; i < slots_seen(l); i++) {
    if (l->slots[i].pid == m->pid && l->slots[i].start == m->start) {
      l->slots[i].pid = 0; /* this process before an exec, which closed its device files (the
                            * same run goes on: it counted as live above) */
      l->reclaimed++;
    }
  }
  int found = free_slot(l);
  if (found >= 0) {
    struct fk_machine_slot *s = &l->slots[found];
    memset(s, 0, sizeof *s);
    s->start = m->start;
    if ((uint32_t)found == l->hi) {
      l->hi++;
    }
    s->pid = (int32_t)m->pid; /* last: the slot counts from here on */
    m->slot = found;
  }
  unlock(m);
  return found >= 0 ? 0 : -ENOSPC;
}

void fk_machine_close(struct fk_machine *m) {
  if (m->l == NULL) {
    return;
  }
  if (m->slot >= 0 && getpid() == m->pid) {
    lock(m);
    m->l->slots[m->slot].pid = 0;
    unlock(m);
  }
  munmap(m->l, sizeof *m->l);
  m->l = NULL;
  m->slot = -1;
}

int fk_machine_take(struct fk_machine *m, int dev, size_t bytes) {
  struct fk_ledger *l = m->l;
  lock(m);
  uint64_t used = machine_used(l, dev), total = l->total[dev];
  int fits = bytes <= total && used <= total - bytes;
  if (!fits) {
    reclaim(m);
    used = machine_used(l, dev);
    fits = bytes <= total && used <= total - bytes;
  }
  if (fits && used + bytes > l->peak[dev]) {
    /* A real device has freed a dead process's memory already (when its device files closed):
     * a new peak counts the live processes only. */
    reclaim(m);
    used = machine_used(l, dev);
  }
  if (fits) {
    /* The peak first: a process killed between the two stores leaves a peak that is still an
     * upper bound of what was ever held. */
    if (used + bytes > l->peak[dev]) {
      l->peak[dev] = used + bytes;
    }
    l->slots[m->slot].used[dev] += bytes;
  }
  unlock(m);
  return fits ? 0 : -ENOMEM;
}

void fk_machine_give(struct fk_machine *m, int dev, size_t bytes) {
  lock(m);
  uint64_t *u = &m->l->slots[m->slot].used[dev];
  *u -= bytes < *u ? bytes : *u;
  unlock(m);
}

void fk_machine_contexts(struct fk_machine *m, int dev, unsigned n) {
  lock(m);
  m->l->slots[m->slot].contexts[dev] = n;
  unlock(m);
}

static int listed(const struct fk_machine_slot *s, int dev) {
  return s->pid != 0 && (s->used[dev] > 0 || s->contexts[dev] > 0);
}

void fk_machine_usage(struct fk_machine *m, int dev, struct fk_machine_usage *u) {
  struct fk_ledger *l = m->l;
  lock(m);
  reclaim(m);
  u->total = l->total[dev];
  u->used = machine_used(l, dev);
  u->peak = l->peak[dev];
  u->processes = 0;
  for (uint32_t i = 0; i < slots_seen(l); i++) {
    u->processes += (unsigned)listed(&l->slots[i], dev);
  }
  u->reclaimed = l->reclaimed;
  u->recoveries = l->recoveries;
  unlock(m);
}

unsigned fk_machine_processes(struct fk_machine *m, int dev, struct fk_machine_proc *out,
                              unsigned cap) {
  struct fk_ledger *l = m->l;
  unsigned n = 0;
  lock(m);
  reclaim(m);
  for (uint32_t i = 0; i < slots_seen(l); i++) {
    const struct fk_machine_slot *s = &l->slots[i];
    if (listed(s, dev)) {
      if (n < cap) {
        out[n] = (struct fk_machine_proc){
            .pid = s->pid, .used = s->used[dev], .contexts = s->contexts[dev]};
      }
      n++;
    }
  }
  unlock(m);
  return n;
}
