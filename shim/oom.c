/* The out-of-memory verdict and messages (see shim/oom.h). */
#include "shim/oom.h"

#include "core/report.h"
#include "shim/cap.h"
#include "shim/fork.h"
#include "shim/ledger.h"
#include "shim/log.h"
#include "shim/settings.h"
#include "shim/share.h"

#include <stdatomic.h>

_Static_assert(OOM_VERDICTS == REPORT_VERDICTS, "the report names every verdict");
#include <stdio.h>
#include <string.h>

static atomic_uint_fast64_t refusals;
static _Atomic uint64_t counts[GPUCAP_MAX_DEVICES][OOM_VERDICTS];

/* a + b, saturated. */
static uint64_t sum(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

enum oom_verdict oom_judge(const oom_facts_t *f) {
  if (f->spill_max > 0) {
    return OOM_SPILL_FULL; /* the cap was passed already: the spill budget refused */
  }
  uint64_t headroom = f->cap == CAP_NONE ? 0 : f->cap > f->charged ? f->cap - f->charged : 0;
  uint64_t here = sum(f->free_bytes, headroom);
  if (f->in_capture > 0 && sum(here, f->in_capture) >= f->bytes) {
    return OOM_CAPTURE;
  }
  if (f->driver_full || f->cap == CAP_NONE) {
    return OOM_DEVICE_FULL;
  }
  if (here >= f->bytes && f->largest < f->bytes && headroom < f->bytes) {
    return OOM_FRAGMENTED;
  }
  if (f->others_idle > 0 && f->others_idle >= f->bytes - (here < f->bytes ? here : f->bytes)) {
    return OOM_OTHER_POOLS;
  }
  return OOM_CAP_FULL;
}

const char *oom_verdict_name(enum oom_verdict v) {
  return report_verdict_name((int)v);
}

uint64_t oom_rank(void) {
  return atomic_fetch_add_explicit(&refusals, 1, memory_order_relaxed);
}

void oom_tally(int dev, enum oom_verdict v) {
  if (dev >= 0 && dev < GPUCAP_MAX_DEVICES && (unsigned)v < OOM_VERDICTS) {
    atomic_fetch_add_explicit(&counts[dev][v], 1, memory_order_relaxed);
  }
}

static bool quiet(void) {
  return settings_get()->report.kind == CFG_DEST_OFF;
}

bool oom_wants_report(uint64_t rank) {
  return rank == 0 && !quiet();
}

uint64_t oom_refusals(int dev, enum oom_verdict v) {
  return atomic_load_explicit(&counts[dev][v], memory_order_relaxed);
}

/* One line of the ledger under the first refusal's report: the device's libraries. */
static void print_lib(void *arg, const struct ledger_line *l) {
  if (l->dev == *(const int *)arg) {
    char held[REPORT_SIZE_MAX], peak[REPORT_SIZE_MAX];
    report_format_size(l->current, held, sizeof held);
    report_format_size(l->peak, peak, sizeof peak);
    log_msg(LOG_INFO, "held by %s%s: %s (peak %s)", l->name, l->program ? " (program)" : "", held,
            peak);
  }
}

/* The verdict in words, with the one action that would help. */
static void why(const oom_facts_t *f, enum oom_verdict v, char *buf, size_t cap) {
  char a[REPORT_SIZE_MAX], b[REPORT_SIZE_MAX];
  switch (v) {
  case OOM_FRAGMENTED:
    report_format_size(f->free_bytes, a, sizeof a);
    report_format_size(f->largest, b, sizeof b);
    snprintf(buf, cap,
             "fragmentation: %s is free under the cap but the largest free piece is %s; %s", a, b,
             settings_get()->allow_growth
                 ? "preallocate one region (GPUCAP_ALLOW_GROWTH=false), which fragments less"
                 : "allocate the large, long-lived blocks first, or raise the cap by the "
                   "request's size");
    break;
  case OOM_DEVICE_FULL:
    if (f->others_hold > 0) {
      report_format_size(f->others_hold, a, sizeof a);
      snprintf(buf, cap,
               "device %d is full: other processes hold %s (the driver's own memory "
               "included), below the cap; run where the device has room",
               f->dev, a);
    } else {
      snprintf(buf, cap,
               "device full: the driver refused below the cap, so other processes (or memory "
               "outside gpucap) hold the device; run where the device has room");
    }
    break;
  case OOM_CAPTURE:
    report_format_size(f->in_capture, a, sizeof a);
    snprintf(buf, cap,
             "capture: %s freed on device %d could serve this, but the device may still be "
             "using it and gpucap cannot wait for the device while a CUDA graph is being "
             "captured; free that memory before the capture begins, or raise the cap",
             a, f->dev);
    break;
  case OOM_SPILL_FULL: {
    char c[REPORT_SIZE_MAX];
    report_format_size(f->spill_max > f->spilled ? f->spill_max - f->spilled : 0, a, sizeof a);
    report_format_size(f->spill_max, b, sizeof b);
    report_format_size(f->spilled, c, sizeof c);
    snprintf(buf, cap,
             "spill budget full: the request does not fit under the cap, nor in the %s spill "
             "budget of device %d beyond it (%s free, %s spilled); raise the spill budget "
             "(--oversubscribe, GPUCAP_OVERSUBSCRIBE) or the cap, or free memory",
             b, f->dev, a, c);
    break;
  }
  case OOM_OTHER_POOLS:
    report_format_size(f->others_idle, a, sizeof a);
    snprintf(buf, cap,
             "other contexts' pools: %s sits idle in the pools of other contexts on device %d "
             "and could not be returned (blocks still live in their regions); free those blocks "
             "or use one context per device",
             a, f->dev);
    break;
  default:
    if (share_active() && f->cap != CAP_NONE && f->charged <= f->cap &&
        f->bytes <= f->cap - f->charged) {
      snprintf(buf, cap,
               "the shared budget '%s' is full on device %d: its other processes hold the rest "
               "(gpucap top lists them); they give idle pool memory back at their next allocation",
               settings_get()->share, f->dev);
      break;
    }
    report_format_size(f->charged, a, sizeof a);
    report_format_size(f->cap, b, sizeof b);
    snprintf(buf, cap,
             "cap full: %s of the %s cap is held by live allocations; raise the cap (--limit, "
             "GPUCAP_MEMORY_LIMIT) or free memory",
             a, b);
    break;
  }
}

void oom_print(uint64_t rank, const oom_facts_t *f, enum oom_verdict v, const char *report,
               size_t len) {
  if (rank > OOM_SUMMARIES + 1 || quiet()) {
    return;
  }
  char text[512];
  why(f, v, text, sizeof text);
  if (rank == 0) {
    log_msg(LOG_WARN, "device %d: out of memory allocating %llu bytes under the cap%s", f->dev,
            (unsigned long long)f->bytes, v == OOM_SPILL_FULL ? " and the spill budget" : "");
    if (report != NULL) {
      log_write_raw(report, strnlen(report, len));
    }
    ledger_each(print_lib, (void *)&f->dev);
    log_msg(LOG_WARN, "verdict: %s", text);
  } else if (rank <= OOM_SUMMARIES) {
    log_msg(LOG_WARN, "device %d: out of memory allocating %llu bytes: %s", f->dev,
            (unsigned long long)f->bytes, text);
  } else {
    log_msg(LOG_WARN, "further refusals are not printed; the exit report counts them");
  }
}

/* A fork child starts with no refusal of its own. */
static void fork_child(void) {
  atomic_store(&refusals, 0);
  memset(counts, 0, sizeof counts);
}
FORK_CHILD(fork_child)
