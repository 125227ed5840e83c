/* The spill budgets and the spilled ranges (see shim/accounting/spill.h). Charges are CAS loops
 * like the cap's (shim/accounting/cap.c); the ranges are one array sorted by address under a mutex
 * that is never held across a driver call, with an atomic count so that a process that never
 * spilled takes no lock in the prefetch and advice hooks.
 */
#include "shim/accounting/spill.h"

#include "shim/base/check.h"
#include "shim/base/fork.h"
#include "shim/base/log.h"
#include "shim/base/real.h"
#include "shim/base/settings.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct budget {
  _Atomic uint64_t used, peak, allocs;
};
static struct budget budgets[GPUCAP_MAX_DEVICES];

struct range {
  uint64_t id;     /* its own (an address is reused once its allocation is freed) */
  uint64_t lo, hi; /* what of the allocation is spilled */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct range *ranges;
static size_t nranges, capranges;
static atomic_size_t live;         /* nranges, for lock-free readers */
static uint64_t next_id;           /* the last range's id; under the lock */
static struct range *inherited[8]; /* a fork child's parents' arrays, kept reachable */
static int ninherited;
static uint64_t longest; /* no range is longer (ranges of a freed allocation and of a new one at
                          * its address may overlap for a moment); under the lock */

uint64_t spill_budget(int dev) {
  if (dev < 0 || dev >= GPUCAP_MAX_DEVICES || !settings_valid()) {
    return 0;
  }
  return cfg_spill_budget(settings_get(), dev);
}

bool spill_possible(int dev) {
  static _Atomic int known[GPUCAP_MAX_DEVICES]; /* 0 not asked, 1 yes, 2 no */
  if (dev < 0 || dev >= GPUCAP_MAX_DEVICES) {
    return false;
  }
  int k = atomic_load_explicit(&known[dev], memory_order_relaxed);
  if (k == 0) {
    int v = 0;
    bool yes = real.cuDeviceGetAttribute &&
               real.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, dev) ==
                   CUDA_SUCCESS &&
               v != 0;
    int expect = 0;
    if (atomic_compare_exchange_strong(&known[dev], &expect, yes ? 1 : 2) && !yes) {
      log_msg(LOG_WARN,
              "device %d cannot keep managed memory on the host while it runs (no "
              "concurrent managed access): nothing beyond its cap is spilled",
              dev);
    }
    k = yes ? 1 : 2;
  }
  return k == 1;
}

bool spill_devices(int dev) {
  return settings_get()->spill && spill_budget(dev) > 0 && spill_possible(dev);
}

bool spill_charge(int dev, uint64_t bytes) {
  uint64_t limit = spill_budget(dev);
  if (limit == 0) {
    return false;
  }
  struct budget *b = &budgets[dev];
  uint64_t used = atomic_load_explicit(&b->used, memory_order_relaxed);
  do {
    if (bytes > limit || used > limit - bytes) {
      return false;
    }
  } while (!atomic_compare_exchange_weak_explicit(&b->used, &used, used + bytes,
                                                  memory_order_relaxed, memory_order_relaxed));
  uint64_t now = used + bytes, peak = atomic_load_explicit(&b->peak, memory_order_relaxed);
  while (now > peak && !atomic_compare_exchange_weak_explicit(
                           &b->peak, &peak, now, memory_order_relaxed, memory_order_relaxed)) {
  }
  return true;
}

void spill_credit(int dev, uint64_t bytes) {
  CHECK_DEVICE(dev);
  atomic_fetch_sub_explicit(&budgets[dev].used, bytes, memory_order_relaxed);
}

uint64_t spill_used(int dev) {
  CHECK_DEVICE(dev);
  return atomic_load_explicit(&budgets[dev].used, memory_order_relaxed);
}

/* Index of the first range that starts at p or later (ranges are sorted by start). Lock held. */
static size_t first_from(uint64_t p) {
  size_t lo = 0, hi = nranges;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ranges[mid].lo < p) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

