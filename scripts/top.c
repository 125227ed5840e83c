/* gpucap top: the shared budgets of this user on this machine, read from their ledgers
 * (shim/budget.h) and nothing else (no CUDA): per budget and device the cap, what its processes
 * hold (the whole: their allocations, their pools' idle part and the driver's own memory for
 * them), the peak and the refusals, then each process. Like top(1) it
 * refreshes until `q` (or an interrupt); with stdout not a terminal it prints a snapshot per
 * interval, and --once prints one. --json writes the snapshot as one JSON document (the schema
 * is docs/report.md's "gpucap top --json"). Looking is also reclaiming: the slots of dead
 * processes are freed, as any process of the budget would.
 */
#include "scripts/top.h"

#include "config/cfg.h"
#include "scripts/cli.h"
#include "shim/budget.h"

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

/* One budget as read, under its lock. */
struct snap {
  char name[BUDGET_NAME_MAX];
  struct budget b;
};

static const char usage_text[] =
    "Usage: gpucap top [--once] [--json] [--interval SECONDS] [-n COUNT] [--budget NAME]\n"
    "\n"
    "Shows the shared budgets (gpucap run --share) of this user on this machine: per budget and\n"
    "device the cap, what its processes hold (in use, idle in their pools, the driver's own\n"
    "memory for them, and the whole), the peak and the allocations refused, then each process.\n"
    "Reads the budgets' ledgers only (no CUDA).\n"
    "\n"
    "  --once             print one snapshot and exit\n"
    "  --json             the snapshot as JSON (schema: docs/report.md)\n"
    "  --interval SECONDS between refreshes (default 1)\n"
    "  -n COUNT           stop after COUNT snapshots\n"
    "  --budget NAME      only this budget\n"
    "\n"
    "Interactive (a terminal): q quits. Exit status 0, or 2 on a usage error.\n";

/* Reads budget `name` into *s; false (with a warning) when its ledger cannot be used. */
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
    cli_warn("budget '%s': its ledger's lock is unrecoverable", name);
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

/* Writes the text of a fixed-size field as a JSON string (the ledger is another process's
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

static void json(FILE *f, const struct snap *s, int n) {
  fprintf(f, "{\"version\": 2, \"budgets\": [");
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

/* bytes in a short human form (binary units, 3 significant digits). */
static const char *human(uint64_t bytes, char *buf, size_t len) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    u++;
  }
  (void)snprintf(buf, len,
                 u == 0    ? "%.0f%s"
                 : v < 10  ? "%.2f%s"
                 : v < 100 ? "%.1f%s"
                           : "%.0f%s",
                 v, units[u]);
  return buf;
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

int top_main(int argc, char **argv) {
  bool once = false, as_json = false;
  const char *only = NULL, *interval_s = NULL, *count_s = NULL;
  for (int i = 1; i < argc; i++) {
    const char *v;
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(usage_text, stdout);
      return CLI_OK;
    } else if (strcmp(argv[i], "--once") == 0) {
      once = true;
    } else if (strcmp(argv[i], "--json") == 0) {
      as_json = true;
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
  if (once) {
    count = 1;
  }
  static struct snap snaps[BUDGETS_MAX];
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
    if (live) {
      fputs("\033[H\033[2J", stdout);
      printf("gpucap top: %d budget%s, every %gs (q quits)\n\n", n, n == 1 ? "" : "s", interval);
    } else if (k > 0 && !as_json) {
      putchar('\n');
    }
    if (as_json) {
      json(stdout, snaps, n);
    } else {
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
