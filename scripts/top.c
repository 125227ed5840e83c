/* gpucap top: the processes of this user running with gpucap on this machine (their roster
 * entries, shim/accounting/roster.h) and its shared budgets (their budget files,
 * shim/accounting/budget.h), read from those files and nothing else (no CUDA): per process and
 * device its cap, pool, peak and refusals; per budget and device the cap, what its processes hold
 * (the whole: their allocations, their pools' idle part and the driver's own memory for them), the
 * peak and the refusals, then each process. Like top(1) it refreshes until `q` (or an interrupt);
 * with stdout not a terminal it prints a snapshot per interval, and --once prints one. --json
 * writes the snapshot as one JSON document (the schema is docs/report.md's "gpucap top --json").
 * Looking is also reclaiming: the slots of dead processes are freed, as any process of the budget
 * would.
 * --clean removes what no live process owns: the entries of processes that ended without
 * removing theirs (SIGKILL, a crash) and the budgets none of whose processes runs.
 */
#include "scripts/top.h"

#include "config/cfg.h"
#include "core/report.h"
#include "scripts/cli.h"
#include "shim/accounting/budget.h"
#include "shim/accounting/roster.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#define BUDGETS_MAX 256
#define PROCS_MAX 1024

/* One budget as read, under its lock. */
struct snap {
  char name[BUDGET_NAME_MAX];
  struct budget b;
};

static const char usage_text[] =
    "Usage: gpucap top [--once] [--json] [--interval SECONDS] [-n COUNT] [--budget NAME]\n"
    "       gpucap top --clean [--budget NAME]\n"
    "\n"
    "Shows the processes of this user running with gpucap on this machine, shared budget or\n"
    "not: per process and device its cap, its pool (what gpucap holds from the driver for it),\n"
    "the pool's peak and the allocations refused; then the shared budgets (gpucap run\n"
    "--share): per budget and device the cap, what its processes hold (in use, idle in their\n"
    "pools, the driver's own memory for them, and the whole), the peak and the allocations\n"
    "refused, then each process. Reads gpucap's files in /dev/shm only (no CUDA).\n"
    "\n"
    "  --once             print one snapshot and exit\n"
    "  --json             the snapshot as JSON (schema: docs/report.md)\n"
    "  --interval SECONDS between refreshes (default 1)\n"
    "  -n COUNT           stop after COUNT snapshots\n"
    "  --budget NAME      only this budget (and its processes)\n"
    "  --clean            remove what no live process owns: the entries of processes that\n"
    "                     ended without removing theirs (killed, crashed), and the budgets none\n"
    "                     of whose processes runs (with --budget, that budget's only); print\n"
    "                     each, and exit\n"
    "\n"
    "Interactive (a terminal): q quits. Exit status 0, or 2 on a usage error.\n";

/* One process's entry, as read. */
struct proc {
  struct roster_entry e;
};

static int by_pid(const void *a, const void *b) {
  const struct proc *x = a, *y = b;
  return (x->e.pid > y->e.pid) - (x->e.pid < y->e.pid);
}

/* The roster entries' file names of this user, one at a time: calls fn with each path and pid
 * string. */
static void each_entry(void (*fn)(void *arg, const char *path), void *arg) {
  char prefix[64];
  (void)snprintf(prefix, sizeof prefix, "%s%u.", ROSTER_PREFIX, (unsigned)geteuid());
  size_t plen = strlen(prefix);
  DIR *d = opendir(ROSTER_DIR);
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    const char *pid = e->d_name + plen;
    if (strncmp(e->d_name, prefix, plen) == 0 && pid[0] != '\0' &&
        strspn(pid, "0123456789") == strlen(pid)) {
      char path[512];
      (void)snprintf(path, sizeof path, "%s/%s", ROSTER_DIR, e->d_name);
      fn(arg, path);
    }
  }
  if (d) {
    closedir(d);
  }
}

struct proc_list {
  struct proc *p;
  int n, max;
  const char *only; /* a budget's name, or NULL */
};

static void add_proc(void *arg, const char *path) {
  struct proc_list *l = arg;
  struct roster_entry e;
  if (l->n < l->max && roster_read(path, &e) == 0 && roster_live(&e) &&
      (l->only == NULL || strcmp(l->only, e.share) == 0)) {
    l->p[l->n++].e = e;
  }
}

