/* The driver's own memory for this process (see overhead.h). A measurement reads without any lock
 * (NVML or cuMemGetInfo may take time), then applies its result under the device's small mutex,
 * in the order measurements started (a ticket): a slower, older one never overwrites a newer one.
 * NVML's figure is trusted only from a reading during which no charge moved (another thread's
 * free, credited after the driver made it, would look like driver memory; an allocation charged
 * and not yet made, like less), and a figure lower than the current one only when a second quiet
 * reading confirms it (the higher of the two kept). When no reading of three is quiet, the
 * figure stays as it is until the next measurement.
 */
#include "shim/accounting/overhead.h"

#include "core/limits.h"
#include "shim/accounting/cap.h"
#include "shim/base/exit.h"
#include "shim/base/fork.h"
#include "shim/base/log.h"
#include "shim/accounting/nvmlq.h"
#include "shim/base/real.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#define MARGIN_MIN (UINT64_C(64) << 20) /* the near-cap band is at least this wide */

struct state {
  uint64_t applied;                /* ticket of the last result applied (under lock) */
  _Atomic uint64_t started;        /* tickets handed out */
  _Atomic uint64_t seen_charges;   /* cap_charges() when the last measurement started */
  _Atomic uint64_t deltas;         /* the deltas method's figure, once deltas_known */
  _Atomic uint64_t peak;           /* the overhead's peak */
  _Atomic uint64_t near;           /* charges + overhead from which the cap is near (the
                                    * band's start; UINT64_MAX: no cap, or not covering) */
  uint64_t cause[OVERHEAD_CAUSES]; /* the overhead by where it grew (sums to it), under lock */
  _Atomic uint64_t cause_peak[OVERHEAD_CAUSES];
  pthread_mutex_t lock;     /* applying a result: `applied`, `cause`, `warned` */
  atomic_int method;        /* enum overhead_method of the last measurement */
  bool warned;              /* over the cap, said once until back under (under lock) */
  atomic_bool deltas_known; /* the deltas method has a figure */
  atomic_bool listed;       /* NVML has listed this process on the device */
};

static struct state states[GPUCAP_MAX_DEVICES];
static atomic_bool nvml_gone; /* NVML cannot answer in this process: deltas only */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_locks(void) {
  for (int dev = 0; dev < GPUCAP_MAX_DEVICES; dev++) {
    pthread_mutex_init(&states[dev].lock, NULL);
  }
}

static struct state *state_of(int dev) {
  pthread_once(&init_once, init_locks);
  return &states[dev];
}

static bool dev_ok(int dev) {
  return dev >= 0 && dev < GPUCAP_MAX_DEVICES;
}

uint64_t overhead_bytes(int dev) {
  return dev_ok(dev) ? cap_overhead(dev) : 0;
}

const char *overhead_method_name(enum overhead_method m) {
  return m == OVERHEAD_NVML ? "nvml" : m == OVERHEAD_DELTAS ? "deltas" : "unmeasured";
}

const char *overhead_cause_name(enum overhead_cause c) {
  static const char *const names[OVERHEAD_CAUSES] = {"context", "modules", "limits", "other"};
  return (unsigned)c < OVERHEAD_CAUSES ? names[c] : "other";
}

/* NVML's figure for this process on dev less the charges (less `reserved`, charged for a call
 * under way), in *out; *quiet: no charge moved meanwhile. False when NVML does not answer.
 * Managed memory is charged whole but held by the device only where touched: the figure then
 * lies between NVML's less all the charges and NVML's less those that are not managed, and
 * *out is the counted overhead kept within those bounds (raised to the first, lowered to the
 * second), so untouched managed pages never pass for room the driver gave back. */
