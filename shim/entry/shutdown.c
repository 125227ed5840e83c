/* What gpucap does when the process ends (see shim/entry/shutdown.h): withdraws its IPC exports,
 * writes out the allocation trace and, only for a process that allocated (or was refused) device
 * memory, the exit report: a table to stderr or a file (GPUCAP_REPORT) and JSON
 * (GPUCAP_REPORT_JSON), with notes saying what could not be included. It runs once, from a
 * destructor at a normal exit or from gpucap's handler of SIGTERM or SIGINT (shim/base/signals.c),
 * after which the signal terminates the process as it would have. No CUDA call, no malloc
 * (static buffers), no lock that it waits for longer than EXIT_WAIT_MS. _exit() and SIGKILL
 * skip all of this.
 */
#include "shim/entry/shutdown.h"

#include "core/report.h"
#include "shim/accounting/cap.h"
#include "shim/context/ctx.h"
#include "shim/base/exit.h"
#include "shim/base/fork.h"
#include "shim/entry/ipc.h"
#include "shim/accounting/ledger.h"
#include "shim/base/log.h"
#include "shim/accounting/oom.h"
#include "shim/accounting/overhead.h"
#include "shim/pool/passthru.h"
#include "shim/accounting/roster.h"
#include "shim/accounting/runinfo.h"
#include "shim/base/settings.h"
#include "shim/base/signals.h"
#include "shim/accounting/spill.h"
#include "shim/accounting/trace.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Live pools, destroyed ones, pass-through. */
#define MAX_ROWS (2 * CTX_MAX + GPUCAP_MAX_DEVICES)

static report_row_t rows[MAX_ROWS];
static int nrows;
static char text[REPORT_TEXT_MAX(MAX_ROWS)];
static char json[REPORT_JSON_MAX(MAX_ROWS)];

enum { RUNNING, ENDING, ENDED };
static atomic_int phase;
static atomic_int pending_signal; /* a terminating signal that arrived while ENDING */

static void add_row(int dev, int index, int arena, const bfc_stats_t *stats, int pooled,
                    bool destroyed, uint64_t largest_request) {
  if (nrows < MAX_ROWS) {
    report_row_t *r = &rows[nrows++];
    memset(r, 0, sizeof *r);
    r->device = dev;
    r->context = index;
    r->arena = arena;
    r->pooled = pooled;
    r->destroyed = destroyed;
    r->cap = cap_limit(dev);
    r->largest_request = largest_request;
    r->stats = *stats;
  }
}

static void add_pool(void *arg, const struct ctx_report *p) {
  (void)arg;
  int before = nrows;
  add_row(p->dev, p->index, p->arena, &p->stats, 1, p->destroyed, p->largest_request);
  if (p->backing.vmm && nrows > before) {
    report_row_t *r = &rows[nrows - 1];
    r->vmm = 1;
    r->address_space_bytes = p->backing.mapped.space_bytes;
    r->mapped_bytes_total = p->backing.mapped.mapped_total;
    r->released_bytes_total = p->backing.mapped.released_total;
    r->driver_map_calls = p->backing.map_calls;
    r->driver_unmap_calls = p->backing.unmap_calls;
  }
}

static void busy_pool(void *arg, int dev, int index) {
  (void)arg;
  char held[REPORT_SIZE_MAX];
  if (dev < 0) {
    exit_note("the pools of contexts destroyed before exit are left out: their list was in use "
              "when the process ended");
    return;
  }
  report_format_size(cap_used(dev), held, sizeof held);
  exit_note("device %d context %d: left out, its pool was in use when the process ended (device "
            "%d had %s charged then)",
            dev, index, dev, held);
}

/* The row of device dev's pass-through path, in the pool's columns: every block is its own
 * driver allocation, so pool bytes = bytes in use = bytes charged. */