/* The live processes (of budget `only` when not NULL), sorted by pid; returns how many. */
static int read_procs(const char *only, struct proc *out, int max) {
  struct proc_list l = {out, 0, max, only};
  each_entry(add_proc, &l);
  qsort(out, (size_t)l.n, sizeof *out, by_pid);
  return l.n;
}

/* Reads budget `name` into *s; false (with a warning) when its budget file cannot be used. */
static bool read_budget(const char *name, struct snap *s) {
  struct budget *l;
  char err[512];
  int rc = budget_open(name, false, "", &l, err, sizeof err);
  if (rc != 0) {
    if (rc != -ENOENT) {
      cli_warn("%s", err);
    }
    return false;
  }
  if (budget_lock(l) != 0) {
    cli_warn("budget '%s': its file's lock is unrecoverable", name);
    budget_close(l);
    return false;
  }
  (void)budget_reclaim(l, 0, 0);
  memcpy(&s->b, l, sizeof s->b);
  budget_unlock(l);
  budget_close(l);
  (void)snprintf(s->name, sizeof s->name, "%s", name);
  return true;
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const struct snap *)a)->name, ((const struct snap *)b)->name);
}

/* Every budget of this user (or only `only`), sorted by name; returns how many. */
static int read_all(const char *only, struct snap *out, int max) {
  char prefix[64];
  (void)snprintf(prefix, sizeof prefix, "%s%u.", BUDGET_PREFIX, (unsigned)geteuid());
  size_t plen = strlen(prefix);
  int n = 0;
  DIR *d = opendir(BUDGET_DIR);
  struct dirent *e;
  while (d && n < max && (e = readdir(d)) != NULL) {
    const char *name = e->d_name + plen;
    char valid[CFG_NAME_MAX], why[CFG_WHY_MAX];
    if (strncmp(e->d_name, prefix, plen) == 0 && (!only || strcmp(only, name) == 0) &&
        cfg_parse_name(name, valid, why, sizeof why) == 0 && strcmp(valid, name) == 0 &&
        read_budget(name, &out[n])) {
      n++;
    }
  }
  if (d) {
    closedir(d);
  }
  qsort(out, (size_t)n, sizeof *out, by_name);
  return n;
}

/* Whether slot p is listed under device d: live, and it used the device. */
static bool listed(const struct budget_slot *p, unsigned d) {
  return p->pid != 0 && (p->used[d] || (p->present >> d & 1));
}

/* Slot p's idle bytes on d (never more than it holds: the two are published apart). */
static uint64_t idle_of(const struct budget_slot *p, unsigned d) {
  return p->idle[d] < p->used[d] ? p->idle[d] : p->used[d];
}

/* Slot p's driver memory on d (never more than it holds beside its idle part). */
static uint64_t driver_of(const struct budget_slot *p, unsigned d) {
  uint64_t rest = p->used[d] - idle_of(p, d);
  return p->driver[d] < rest ? p->driver[d] : rest;
}

/* Device d's figures, the sums over its listed processes; false when the entry is unused. */
struct devsum {
  uint64_t used, idle, driver, refused;
};
static bool dev_sum(const struct budget *b, unsigned d, struct devsum *out) {
  *out = (struct devsum){0, 0, 0, b->dev[d].refused};
  for (unsigned i = 0; i < BUDGET_SLOTS; i++) {
    if (listed(&b->slot[i], d)) {
      out->used += b->slot[i].used[d];
      out->idle += idle_of(&b->slot[i], d);
      out->driver += driver_of(&b->slot[i], d);
    }
  }
  return b->dev[d].uuid[0] != '\0';
}

/* Writes the text of a fixed-size field as a JSON string (the budget file is another process's
 * memory: anything but printable ASCII is escaped, and it stops at the field's end). */
static void jstr(FILE *f, const char *v, size_t max) {
  putc('"', f);
  for (size_t i = 0; i < max && v[i]; i++) {
    unsigned char c = (unsigned char)v[i];
    if (c == '"' || c == '\\') {
      fprintf(f, "\\%c", c);
    } else if (c < 0x20 || c >= 0x7f) {
      fprintf(f, "\\u%04x", c);
    } else {
      putc(c, f);
    }
  }
  putc('"', f);
}

