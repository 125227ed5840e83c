/* TAP test of the machine ledger (fk_machine.c) on its own, with real processes: creation (one
 * file, owner-only, race-free among processes opening it at once), the checks on open (settings
 * of another machine, malformed, foreign, a symbolic link), admission at the boundary (processes
 * racing for the last bytes: exactly one wins), a process killed with kill -9 in the middle of
 * allocating and while it holds the ledger's lock (its bytes come back, the survivors go on),
 * pid reuse and zombies (forged slots), the process list per device (what the fake NVML shows:
 * memory or a context; a list longer than the room given), a ledger whose processes are all
 * gone (the next one starts a new run), and processes x threads allocating at random (the sum
 * over processes never above the total, everything back at the end). Linked with fk_machine.o
 * alone; every wait is bounded by alarm() so a wedged lock fails instead of hanging.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/fakecuda/fk_machine.h"
#include "tests/tap.h"

#define MiB ((size_t)1 << 20)
#define TOTAL0 ((size_t)64 << 20)
#define TOTAL1 ((size_t)32 << 20)

static struct fk_config cfg;
static char name[64], path[160];
static char err[512];

/* A lock that never comes back ends the test here, as a failure, instead of hanging it. */
static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "not ok - timed out: a process is stuck (a wedged ledger lock?)\n";
  (void)!write(1, msg, sizeof msg - 1);
  _exit(1);
}

static void config(struct fk_config *c, int ndev) {
  memset(c, 0, sizeof *c);
  c->ndev = ndev;
  c->cc_major = 9;
  c->mem[0] = TOTAL0;
  c->mem[1] = TOTAL1;
}

/* A child's whole life: f(arg) with the ledger opened and joined; its exit status is f's. */
static pid_t spawn(int (*f)(struct fk_machine *, void *), void *arg) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(60);
    struct fk_machine m;
    if (fk_machine_open(name, &cfg, &m, err, sizeof err) != 0 || fk_machine_join(&m) != 0) {
      _exit(100);
    }
    _exit(f(&m, arg));
  }
  return pid;
}