static void add_passthrough(int dev) {
  passthru_counts_t c;
  passthru_counts(dev, &c);
  if (c.allocs == 0 && c.ooms == 0) {
    return;
  }
  bfc_stats_t s = {0};
  s.num_allocs = c.allocs;
  s.bytes_in_use = s.bytes_requested_in_use = c.in_use;
  s.peak_bytes_in_use = s.peak_bytes_requested_in_use = c.peak;
  s.largest_alloc_size = c.largest;
  s.driver_alloc_calls = c.allocs;
  s.driver_free_calls = c.frees;
  s.num_ooms = c.ooms;
  s.num_in_use = c.allocs - c.frees;
  s.bytes_limit = cap_limit(dev) == CAP_NONE ? 0 : cap_limit(dev);
  add_row(dev, 0, 0, &s, 0, false, 0);
}

static void add_lib(void *arg, const struct ledger_line *l) {
  report_run_t *run = arg;
  if (run->nlibs < REPORT_LIBS_MAX) {
    report_lib_t *x = &run->libs[run->nlibs++];
    x->device = l->dev;
    x->program = l->program;
    snprintf(x->name, sizeof x->name, "%s", l->name);
    x->current = l->current;
    x->peak = l->peak;
  }
}

/* The per-library ledger, the driver's use, the right size and the refusals of each device
 * that held memory or was refused. */
static void add_usage(report_run_t *run) {
  run->nlibs = 0;
  run->nusage = 0;
  ledger_each(add_lib, run);
  for (int dev = 0; dev < GPUCAP_MAX_DEVICES; dev++) {
    report_usage_t u = {.device = dev};
    uint64_t refused = 0;
    for (int v = 0; v < OOM_VERDICTS; v++) {
      u.refusals[v] = oom_refusals(dev, (enum oom_verdict)v);
      refused += u.refusals[v];
    }
    ledger_total(dev, &u.current, &u.peak);
    if (u.peak == 0 && refused == 0) {
      continue;
    }
    spill_counts_t sc;
    spill_counts(dev, &sc);
    u.spill_budget = sc.budget;
    u.spilled = sc.now;
    u.peak_spilled = sc.peak;
    u.spilled_allocs = sc.allocs;
    struct overhead_figures of;
    struct cap_peak at;
    overhead_figures(dev, &of);
    cap_peak(dev, &at);
    bool measured = of.method != OVERHEAD_UNMEASURED;
    u.driver = measured ? overhead_bytes(dev) : REPORT_UNKNOWN;
    u.driver_peak = measured ? of.peak : REPORT_UNKNOWN;
    for (int c = 0; c < OVERHEAD_CAUSES && c < REPORT_CAUSES; c++) {
      u.driver_cause_peak[c] = of.cause_peak[c];
    }
    u.measured_by = of.method == OVERHEAD_NVML ? 1 : of.method == OVERHEAD_DELTAS ? 2 : 0;
    u.covers_process = cap_covers_process();
    u.whole_peak = at.whole;
    /* The program's allocations then: its peak held, at most the charges (the block being
     * allocated as the peak was charged counts as allocated, not as slack). */
    u.at_peak_allocations = u.peak < at.charged ? u.peak : at.charged;
    u.at_peak_slack = at.charged - u.at_peak_allocations;
    u.at_peak_driver = at.overhead;
    /* What the pools reserved at their peaks: a cap at least that large never binds, so the
     * run goes the same way; the peak held alone is a lower bound (growth leaves slack). Under
     * a cap that covers the process, the whole at its peak, the driver's memory included.
     * Spilled blocks are counted in both (the pass-through row and the ledger hold them whole),
     * so this is also a cap under which nothing would have spilled. */
    uint64_t reserved = 0;
    for (int i = 0; i < nrows; i++) {
      if (rows[i].device == dev) {
        reserved +=
            rows[i].pooled ? rows[i].stats.peak_pool_bytes : rows[i].stats.peak_bytes_in_use;
      }
    }
    uint64_t need = reserved > u.peak ? reserved : u.peak;
    if (u.covers_process && at.whole > need) {
      need = at.whole;
    }
    u.right_size = refused > 0 ? REPORT_UNKNOWN : report_right_size(need, 0);
    run->usage[run->nusage++] = u;
  }
}

