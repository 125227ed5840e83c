/* Caps and charges per device. The settings are read once (pthread_once) at the first hook
 * that needs them; each device's limit is computed once from the settings, the caps the
 * cluster set (its PCI bus id asked of the driver) and the device's real total memory, then
 * published with a release store. Charges are CAS loops on one atomic counter per device, so
 * concurrent allocations never overshoot the cap; under GPUCAP_CAP_COVERS=process the loop
 * admits within the cap less the overhead (the driver's own memory, set by
 * shim/accounting/overhead.c). The peak of charges + overhead is kept with a CAS; its split is
 * stored beside it without a lock (figures for the exit report).
 */
#include "shim/accounting/cap.h"

#include "core/report.h"
#include "shim/base/check.h"
#include "shim/base/fork.h"
#include "shim/base/log.h"
#include "shim/base/real.h"
#include "shim/accounting/roster.h"
#include "shim/accounting/runinfo.h"
#include "shim/base/settings.h"
#include "shim/accounting/share.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

struct device_cap {
  _Atomic uint64_t used;
  _Atomic uint64_t limit;     /* valid once `ready` */
  _Atomic uint64_t guarantee; /* valid once `ready` */
  atomic_bool ready;
  atomic_bool warned;        /* the cap above the device's memory was said */
  _Atomic uint64_t overhead; /* the driver's own memory for the process (cap_set_overhead) */
  _Atomic uint64_t charges;  /* successful charges so far */
  _Atomic uint64_t managed;  /* of `used`, managed memory's (cap_managed) */
  _Atomic uint64_t peak;     /* the peak of used + overhead, and at it: */
  _Atomic uint64_t peak_charged, peak_overhead;
};

static struct device_cap devices[GPUCAP_MAX_DEVICES];

bool cap_no_context(CUresult rc) {
  return rc == CUDA_ERROR_INVALID_CONTEXT || rc == CUDA_ERROR_NOT_INITIALIZED ||
         rc == CUDA_ERROR_DEINITIALIZED || rc == CUDA_ERROR_CONTEXT_IS_DESTROYED;
}

CUresult cap_current_device(int *dev) {
  CUdevice d = 0;
  if (!real.cuCtxGetDevice) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  CUresult rc = real.cuCtxGetDevice(&d);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (d < 0 || d >= GPUCAP_MAX_DEVICES) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *dev = d;
  return CUDA_SUCCESS;
}

/* Whether some discovered source is keyed by PCI bus id. */
static bool keyed_by_pci(const cfg_found_t *f) {
  for (int i = 0; i < f->nlines; i++) {
    if (f->line[i].device == CFG_BY_PCI) {
      return true;
    }
  }
  return false;
}

/* The smaller of `own` (gpucap's settings' cap of dev) and the caps the cluster set for dev;
 * stores dev's guarantee (CAP_NONE: none) in c. */
static uint64_t discovered(int dev, uint64_t own, struct device_cap *c) {
  const cfg_found_t *f = settings_found();
  cfg_devcap_t d = {CAP_NONE, -1, 0, CAP_NONE, -1};
  if (f->n > 0) {
    char bus[64] = "";
    cfg_pci_t pci;
    CUresult rc = real.cuDeviceGetPCIBusId ? real.cuDeviceGetPCIBusId(bus, (int)sizeof bus, dev)
                                           : CUDA_ERROR_NOT_FOUND;
    bool known = rc == CUDA_SUCCESS && cfg_parse_pci(bus, strnlen(bus, sizeof bus), &pci) == 0;
    if (!known && keyed_by_pci(f)) {
      log_msg(LOG_WARN,
              "device %d: the driver gives no PCI bus id ('%.32s', error %d), so the caps "
              "keyed by one (SLURM_SHARD_MEM_PER_GPU, dmem.max) do not apply to it",
              dev, bus, (int)rc);
    }
    cfg_discover_device(f, dev, known ? &pci : NULL, !cap_covers_process(), &d);
  }
  atomic_store_explicit(&c->guarantee, d.soft, memory_order_relaxed);
  if (d.limit_src < 0 || d.cap >= own) {
    return own;
  }
  const cfg_found_src_t *s = &f->src[d.limit_src];
  log_msg(LOG_DEBUG, "device %d: cap %llu bytes from %s%s%s: %llu less %llu for %s", dev,
          (unsigned long long)d.cap, s->name, s->where[0] ? " " : "", s->where,
          (unsigned long long)d.line, (unsigned long long)(d.line - d.cap), s->enforcer);
  return d.cap;
}