static int status_of(pid_t pid) {
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static uint64_t used(struct fk_machine *m, int dev) {
  struct fk_machine_usage u;
  fk_machine_usage(m, dev, &u);
  return u.used;
}

static void wait_byte(int fd) {
  char c;
  while (read(fd, &c, 1) < 0 && errno == EINTR) {
  }
}

static void put_byte(int fd) {
  char c = 1;
  (void)!write(fd, &c, 1);
}

/* ---- Creation and the checks on open. ---- */

static void creation(void) {
  struct fk_machine m, m2;
  TAP_EQ(fk_machine_open(name, &cfg, &m, err, sizeof err), 0, "open creates the ledger (%s)", err);
  struct stat st;
  tap_ok(stat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0600 &&
             st.st_uid == geteuid() && (size_t)st.st_size == sizeof(struct fk_ledger),
         "%s: a regular file, mode 0600, ours, %zu bytes", path, sizeof(struct fk_ledger));
  tap_ok(m.l->ndev == 2 && m.l->total[0] == TOTAL0 && m.l->total[1] == TOTAL1 &&
             m.l->version == FK_MACHINE_VERSION && m.l->hi == 0,
         "its header: 2 devices of 64 and 32 MiB, version %u, no slot used", FK_MACHINE_VERSION);
  TAP_EQ(fk_machine_open(name, &cfg, &m2, err, sizeof err), 0, "a second open attaches");
  tap_ok(m2.l != m.l, "... through its own mapping");
  TAP_EQ(fk_machine_join(&m), 0, "join");
  TAP_EQ(fk_machine_take(&m, 0, 3 * MiB), 0, "take 3 MiB of device 0");
  TAP_EQ(used(&m2, 0), 3 * MiB, "the other mapping sees them");
  TAP_EQ(used(&m2, 1), 0, "... and nothing on device 1");
  uint64_t reclaimed = m.l->reclaimed;
  TAP_EQ(fk_machine_join(&m2), 0, "the same process joins again (as after an exec)");
  tap_ok(m.l->reclaimed == reclaimed + 1 && used(&m2, 0) == 0,
         "... its slot from before is reclaimed, the 3 MiB with it");
  fk_machine_close(&m);
  fk_machine_close(&m2);
  tap_ok(m.l == NULL && m2.l == NULL, "close unmaps");
}

/* Writes a file at the path of machine `bad` after fn edits a valid ledger image. */
static void forge(const char *bad, void (*fn)(struct fk_ledger *, int fd)) {
  char p[160];
  fk_machine_path(bad, p, sizeof p);
  unlink(p);
  struct fk_ledger *l = calloc(1, sizeof *l);
  memcpy(l->magic, FK_MACHINE_MAGIC, sizeof l->magic);
  l->version = FK_MACHINE_VERSION;
  l->size = sizeof *l;
  l->uid = (uint32_t)geteuid();
  l->nslots = FK_MACHINE_SLOTS;
  l->ndev = 2;
  l->cc_major = 9;
  l->total[0] = TOTAL0;
  l->total[1] = TOTAL1;
  int fd = open(p, O_RDWR | O_CREAT | O_EXCL, 0600);
  fchmod(fd, 0600);
  fn(l, fd);
  if (fd >= 0 && lseek(fd, 0, SEEK_END) == 0) {
    (void)!write(fd, l, sizeof *l);
  }
  if (fd >= 0) {
    close(fd);
  }
  free(l);
}

static void f_good(struct fk_ledger *l, int fd) {
  (void)l;
  (void)fd;
}
static void f_short(struct fk_ledger *l, int fd) {
  (void)!write(fd, l, 100);
}
static void f_magic(struct fk_ledger *l, int fd) {
  (void)fd;
  memcpy(l->magic, "HAMIshr", 8);
}
static void f_version(struct fk_ledger *l, int fd) {
  (void)fd;
  l->version = FK_MACHINE_VERSION + 1;
}
static void f_slots(struct fk_ledger *l, int fd) {
  (void)fd;
  l->hi = FK_MACHINE_SLOTS + 5;
}
static void f_uid(struct fk_ledger *l, int fd) {
  (void)fd;
  l->uid = (uint32_t)geteuid() + 1;
}
static void f_mode(struct fk_ledger *l, int fd) {
  (void)l;
  fchmod(fd, 0644);
}
static void f_owner(struct fk_ledger *l, int fd) {
  (void)l;
  (void)!fchown(fd, 65534, 65534);
}

/* Opening machine `bad` fails with want (and a reason naming the path and `why`). */
static void refused(const char *bad, int want, const char *why, const char *what) {
  struct fk_machine m;
  err[0] = '\0';
  int rc = fk_machine_open(bad, &cfg, &m, err, sizeof err);
  char p[160];
  fk_machine_path(bad, p, sizeof p);
  tap_ok(rc == want && m.l == NULL && strstr(err, p) != NULL && strstr(err, why) != NULL,
         "%s: refused (%d)", what, rc);
  tap_diag("  %s", err);
  unlink(p);
}

static void checks(void) {
  char bad[80], p[160];
  struct fk_config other;
  config(&other, 1);
  struct fk_machine m;
  TAP_EQ(fk_machine_open(name, &other, &m, err, sizeof err), -EPROTO,
         "another FAKECUDA_DEVICES: refused");
  tap_ok(strstr(err, "FAKECUDA_DEVICES=2, this process has 1") != NULL, "... saying so: %s", err);
  config(&other, 2);
  other.mem[1] = 2 * TOTAL1;
  TAP_EQ(fk_machine_open(name, &other, &m, err, sizeof err), -EPROTO,
         "another FAKECUDA_MEMORY: refused");
  tap_ok(strstr(err, "device 1 has 33554432 bytes there") != NULL, "... saying so: %s", err);
  config(&other, 2);
  other.cc_minor = 1;
  TAP_EQ(fk_machine_open(name, &other, &m, err, sizeof err), -EPROTO,
         "another FAKECUDA_CC: refused");

  snprintf(bad, sizeof bad, "%s-good", name);
  forge(bad, f_good);
  TAP_EQ(fk_machine_open(bad, &cfg, &m, err, sizeof err), 0,
         "a well-formed ledger written by hand opens (the forgeries below differ in one thing)");
  fk_machine_close(&m);
  fk_machine_path(bad, p, sizeof p);
  unlink(p);
  static const struct {
    const char *suffix;
    void (*fn)(struct fk_ledger *, int fd);
    const char *why, *what;
  } forgeries[] = {
      {"short", f_short, "100 bytes", "a 100-byte file"},
      {"magic", f_magic, "bad magic", "another magic"},
      {"version", f_version, "ledger version 2", "another version"},
      {"slots", f_slots, "malformed header", "more slots used than there are"},
      {"uid", f_uid, "made by uid", "a header naming another user"},
      {"mode", f_mode, "mode 0644", "mode 0644"},
  };
  for (size_t i = 0; i < sizeof forgeries / sizeof forgeries[0]; i++) {
    snprintf(bad, sizeof bad, "%s-%s", name, forgeries[i].suffix);
    forge(bad, forgeries[i].fn);
    refused(bad, -EPROTO, forgeries[i].why, forgeries[i].what);
  }
  if (geteuid() == 0) {
    snprintf(bad, sizeof bad, "%s-owner", name);
    forge(bad, f_owner);
    refused(bad, -EPROTO, "owned by uid 65534", "a file owned by another user");
  } else {
    tap_skip("a file owned by another user", "needs root to give a file away");
  }
  snprintf(bad, sizeof bad, "%s-link", name);
  fk_machine_path(bad, p, sizeof p);
  unlink(p);
  (void)!symlink(path, p);
  refused(bad, -EPROTO, "symbolic link", "a symbolic link (to a good ledger)");
  snprintf(bad, sizeof bad, "%s-dir", name);
  fk_machine_path(bad, p, sizeof p);
  mkdir(p, 0700);
  refused(bad, -EPROTO, "not a regular file", "a directory");
  rmdir(p);
}

/* Processes opening a machine that does not exist yet, all at once: one file, every process in
 * it with a slot of its own. */
static int racer(struct fk_machine *m, void *arg) {
  int fd = *(int *)arg;
  struct stat st;
  stat(path, &st);
  unsigned long long rec[2] = {(unsigned long long)st.st_ino, (unsigned long long)m->slot};
  (void)!write(fd, rec, sizeof rec);
  pause(); /* stays alive until killed: the slots stay occupied */
  return 0;
}

static void creation_race(void) {
  enum { N = 8 };
  unlink(path);
  int go[2], res[2];
  (void)!pipe(go);
  (void)!pipe(res);
  pid_t kids[N];
  for (int i = 0; i < N; i++) {
    fflush(stdout);
    kids[i] = fork();
    if (kids[i] == 0) {
      alarm(60);
      close(go[1]);
      wait_byte(go[0]); /* every child starts together */
      struct fk_machine m;
      if (fk_machine_open(name, &cfg, &m, err, sizeof err) != 0 || fk_machine_join(&m) != 0) {
        _exit(1);
      }
      _exit(racer(&m, &res[1]));
    }
  }
  close(go[0]);
  close(go[1]); /* EOF: go */
  unsigned long long ino = 0, slots = 0;
  int same = 1;
  for (int i = 0; i < N; i++) {
    unsigned long long rec[2] = {0, 0};
    if (read(res[0], rec, sizeof rec) != (ssize_t)sizeof rec) {
      same = 0;
      break;
    }
    same &= i == 0 || rec[0] == ino;
    ino = rec[0];
    slots |= 1ull << rec[1];
  }
  tap_ok(same && ino != 0, "%d processes creating the machine at once: all in one file", N);
  TAP_EQ(__builtin_popcountll(slots), N, "... each in a slot of its own");
  for (int i = 0; i < N; i++) {
    kill(kids[i], SIGKILL);
    status_of(kids[i]);
  }
  close(res[0]);
  close(res[1]);
}

/* ---- The boundary: processes racing for the last bytes. ---- */

struct race {
  int go, res, done;
  size_t bytes;
};

static int contender(struct fk_machine *m, void *arg) {
  struct race *r = arg;
  wait_byte(r->go);
  char won = fk_machine_take(m, 1, r->bytes) == 0;
  (void)!write(r->res, &won, 1);
  wait_byte(r->done); /* holds what it won until the parent has counted */
  return 0;
}

static void boundary(void) {
  enum { N = 6, ROUNDS = 20 };
  struct fk_machine m;
  fk_machine_open(name, &cfg, &m, err, sizeof err);
  fk_machine_join(&m);
  size_t last = 3 * MiB + 512;
  TAP_EQ(fk_machine_take(&m, 1, TOTAL1 - last), 0, "the parent holds all but the last bytes");
  int exact = 0;
  for (int round = 0; round < ROUNDS; round++) {
    int go[2], res[2], done[2];
    (void)!pipe(go);
    (void)!pipe(res);
    (void)!pipe(done);
    struct race r = {go[0], res[1], done[0], last};
    pid_t kids[N];
    for (int i = 0; i < N; i++) {
      kids[i] = spawn(contender, &r);
    }
    for (int i = 0; i < N; i++) {
      put_byte(go[1]); /* all go at once */
    }
    int wins = 0;
    for (int i = 0; i < N; i++) {
      char won = 0;
      (void)!read(res[0], &won, 1);
      wins += won;
    }
    uint64_t full = used(&m, 1);
    for (int i = 0; i < N; i++) {
      put_byte(done[1]);
    }
    for (int i = 0; i < N; i++) {
      status_of(kids[i]);
    }
    exact += wins == 1 && full == TOTAL1 && used(&m, 1) == TOTAL1 - last;
    close(go[0]);
    close(go[1]);
    close(res[0]);
    close(res[1]);
    close(done[0]);
    close(done[1]);
  }
  TAP_EQ(exact, ROUNDS,
         "%d rounds of %d processes racing for the last %zu bytes: exactly one wins each time, "
         "the device is then full, and the winner's bytes come back when it exits",
         ROUNDS, N, last);
  TAP_EQ(fk_machine_take(&m, 1, last + 512), -ENOMEM, "512 bytes more than is free: refused");
  TAP_EQ(fk_machine_take(&m, 1, last), 0, "exactly what is free: admitted");
  struct fk_machine_usage u;
  fk_machine_usage(&m, 1, &u);
  tap_ok(u.used == TOTAL1 && u.peak == TOTAL1, "device 1 full: used = peak = total");
  fk_machine_give(&m, 1, TOTAL1);
  TAP_EQ(used(&m, 1), 0, "all given back");
  fk_machine_close(&m);
}

/* ---- kill -9. ---- */

struct victim {
  int ready;
  int hold_lock; /* 1: half-way through an update, inside the lock */
};

static int victim(struct fk_machine *m, void *arg) {
  struct victim *v = arg;
  fk_machine_take(m, 0, 5 * MiB);
  if (v->hold_lock) {
    pthread_mutex_lock(&m->l->lock);
    m->l->slots[m->slot].used[0] += 7 * MiB; /* an update the lock was protecting */
    put_byte(v->ready);
    pause();
  }
  put_byte(v->ready);
  for (unsigned i = 0; i != ~0u; i++) { /* allocating and freeing until killed */
    size_t b = (size_t)(i % 13 + 1) * 512 * 1024;
    if (fk_machine_take(m, 0, b) == 0) {
      fk_machine_give(m, 0, b / 2);
    }
  }
  return 0;
}

static void killed(void) {
  struct fk_machine m;
  fk_machine_open(name, &cfg, &m, err, sizeof err);
  fk_machine_join(&m);
  TAP_EQ(fk_machine_take(&m, 0, 2 * MiB), 0, "the survivor holds 2 MiB");
  for (int hold = 0; hold < 2; hold++) {
    int ready[2];
    (void)!pipe(ready);
    struct victim v = {ready[1], hold};
    uint64_t recoveries = m.l->recoveries;
    pid_t kid = spawn(victim, &v);
    wait_byte(ready[0]);
    if (!hold) {
      usleep(20000); /* let it allocate for a while */
    }
    kill(kid, SIGKILL);
    status_of(kid);
    alarm(20); /* a wedged lock ends the test here instead of hanging */
    int took = fk_machine_take(&m, 0, TOTAL0 - 2 * MiB);
    alarm(0);
    TAP_EQ(took, 0,
           "kill -9 of a process %s: the survivor goes on and can take all the rest (its bytes "
           "came back)",
           hold ? "holding the ledger's lock half-way through an update" : "allocating");
    if (hold) {
      TAP_EQ(m.l->recoveries, recoveries + 1, "... the lock was recovered from the dead holder");
    } else {
      tap_ok(m.l->recoveries <= recoveries + 1, "... killed %s the lock",
             m.l->recoveries > recoveries ? "inside" : "outside");
    }
    fk_machine_give(&m, 0, TOTAL0 - 2 * MiB);
    TAP_EQ(used(&m, 0), 2 * MiB, "... the machine holds the survivor's 2 MiB");
    close(ready[0]);
    close(ready[1]);
  }
  fk_machine_give(&m, 0, 2 * MiB);
  fk_machine_close(&m);
}

/* ---- Forged slots: a reused pid, a zombie. ---- */

static int sleeper(struct fk_machine *m, void *arg) {
  (void)m;
  put_byte(*(int *)arg); /* joined: a slot forged for this pid from now on is not "its own from
                            before an exec", which its join would reclaim */
  pause();
  return 0;
}

static int exiter(struct fk_machine *m, void *arg) {
  (void)arg;
  fk_machine_take(m, 0, 9 * MiB);
  return 0; /* exits holding 9 MiB */
}

/* Field 22 of /proc/PID/stat (its start time), counted from the last ')'; 0 when unreadable. */
static unsigned long long proc_start(pid_t pid) {
  char st[64], buf[1024] = "";
  snprintf(st, sizeof st, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(st, "r");
  if (f != NULL) {
    (void)!fgets(buf, sizeof buf, f);
    fclose(f);
  }
  char *p = strrchr(buf, ')');
  for (int field = 3; p != NULL && field <= 22; field++) {
    p = strchr(p + 1, ' ');
    if (field == 22 && p != NULL) {
      return strtoull(p + 1, NULL, 10);
    }
  }
  return 0;
}

/* Occupies a free slot of m's ledger for pid with start time start, holding bytes on device 0. */
static void forge_slot(struct fk_machine *m, pid_t pid, uint64_t start, uint64_t bytes) {
  struct fk_ledger *l = m->l;
  pthread_mutex_lock(&l->lock);
  uint32_t i = l->hi++;
  memset(&l->slots[i], 0, sizeof l->slots[i]);
  l->slots[i].start = start;
  l->slots[i].used[0] = bytes;
  l->slots[i].pid = pid;
  pthread_mutex_unlock(&l->lock);
}

static void forged(void) {
  struct fk_machine m;
  fk_machine_open(name, &cfg, &m, err, sizeof err);
  fk_machine_join(&m);
  int ready[2];
  (void)!pipe(ready);
  pid_t kid = spawn(sleeper, &ready[1]);
  wait_byte(ready[0]);
  close(ready[0]);
  close(ready[1]);
  unsigned long long start = proc_start(kid);
  tap_ok(start > 0, "the sleeper (pid %d) started at tick %llu", (int)kid, start);
  forge_slot(&m, kid, start, 4 * MiB);
  TAP_EQ(used(&m, 0), 4 * MiB, "a slot with a live pid and its start time counts");
  forge_slot(&m, kid, start + 1, 8 * MiB);
  TAP_EQ(used(&m, 0), 4 * MiB,
         "a slot with the same live pid but another start time (the pid reused) is reclaimed");
  forge_slot(&m, getpid(), m.start - 1, 8 * MiB);
  TAP_EQ(used(&m, 0), 4 * MiB, "... also when that pid is the looking process's own");
  kill(kid, SIGKILL);
  status_of(kid);
  TAP_EQ(used(&m, 0), 0, "the sleeper killed: its slot is reclaimed");
  forge_slot(&m, 0x3ffffff0, 1, 8 * MiB);
  TAP_EQ(used(&m, 0), 0, "a slot of a pid that does not exist is reclaimed");

  pid_t z = spawn(exiter, NULL);
  siginfo_t si;
  waitid(P_PID, (id_t)z, &si, WEXITED | WNOWAIT); /* exited, not reaped: a zombie */
  TAP_EQ(used(&m, 0), 0, "a zombie's slot is reclaimed (the driver freed its memory at exit)");
  status_of(z);
  fk_machine_close(&m);
}

/* ---- The process list (what the fake NVML shows). ---- */

static int holder(struct fk_machine *m, void *arg) {
  const int *ready = arg;
  if (ready[1] != 0) {
    fk_machine_take(m, 0, 5 * MiB); /* the other holds nothing: joined, never listed */
  }
  put_byte(ready[0]);
  pause();
  return 0;
}

static void listing(void) {
  struct fk_machine m;
  fk_machine_open(name, &cfg, &m, err, sizeof err);
  fk_machine_join(&m);
  fk_machine_take(&m, 1, 3 * MiB);
  fk_machine_contexts(&m, 0, 1); /* a context on device 0, no memory there */
  int fds[2];
  (void)!pipe(fds);
  int with[2] = {fds[1], 1}, without[2] = {fds[1], 0};
  pid_t kid = spawn(holder, with), idle_kid = spawn(holder, without);
  wait_byte(fds[0]);
  wait_byte(fds[0]);
  struct fk_machine_proc list[4];
  memset(list, 0, sizeof list);
  unsigned n = fk_machine_processes(&m, 0, list, 4);
  tap_ok(n == 2 && list[0].pid == getpid() && list[0].used == 0 && list[0].contexts == 1 &&
             list[1].pid == kid && list[1].used == 5 * MiB && list[1].contexts == 0,
         "device 0 lists this process (a context, no memory) and the child (5 MiB), not the "
         "child that holds nothing");
  n = fk_machine_processes(&m, 1, list, 4);
  tap_ok(n == 1 && list[0].pid == getpid() && list[0].used == 3 * MiB,
         "device 1 lists this process only, with its 3 MiB");
  struct fk_machine_usage u;
  fk_machine_usage(&m, 0, &u);
  TAP_EQ(u.processes, 2, "the usage counts the same two processes on device 0");
  memset(list, 0x5a, sizeof list);
  n = fk_machine_processes(&m, 0, list, 1);
  tap_ok(n == 2 && list[0].pid == getpid() && list[1].pid == 0x5a5a5a5a,
         "room for one: the count is still 2, one entry written");
  kill(kid, SIGKILL);
  status_of(kid);
  n = fk_machine_processes(&m, 0, list, 4);
  tap_ok(n == 1 && list[0].pid == getpid(), "the child killed: it leaves the list");
  kill(idle_kid, SIGKILL);
  status_of(idle_kid);
  close(fds[0]);
  close(fds[1]);
  fk_machine_close(&m);
}

/* A ledger whose processes all died: the next process to join starts a new run. */
static void new_run(void) {
  struct fk_machine m;
  fk_machine_open(name, &cfg, &m, err, sizeof err);
  status_of(spawn(exiter, NULL)); /* dies holding 9 MiB: its slot stays until someone looks */
  unsigned occupied = 0;
  for (uint32_t i = 0; i < m.l->hi; i++) {
    occupied += m.l->slots[i].pid != 0;
  }
  tap_ok(m.l->peak[0] >= 9 * MiB && occupied > 0,
         "a run whose last process died holding 9 MiB left its slot and a peak of %llu",
         (unsigned long long)m.l->peak[0]);
  TAP_EQ(fk_machine_join(&m), 0, "a process of a new run joins");
  tap_ok(m.l->peak[0] == 0 && m.l->peak[1] == 0 && m.l->reclaimed == 0 && m.l->recoveries == 0 &&
             used(&m, 0) == 0,
         "... the old run's memory, peaks and counters are gone");
  fk_machine_close(&m);
}

/* ---- Processes x threads at random. ---- */

enum { PROCS = 4, THREADS = 4, OPS = 1500 };

struct worker {
  struct fk_machine *m;
  pthread_mutex_t *lock; /* the caller serialises its threads, as fk.lock does */
  unsigned seed;
  int bad;
};

static void *thread_main(void *arg) {
  struct worker *w = arg;
  size_t held[2] = {0, 0};
  for (int i = 0; i < OPS; i++) {
    int dev = (int)(rand_r(&w->seed) % 2);
    size_t total = dev ? TOTAL1 : TOTAL0;
    pthread_mutex_lock(w->lock);
    if (rand_r(&w->seed) % 3 != 0 || held[dev] == 0) {
      size_t b = (size_t)(rand_r(&w->seed) % 4096 + 1) * 512;
      if (fk_machine_take(w->m, dev, b) == 0) {
        held[dev] += b;
        struct fk_machine_usage u;
        fk_machine_usage(w->m, dev, &u);
        w->bad += u.used > total || u.peak > total;
      }
    } else {
      size_t b = held[dev] / 2 + 512 > held[dev] ? held[dev] : held[dev] / 2 + 512;
      fk_machine_give(w->m, dev, b);
      held[dev] -= b;
    }
    pthread_mutex_unlock(w->lock);
  }
  pthread_mutex_lock(w->lock);
  fk_machine_give(w->m, 0, held[0]);
  fk_machine_give(w->m, 1, held[1]);
  pthread_mutex_unlock(w->lock);
  return NULL;
}

static int stress_proc(struct fk_machine *m, void *arg) {
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  struct worker w[THREADS];
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (struct worker){m, &lock, (unsigned)(uintptr_t)arg * 131u + (unsigned)i, 0};
    pthread_create(&t[i], NULL, thread_main, &w[i]);
  }
  int bad = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    bad += w[i].bad;
  }
  return bad > 0;
}

