/* The out-of-memory verdict and messages (see shim/accounting/oom.h). The first refusal's report is
 * built in a stack buffer and written with one write(2), so that another thread's lines cannot fall
 * inside it; its figures carry the exit report's names (cap, pool, in use, largest free). */
#include "shim/accounting/oom.h"

#include "core/report.h"
#include "core/strbuf.h"
#include "shim/accounting/cap.h"
#include "shim/base/fork.h"
#include "shim/accounting/ledger.h"
#include "shim/base/log.h"
#include "shim/accounting/roster.h"
#include "shim/base/settings.h"
#include "shim/accounting/share.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

_Static_assert(OOM_VERDICTS == REPORT_VERDICTS, "the report names every verdict");

static atomic_uint_fast64_t refusals;
static _Atomic uint64_t counts[GPUCAP_MAX_DEVICES][OOM_VERDICTS];

/* a + b, saturated. */
static uint64_t sum(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* What the cap left unclaimed: the cap less the charges and the driver's memory it counts. */
static uint64_t unclaimed(const oom_facts_t *f) {
  uint64_t held = sum(f->charged, f->driver);
  return f->cap != CAP_NONE && f->cap > held ? f->cap - held : 0;
}

enum oom_verdict oom_judge(const oom_facts_t *f) {
  if (f->spill_max > 0) {
    return OOM_SPILL_FULL; /* the cap was passed already: the spill budget refused */
  }
  uint64_t headroom = unclaimed(f);
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
    roster_refused(dev);
  }
}

static bool quiet(void) {
  return settings_get()->report.kind == CFG_DEST_OFF;
}

bool oom_wants_report(uint64_t rank) {
  cfg_dest_kind_t kind = settings_get()->oom_dump.kind;
  return rank == 0 && (kind == CFG_DEST_FILE || (kind == CFG_DEST_STDERR && !quiet()));
}

uint64_t oom_refusals(int dev, enum oom_verdict v) {
  return atomic_load_explicit(&counts[dev][v], memory_order_relaxed);
}

/* The libraries with the most in use on one device, for the first refusal's report. */
#define TOP_LIBS 3
struct top_libs {
  int dev;
  int n, others;       /* lines kept; further libraries holding bytes */
  uint64_t others_use; /* ... and what they hold */
  struct {
    const char *name;
    bool program;
    uint64_t bytes;
  } lib[TOP_LIBS];
};

static void pick_lib(void *arg, const struct ledger_line *l) {
  struct top_libs *t = arg;
  if (l->dev != t->dev || l->current == 0) {
    return;
  }
  int at = t->n < TOP_LIBS ? t->n : TOP_LIBS - 1;
  if (t->n == TOP_LIBS && l->current <= t->lib[at].bytes) {
    t->others++;
    t->others_use += l->current;
    return;
  }
  if (t->n == TOP_LIBS) { /* the smallest kept one makes room */
    t->others++;
    t->others_use += t->lib[at].bytes;
  } else {
    t->n++;
  }
  while (at > 0 && t->lib[at - 1].bytes < l->current) {
    t->lib[at] = t->lib[at - 1];
    at--;
  }
  t->lib[at].name = l->name;
  t->lib[at].program = l->program;
  t->lib[at].bytes = l->current;
}

/* "  label      " : every line of the block starts with its label in one column. */
static void label(strbuf_t *o, const char *name) {
  strbuf_printf(o, "  %-11s", name);
}

/* Whether the device was filled by this process itself (a device_full refusal): what it holds
 * is more than what the others (other processes, the driver's own memory) were seen to hold. */
static bool filled_here(const oom_facts_t *f) {
  return f->charged > 0 && f->charged >= f->others_hold;
}

/* Whether a cap_full refusal is the shared budget's: this process's own cap had room. */
static bool budget_full(const oom_facts_t *f) {
  return share_active() && f->cap != CAP_NONE && f->charged <= f->cap &&
         f->bytes <= f->cap - f->charged;
}

/* Whether the request alone is more than the cap. */
static bool over_cap(const oom_facts_t *f) {
  return f->cap != CAP_NONE && f->bytes > f->cap;
}

/* "cap 2.0 GiB, pool 1.5 GiB, driver 401.0 MiB, in use 1.5 GiB": the device's figures, in the
 * exit report's names (the driver's memory where the cap counts it). */