static void json_procs(FILE *f, const struct proc *p, int np) {
  fprintf(f, "\"processes\": [");
  for (int k = 0; k < np; k++) {
    const struct roster_entry *e = &p[k].e;
    fprintf(f, "%s\n  {\"pid\": %d, \"command\": ", k ? "," : "", (int)e->pid);
    jstr(f, e->command, sizeof e->command);
    fprintf(f, ", \"share\": ");
    jstr(f, e->share, sizeof e->share);
    fprintf(f, ", \"devices\": [");
    bool first = true;
    for (unsigned d = 0; d < ROSTER_DEVICES; d++) {
      const struct roster_device *v = &e->dev[d];
      if (e->present >> d & 1) {
        fprintf(f, "%s{\"device\": %u, \"cap\": ", first ? "" : ", ", d);
        if (v->cap == ROSTER_NO_CAP) {
          fprintf(f, "null");
        } else {
          fprintf(f, "%" PRIu64, v->cap);
        }
        fprintf(f, ", \"pool\": %" PRIu64 ", \"peak\": %" PRIu64 ", \"refused\": %" PRIu64 "}",
                v->pool, v->peak, v->refused);
        first = false;
      }
    }
    fprintf(f, "]}");
  }
  fprintf(f, "%s], ", np ? "\n" : "");
}

static void json(FILE *f, const struct proc *procs, int np, const struct snap *s, int n) {
  fprintf(f, "{\"version\": 2, ");
  json_procs(f, procs, np);
  fprintf(f, "\"budgets\": [");
  for (int k = 0; k < n; k++) {
    const struct budget *b = &s[k].b;
    fprintf(f, "%s\n  {\"name\": ", k ? "," : "");
    jstr(f, s[k].name, sizeof s[k].name);
    fprintf(f, ", \"settings\": ");
    jstr(f, b->settings, sizeof b->settings);
    fprintf(f, ", \"reclaimed\": %" PRIu64 ", \"recoveries\": %" PRIu64 ", \"devices\": [",
            b->reclaimed, b->recoveries);
    bool first = true;
    struct devsum t;
    for (unsigned d = 0; d < BUDGET_DEVICES; d++) {
      if (!dev_sum(b, d, &t)) {
        continue;
      }
      fprintf(f, "%s\n    {\"uuid\": ", first ? "" : ",");
      jstr(f, b->dev[d].uuid, sizeof b->dev[d].uuid);
      fprintf(f,
              ", \"cap\": %" PRIu64 ", \"min\": %" PRIu64 ", \"used\": %" PRIu64
              ", \"idle\": %" PRIu64 ", \"driver\": %" PRIu64 ", \"peak\": %" PRIu64
              ", \"refused\": %" PRIu64 ", \"processes\": [",
              b->dev[d].cap, b->dev[d].min, t.used, t.idle, t.driver, b->dev[d].peak, t.refused);
      first = false;
      bool pfirst = true;
      for (unsigned i = 0; i < BUDGET_SLOTS; i++) {
        const struct budget_slot *p = &b->slot[i];
        if (listed(p, d)) {
          fprintf(f,
                  "%s\n      {\"pid\": %d, \"used\": %" PRIu64 ", \"idle\": %" PRIu64
                  ", \"driver\": %" PRIu64 ", \"refused\": %" PRIu64 "}",
                  pfirst ? "" : ",", (int)p->pid, p->used[d], idle_of(p, d), driver_of(p, d),
                  p->refused[d]);
          pfirst = false;
        }
      }
      fprintf(f, "%s]}", pfirst ? "" : "\n    ");
    }
    fprintf(f, "%s]}", first ? "" : "\n  ");
  }
  fprintf(f, "%s]}\n", n ? "\n" : "");
}

/* bytes in the reports' one size format ("1.5 GiB"). */
static const char *human(uint64_t bytes, char *buf, size_t len) {
  report_format_size(bytes, buf, len);
  return buf;
}

/* The processes' table: a row per process and device it used. */
static void proc_table(FILE *f, const struct proc *p, int np) {
  char a[32], b[32], c[32];
  fprintf(f, "%8s %-28s %6s %10s %10s %10s %6s  %s\n", "PID", "COMMAND", "DEVICE", "CAP", "POOL",
          "PEAK", "OOMS", "BUDGET");
  if (np == 0) {
    fprintf(f, "(no process of this user runs with gpucap on this machine)\n");
  }
  for (int k = 0; k < np; k++) {
    const struct roster_entry *e = &p[k].e;
    bool any = false;
    for (unsigned d = 0; d < ROSTER_DEVICES; d++) {
      const struct roster_device *v = &e->dev[d];
      if (!(e->present >> d & 1)) {
        continue;
      }
      fprintf(f, "%8d %-28.28s %6u %10s %10s %10s %6" PRIu64 "  %s\n", (int)e->pid,
              any ? "" : e->command, d,
              v->cap == ROSTER_NO_CAP ? "none" : human(v->cap, a, sizeof a),
              human(v->pool, b, sizeof b), human(v->peak, c, sizeof c), v->refused,
              e->share[0] ? e->share : "-");
      any = true;
    }
  }
}