void cap_bind(int dev, uint64_t physical_total) {
  CHECK_DEVICE(dev);
  struct device_cap *c = &devices[dev];
  if (atomic_load_explicit(&c->ready, memory_order_acquire)) {
    return;
  }
  if (!physical_total) {
    size_t total = 0;
    if (!real.cuDeviceTotalMem_v2 || real.cuDeviceTotalMem_v2(&total, dev) != CUDA_SUCCESS) {
      /* Unknown size: only an absolute limit can apply; a fraction of nothing is nothing. */
      total = 0;
    }
    physical_total = total;
  }
  uint64_t limit = settings_valid() ? cfg_device_cap(settings_get(), dev, physical_total) : 0;
  if (limit != CAP_NONE && physical_total > 0 && limit > physical_total &&
      !atomic_exchange_explicit(&c->warned, true, memory_order_relaxed)) {
    char want[REPORT_SIZE_MAX], has[REPORT_SIZE_MAX];
    report_format_size(limit, want, sizeof want);
    report_format_size(physical_total, has, sizeof has);
    log_msg(LOG_WARN,
            "device %d: the cap (%s) is more than the device's %s: the device's memory is the only "
            "limit there",
            dev, want, has);
  }
  limit = discovered(dev, limit, c);
  limit = share_limit(dev, limit, physical_total); /* a shared budget's, when one is named */
  runinfo_learn(dev); /* the device's first use: what the exit report will say about it */
  atomic_store_explicit(&c->limit, limit, memory_order_relaxed);
  atomic_store_explicit(&c->ready, true, memory_order_release);
  if (limit != CAP_NONE) {
    log_msg(LOG_DEBUG, "device %d: cap %llu bytes", dev, (unsigned long long)limit);
  }
}

uint64_t cap_limit(int dev) {
  CHECK_DEVICE(dev);
  const struct device_cap *c = &devices[dev];
  if (!atomic_load_explicit(&c->ready, memory_order_acquire)) {
    return CAP_NONE;
  }
  return atomic_load_explicit(&c->limit, memory_order_relaxed);
}

uint64_t cap_guarantee(int dev) {
  CHECK_DEVICE(dev);
  struct device_cap *c = &devices[dev];
  if (!atomic_load_explicit(&c->ready, memory_order_acquire)) {
    return CAP_NONE;
  }
  return atomic_load_explicit(&c->guarantee, memory_order_relaxed);
}

/* What the process now holds on dev, for `gpucap top` (shim/accounting/roster.h). */
static void publish(int dev, uint64_t used) {
  cap_bind(dev, 0); /* a charge or credit is a use of the device */
  roster_note(dev, cap_limit(dev), used, settings_valid() ? settings_get()->share : "");
}

bool cap_covers_process(void) {
  return !settings_valid() || settings_get()->cap_covers == CFG_COVERS_PROCESS;
}

/* Records a new peak of charges + overhead (used: the charges after the change). */
static void note_peak(struct device_cap *c, uint64_t used) {
  uint64_t over = atomic_load_explicit(&c->overhead, memory_order_relaxed);
  uint64_t whole = used + over, peak = atomic_load_explicit(&c->peak, memory_order_relaxed);
  while (whole > peak) {
    if (atomic_compare_exchange_weak_explicit(&c->peak, &peak, whole, memory_order_relaxed,
                                              memory_order_relaxed)) {
      atomic_store_explicit(&c->peak_charged, used, memory_order_relaxed);
      atomic_store_explicit(&c->peak_overhead, over, memory_order_relaxed);
      return;
    }
  }
}

/* The charges dev's cap admits: its limit, less the driver's own memory when the cap counts it. */
static uint64_t admit_limit(int dev) {
  uint64_t limit = cap_limit(dev);
  if (limit != CAP_NONE && cap_covers_process()) {
    uint64_t over = atomic_load_explicit(&devices[dev].overhead, memory_order_relaxed);
    limit = over < limit ? limit - over : 0;
  }
  return limit;
}

uint64_t cap_room(int dev) {
  CHECK_DEVICE(dev);
  uint64_t limit = admit_limit(dev);
  if (limit == CAP_NONE) {
    return UINT64_MAX;
  }
  uint64_t used = atomic_load_explicit(&devices[dev].used, memory_order_relaxed);
  return limit > used ? limit - used : 0;
}

bool cap_charge(int dev, uint64_t bytes) {
  CHECK_DEVICE(dev);
  cap_bind(dev, 0); /* the device's first charge may be its first use */
  uint64_t limit = admit_limit(dev);
  struct device_cap *c = &devices[dev];
  uint64_t used = atomic_load_explicit(&c->used, memory_order_relaxed);
  do {
    if (bytes > limit || used > limit - bytes) {
      return false;
    }
  } while (!atomic_compare_exchange_weak_explicit(&c->used, &used, used + bytes,
                                                  memory_order_relaxed, memory_order_relaxed));
  if (!share_charge(dev, bytes)) {
    atomic_fetch_sub_explicit(&c->used, bytes, memory_order_relaxed);
    return false;
  }
  atomic_fetch_add_explicit(&c->charges, 1, memory_order_relaxed);
  note_peak(c, used + bytes);
  publish(dev, used + bytes);
  return true;
}

