/* This process's part in a shared budget (see share.h). The mapping, the slot and the binding of
 * each CUDA ordinal to the budget's device entry are set once under `join_lock` and published
 * with release stores; charges then take only the file's own (robust, process-shared) lock.
 * A refusal is sticky: once the process is refused it stays refused (cap 0), never uncapped.
 */
#include "shim/accounting/share.h"

#include "core/limits.h"
#include "shim/accounting/budget.h"
#include "shim/base/fork.h"
#include "shim/base/log.h"
#include "shim/base/real.h"
#include "shim/accounting/runinfo.h"
#include "shim/base/settings.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t join_lock = PTHREAD_MUTEX_INITIALIZER;
static struct budget *_Atomic shared; /* mapped once, kept across fork (MAP_SHARED) */
static _Atomic int slot = -1;         /* this process's slot; -1 before it joins */
static atomic_bool refused;
static pid_t my_pid;
static uint64_t my_start;
static atomic_int bound[GPUCAP_MAX_DEVICES]; /* 1 + the budget's device entry; 0 unbound */
static _Atomic uint64_t seen_asks[BUDGET_DEVICES];
static _Atomic uint64_t published[GPUCAP_MAX_DEVICES]; /* driver memory the slot holds */

bool share_active(void) {
  return settings_valid() && settings_get()->share[0] != '\0';
}

/* The budget's settings as canonical text: what every process naming it must agree on. */
static void settings_text(char *buf, size_t len) {
  static const cfg_opt_t fixed[] = {CFG_OPT_MEMORY_LIMIT, CFG_OPT_MEMORY_FRACTION,
                                    CFG_OPT_SHARE_MIN, CFG_OPT_CAP_COVERS};
  size_t n = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && n < len; i++) {
    char v[256];
    cfg_option_value(settings_get(), fixed[i], v, sizeof v);
    n += (size_t)snprintf(buf + n, len - n, "%s%s=%s", i ? " " : "", cfg_option(fixed[i])->name,
                          v[0] ? v : "(unset)");
  }
}

static void refuse(const char *fmt, const char *a, const char *b) {
  if (!atomic_exchange(&refused, true)) {
    char why[768];
    (void)snprintf(why, sizeof why, fmt, a, b);
    log_msg(LOG_ERROR, "shared budget '%s': %s; every allocation is refused", settings_get()->share,
            why);
  }
}

/* Starts the budget afresh: no live process is left, so what the file says is a previous
 * run's (its processes gone); the joining process's settings become the budget's. Locked. */
static void restart(struct budget *l, const char *text) {
  memset(l->dev, 0, sizeof l->dev);
  memset(l->slot, 0, sizeof l->slot);
  l->reclaimed = 0;
  l->recoveries = 0;
  l->pidns = budget_pidns();
  (void)snprintf(l->settings, sizeof l->settings, "%s", text);
}

