/* What gpucap does at process exit: withdraws its IPC exports, writes out the allocation
 * trace and, only for a process
 * that allocated (or was refused) device memory, the exit report: a table to stderr or a file
 * (GPUCAP_REPORT) and JSON (GPUCAP_REPORT_JSON). Runs from a destructor: no CUDA call, no
 * malloc (static buffers), files created without following symlinks. A forked child that
 * inherited the parent's pools reports nothing. _exit() and SIGKILL skip all of this.
 */
#include "config/cfg.h"
#include "core/report.h"
#include "shim/cap.h"
#include "shim/fork.h"
#include "shim/ipc.h"
#include "shim/log.h"
#include "shim/memory.h"
#include "shim/pool.h"
#include "shim/runinfo.h"
#include "shim/trace.h"

#include <errno.h>
#include <stdbool.h>
#include <unistd.h>

#define MAX_ROWS (2 * POOL_MAX + CAP_MAX_DEVICES) /* live pools, destroyed ones, pass-through */

static report_row_t rows[MAX_ROWS];
static int nrows;
static report_run_t run;
static char text[REPORT_TEXT_MAX(MAX_ROWS)];
static char json[REPORT_JSON_MAX(MAX_ROWS)];
static bool fork_child;

static void add_row(int dev, int index, const bfc_stats_t *stats, int pooled, bool destroyed,
                    uint64_t largest_request) {
  if (nrows < MAX_ROWS) {
    report_row_t *r = &rows[nrows++];
    r->device = dev;
    r->context = index;
    r->pooled = pooled;
    r->destroyed = destroyed;
    r->cap = cap_limit(dev, 0);
    r->largest_request = largest_request;
    r->stats = *stats;
  }
}

static void add_pool(void *arg, const struct pool_report *p) {
  (void)arg;
  add_row(p->dev, p->index, &p->stats, 1, p->destroyed, p->largest_request);
}

static void add_passthrough(void *arg, int dev, const bfc_stats_t *stats) {
  (void)arg;
  add_row(dev, 0, stats, 0, false, 0);
}

static void write_file(const char *setting, const char *path, const char *buf, size_t len) {
  int fd = log_create(setting, path);
  if (fd >= 0) {
    log_write_fd(fd, buf, len);
    close(fd);
  }
}

void exit_fork_child(void) {
  fork_child = true;
}

__attribute__((destructor)) static void exit_report(void) {
  int saved = errno;
  ipc_exit();
  trace_flush();
  pool_settle_at_exit();
  pool_each(add_pool, NULL);
  memory_each_passthrough(add_passthrough, NULL);
  if (nrows == 0 || fork_child) {
    errno = saved;
    return;
  }
  const cfg_t *cfg = cap_settings();
  runinfo_fill(&run, "exit");
  if (cfg->report.kind != CFG_DEST_OFF) {
    size_t n = report_format_text(rows, nrows, &run, text, sizeof text);
    n = n < sizeof text ? n : sizeof text - 1;
    if (cfg->report.kind == CFG_DEST_FILE) {
      write_file("GPUCAP_REPORT", cfg->report.path, text, n);
    } else {
      log_write_raw(text, n);
    }
  }
  if (cfg->report_json[0]) {
    size_t n = report_format_json(rows, nrows, &run, json, sizeof json);
    write_file("GPUCAP_REPORT_JSON", cfg->report_json, json, n < sizeof json ? n : sizeof json - 1);
  }
  errno = saved;
}