void cap_add(int dev, uint64_t bytes) {
  CHECK_DEVICE(dev);
  struct device_cap *c = &devices[dev];
  uint64_t used = atomic_fetch_add_explicit(&c->used, bytes, memory_order_relaxed) + bytes;
  share_add(dev, bytes);
  atomic_fetch_add_explicit(&c->charges, 1, memory_order_relaxed);
  note_peak(c, used);
  publish(dev, used);
}

void cap_credit(int dev, uint64_t bytes) {
  CHECK_DEVICE(dev);
  uint64_t used = atomic_fetch_sub_explicit(&devices[dev].used, bytes, memory_order_relaxed);
  share_credit(dev, bytes);
  publish(dev, used - bytes);
}

uint64_t cap_used(int dev) {
  CHECK_DEVICE(dev);
  return atomic_load_explicit(&devices[dev].used, memory_order_relaxed);
}

uint64_t cap_charges(int dev) {
  CHECK_DEVICE(dev);
  return atomic_load_explicit(&devices[dev].charges, memory_order_relaxed);
}

uint64_t cap_overhead(int dev) {
  CHECK_DEVICE(dev);
  return atomic_load_explicit(&devices[dev].overhead, memory_order_relaxed);
}

void cap_managed_add(int dev, uint64_t bytes) {
  CHECK_DEVICE(dev);
  atomic_fetch_add_explicit(&devices[dev].managed, bytes, memory_order_relaxed);
}

void cap_managed_sub(int dev, uint64_t bytes) {
  CHECK_DEVICE(dev);
  atomic_fetch_sub_explicit(&devices[dev].managed, bytes, memory_order_relaxed);
}

uint64_t cap_managed(int dev) {
  CHECK_DEVICE(dev);
  return atomic_load_explicit(&devices[dev].managed, memory_order_relaxed);
}

uint64_t cap_counted_overhead(int dev) {
  return cap_covers_process() ? cap_overhead(dev) : 0;
}

uint64_t cap_set_overhead(int dev, uint64_t bytes) {
  CHECK_DEVICE(dev);
  struct device_cap *c = &devices[dev];
  cap_bind(dev, 0); /* the device is bound to its shared budget, if any, from now on */
  uint64_t old = atomic_exchange_explicit(&c->overhead, bytes, memory_order_relaxed);
  /* A shared budget holds each process's driver memory in its slot too (docs/design.md). */
  share_overhead(dev, old, bytes);
  note_peak(c, atomic_load_explicit(&c->used, memory_order_relaxed));
  return old;
}

void cap_peak(int dev, struct cap_peak *out) {
  CHECK_DEVICE(dev);
  const struct device_cap *c = &devices[dev];
  *out = (struct cap_peak){atomic_load_explicit(&c->peak, memory_order_relaxed),
                           atomic_load_explicit(&c->peak_charged, memory_order_relaxed),
                           atomic_load_explicit(&c->peak_overhead, memory_order_relaxed)};
}

void cap_shape(uint64_t limit, uint64_t held, uint64_t idle, uint64_t room, uint64_t *free_bytes,
               uint64_t *total_bytes) {
  uint64_t total = limit < *total_bytes ? limit : *total_bytes;
  uint64_t avail = *free_bytes + idle < *free_bytes ? UINT64_MAX : *free_bytes + idle;
  if (limit != CAP_NONE) {
    uint64_t headroom = held >= limit ? 0 : limit - held;
    avail = headroom < avail ? headroom : avail;
  }
  /* A shared budget's room for this process, plus what its pools hold unused (charged to it). */
  room = room + idle < room ? UINT64_MAX : room + idle;
  avail = room < avail ? room : avail;
  *total_bytes = total;
  *free_bytes = avail < total ? avail : total;
}

void cap_view(int dev, uint64_t idle, uint64_t physical, uint64_t *free_bytes,
              uint64_t *total_bytes) {
  cap_bind(dev, physical);
  uint64_t limit = cap_limit(dev);
  uint64_t charged = cap_used(dev);
  uint64_t held = charged > idle ? charged - idle : 0;
  if (cap_covers_process()) {
    held += cap_overhead(dev); /* the room really left: the driver's memory is in use too */
  }
  uint64_t room = UINT64_MAX, budget_cap = CAP_NONE;
  if (share_view(dev, idle, &room, &budget_cap)) {
    limit = budget_cap < limit ? budget_cap : limit;
  }
  cap_shape(limit, held, idle, room, free_bytes, total_bytes);
}

/* In a fork child: no device memory is charged (the parent's is not the child's). */
static void fork_child(void) {
  for (int dev = 0; dev < GPUCAP_MAX_DEVICES; dev++) {
    atomic_store_explicit(&devices[dev].used, 0, memory_order_relaxed);
    atomic_store_explicit(&devices[dev].overhead, 0, memory_order_relaxed);
    atomic_store_explicit(&devices[dev].managed, 0, memory_order_relaxed);
  }
}
FORK_CHILD(fork_child)
