/* The pass-through path (see shim/pool/passthru.h): admission under the cap, the records of the
 * blocks and arrays the driver made under a charge, and the per-device counters the exit report
 * shows for memory served outside the pools.
 * Locking: each record table has its own mutex (shim/pool/charges.h), never held across a driver
 * call; the counters are atomics.
 */
#include "shim/pool/passthru.h"

#include "shim/accounting/cap.h"
#include "shim/base/check.h"
#include "shim/base/fork.h"
#include "shim/accounting/ledger.h"
#include "shim/base/log.h"
#include "shim/accounting/oom.h"
#include "shim/pool/pending.h"
#include "shim/base/real.h"
#include "shim/accounting/spill.h"
#include "shim/accounting/trace.h"

#include <stdatomic.h>

static charges_t blocks = CHARGES_INIT; /* pass-through blocks: address -> charge */
static charges_t arrays = CHARGES_INIT; /* array or mipmapped-array handle -> charge */

/* Counters of the pass-through path, per device, for the exit report. */
struct counters {
  _Atomic uint64_t allocs, frees, ooms, in_use, peak, largest;
};
static struct counters counters[GPUCAP_MAX_DEVICES];

static void count_alloc(int dev, uint64_t bytes) {
  CHECK_DEVICE(dev);
  struct counters *c = &counters[dev];
  uint64_t now = atomic_fetch_add(&c->in_use, bytes) + bytes;
  uint64_t peak = atomic_load(&c->peak), largest = atomic_load(&c->largest);
  while (now > peak && !atomic_compare_exchange_weak(&c->peak, &peak, now)) {
  }
  while (bytes > largest && !atomic_compare_exchange_weak(&c->largest, &largest, bytes)) {
  }
  atomic_fetch_add(&c->allocs, 1);
}

/* Takes a block out of the counters, and records its free at `ticket` in the trace (its charge
 * is returned separately). */
static void forget_block(uint64_t ptr, const charge_t *e, uint64_t ticket) {
  CHECK_DEVICE(e->dev);
  if (e->managed) {
    cap_managed_sub(e->dev, e->bytes - e->spill);
  }
  atomic_fetch_sub(&counters[e->dev].in_use, e->bytes);
  atomic_fetch_add(&counters[e->dev].frees, 1);
  ledger_sub(e->dev, e->lib, e->bytes);
  trace_spilled(e->spill);
  trace_fill(ticket, TRACE_FREE, e->dev, ptr, e->bytes, e->bytes, e->lib);
  trace_spilled(0);
}

uint64_t passthru_charge_of(const charge_t *e) {
  return e->kind == PASSTHRU_IN_POOL ? 0 : e->bytes - e->spill;
}

/* Returns what a block was charged, the cap's part and the spill budget's. */
static void credit_charge(const charge_t *e) {
  cap_credit(e->dev, passthru_charge_of(e));
  if (e->spill > 0) {
    spill_credit(e->dev, e->spill);
    spill_forget(e->aux); /* its spilled range (passthru_spill) */
  }
}

/* Returns a tracked block's charge once the driver no longer has it. */
static void credit_block(uint64_t ptr, const charge_t *e) {
  forget_block(ptr, e, trace_ticket());
  credit_charge(e);
}

static void credit_array(uint64_t handle, const charge_t *e) {
  (void)handle;
  ledger_sub(e->dev, e->lib, e->bytes);
  cap_credit(e->dev, e->bytes);
}

/* passthru_track's, with aux (the pool of a PASSTHRU_IN_POOL block; a spilled block's range in
 * shim/accounting/spill.h), the bytes of the charge that are the spill budget's, the library to
 * charge in the ledger, and whether the block is managed memory. */