static void put_holdings(strbuf_t *o, const oom_facts_t *f, uint64_t in_use) {
  if (f->cap == CAP_NONE) {
    strbuf_str(o, "cap none");
  } else {
    strbuf_str(o, "cap ");
    strbuf_size(o, f->cap);
  }
  strbuf_str(o, ", pool ");
  strbuf_size(o, f->charged);
  if (f->driver > 0 && f->cap != CAP_NONE) {
    strbuf_str(o, ", driver ");
    strbuf_size(o, f->driver);
  }
  strbuf_str(o, ", in use ");
  strbuf_size(o, in_use);
}

/* The verdict's line: its name and what it means here, then its evidence. */
static void put_verdict(strbuf_t *o, const oom_facts_t *f, enum oom_verdict v, uint64_t in_use) {
  static const char *const meaning[OOM_VERDICTS] = {
      [OOM_CAP_FULL] = "the cap is full of live allocations",
      [OOM_FRAGMENTED] = "enough is free under the cap, but in pieces smaller than the request",
      [OOM_OTHER_POOLS] = "other contexts' pools hold idle memory they could not give back",
      [OOM_CAPTURE] = "only memory freed during a graph capture could serve; the device may use it",
      [OOM_SPILL_FULL] = "the request fits neither under the cap nor in the spill budget beyond it",
  };
  uint64_t headroom = unclaimed(f);
  label(o, "verdict");
  strbuf_printf(o, "%s: ", oom_verdict_name(v));
  if (v == OOM_CAP_FULL && budget_full(f)) {
    strbuf_printf(o, "the shared budget '%s' is full on device %d\n", settings_get()->share,
                  f->dev);
    label(o, "evidence");
    strbuf_str(o, "this process's pool ");
    strbuf_size(o, f->charged);
    strbuf_str(o, " of its cap ");
    strbuf_size(o, f->cap);
    strbuf_str(o, "; the budget's other processes hold the rest\n");
    return;
  }
  if (v == OOM_DEVICE_FULL) {
    strbuf_printf(o, "device %d itself is full", f->dev);
  } else {
    strbuf_str(o, v == OOM_CAP_FULL && over_cap(f) ? "the request is larger than the cap itself"
                                                   : meaning[v]);
  }
  strbuf_str(o, v == OOM_DEVICE_FULL && filled_here(f) ? ", and this process filled it\n" : "\n");
  label(o, "evidence");
  if (v == OOM_SPILL_FULL) {
    strbuf_str(o, "spill budget ");
    strbuf_size(o, f->spill_max);
    strbuf_str(o, ", spilled ");
    strbuf_size(o, f->spilled);
    strbuf_str(o, ", free in it ");
    strbuf_size(o, f->spill_max > f->spilled ? f->spill_max - f->spilled : 0);
    strbuf_char(o, '\n');
    return;
  }
  if (v == OOM_CAPTURE) {
    strbuf_size(o, f->in_capture);
    strbuf_str(o, " freed during the capture; gpucap cannot wait for the device until it ends\n");
    return;
  }
  if (v == OOM_OTHER_POOLS) {
    strbuf_size(o, f->others_idle);
    strbuf_printf(o, " idle in other contexts' pools on device %d (blocks still live in them)\n",
                  f->dev);
    return;
  }
  put_holdings(o, f, in_use);
  if (v == OOM_DEVICE_FULL && f->others_hold > 0) {
    strbuf_str(o, "; other processes and the driver hold ");
    strbuf_size(o, f->others_hold);
  } else if (v == OOM_DEVICE_FULL) {
    strbuf_str(o, "; no other process was seen holding it");
  } else {
    strbuf_str(o, "; free under cap ");
    strbuf_size(o, f->free_bytes + headroom);
  }
  if (v == OOM_FRAGMENTED) {
    strbuf_str(o, ", largest free ");
    strbuf_size(o, f->largest);
  }
  strbuf_char(o, '\n');
}

/* The one action that helps. */
static const char *helps(const oom_facts_t *f, enum oom_verdict v) {
  switch (v) {
  case OOM_FRAGMENTED:
    return settings_get()->allow_growth
               ? "preallocate one region (GPUCAP_ALLOW_GROWTH=false), which fragments less"
               : "allocate the large, long-lived blocks first, or raise the cap by the request's "
                 "size";
  case OOM_DEVICE_FULL:
    return filled_here(f) ? "the program needs more than the device has: make it use less, or use "
                            "a larger device"
                          : "run where the device has room (the other processes hold it)";
  case OOM_OTHER_POOLS:
    return "free those blocks, or use one context per device";
  case OOM_CAPTURE:
    return "free that memory before the capture begins, or raise the cap";
  case OOM_SPILL_FULL:
    return "raise the spill budget (--oversubscribe, GPUCAP_OVERSUBSCRIBE) or the cap, or free "
           "memory";
  default:
    if (budget_full(f)) {
      return "wait, or free memory: the budget's other processes give idle memory back (gpucap "
             "top)";
    }
    if (over_cap(f)) {
      return "raise the cap above the request (--limit, GPUCAP_MEMORY_LIMIT), or ask for less";
    }
    return "raise the cap (--limit, GPUCAP_MEMORY_LIMIT) or free memory";
  }
}