static bool by_nvml(int dev, uint64_t reserved, uint64_t *out, bool *quiet) {
  if (atomic_load_explicit(&nvml_gone, memory_order_relaxed)) {
    return false;
  }
  struct state *s = &states[dev];
  uint64_t before = cap_used(dev), whole = 0;
  int rc = nvmlq_process_bytes(dev, &whole);
  uint64_t after = cap_used(dev);
  if (rc == -ENOSYS) {
    atomic_store_explicit(&nvml_gone, true, memory_order_relaxed);
  }
  /* Not listed where NVML listed it before: it holds nothing there now (its contexts went). */
  if (rc == -ENOENT && atomic_load_explicit(&s->listed, memory_order_relaxed)) {
    whole = 0;
    rc = 0;
  }
  if (rc != 0) {
    return false;
  }
  atomic_store_explicit(&s->listed, true, memory_order_relaxed);
  uint64_t charged = before < after ? before : after;
  charged = charged > reserved ? charged - reserved : 0;
  uint64_t managed = cap_managed(dev), held = charged > managed ? charged - managed : 0;
  uint64_t low = whole > charged ? whole - charged : 0, high = whole > held ? whole - held : 0;
  uint64_t now = cap_overhead(dev);
  *out = low > now ? low : high < now ? high : now;
  *quiet = before == after;
  return true;
}

/* cuMemGetInfo's free and total memory of dev, when the calling thread's context is on dev. */
static bool free_of(int dev, uint64_t *free_bytes, uint64_t *total) {
  int cur = -1;
  size_t f = 0, t = 0;
  if (!real.cuMemGetInfo_v2 || cap_current_device(&cur) != CUDA_SUCCESS || cur != dev ||
      real.cuMemGetInfo_v2(&f, &t) != CUDA_SUCCESS) {
    return false;
  }
  *free_bytes = f;
  *total = t;
  return true;
}

/* The deltas method's figure for dev once it has none: what the device shows in use beyond the
 * charges (this process's first context, and anything other processes hold). */
static void deltas_start(struct state *s, int dev) {
  uint64_t f, t;
  if (!atomic_load(&s->deltas_known) && free_of(dev, &f, &t)) {
    uint64_t used = t - (f < t ? f : t), charged = cap_used(dev);
    atomic_store(&s->deltas, used > charged ? used - charged : 0);
    atomic_store(&s->deltas_known, true);
  }
}

/* Takes `from` bytes off the causes, from `first` on, then the others in order. Locked. */
static void uncount(struct state *s, enum overhead_cause first, uint64_t from) {
  for (int i = 0; i <= OVERHEAD_CAUSES && from > 0; i++) {
    int c = i == 0 ? (int)first : i - 1;
    uint64_t take = s->cause[c] < from ? s->cause[c] : from;
    s->cause[c] -= take;
    from -= take;
  }
}

/* Says once (until the process is back under) that the driver's memory took it over its cap. */
static void warn_over(struct state *s, int dev, const char *call) {
  uint64_t limit = cap_limit(dev), over = cap_overhead(dev), used = cap_used(dev);
  bool above = cap_covers_process() && limit != CAP_NONE && used + over > limit;
  if (above && !s->warned) {
    log_msg(LOG_WARN,
            "device %d: the driver holds %llu bytes for this process (contexts, modules, local "
            "memory, page rounding), which with %llu bytes allocated passes its cap of %llu "
            "bytes%s%s; gpucap cannot refuse what the driver takes for itself: allocations are "
            "refused until the process is back under its cap",
            dev, (unsigned long long)over, (unsigned long long)used, (unsigned long long)limit,
            call ? " after "
                 : " (seen at a measurement: a kernel launch may have loaded code or "
                   "needed a deeper stack)",
            call ? call : "");
  }
  s->warned = above;
}

/* Applies the result of the measurement with this ticket: the new overhead, its growth or
 * shrinking attributed to cause. */