static CUresult track(uint64_t ptr, int dev, uint64_t bytes, enum passthru_kind kind, uint64_t aux,
                      uint64_t spill, int lib, bool managed, passthru_free_fn driver_free,
                      void *arg) {
  charge_t e = {.bytes = bytes,
                .spill = spill,
                .aux = aux,
                .ctx = NULL,
                .dev = dev,
                .kind = (int)kind,
                .lib = lib,
                .managed = managed},
           old;
  if (kind == PASSTHRU_CONTEXT) {
    real.cuCtxGetCurrent(&e.ctx); /* the context whose teardown frees the block */
  }
  int put = charges_put(&blocks, ptr, &e, &old);
  if (put < 0) {
    driver_free(ptr, arg);
    credit_charge(&e);
    log_msg(LOG_ERROR, "out of host memory while recording a device allocation");
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (put > 0) {
    credit_block(ptr, &old); /* freed in a way gpucap did not see */
  }
  if (managed) {
    cap_managed_add(dev, bytes - spill);
  }
  count_alloc(dev, bytes);
  ledger_add(dev, e.lib, bytes);
  trace_spilled(spill);
  trace_note(TRACE_ALLOC, dev, ptr, bytes, bytes, e.lib);
  trace_spilled(0);
  trace_poll();
  return CUDA_SUCCESS;
}

CUresult passthru_track(uint64_t ptr, int dev, uint64_t bytes, enum passthru_kind kind,
                        passthru_free_fn driver_free, void *arg) {
  return track(ptr, dev, bytes, kind, 0, 0, ledger_caller(), false, driver_free, arg);
}

CUresult passthru_track_in_pool(uint64_t ptr, int dev, uint64_t bytes, CUmemoryPool pool,
                                passthru_free_fn driver_free, void *arg) {
  return track(ptr, dev, bytes, PASSTHRU_IN_POOL, (uint64_t)(uintptr_t)pool, 0, ledger_caller(),
               false, driver_free, arg);
}

/* A block of a destroyed pool takes its own charge (passthru_pool_gone). */
struct gone {
  uint64_t pool;
  uint64_t added[GPUCAP_MAX_DEVICES];
};

static void own_charge(charge_t *e, void *arg) {
  struct gone *g = arg;
  if (e->kind == PASSTHRU_IN_POOL && e->aux == g->pool) {
    e->kind = PASSTHRU_ORDERED;
    e->aux = 0;
    g->added[e->dev] += e->bytes;
  }
}

void passthru_pool_gone(CUmemoryPool pool) {
  struct gone g = {.pool = (uint64_t)(uintptr_t)pool};
  charges_update(&blocks, own_charge, &g);
  for (int dev = 0; dev < GPUCAP_MAX_DEVICES; dev++) {
    if (g.added[dev] > 0) {
      cap_add(dev, g.added[dev]);
    }
  }
}

CUresult passthru_current_device(int *dev) {
  CUresult rc = cap_current_device(dev);
  if (rc == CUDA_ERROR_INVALID_DEVICE) {
    *dev = -1;
    return CUDA_SUCCESS;
  }
  return rc;
}

bool passthru_prepare(bool args_ok, int *dev, CUresult *rc) {
  *rc = CUDA_SUCCESS;
  if (!args_ok) {
    return false;
  }
  CUresult q = passthru_current_device(dev);
  if (q == CUDA_SUCCESS) {
    return true;
  }
  *rc = cap_no_context(q) ? CUDA_SUCCESS : q;
  return false;
}

CUresult passthru_refuse(int dev, uint64_t bytes) {
  return passthru_refuse_as(dev, bytes, ledger_caller());
}

/* Counts and reports a refusal (spill: the spill budget refused what the cap did). */
static CUresult refuse(int dev, uint64_t bytes, int lib, bool spill) {
  if (dev < 0) {
    log_msg(LOG_ERROR, "device ordinal beyond %d: allocation refused", GPUCAP_MAX_DEVICES - 1);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  atomic_fetch_add(&counters[dev].ooms, 1);
  /* The pools' idle regions were given back before the refusal (ctx_admit). */
  oom_facts_t f = {.dev = dev,
                   .bytes = bytes,
                   .cap = cap_limit(dev),
                   .charged = cap_used(dev),
                   .driver = cap_counted_overhead(dev)};
  if (spill) {
    f.spill_max = spill_budget(dev);
    f.spilled = spill_used(dev);
  }
  enum oom_verdict v = oom_judge(&f);
  oom_tally(dev, v);
  trace_refused(dev, bytes, oom_verdict_name(v), lib);
  trace_poll();
  oom_print(oom_rank(), &f, v, NULL, 0);
  return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult passthru_refuse_as(int dev, uint64_t bytes, int lib) {
  return refuse(dev, bytes, lib, false);
}

CUresult passthru_refuse_spill(int dev, uint64_t bytes, int lib) {
  return refuse(dev, bytes, lib, true);
}

static CUresult free_spilled(uint64_t ptr, void *arg) {
  (void)arg;
  return real.cuMemFree_v2(ptr);
}

/* The part of `bytes` that the cap still holds on dev, in whole 2 MiB (the GPU's large page:
 * the spilled part then starts on one), charged; 0 when none. A charge refused after the room
 * was read (another thread charged first, or a shared budget is fuller than the cap) is tried
 * again with the room read again, a few times; then all of it spills. */
static uint64_t charge_under_cap(int dev, uint64_t bytes) {
  const uint64_t step = UINT64_C(2) << 20;
  for (int tries = 0; tries < 4; tries++) {
    uint64_t room = cap_room(dev);
    uint64_t part = (room < bytes ? room : bytes) / step * step;
    if (part == 0 || cap_charge(dev, part)) {
      return part;
    }
  }
  return 0;
}

CUresult passthru_spill(CUdeviceptr *dptr, int dev, uint64_t bytes, unsigned flags, int lib,
                        bool *budget_full) {
  *budget_full = false;
  if (!real.cuMemAllocManaged || !real.cuMemFree_v2) {
    return CUDA_ERROR_OUT_OF_MEMORY; /* a driver without managed memory: nothing to spill to */
  }
  uint64_t kept = charge_under_cap(dev, bytes), spill = bytes - kept;
  if (!spill_charge(dev, spill)) {
    cap_credit(dev, kept);
    *budget_full = true;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUdeviceptr p = 0;
  uint64_t range = 0;
  CUresult rc = real.cuMemAllocManaged(&p, (size_t)bytes, flags);
  if (rc == CUDA_SUCCESS) {
    rc = spill_keep_on_host(p + kept, spill, dev);
    if (rc != CUDA_SUCCESS) {
      log_msg(LOG_ERROR,
              "device %d: cannot keep %llu spilled bytes on the host (the driver "
              "answered %d to cuMemAdvise): allocation refused",
              dev, (unsigned long long)spill, (int)rc);
    } else if ((range = spill_remember(p, kept, bytes, dev)) == 0) {
      log_msg(LOG_ERROR, "out of host memory while recording a spilled allocation");
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc != CUDA_SUCCESS) {
      real.cuMemFree_v2(p); /* never left where the device could take it past the cap */
      rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  if (rc != CUDA_SUCCESS) {
    cap_credit(dev, kept);
    spill_credit(dev, spill);
    return rc;
  }
  log_msg(LOG_DEBUG, "device %d: %llu bytes beyond the cap spilled to host memory (%llu under it)",
          dev, (unsigned long long)spill, (unsigned long long)kept);
  rc = track(p, dev, bytes, PASSTHRU_CONTEXT, range, spill, lib, true, free_spilled, NULL);
  if (rc == CUDA_SUCCESS) {
    *dptr = p;
  }
  return rc;
}

bool passthru_admit(int dev, uint64_t bytes) {
  if (dev < 0) {
    return false;
  }
  if (cap_charge(dev, bytes)) {
    return true;
  }
  pending_wait(dev); /* memory the stream-ordered frees are about to give back */
  return cap_charge(dev, bytes);
}

CUresult passthru_settle(CUresult rc, uint64_t ptr, int dev, uint64_t bytes,
                         enum passthru_kind kind, passthru_free_fn driver_free, void *arg) {
  if (rc != CUDA_SUCCESS) {
    cap_credit(dev, bytes);
    return rc;
  }
  return passthru_track(ptr, dev, bytes, kind, driver_free, arg);
}

CUresult passthru_settle_managed(CUresult rc, uint64_t ptr, int dev, uint64_t bytes,
                                 passthru_free_fn driver_free) {
  if (rc != CUDA_SUCCESS) {
    cap_credit(dev, bytes);
    return rc;
  }
  return track(ptr, dev, bytes, PASSTHRU_CONTEXT, 0, 0, ledger_caller(), true, driver_free, NULL);
}

CUresult passthru_untrack_free(uint64_t ptr, passthru_free_fn driver_free, void *arg,
                               passthru_after_fn after) {
  charge_hold_t *held = ptr ? charges_hold(&blocks, ptr) : NULL;
  /* The free's place among the rows is taken before the driver may hand the address out again
   * (to another thread, whose allocation row must come after it). */
  uint64_t ticket = held ? trace_ticket() : 0;
  CUresult rc = driver_free(ptr, arg);
  charge_t e;
  if (charges_settle(&blocks, ptr, held, rc == CUDA_SUCCESS, &e)) {
    forget_block(ptr, &e, ticket);
    if (after) {
      after(&e, arg);
    } else {
      credit_charge(&e);
    }
  } else {
    trace_fill(ticket, TRACE_NONE, -1, 0, 0, 0, -1);
  }
  trace_poll();
  return rc;
}

bool passthru_remember_array(uint64_t handle, int dev, uint64_t bytes) {
  charge_t e = {.bytes = bytes, .ctx = NULL, .dev = dev, .lib = ledger_caller()}, stale;
  real.cuCtxGetCurrent(&e.ctx);
  int put = charges_put(&arrays, handle, &e, &stale);
  if (put > 0) {
    credit_array(handle, &stale);
  }
  if (put >= 0) {
    ledger_add(dev, e.lib, bytes);
  }
  return put >= 0;
}

CUresult passthru_destroy_array(uint64_t handle, CUresult (*destroy)(uint64_t handle, void *arg),
                                void *arg) {
  charge_t e;
  charge_hold_t *held = handle ? charges_hold(&arrays, handle) : NULL;
  CUresult rc = destroy(handle, arg);
  if (charges_settle(&arrays, handle, held, rc == CUDA_SUCCESS, &e)) {
    credit_array(handle, &e);
  }
  return rc;
}

static bool made_in(const charge_t *e, const void *ctx) {
  return e->kind == PASSTHRU_CONTEXT && e->ctx == ctx;
}

static bool ordered_on(const charge_t *e, const void *dev) {
  return (e->kind == PASSTHRU_ORDERED || e->kind == PASSTHRU_IN_POOL) &&
         e->dev == *(const int *)dev;
}

void passthru_drop_context(CUcontext ctx) {
  if (ctx) {
    charges_drop(&blocks, made_in, ctx, credit_block);
    charges_drop_context(&arrays, ctx, credit_array);
  }
}

void passthru_drop_ordered(int dev) {
  charges_drop(&blocks, ordered_on, &dev, credit_block);
}

void passthru_counts(int dev, passthru_counts_t *out) {
  CHECK_DEVICE(dev);
  const struct counters *c = &counters[dev];
  *out = (passthru_counts_t){.allocs = atomic_load(&c->allocs),
                             .frees = atomic_load(&c->frees),
                             .ooms = atomic_load(&c->ooms),
                             .in_use = atomic_load(&c->in_use),
                             .peak = atomic_load(&c->peak),
                             .largest = atomic_load(&c->largest)};
}

/* In a fork child: forget every block, array and counter (the parent's memory is not the
 * child's). */
static void fork_child(void) {
  charges_fork_child(&blocks);
  charges_fork_child(&arrays);
  for (int dev = 0; dev < GPUCAP_MAX_DEVICES; dev++) {
    struct counters *c = &counters[dev];
    atomic_store(&c->allocs, 0);
    atomic_store(&c->frees, 0);
    atomic_store(&c->ooms, 0);
    atomic_store(&c->in_use, 0);
    atomic_store(&c->peak, 0);
    atomic_store(&c->largest, 0);
  }
}
FORK_CHILD(fork_child)