/* Takes a slot in the budget (mapping it first). join_lock held. */
static void join(void) {
  if (atomic_load(&slot) >= 0 || atomic_load(&refused)) {
    return;
  }
  char text[BUDGET_SETTINGS_MAX], err[512];
  settings_text(text, sizeof text);
  struct budget *l = atomic_load(&shared);
  for (int tries = 0;; tries++) {
    if (!l) {
      int rc = budget_open(settings_get()->share, true, text, &l, err, sizeof err);
      if (rc != 0) {
        refuse("%s%s", err,
               rc == -EPROTO ? " (remove the file if no process of the budget is running)" : "");
        return;
      }
      atomic_store(&shared, l);
    }
    if (budget_lock(l) != 0) {
      refuse("%s%s", "its file's lock is unrecoverable", "");
      return;
    }
    if (!l->removed || tries == 3) {
      break;
    }
    /* `gpucap top --clean` unlinked it (no process of it ran) after it was mapped: joining
     * it would split the budget from the processes that open it by name from now on. */
    budget_unlock(l);
    budget_close(l);
    atomic_store(&shared, NULL);
    l = NULL;
  }
  if (l->removed) {
    budget_unlock(l);
    refuse("%s%s", "its file keeps being removed (gpucap top --clean)", "");
    return;
  }
  my_pid = getpid();
  my_start = budget_start_of(my_pid);
  int mine = -1;
  if (budget_reclaim(l, my_pid, my_start) == 0) {
    restart(l, text);
  }
  if (strncmp(l->settings, text, sizeof l->settings) != 0) {
    budget_unlock(l);
    refuse("made with %s, this process has %s (a budget's settings are its creator's)", l->settings,
           text);
    return;
  }
  if (l->pidns != budget_pidns()) {
    budget_unlock(l);
    refuse("its processes are in another pid namespace%s%s, where this process cannot tell "
           "whether they live (share one: Kubernetes shareProcessNamespace)",
           "", "");
    return;
  }
  for (unsigned i = 0; i < BUDGET_SLOTS && mine < 0; i++) {
    if (l->slot[i].pid == 0) {
      mine = (int)i;
    }
  }
  if (mine >= 0) {
    struct budget_slot *s = &l->slot[mine];
    memset(s, 0, sizeof *s);
    s->start = my_start;
    for (int dev = 0; dev < GPUCAP_MAX_DEVICES; dev++) {
      int b = atomic_load(&bound[dev]); /* a fork child: its parent's devices */
      s->present |= b > 0 ? UINT64_C(1) << (b - 1) : 0;
    }
    s->pid = my_pid; /* last: the slot is complete before it counts */
  }
  budget_unlock(l);
  if (mine < 0) {
    refuse("all %s process slots are held by live processes%s", "64", "");
    return;
  }
  atomic_store(&slot, mine);
}

/* Binds CUDA ordinal dev to the budget's entry for its UUID, creating it with this process's
 * cap and guarantee, or refusing the process when the entry says otherwise. join_lock held. */
static void bind_device(int dev, uint64_t cap, uint64_t min) {
  struct budget *l = atomic_load(&shared);
  CUuuid u;
  char uuid[BUDGET_UUID_MAX];
  if (!real.cuDeviceGetUuid_v2 || real.cuDeviceGetUuid_v2(&u, (CUdevice)dev) != CUDA_SUCCESS) {
    refuse("%s%s", "the device's UUID is unknown", "");
    return;
  }
  runinfo_format_uuid(&u, uuid, sizeof uuid);
  if (budget_lock(l) != 0) {
    refuse("%s%s", "its file's lock is unrecoverable", "");
    return;
  }
  int d = budget_find(l, uuid);
  for (unsigned i = 0; d < 0 && i < BUDGET_DEVICES; i++) {
    if (!l->dev[i].uuid[0]) {
      struct budget_device *e = &l->dev[i];
      memset(e, 0, sizeof *e);
      e->cap = cap;
      e->min = min;
      e->want_slot = -1;
      (void)snprintf(e->uuid, sizeof e->uuid, "%s", uuid);
      d = (int)i;
    }
  }
  bool same = d >= 0 && l->dev[d].cap == cap && l->dev[d].min == min;
  if (same) {
    l->slot[atomic_load(&slot)].present |= UINT64_C(1) << d;
  }
  char was[128] = "";
  if (d >= 0 && !same) {
    (void)snprintf(was, sizeof was,
                   "cap %llu and guarantee %llu bytes; this process has %llu and %llu",
                   (unsigned long long)l->dev[d].cap, (unsigned long long)l->dev[d].min,
                   (unsigned long long)cap, (unsigned long long)min);
  }
  budget_unlock(l);
  if (d < 0) {
    refuse("more than %s devices%s", "16", "");
  } else if (!same) {
    refuse("device %s was set up with %s (its devices are numbered otherwise here?)", uuid, was);
  } else {
    atomic_store_explicit(&seen_asks[d], __atomic_load_n(&l->dev[d].asks, __ATOMIC_RELAXED),
                          memory_order_relaxed);
    atomic_store_explicit(&bound[dev], d + 1, memory_order_release);
  }
}