/* Writes the full dump (report) where GPUCAP_OOM_DUMP says, and says where it went. */
static void put_dump(strbuf_t *o, const char *report, size_t len) {
  const cfg_dest_t *d = &settings_get()->oom_dump;
  label(o, "full dump");
  if (d->kind == CFG_DEST_OFF) {
    strbuf_str(o, "GPUCAP_OOM_DUMP=stderr or =FILE writes the pool's bins and occupancy map\n");
  } else if (report == NULL) {
    strbuf_str(o, "none (the refusal came from no pool)\n");
  } else if (d->kind == CFG_DEST_STDERR) {
    strbuf_str(o, "below\n");
  } else {
    char full[PATH_MAX];
    int fd = log_create("GPUCAP_OOM_DUMP", d->path, full, sizeof full);
    int err = fd < 0 ? -1 : log_write_fd(fd, report, strnlen(report, len), NULL);
    if (fd >= 0 && close(fd) != 0 && err == 0) {
      err = errno;
    }
    if (err == 0) {
      strbuf_printf(o, "written to %s\n", full);
    } else {
      strbuf_str(o, "not written (see the warning above)\n");
      if (err > 0) {
        log_msg(LOG_WARN, "GPUCAP_OOM_DUMP: cannot write '%s': %s", full, strerror(err));
      }
    }
  }
}

/* The first refusal's report: one block, written at once. */
static void print_first(const oom_facts_t *f, enum oom_verdict v, const char *report, size_t len) {
  char text[2048];
  strbuf_t o;
  strbuf_init(&o, text, sizeof text);
  uint64_t in_use = 0, peak = 0;
  ledger_total(f->dev, &in_use, &peak);
  strbuf_printf(&o, "gpucap: out of memory on device %d (pid %ld): ", f->dev, (long)getpid());
  strbuf_size(&o, f->bytes);
  strbuf_printf(&o, " (%llu bytes) refused\n", (unsigned long long)f->bytes);
  put_verdict(&o, f, v, in_use);
  struct top_libs t = {.dev = f->dev};
  ledger_each(pick_lib, &t);
  if (t.n > 0) {
    label(&o, "in use by");
    for (int i = 0; i < t.n; i++) {
      strbuf_printf(&o, "%s%s%s ", i > 0 ? ", " : "", t.lib[i].name,
                    t.lib[i].program ? " (program)" : "");
      strbuf_size(&o, t.lib[i].bytes);
    }
    if (t.others > 0) {
      strbuf_printf(&o, ", %d more ", t.others);
      strbuf_size(&o, t.others_use);
    }
    strbuf_char(&o, '\n');
  }
  label(&o, "helps");
  strbuf_printf(&o, "%s\n", helps(f, v));
  if (!quiet()) {
    put_dump(&o, report, len);
    strbuf_finish(&o);
    log_write_raw(text, strnlen(text, sizeof text));
    if (report != NULL && settings_get()->oom_dump.kind == CFG_DEST_STDERR) {
      log_write_raw(report, strnlen(report, len));
    }
  } else if (report != NULL && settings_get()->oom_dump.kind == CFG_DEST_FILE) {
    strbuf_t none;
    strbuf_init(&none, NULL, 0);
    put_dump(&none, report, len); /* the file asked for, even with no report on stderr */
  }
}

void oom_print(uint64_t rank, const oom_facts_t *f, enum oom_verdict v, const char *report,
               size_t len) {
  if (rank == 0) {
    print_first(f, v, report, len);
    return;
  }
  if (rank > OOM_SUMMARIES + 1 || quiet()) {
    return;
  }
  if (rank <= OOM_SUMMARIES) {
    char size[REPORT_SIZE_MAX];
    report_format_size(f->bytes, size, sizeof size);
    log_msg(LOG_WARN, "device %d: out of memory: %s (%llu bytes) refused: %s; %s", f->dev, size,
            (unsigned long long)f->bytes, oom_verdict_name(v), helps(f, v));
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