static void table(FILE *f, const struct snap *s, int n) {
  char a[32], b2[32], c[32], p[32], dr[32], w[32];
  fprintf(f, "%-20s %-14s %8s %10s %10s %10s %10s %10s %10s %8s\n", "BUDGET", "DEVICE", "PID",
          "IN USE", "POOL IDLE", "DRIVER", "WHOLE", "CAP", "PEAK", "OOMS");
  if (n == 0) {
    fprintf(f, "(no shared budget of this user on this machine)\n");
  }
  for (int k = 0; k < n; k++) {
    const struct budget *b = &s[k].b;
    struct devsum t;
    for (unsigned d = 0; d < BUDGET_DEVICES; d++) {
      if (!dev_sum(b, d, &t)) {
        continue;
      }
      fprintf(f, "%-20s %-14.14s %8s %10s %10s %10s %10s %10s %10s %8" PRIu64 "\n", s[k].name,
              b->dev[d].uuid, "all", human(t.used - t.idle - t.driver, a, sizeof a),
              human(t.idle, b2, sizeof b2), human(t.driver, dr, sizeof dr),
              human(t.used, w, sizeof w), human(b->dev[d].cap, c, sizeof c),
              human(b->dev[d].peak, p, sizeof p), t.refused);
      for (unsigned i = 0; i < BUDGET_SLOTS; i++) {
        const struct budget_slot *x = &b->slot[i];
        if (listed(x, d)) {
          uint64_t xi = idle_of(x, d), xd = driver_of(x, d);
          fprintf(f, "%-20s %-14s %8d %10s %10s %10s %10s %10s %10s %8" PRIu64 "\n", "", "",
                  (int)x->pid, human(x->used[d] - xi - xd, a, sizeof a), human(xi, b2, sizeof b2),
                  human(xd, dr, sizeof dr), human(x->used[d], w, sizeof w), "", "", x->refused[d]);
        }
      }
    }
  }
}

/* Waits up to ms for a key on a terminal stdin; true iff it was q (or stdin ended). */
static bool quit_key(int ms) {
  struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
  if (poll(&p, 1, ms) <= 0) {
    return false;
  }
  char c = 0;
  ssize_t r = read(STDIN_FILENO, &c, 1);
  return r <= 0 || c == 'q' || c == 'Q';
}

struct cleaning {
  const char *only; /* a budget's name, or NULL */
  int removed;
};

static void clean_entry(void *arg, const char *path) {
  struct cleaning *c = arg;
  struct roster_entry e;
  if (roster_read(path, &e) == 0 && e.pidns == budget_pidns() && !roster_live(&e) &&
      (c->only == NULL || strcmp(c->only, e.share) == 0)) {
    if (unlink(path) == 0) {
      printf("removed %s: process %d (%s) is gone\n", path, (int)e.pid, e.command);
      c->removed++;
    } else if (errno != ENOENT) {
      cli_warn("top: cannot remove %s: %s", path, strerror(errno));
    }
  }
}

/* Removes budget `name`'s budget file when none of its processes runs: under its lock, marked
 * removed first, so a process that mapped it meanwhile opens the budget afresh
 * (shim/accounting/share.c). Returns 1 when removed. */
static int clean_budget(const char *name) {
  struct budget *l;
  char err[512], path[256];
  if (budget_open(name, false, "", &l, err, sizeof err) != 0) {
    return 0; /* gone meanwhile, or not a budget file of this version: left alone */
  }
  int removed = 0;
  if (budget_lock(l) == 0) {
    if (l->pidns == budget_pidns() && budget_reclaim(l, 0, 0) == 0) {
      budget_path(name, (unsigned)geteuid(), path, sizeof path);
      l->removed = 1;
      if (unlink(path) == 0) {
        printf("removed %s: budget '%s' has no live process\n", path, name);
        removed = 1;
      }
    }
    budget_unlock(l);
  }
  budget_close(l);
  return removed;
}

