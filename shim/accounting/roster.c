/* The roster's entry files (contract and layout in roster.h). This process's entry is made once
 * under `lock` and published with a release store; the figures are then relaxed atomic stores
 * into the shared mapping, so noting a charge costs a few stores and no lock. A fork child
 * forgets its parent's mapping (fork_child) and makes its own at its first charge. Leaving
 * removes the file but keeps the mapping, which a thread may still be writing. Making one
 * removes the entries that dead processes of the user left.
 */
#include "shim/accounting/roster.h"

#include "shim/base/fork.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct roster_entry *_Atomic mine; /* this process's entry, once made */
static atomic_bool failed;                /* making it failed: not tried again */
static char mine_path[128];

void roster_path(unsigned uid, pid_t pid, char *buf, size_t len) {
  (void)snprintf(buf, len, "%s/%s%u.%d", ROSTER_DIR, ROSTER_PREFIX, uid, (int)pid);
}

/* The command line, its arguments joined by spaces, into out (cut to fit). */
static void command_line(char *out, size_t cap) {
  out[0] = '\0';
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return;
  }
  ssize_t n = read(fd, out, cap - 1);
  close(fd);
  n = n < 0 ? 0 : n;
  while (n > 0 && out[n - 1] == '\0') {
    n--;
  }
  for (ssize_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)out[i];
    out[i] = c == '\0' ? ' ' : c < 0x20 || c == 0x7f ? '?' : (char)c;
  }
  out[n] = '\0';
}

/* Removes the entries of this user's processes that are gone (killed, crashed: they could not
 * remove theirs), as whoever looks at a budget reclaims its dead slots. Reads the directory
 * with getdents64 into a stack buffer (no malloc: a pool's lock may be held). */