/* Writes a whole report file, or leaves it empty after one warning: never a cut one. */
static void write_file(const char *setting, const char *path, const char *buf, size_t len) {
  char full[PATH_MAX];
  int fd = log_create(setting, path, full, sizeof full);
  if (fd < 0) {
    return;
  }
  int err = log_write_fd(fd, buf, len, NULL);
  if (err != 0) {
    (void)ftruncate(fd, 0); /* fails harmlessly on a pipe or a device */
  }
  if (close(fd) != 0 && err == 0) {
    err = errno; /* a delayed write error (NFS, a full quota) */
  }
  if (err != 0) {
    log_msg(LOG_WARN, "%s: cannot write '%s': %s; the report is not in that file", setting, full,
            strerror(err));
  }
}

static void report(const char *ended_by) {
  const cfg_t *cfg = settings_get();
  bool written = false;
  report_run_t *run = exit_run();
  runinfo_fill(run, ended_by);
  add_usage(run);
  if (cfg->report.kind != CFG_DEST_OFF) {
    size_t n = report_format_text(rows, nrows, run, text, sizeof text);
    n = n < sizeof text ? n : sizeof text - 1;
    if (cfg->report.kind == CFG_DEST_FILE) {
      write_file("GPUCAP_REPORT", cfg->report.path, text, n);
    } else {
      log_write_raw(text, n);
    }
    written = true;
  }
  if (cfg->report_json[0]) {
    size_t n = report_format_json(rows, nrows, run, json, sizeof json);
    write_file("GPUCAP_REPORT_JSON", cfg->report_json, json, n < sizeof json ? n : sizeof json - 1);
    written = true;
  }
  for (int i = 0; !written && i < run->nnotes; i++) {
    log_msg(LOG_WARN, "at exit: %s", run->notes[i]); /* no report to hold them */
  }
}

/* The exit path, once per process: returns RUNNING after running it (ended_by is "exit" or the
 * signal's name), else the phase another caller had already moved it to. */
static int finish(const char *ended_by) {
  int expected = RUNNING;
  if (!atomic_compare_exchange_strong(&phase, &expected, ENDING)) {
    return expected;
  }
  int saved = errno;
  exit_begin();
  ipc_exit(strcmp(ended_by, "exit") == 0); /* a signal's exit path waits for nothing */
  trace_exit();
  ctx_each(add_pool, busy_pool, NULL);
  for (int dev = 0; dev < GPUCAP_MAX_DEVICES; dev++) {
    add_passthrough(dev);
  }
  if (nrows > 0 || exit_run()->nnotes > 0) {
    report(ended_by);
  }
  roster_leave();
  atomic_store(&phase, ENDED);
  errno = saved;
  int sig = atomic_exchange(&pending_signal, 0);
  if (sig != 0) {
    signals_die(sig); /* a terminating signal came meanwhile: it ends the process now */
  }
  return RUNNING;
}

bool shutdown_by_signal(int sig, const char *name) {
  if (finish(name) != ENDING) {
    return true; /* written now, or long done */
  }
  /* Another thread is on the exit path: leave the signal to it. Whichever of the two takes the
   * pending signal back (with an exchange) raises it, so it is raised exactly once. */
  atomic_store(&pending_signal, sig);
  return atomic_load(&phase) == ENDED && atomic_exchange(&pending_signal, 0) != 0;
}

/* In a fork child: the exit path starts over, with no row and no note of the parent's. */
static void fork_child(void) {
  nrows = 0;
  atomic_store(&phase, RUNNING);
  atomic_store(&pending_signal, 0);
}
FORK_CHILD(fork_child)

void shutdown_before_exec(void) {
  exit_begin();
  roster_leave(); /* the new program makes its own entry */
  if (!trace_flush()) {
    log_msg(LOG_WARN, "GPUCAP_TRACE: its last events were not written before exec: the trace "
                      "was in use");
  }
}

/* Signals reach the exit path through shim/base/signals.c, which knows nothing above it. */
__attribute__((constructor)) static void finish_init(void) {
  signals_on_end(shutdown_by_signal);
}

__attribute__((destructor)) static void exit_report(void) {
  finish("exit");
}