static void stress(void) {
  struct fk_machine m;
  fk_machine_open(name, &cfg, &m, err, sizeof err);
  fk_machine_join(&m);
  pid_t kids[PROCS];
  for (int i = 0; i < PROCS; i++) {
    kids[i] = spawn(stress_proc, (void *)(uintptr_t)(i + 1));
  }
  int clean = 0;
  for (int i = 0; i < PROCS; i++) {
    clean += status_of(kids[i]) == 0;
  }
  TAP_EQ(clean, PROCS,
         "%d processes x %d threads, %d random takes and gives each: after every take the "
         "machine's use and peak are within the total",
         PROCS, THREADS, OPS);
  struct fk_machine_usage u0, u1;
  fk_machine_usage(&m, 0, &u0);
  fk_machine_usage(&m, 1, &u1);
  tap_ok(u0.used == 0 && u1.used == 0, "everything given back: used %llu and %llu",
         (unsigned long long)u0.used, (unsigned long long)u1.used);
  tap_ok(u0.peak <= TOTAL0 && u1.peak <= TOTAL1 && u0.peak > TOTAL0 / 2 && u1.peak > TOTAL1 / 2,
         "the peaks of the sums (%llu, %llu) came near the totals and stayed within them",
         (unsigned long long)u0.peak, (unsigned long long)u1.peak);
  fk_machine_close(&m);
}

int main(void) {
  signal(SIGALRM, on_alarm);
  snprintf(name, sizeof name, "test-machine-%d", (int)getpid());
  fk_machine_path(name, path, sizeof path);
  config(&cfg, 2);
  unlink(path);
  creation();
  checks();
  creation_race();
  boundary();
  killed();
  forged();
  listing();
  new_run();
  unlink(path);
  strcat(name, "-stress"); /* a fresh machine: its peaks start at 0 */
  fk_machine_path(name, path, sizeof path);
  unlink(path);
  stress();
  unlink(path);
  return tap_done();
}