/* gpucap top --clean [--budget NAME]: everything of this user, or that budget's. */
static int clean(const char *only) {
  struct cleaning c = {only, 0};
  each_entry(clean_entry, &c);
  static struct snap snaps[BUDGETS_MAX];
  int n = read_all(only, snaps, BUDGETS_MAX);
  for (int k = 0; k < n; k++) {
    c.removed += clean_budget(snaps[k].name);
  }
  if (c.removed == 0) {
    printf("nothing to remove: every entry and budget belongs to a live process\n");
  }
  return CLI_OK;
}

int top_main(int argc, char **argv) {
  bool once = false, as_json = false, cleaning = false;
  const char *only = NULL, *interval_s = NULL, *count_s = NULL;
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (cli_is_help(argv[i])) {
      fputs(usage_text, stdout);
      return CLI_OK;
    } else if (strcmp(argv[i], "--version") == 0) {
      cli_print_version();
      return CLI_OK;
    } else if (strcmp(argv[i], "--once") == 0) {
      once = true;
    } else if (strcmp(argv[i], "--json") == 0) {
      as_json = true;
    } else if (strcmp(argv[i], "--clean") == 0) {
      cleaning = true;
    } else if (cli_opt_value(argc, argv, &i, "--interval", NULL, &v)) {
      if (!v) {
        return CLI_USAGE;
      }
      interval_s = v;
    } else if (cli_opt_value(argc, argv, &i, "--count", "-n", &v)) {
      if (!v) {
        return CLI_USAGE;
      }
      count_s = v;
    } else if (cli_opt_value(argc, argv, &i, "--budget", NULL, &v)) {
      if (!v) {
        return CLI_USAGE;
      }
      only = v;
    } else {
      cli_error("top: unknown argument '%s' (gpucap top --help)", argv[i]);
      return CLI_USAGE;
    }
  }
  char *end = NULL;
  double interval = interval_s ? strtod(interval_s, &end) : 1.0;
  if (interval_s && (end == interval_s || *end || !(interval >= 0.01 && interval <= 3600))) {
    cli_error("top: --interval '%s': a number of seconds from 0.01 to 3600", interval_s);
    return CLI_USAGE;
  }
  long count = count_s ? strtol(count_s, &end, 10) : -1;
  if (count_s && (end == count_s || *end || count < 1)) {
    cli_error("top: -n '%s': a count of at least 1", count_s);
    return CLI_USAGE;
  }
  char why[CFG_WHY_MAX], name[CFG_NAME_MAX];
  if (only && cfg_parse_name(only, name, why, sizeof why) != 0) {
    cli_error("top: --budget '%s': %s", only, why);
    return CLI_USAGE;
  }
  if (cleaning) {
    if (once || as_json || interval_s || count_s) {
      cli_error("top: --clean takes no other option but --budget (gpucap top --help)");
      return CLI_USAGE;
    }
    return clean(only ? name : NULL);
  }
  if (once) {
    count = 1;
  }
  static struct snap snaps[BUDGETS_MAX];
  static struct proc procs[PROCS_MAX];
  bool live = isatty(STDOUT_FILENO) && count != 1;
  bool keys = live && isatty(STDIN_FILENO);
  struct termios saved, raw;
  if (keys && tcgetattr(STDIN_FILENO, &saved) == 0) {
    raw = saved;
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    tcsetattr(STDIN_FILENO, TCSANOW, &raw);
  } else {
    keys = false;
  }
  for (long k = 0; count < 0 || k < count; k++) {
    int n = read_all(only ? name : NULL, snaps, BUDGETS_MAX);
    int np = read_procs(only ? name : NULL, procs, PROCS_MAX);
    if (live) {
      fputs("\033[H\033[2J", stdout);
      printf("gpucap top: %d process%s, %d budget%s, every %gs (q quits)\n\n", np,
             np == 1 ? "" : "es", n, n == 1 ? "" : "s", interval);
    } else if (k > 0 && !as_json) {
      putchar('\n');
    }
    if (as_json) {
      json(stdout, procs, np, snaps, n);
    } else {
      if (!only) { /* with --budget, its table lists its processes */
        proc_table(stdout, procs, np);
        putchar('\n');
      }
      table(stdout, snaps, n);
    }
    fflush(stdout);
    if (count >= 0 && k + 1 >= count) {
      break;
    }
    if (keys ? quit_key((int)(interval * 1000)) : (usleep((useconds_t)(interval * 1e6)), false)) {
      break;
    }
  }
  if (keys) {
    tcsetattr(STDIN_FILENO, TCSANOW, &saved);
  }
  return CLI_OK;
}