static void apply(int dev, uint64_t ticket, uint64_t now, enum overhead_cause cause,
                  const char *call) {
  struct state *s = state_of(dev);
  pthread_mutex_lock(&s->lock);
  if (ticket <= s->applied) {
    pthread_mutex_unlock(&s->lock);
    return;
  }
  s->applied = ticket;
  uint64_t old = cap_overhead(dev);
  cap_set_overhead(dev, now); /* also when unchanged: a shared budget bound since hears it */
  if (now != old) {
    log_msg(LOG_DEBUG, "device %d: the driver holds %llu bytes for this process (%s, %s%s)", dev,
            (unsigned long long)now,
            overhead_method_name(
                (enum overhead_method)atomic_load_explicit(&s->method, memory_order_relaxed)),
            call ? "after " : "measured", call ? call : "");
  }
  if (now > old) {
    s->cause[cause] += now - old;
    uint64_t c = s->cause[cause],
             p = atomic_load_explicit(&s->cause_peak[cause], memory_order_relaxed);
    atomic_store_explicit(&s->cause_peak[cause], c > p ? c : p, memory_order_relaxed);
    p = atomic_load_explicit(&s->peak, memory_order_relaxed);
    atomic_store_explicit(&s->peak, now > p ? now : p, memory_order_relaxed);
  } else {
    uncount(s, cause, old - now);
  }
  warn_over(s, dev, call);
  pthread_mutex_unlock(&s->lock);
}

/* NVML's reading for dev that can be trusted, in *out: one taken while no charge moved (a free
 * credited during a reading the driver made before it would look like driver memory, an
 * allocation charged and not yet made like less), a lower one than counted confirmed by a second
 * (the higher kept). Returns 1 with *out, 0 when no reading in three was quiet (the figure stays
 * as it is), -1 when NVML does not answer. */
static int by_nvml_quiet(int dev, uint64_t reserved, uint64_t *out) {
  uint64_t value = 0, again = 0;
  bool quiet = false, calm = false;
  for (int tries = 0; tries < 3 && !quiet; tries++) {
    if (!by_nvml(dev, reserved, &value, &quiet)) {
      return -1;
    }
  }
  if (!quiet) {
    return 0;
  }
  if (value < cap_overhead(dev)) {
    if (!by_nvml(dev, reserved, &again, &calm) || !calm) {
      return 0;
    }
    value = again > value ? again : value;
  }
  *out = value;
  return 1;
}

/* Measures dev now; `reserved`: charged for a call under way (left out). */
static void measure(int dev, enum overhead_cause cause, const char *call, uint64_t reserved) {
  struct state *s = state_of(dev);
  uint64_t ticket = atomic_fetch_add(&s->started, 1) + 1, value = 0;
  atomic_store_explicit(&s->seen_charges, cap_charges(dev), memory_order_relaxed);
  int got = by_nvml_quiet(dev, reserved, &value);
  if (got < 0) {
    deltas_start(s, dev);
    value = atomic_load(&s->deltas);
  }
  atomic_store_explicit(&s->method, got < 0 ? OVERHEAD_DELTAS : OVERHEAD_NVML,
                        memory_order_relaxed);
  if (got != 0) {
    apply(dev, ticket, value, cause, call);
  }
}

void overhead_measure(int dev) {
  if (dev_ok(dev)) {
    measure(dev, OVERHEAD_OTHER, NULL, 0);
  }
}

/* Where the near-cap band starts on dev: the cap less its last eighth (at least MARGIN_MIN), or
 * UINT64_MAX when the cap does not cover the process or there is none. */
static uint64_t band_of(int dev) {
  uint64_t limit = cap_limit(dev);
  if (!cap_covers_process() || limit == CAP_NONE) {
    return UINT64_MAX;
  }
  uint64_t margin = limit / 8 > MARGIN_MIN ? limit / 8 : MARGIN_MIN;
  return limit > margin ? limit - margin : 0;
}

void overhead_check(int dev) {
  if (!dev_ok(dev)) {
    return;
  }
  struct state *s = &states[dev];
  if (atomic_load_explicit(&s->method, memory_order_relaxed) == OVERHEAD_UNMEASURED) {
    cap_bind(dev, 0); /* the device's first use: its cap, before the band is set from it */
    atomic_store_explicit(&s->near, band_of(dev), memory_order_relaxed);
    measure(dev, OVERHEAD_OTHER, NULL, 0); /* the device's first use */
    return;
  }
  if (cap_used(dev) + cap_overhead(dev) >= atomic_load_explicit(&s->near, memory_order_relaxed) &&
      cap_charges(dev) != atomic_load_explicit(&s->seen_charges, memory_order_relaxed)) {
    measure(dev, OVERHEAD_OTHER, NULL, 0);
  }
}