uint64_t spill_remember(uint64_t base, uint64_t kept, uint64_t bytes, int dev) {
  CHECK_DEVICE(dev);
  pthread_mutex_lock(&lock);
  if (nranges == capranges) {
    size_t cap = capranges ? 2 * capranges : 64;
    struct range *grown = realloc(ranges, cap * sizeof *grown);
    if (grown == NULL) {
      pthread_mutex_unlock(&lock);
      return 0;
    }
    ranges = grown;
    capranges = cap;
  }
  struct range r = {.id = ++next_id, .lo = base + kept, .hi = base + bytes};
  size_t i = first_from(r.lo);
  longest = r.hi - r.lo > longest ? r.hi - r.lo : longest;
  memmove(&ranges[i + 1], &ranges[i], (nranges - i) * sizeof *ranges);
  ranges[i] = r;
  nranges++;
  atomic_store_explicit(&live, nranges, memory_order_release);
  pthread_mutex_unlock(&lock);
  atomic_fetch_add_explicit(&budgets[dev].allocs, 1, memory_order_relaxed);
  return r.id;
}

void spill_forget(uint64_t id) {
  if (id == 0 || atomic_load_explicit(&live, memory_order_acquire) == 0) {
    return;
  }
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < nranges; i++) {
    if (ranges[i].id == id) {
      memmove(&ranges[i], &ranges[i + 1], (nranges - i - 1) * sizeof *ranges);
      nranges--;
      break;
    }
  }
  longest = nranges == 0 ? 0 : longest;
  atomic_store_explicit(&live, nranges, memory_order_release);
  pthread_mutex_unlock(&lock);
}

int spill_outside(uint64_t p, uint64_t n, uint64_t out[][2], int max, uint64_t *spilled) {
  uint64_t end = p + n < p ? UINT64_MAX : p + n;
  *spilled = 0;
  if (atomic_load_explicit(&live, memory_order_acquire) == 0) {
    out[0][0] = p;
    out[0][1] = n;
    return 1;
  }
  int parts = 0;
  uint64_t at = p;
  pthread_mutex_lock(&lock);
  for (size_t i = first_from(p > longest ? p - longest : 0); i < nranges && ranges[i].lo < end;
       i++) {
    uint64_t lo = ranges[i].lo > at ? ranges[i].lo : at;
    uint64_t hi = ranges[i].hi < end ? ranges[i].hi : end;
    if (hi <= lo) {
      continue; /* before p, or within what an earlier range covers */
    }
    if (lo > at && parts < max) {
      out[parts][0] = at;
      out[parts++][1] = lo - at;
    }
    *spilled += hi - lo;
    at = hi;
  }
  pthread_mutex_unlock(&lock);
  if (at < end && parts < max) {
    out[parts][0] = at;
    out[parts++][1] = end - at;
  }
  return parts;
}

CUresult spill_keep_on_host(uint64_t p, uint64_t n, int dev) {
  CUresult rc = CUDA_ERROR_NOT_SUPPORTED;
  if (n == 0) {
    return CUDA_SUCCESS;
  }
  if (real.cuMemAdvise_v2) {
    CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0},
                  device = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
    rc = real.cuMemAdvise_v2(p, n, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host);
    if (rc == CUDA_SUCCESS) {
      rc = real.cuMemAdvise_v2(p, n, CU_MEM_ADVISE_SET_ACCESSED_BY, device);
    }
  } else if (real.cuMemAdvise) { /* a driver before CUDA 12.2 */
    rc = real.cuMemAdvise(p, n, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_DEVICE_CPU);
    if (rc == CUDA_SUCCESS) {
      rc = real.cuMemAdvise(p, n, CU_MEM_ADVISE_SET_ACCESSED_BY, dev);
    }
  }
  return rc;
}

void spill_counts(int dev, spill_counts_t *out) {
  CHECK_DEVICE(dev);
  const struct budget *b = &budgets[dev];
  *out = (spill_counts_t){.budget = spill_budget(dev),
                          .now = atomic_load_explicit(&b->used, memory_order_relaxed),
                          .peak = atomic_load_explicit(&b->peak, memory_order_relaxed),
                          .allocs = atomic_load_explicit(&b->allocs, memory_order_relaxed)};
}

/* In a fork child: nothing is spilled (the parent's memory is not the child's); the ranges are
 * abandoned unread, since another thread may have been changing them. */
static void fork_child(void) {
  pthread_mutex_init(&lock, NULL);
  if (ninherited < 8) {
    inherited[ninherited++] = ranges;
  }
  ranges = NULL;
  nranges = capranges = 0;
  next_id = longest = 0;
  atomic_store(&live, 0);
  for (int dev = 0; dev < GPUCAP_MAX_DEVICES; dev++) {
    atomic_store(&budgets[dev].used, 0);
    atomic_store(&budgets[dev].peak, 0);
    atomic_store(&budgets[dev].allocs, 0);
  }
}
FORK_CHILD(fork_child)