uint64_t share_limit(int dev, uint64_t cap, uint64_t physical) {
  if (!share_active() || dev < 0 || dev >= GPUCAP_MAX_DEVICES) {
    return cap;
  }
  const cfg_t *s = settings_get();
  uint64_t budget_cap = cap == UINT64_MAX ? physical : cap, min = 0, max = UINT64_MAX;
  (void)cfg_devvals_get(&s->share_min, dev, &min);
  (void)cfg_devvals_get(&s->share_max, dev, &max);
  pthread_mutex_lock(&join_lock);
  join();
  if (!atomic_load(&refused) && atomic_load(&bound[dev]) == 0) {
    bind_device(dev, budget_cap, min);
  }
  pthread_mutex_unlock(&join_lock);
  if (atomic_load(&refused)) {
    return 0;
  }
  return max < budget_cap ? max : budget_cap;
}

/* The budget's entry for dev and this process's slot, joining first in a fork child; false
 * without a budget (or when refused: *refusal set). */
static bool entry(int dev, struct budget **l, int *d, int *s) {
  if (dev < 0 || dev >= GPUCAP_MAX_DEVICES) {
    return false;
  }
  int b = atomic_load_explicit(&bound[dev], memory_order_acquire);
  if (b == 0) {
    return false;
  }
  if (atomic_load(&slot) < 0) {
    pthread_mutex_lock(&join_lock);
    join();
    pthread_mutex_unlock(&join_lock);
  }
  *l = atomic_load(&shared);
  *d = b - 1;
  *s = atomic_load(&slot);
  return *s >= 0 && !atomic_load(&refused);
}

bool share_charge(int dev, uint64_t bytes) {
  struct budget *l;
  int d, s;
  if (!entry(dev, &l, &d, &s)) {
    return !atomic_load(&refused); /* no budget: the per-process cap alone */
  }
  int saved = errno;
  bool ok = false;
  if (budget_lock(l) == 0) {
    ok = budget_admit(l, (unsigned)d, s, bytes);
    if (!ok && budget_reclaim(l, 0, 0) < BUDGET_SLOTS) {
      ok = budget_admit(l, (unsigned)d, s, bytes); /* the dead held some of it */
    }
    if (!ok) {
      l->slot[s].refused[d]++;
      l->dev[d].refused++;
      /* the others give their idle memory back at their next call (they read it unlocked) */
      __atomic_fetch_add(&l->dev[d].asks, 1, __ATOMIC_RELAXED);
    }
    budget_unlock(l);
    if (!ok) {
      log_msg(LOG_DEBUG,
              "device %d: shared budget full: %llu bytes refused, idle memory asked back", dev,
              (unsigned long long)bytes);
    }
  }
  errno = saved;
  return ok;
}

void share_add(int dev, uint64_t bytes) {
  struct budget *l;
  int d, s;
  if (entry(dev, &l, &d, &s) && budget_lock(l) == 0) {
    l->slot[s].used[d] += bytes;
    budget_unlock(l);
  }
}

void share_credit(int dev, uint64_t bytes) {
  struct budget *l;
  int d, s;
  if (entry(dev, &l, &d, &s) && budget_lock(l) == 0) {
    uint64_t *u = &l->slot[s].used[d];
    *u = *u > bytes ? *u - bytes : 0;
    budget_unlock(l);
  }
}

void share_overhead(int dev, uint64_t old, uint64_t bytes) {
  struct budget *l;
  int d, s;
  (void)old; /* the slot's own count decides: a device bound late catches up */
  if (entry(dev, &l, &d, &s) && budget_lock(l) == 0) {
    uint64_t *u = &l->slot[s].used[d];
    uint64_t was = atomic_exchange(&published[dev], bytes);
    *u = *u + bytes > was ? *u + bytes - was : 0;
    l->slot[s].driver[d] = bytes;
    budget_unlock(l);
  }
}

bool share_view(int dev, uint64_t idle, uint64_t *headroom, uint64_t *cap) {
  struct budget *l;
  int d, s;
  if (!entry(dev, &l, &d, &s) || budget_lock(l) != 0) {
    return false;
  }
  l->slot[s].idle[d] = idle;
  *headroom = budget_headroom(l, (unsigned)d, s);
  *cap = l->dev[d].cap;
  budget_unlock(l);
  return true;
}