static void reclaim(void) {
  char prefix[64];
  (void)snprintf(prefix, sizeof prefix, "%s%u.", ROSTER_PREFIX, (unsigned)geteuid());
  size_t plen = strlen(prefix);
  int dir = open(ROSTER_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    return;
  }
  char buf[4096] __attribute__((aligned(8)));
  long n;
  while ((n = syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
    for (long at = 0; at < n;) {
      const struct dirent64 *d = (const struct dirent64 *)(const void *)(buf + at);
      at += d->d_reclen;
      const char *pid = d->d_name + plen;
      if (strncmp(d->d_name, prefix, plen) != 0 || pid[0] == '\0' ||
          strspn(pid, "0123456789") != strlen(pid)) {
        continue;
      }
      char path[sizeof ROSTER_DIR + 256];
      struct roster_entry e;
      (void)snprintf(path, sizeof path, "%s/%s", ROSTER_DIR, d->d_name);
      if (strcmp(path, mine_path) != 0 && roster_read(path, &e) == 0 && e.pidns == budget_pidns() &&
          !roster_live(&e)) {
        unlink(path);
      }
    }
  }
  close(dir);
}

/* Makes this process's entry: written in full into an unnamed file, then linked in place (an
 * entry a dead process of the same pid left, or this process before an exec, is replaced).
 * lock held. */
static struct roster_entry *make(const char *share) {
  struct roster_entry *e = NULL;
  int fd = budget_unnamed(sizeof *e, (void **)&e);
  if (fd < 0) {
    return NULL;
  }
  memcpy(e->magic, ROSTER_MAGIC, sizeof e->magic);
  e->version = ROSTER_VERSION;
  e->size = sizeof *e;
  e->uid = (uint32_t)geteuid();
  e->pid = (int32_t)getpid();
  e->start = budget_start_of(getpid());
  e->pidns = budget_pidns();
  command_line(e->command, sizeof e->command);
  (void)snprintf(e->share, sizeof e->share, "%s", share != NULL ? share : "");
  char self[64];
  roster_path((unsigned)geteuid(), getpid(), mine_path, sizeof mine_path);
  (void)snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  int rc = linkat(AT_FDCWD, self, AT_FDCWD, mine_path, AT_SYMLINK_FOLLOW);
  if (rc != 0 && errno == EEXIST && unlink(mine_path) == 0) {
    rc = linkat(AT_FDCWD, self, AT_FDCWD, mine_path, AT_SYMLINK_FOLLOW);
  }
  close(fd);
  if (rc != 0) {
    munmap(e, sizeof *e);
    return NULL;
  }
  reclaim();
  return e;
}

/* This process's entry, made when there is none; NULL when that fails. */
static struct roster_entry *entry(const char *share) {
  struct roster_entry *e = atomic_load_explicit(&mine, memory_order_acquire);
  if (e != NULL || atomic_load_explicit(&failed, memory_order_relaxed)) {
    return e;
  }
  int saved = errno;
  pthread_mutex_lock(&lock);
  e = atomic_load_explicit(&mine, memory_order_acquire);
  if (e == NULL && !atomic_load_explicit(&failed, memory_order_relaxed)) {
    e = make(share);
    atomic_store_explicit(&failed, e == NULL, memory_order_relaxed);
    atomic_store_explicit(&mine, e, memory_order_release);
  }
  pthread_mutex_unlock(&lock);
  errno = saved;
  return e;
}

void roster_note(int dev, uint64_t cap, uint64_t pool, const char *share) {
  if (dev < 0 || dev >= (int)ROSTER_DEVICES) {
    return;
  }
  struct roster_entry *e = entry(share);
  if (e == NULL) {
    return;
  }
  struct roster_device *d = &e->dev[dev];
  __atomic_store_n(&d->cap, cap, __ATOMIC_RELAXED);
  __atomic_store_n(&d->pool, pool, __ATOMIC_RELAXED);
  uint64_t peak = __atomic_load_n(&d->peak, __ATOMIC_RELAXED);
  while (pool > peak && !__atomic_compare_exchange_n(&d->peak, &peak, pool, true, __ATOMIC_RELAXED,
                                                     __ATOMIC_RELAXED)) {
  }
  if (!(__atomic_load_n(&e->present, __ATOMIC_RELAXED) >> dev & 1)) {
    __atomic_fetch_or(&e->present, UINT64_C(1) << dev, __ATOMIC_RELEASE);
  }
}

void roster_refused(int dev) {
  struct roster_entry *e = atomic_load_explicit(&mine, memory_order_acquire);
  if (e != NULL && dev >= 0 && dev < (int)ROSTER_DEVICES) {
    __atomic_fetch_add(&e->dev[dev].refused, 1, __ATOMIC_RELAXED);
  }
}

void roster_leave(void) {
  struct roster_entry *e = atomic_load_explicit(&mine, memory_order_acquire);
  if (e == NULL || e->pid != (int32_t)getpid()) {
    return; /* none, or a vfork child: the entry and the memory are its parent's */
  }
  int saved = errno;
  /* Another thread may be noting a charge in it right now: the mapping stays (it goes with the
   * process image), only the file goes, and no new one is made. */
  atomic_store_explicit(&failed, true, memory_order_relaxed);
  atomic_store_explicit(&mine, NULL, memory_order_release);
  unlink(mine_path);
  errno = saved;
}

int roster_read(const char *path, struct roster_entry *out) {
  int saved = errno;
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  int rc = -1;
  if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
      st.st_size == (off_t)sizeof *out) {
    const struct roster_entry *e = mmap(NULL, sizeof *e, PROT_READ, MAP_SHARED, fd, 0);
    if (e != MAP_FAILED) {
      memcpy(out, e, offsetof(struct roster_entry, dev));
      for (unsigned d = 0; d < ROSTER_DEVICES; d++) {
        out->dev[d].cap = __atomic_load_n(&e->dev[d].cap, __ATOMIC_RELAXED);
        out->dev[d].pool = __atomic_load_n(&e->dev[d].pool, __ATOMIC_RELAXED);
        out->dev[d].peak = __atomic_load_n(&e->dev[d].peak, __ATOMIC_RELAXED);
        out->dev[d].refused = __atomic_load_n(&e->dev[d].refused, __ATOMIC_RELAXED);
      }
      out->present = __atomic_load_n(&e->present, __ATOMIC_ACQUIRE);
      munmap((void *)e, sizeof *e);
      out->command[sizeof out->command - 1] = '\0';
      out->share[sizeof out->share - 1] = '\0';
      rc = memcmp(out->magic, ROSTER_MAGIC, sizeof out->magic) == 0 &&
                   out->version == ROSTER_VERSION && out->size == sizeof *out &&
                   out->uid == (uint32_t)geteuid()
               ? 0
               : -1;
    }
  }
  if (fd >= 0) {
    close(fd);
  }
  errno = saved;
  return rc;
}

bool roster_live(const struct roster_entry *e) {
  return e->pidns == budget_pidns() && e->pid > 0 && budget_start_of(e->pid) == e->start;
}

/* In a fork child: the entry is the parent's (the mapping is shared): forget it, unmapped. */
static void fork_child(void) {
  pthread_mutex_init(&lock, NULL);
  struct roster_entry *e = atomic_exchange_explicit(&mine, NULL, memory_order_relaxed);
  if (e != NULL) {
    munmap(e, sizeof *e);
  }
  atomic_store_explicit(&failed, false, memory_order_relaxed);
}
FORK_CHILD(fork_child)