bool overhead_recheck(int dev) {
  if (!dev_ok(dev)) {
    return false;
  }
  uint64_t before = cap_overhead(dev);
  measure(dev, OVERHEAD_OTHER, NULL, 0);
  return cap_overhead(dev) < before;
}

void overhead_before(struct overhead_call *c, int dev, bool teardown) {
  uint64_t total;
  /* At exit the runtime's teardown releases its contexts after NVML's may have run: nothing is
   * measured then (the exit report uses the figures so far). */
  c->dev = dev_ok(dev) && !exit_started() ? dev : -1;
  c->known = false;
  c->reserved = 0;
  c->teardown = teardown;
  if (c->dev < 0) {
    return;
  }
  c->charged_before = cap_used(dev);
  if (atomic_load_explicit(&nvml_gone, memory_order_relaxed) ||
      atomic_load_explicit(&state_of(dev)->method, memory_order_relaxed) == OVERHEAD_DELTAS) {
    c->known = free_of(dev, &c->free_before, &total);
  }
}

void overhead_after(struct overhead_call *c, enum overhead_cause cause, const char *call,
                    CUresult rc) {
  if (c->dev < 0) {
    return;
  }
  int dev = c->dev;
  struct state *s = state_of(dev);
  uint64_t ticket = atomic_fetch_add(&s->started, 1) + 1, value = 0, f, t;
  atomic_store_explicit(&s->seen_charges, cap_charges(dev), memory_order_relaxed);
  int got = by_nvml_quiet(dev, c->reserved, &value);
  if (got >= 0) {
    atomic_store_explicit(&s->method, OVERHEAD_NVML, memory_order_relaxed);
  } else {
    /* The fall in free memory across the call, less what the process's charges took meanwhile. */
    if (c->known && atomic_load(&s->deltas_known) && free_of(dev, &f, &t)) {
      int64_t fall = (int64_t)(c->free_before - f) - (int64_t)(cap_used(dev) - c->charged_before);
      fall = rc != CUDA_SUCCESS ? 0 : c->teardown ? (fall < 0 ? fall : 0) : (fall > 0 ? fall : 0);
      int64_t now = (int64_t)atomic_load(&s->deltas) + fall;
      atomic_store(&s->deltas, now > 0 ? (uint64_t)now : 0);
    }
    deltas_start(s, dev);
    value = atomic_load(&s->deltas);
    atomic_store_explicit(&s->method, OVERHEAD_DELTAS, memory_order_relaxed);
  }
  if (got != 0) {
    apply(dev, ticket, value, cause, call);
  }
}

void overhead_figures(int dev, struct overhead_figures *out) {
  *out = (struct overhead_figures){.method = OVERHEAD_UNMEASURED};
  if (!dev_ok(dev)) {
    return;
  }
  const struct state *s = &states[dev];
  out->method = (enum overhead_method)atomic_load_explicit(&s->method, memory_order_relaxed);
  out->peak = atomic_load_explicit(&s->peak, memory_order_relaxed);
  for (int c = 0; c < OVERHEAD_CAUSES; c++) {
    out->cause_peak[c] = atomic_load_explicit(&s->cause_peak[c], memory_order_relaxed);
  }
}

/* In a fork child: nothing is held (the parent's contexts are not the child's). */
static void fork_child(void) {
  for (int dev = 0; dev < GPUCAP_MAX_DEVICES; dev++) {
    struct state *s = &states[dev];
    pthread_mutex_init(&s->lock, NULL);
    s->applied = 0;
    s->warned = false;
    atomic_store(&s->started, 0);
    atomic_store(&s->method, OVERHEAD_UNMEASURED);
    atomic_store(&s->deltas, 0);
    atomic_store(&s->deltas_known, false);
    atomic_store(&s->listed, false);
    atomic_store(&s->near, 0);
    for (int c = 0; c < OVERHEAD_CAUSES; c++) {
      s->cause[c] = 0;
    }
  }
}
FORK_CHILD(fork_child)