uint64_t share_asked(void) {
  struct budget *l = atomic_load_explicit(&shared, memory_order_acquire);
  uint64_t mask = 0;
  if (!l || atomic_load_explicit(&slot, memory_order_relaxed) < 0) {
    return 0;
  }
  for (int dev = 0; dev < GPUCAP_MAX_DEVICES; dev++) {
    int b = atomic_load_explicit(&bound[dev], memory_order_acquire);
    if (b > 0 && __atomic_load_n(&l->dev[b - 1].asks, __ATOMIC_RELAXED) !=
                     atomic_load_explicit(&seen_asks[b - 1], memory_order_relaxed)) {
      mask |= UINT64_C(1) << dev;
    }
  }
  return mask;
}

void share_answered(int dev) {
  log_msg(LOG_DEBUG, "device %d: giving idle pool memory back to the shared budget", dev);
  struct budget *l = atomic_load(&shared);
  int b = dev >= 0 && dev < GPUCAP_MAX_DEVICES ? atomic_load(&bound[dev]) : 0;
  if (l && b > 0) {
    atomic_store_explicit(&seen_asks[b - 1], __atomic_load_n(&l->dev[b - 1].asks, __ATOMIC_RELAXED),
                          memory_order_relaxed);
  }
}

/* The mapping, opened (never created) for a process that has not joined: an NVML tool. */
static struct budget *mapped(void) {
  struct budget *l = atomic_load(&shared);
  char err[512];
  if (l || !share_active()) {
    return l;
  }
  pthread_mutex_lock(&join_lock);
  l = atomic_load(&shared);
  if (!l && budget_open(settings_get()->share, false, "", &l, err, sizeof err) == 0) {
    atomic_store(&shared, l);
  }
  pthread_mutex_unlock(&join_lock);
  return l;
}

int share_ordinal(const char *uuid) {
  struct budget *l = atomic_load(&shared);
  if (!l || budget_lock(l) != 0) {
    return -1;
  }
  int d = budget_find(l, uuid);
  budget_unlock(l);
  for (int dev = 0; d >= 0 && dev < GPUCAP_MAX_DEVICES; dev++) {
    if (atomic_load(&bound[dev]) == d + 1) {
      return dev;
    }
  }
  return -1;
}

bool share_peek(const char *uuid, uint64_t *cap, uint64_t *room) {
  struct budget *l = mapped();
  if (!l || atomic_load(&refused) || budget_lock(l) != 0) {
    return false;
  }
  (void)budget_reclaim(l, 0, 0);
  int d = budget_find(l, uuid);
  if (d >= 0) {
    *cap = l->dev[d].cap;
    *room = budget_headroom(l, (unsigned)d, -1);
  }
  budget_unlock(l);
  return d >= 0;
}

unsigned share_processes(const char *uuid, struct share_proc *out, unsigned cap) {
  struct budget *l = mapped();
  unsigned n = 0;
  if (!l || budget_lock(l) != 0) {
    return 0;
  }
  (void)budget_reclaim(l, 0, 0);
  int d = budget_find(l, uuid);
  for (unsigned i = 0; d >= 0 && i < BUDGET_SLOTS; i++) {
    const struct budget_slot *x = &l->slot[i];
    if (x->pid != 0 && (x->used[d] > 0 || (x->present >> d & 1))) {
      if (n < cap) {
        out[n] = (struct share_proc){x->pid, x->used[d]};
      }
      n++;
    }
  }
  budget_unlock(l);
  return n;
}

/* A fork child holds no device memory and is not its parent: no slot until its first charge
 * (the mapping and the device bindings stay valid). */
static void fork_child(void) {
  pthread_mutex_init(&join_lock, NULL);
  atomic_store(&slot, -1);
  for (int dev = 0; dev < GPUCAP_MAX_DEVICES; dev++) {
    atomic_store(&published[dev], 0);
  }
}
FORK_CHILD(fork_child)
