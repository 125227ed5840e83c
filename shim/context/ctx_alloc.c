/* A context's allocation path (see shim/context/ctx.h), one step after another, each only when
 * the ones before it could not serve the request:
 *   serve    the pool's own policy (core/bfc.h): best fit; retiring the deferred frees the
 *            device has finished (one context synchronize retires a whole batch instead of one
 *            per cudaFree); growth under the cap, in the thread's own arena;
 *   relieve  the device's other pools give their wholly free regions back and its pending
 *            stream-ordered frees their charges, then serve again;
 *   borrow   another arena of the context lends a free chunk that fits (after growth: it takes
 *            that arena's lock, the contention arenas are there to avoid);
 *   spill    host memory under the spill budget (GPUCAP_OVERSUBSCRIBE);
 *   refuse   out of memory, with one report per burst of failures (shim/accounting/oom.h).
 * The pool is entered through ctx_lock_arena (another arena on contention); its lock is dropped
 * across every synchronize and every wait. Also the admission of memory the pools do not serve
 * (ctx_admit), which gives the pools' wholly free regions back before refusing.
 */
#include "shim/context/ctx_impl.h"

#include "shim/accounting/cap.h"
#include "shim/context/capture.h"
#include "shim/base/check.h"
#include "shim/accounting/ledger.h"
#include "shim/base/log.h"
#include "shim/accounting/oom.h"
#include "shim/pool/ordered.h"
#include "shim/accounting/overhead.h"
#include "shim/pool/passthru.h"
#include "shim/pool/pending.h"
#include "shim/base/real.h"
#include "shim/accounting/share.h"
#include "shim/accounting/spill.h"
#include "shim/accounting/trace.h"

#include <errno.h>

/* Synchronises o's context from this thread (push, synchronize, pop) and retires the
 * deferred frees that covered; `mine` is the thread's current context, restored if the pop
 * fails. Called and returns with o's lock held; drops it meanwhile. */
static void settle_other(struct ctx *o, CUcontext mine) {
  CHECK_HELD(&o->lock);
  uint64_t in_use, deferred, free_b, reserved;
  bfc_usage(o->pool.bfc, &in_use, &deferred, &free_b, &reserved);
  CUcontext handle = atomic_load_explicit(&o->handle, memory_order_acquire);
  if (deferred == 0 || !handle || !capture_sync_enter()) {
    return; /* a synchronisation would invalidate a capture going on (shim/context/capture.h) */
  }
  uint64_t mark = bfc_defer_mark(o->pool.bfc);
  pthread_mutex_unlock(&o->lock);
  CUcontext popped;
  bool synced = real.cuCtxPushCurrent_v2(handle) == CUDA_SUCCESS;
  if (synced) {
    synced = real.cuCtxSynchronize() == CUDA_SUCCESS;
    if (real.cuCtxPopCurrent_v2(&popped) != CUDA_SUCCESS) {
      real.cuCtxSetCurrent(mine); /* never leave the program in another context */
    }
  }
  capture_sync_leave();
  pthread_mutex_lock(&o->lock);
  if (synced && o->pool.bfc) {
    bfc_retire_upto(o->pool.bfc, mark);
  }
}

/* The idle release (GPUCAP_RELEASE_AFTER, VMM-backed pools; and any pool above the device's
 * guarantee): once due (pool_idle_due), the whole free units or regions above what the pool
 * keeps are released, after settling the deferred frees (a synchronize, skipped while a capture
 * is going on). Lock held; dropped across the synchronize. */
static void release_idle(struct ctx *c, bool allocated) {
  CHECK_HELD(&c->lock);
  uint64_t keep = 0;
  if (!pool_idle_due(&c->pool, allocated, &keep)) {
    return;
  }
  CUcontext mine = NULL;
  if (real.cuCtxGetCurrent && real.cuCtxGetCurrent(&mine) == CUDA_SUCCESS) {
    settle_other(c, mine);
  }
  pool_trim_to(&c->pool, keep);
}

/* Calls fn(o, arg) with o's lock held for each live pooled context o on device dev (any device
 * when dev < 0) but `skip`, taking each lock in turn: the caller holds none. */
static void each_pool(int dev, const struct ctx *skip, void (*fn)(struct ctx *o, void *arg),
                      void *arg) {
  int n = ctx_count();
  for (int i = 0; i < n; i++) {
    struct ctx *o = ctx_slot(i);
    if (o == skip || atomic_load_explicit(&o->dying, memory_order_acquire)) {
      continue;
    }
    pthread_mutex_lock(&o->lock);
    if (o->pool.bfc && (dev < 0 || o->dev == dev)) {
      fn(o, arg);
    }
    pthread_mutex_unlock(&o->lock);
  }
}

static void release_idle_of(struct ctx *o, void *arg) {
  (void)arg;
  release_idle(o, false);
}

void ctx_release_idle(int dev) {
  each_pool(dev, NULL, release_idle_of, NULL);
}

/* Settles o's deferred frees; arg: the thread's current context, to restore. */
static void settle_of(struct ctx *o, void *arg) {
  settle_other(o, arg);
}

void ctx_settle_all(void) {
  CUcontext mine = NULL;
  if (!real.cuCtxGetCurrent || real.cuCtxGetCurrent(&mine) != CUDA_SUCCESS) {
    return; /* the thread's context, to restore, is not known */
  }
  each_pool(-1, NULL, settle_of, mine);
}

__attribute__((constructor)) static void settle_before_captures(void) {
  capture_before_begin(ctx_settle_all);
}

struct trim_arg {
  CUcontext mine; /* the thread's current context, to restore */
  uint64_t total; /* bytes released */
};

static void trim_of(struct ctx *o, void *arg) {
  struct trim_arg *t = arg;
  uint64_t released = 0;
  settle_other(o, t->mine); /* deferred frees may free whole regions */
  if (o->pool.bfc) {
    bfc_trim(o->pool.bfc, &released);
  }
  t->total += released;
}

/* Releases the fully free regions of the pools on device dev but `skip`'s (settling their
 * deferred frees first, `mine` being the thread's current context); returns the bytes
 * released. Takes each object's lock in turn: the caller holds none. */
static uint64_t trim_device(int dev, const struct ctx *skip, CUcontext mine) {
  struct trim_arg t = {.mine = mine, .total = 0};
  each_pool(dev, skip, trim_of, &t);
  return t.total;
}

static uint64_t trim_others(struct ctx *c) {
  return trim_device(c->dev, c, atomic_load_explicit(&c->handle, memory_order_acquire));
}

/* Releases the wholly free regions of every pool on device dev (after settling their deferred
 * frees); returns the bytes released. */
static uint64_t trim(int dev) {
  bool any = false;
  int n = ctx_count();
  for (int i = 0; i < n && !any; i++) {
    struct ctx *o = ctx_slot(i);
    pthread_mutex_lock(&o->lock);
    any = o->pool.bfc && o->dev == dev;
    pthread_mutex_unlock(&o->lock);
  }
  CUcontext mine = NULL;
  if (!any || !real.cuCtxGetCurrent || real.cuCtxGetCurrent(&mine) != CUDA_SUCCESS) {
    return 0; /* no pool there; or the thread's context, to restore, is not known */
  }
  return trim_device(dev, NULL, mine);
}

/* Another process of the shared budget was refused for want of room: give back this process's
 * idle pool memory on those devices (docs/design.md, "Shared budgets"). No lock held. */
static void answer_asks(void) {
  uint64_t mask = share_asked();
  for (int dev = 0; mask; dev++, mask >>= 1) {
    if (mask & 1) {
      share_answered(dev);
      uint64_t released = trim(dev);
      log_msg(LOG_DEBUG, "device %d: %llu bytes of idle pool memory given back", dev,
              (unsigned long long)released);
    }
  }
}

void ctx_relieve(int dev) {
  trim(dev);
  pending_wait(dev);
  ordered_relieve(dev);
}

bool ctx_retry(int dev, CUresult rc) {
  if (rc != CUDA_ERROR_OUT_OF_MEMORY || dev < 0) {
    return false;
  }
  /* Asked again even when this call gave nothing back: another thread's relief may have. */
  ctx_relieve(dev);
  return true;
}

bool ctx_admit(int dev, uint64_t bytes) {
  answer_asks();
  overhead_check(dev);
  if (passthru_admit(dev, bytes)) {
    return true;
  }
  /* Memory the program freed into a pool, or the driver's pools keep, or that the driver no
   * longer holds for itself: this allocation must not fail for want of it. The charge is tried
   * again even when this call gave nothing back: another thread's relief, under way when this
   * one began, may have made the room. */
  if (dev < 0) {
    return false;
  }
  ctx_relieve(dev);
  overhead_recheck(dev);
  return cap_charge(dev, bytes);
}

bool ctx_recharge(int dev, uint64_t admitted, uint64_t exact) {
  if (exact > admitted && !ctx_admit(dev, exact - admitted)) {
    cap_credit(dev, admitted);
    return false;
  }
  if (exact < admitted) {
    cap_credit(dev, admitted - exact);
  }
  return true;
}

/* One allocation on its way through the steps of ctx_alloc. */
struct request {
  uint64_t bytes;
  int lib;             /* the library that asked (shim/accounting/ledger.h) */
  int err;             /* the last pool's answer: 0, -ENOMEM or -EAGAIN (refused), or another */
  int nooms;           /* the pool's refusals in this call (counted in its num_ooms) */
  uint64_t addr, held; /* when served: the block and its chunk */
  struct ctx *lender;  /* borrowed: the arena that served it */
  bool spill_full;     /* spilling was refused for want of spill budget */
  CUresult rc;         /* a step's own answer, when it ends the call otherwise */
};

/* Where a step leaves the request. */
enum step { NEXT, SERVED, ANSWERED, TO_DRIVER };

/* Synchronises c's context with c's lock dropped (not while a capture is counted) and retires
 * the deferred frees the synchronisation covered. Returns false with q->rc set when the
 * synchronize failed. */
static bool retire(struct ctx *c, struct request *q) {
  if (!capture_sync_enter()) {
    return true; /* a capture began meanwhile: nothing is retired */
  }
  uint64_t mark = bfc_defer_mark(c->pool.bfc);
  pthread_mutex_unlock(&c->lock);
  CUresult sync = real.cuCtxSynchronize();
  capture_sync_leave();
  pthread_mutex_lock(&c->lock);
  if (sync != CUDA_SUCCESS) {
    q->rc = sync;
    return false;
  }
  if (c->pool.bfc) {
    bfc_retire_upto(c->pool.bfc, mark);
  }
  return true;
}

/* Serve: the pool's own policy (core/bfc.h: best fit, retiring what the device finished,
 * growth under the cap). The deferred frees are retired early, before they are a quarter of
 * the pool's free memory: waiting until a request fails lets placement drift around their
 * holes and needs a looser cap (docs/benchmarks.md); a VMM-backed pool also retires before it
 * grows, or units mapped around a deferred block would stay mapped for a fragment. While a
 * capture goes on nothing can be retired and the pool grows past its deferred frees. */
static enum step serve(struct ctx *c, struct request *q) {
  for (int tries = 0;; tries++) {
    if (!c->pool.bfc) {
      return TO_DRIVER; /* its context was destroyed while the lock was dropped */
    }
    uint64_t in_use, deferred, free_b, reserved;
    bfc_usage(c->pool.bfc, &in_use, &deferred, &free_b, &reserved);
    bool can_sync = !capture_any(); /* shim/context/capture.h */
    if (!(can_sync && tries == 0 && deferred > 0 &&
          (deferred >= free_b / 4 || (c->pool.vmm && free_b < q->bytes)))) {
      c->pool.last_driver_rc = CUDA_SUCCESS;
      q->err = can_sync
                   ? bfc_alloc_tagged(c->pool.bfc, q->bytes, (uint8_t)q->lib, &q->addr, &q->held)
                   : bfc_alloc_nosync(c->pool.bfc, q->bytes, (uint8_t)q->lib, &q->addr, &q->held);
      q->nooms += q->err == -ENOMEM;
      if (q->err != -EAGAIN || tries >= 16 || !can_sync) {
        return q->err == 0 ? SERVED : NEXT;
      }
    }
    if (!retire(c, q)) {
      return ANSWERED;
    }
  }
}

/* Relieve: the device's other pools give their wholly free regions back, and the stream-ordered
 * frees not yet reached by their streams the charges they are about to return; then the pool is
 * asked again, whatever this thread gave back (another thread's relief may have made the room).
 * Drops c's lock meanwhile. */
static enum step relieve(struct ctx *c, struct request *q) {
  pthread_mutex_unlock(&c->lock);
  trim_others(c);
  pending_wait(c->dev);
  ordered_relieve(c->dev);
  overhead_recheck(c->dev); /* the driver may hold less than counted */
  pthread_mutex_lock(&c->lock);
  return serve(c, q);
}

/* Borrow (docs/design.md, "Arenas"): another arena of c's context may serve the block, from a
 * free chunk or by growing (its free end and the room left under the cap may fit together where
 * c's could not), never synchronising (bfc_alloc_nosync; the relief settled its deferred frees).
 * Drops c's lock while each other arena is asked under its own lock (never two at once); the
 * lender makes the block's trace row and ledger entry, and takes its own refusal back out of its
 * count (the program did not see it). */
static enum step borrow(struct ctx *c, struct request *q) {
  CHECK_HELD(&c->lock);
  CUcontext handle = atomic_load_explicit(&c->handle, memory_order_acquire);
  pthread_mutex_unlock(&c->lock);
  int n = ctx_count();
  for (int i = 0; i < n && !q->lender && handle; i++) {
    struct ctx *o = ctx_slot(i);
    if (o == c || atomic_load_explicit(&o->handle, memory_order_acquire) != handle ||
        atomic_load_explicit(&o->dying, memory_order_acquire)) {
      continue;
    }
    pthread_mutex_lock(&o->lock);
    if (o->pool.bfc && atomic_load_explicit(&o->handle, memory_order_acquire) == handle) {
      int err = bfc_alloc_nosync(o->pool.bfc, q->bytes, (uint8_t)q->lib, &q->addr, &q->held);
      o->ooms_taken_back += err == -ENOMEM;
      if (err == 0) {
        q->lender = o;
        trace_note(TRACE_ALLOC, o->dev, q->addr, q->bytes, q->held, q->lib);
        ledger_add(o->dev, q->lib, q->held);
      }
    }
    pthread_mutex_unlock(&o->lock);
  }
  pthread_mutex_lock(&c->lock);
  return q->lender ? SERVED : NEXT;
}

/* Spill (docs/design.md, "Beyond the card"): host memory under the spill budget, outside every
 * pool, so the pool is left as the refusal left it. Drops c's lock across the driver's calls.
 * NEXT when the spill budget is full too (the refusal then names it). */
static enum step spill(struct ctx *c, struct request *q, CUdeviceptr *dptr) {
  if (!spill_devices(c->dev)) {
    return NEXT;
  }
  int dev = c->dev;
  bool driver_full = c->pool.driver_full;
  uint64_t others_hold = c->pool.others_hold;
  CUcontext handle = atomic_load_explicit(&c->handle, memory_order_acquire);
  pthread_mutex_unlock(&c->lock);
  q->rc = passthru_spill(dptr, dev, q->bytes, CU_MEM_ATTACH_GLOBAL, q->lib, &q->spill_full);
  pthread_mutex_lock(&c->lock);
  bool same = c->pool.bfc && atomic_load_explicit(&c->handle, memory_order_acquire) == handle;
  if (q->rc == CUDA_SUCCESS && same) {
    c->ooms_taken_back += q->err == -ENOMEM && q->nooms > 0; /* served: the program saw none */
  }
  if (q->rc == CUDA_SUCCESS || !q->spill_full) {
    return ANSWERED;
  }
  if (!same) {
    q->rc = passthru_refuse_spill(dev, q->bytes, q->lib);
    return ANSWERED;
  }
  c->pool.driver_full = driver_full;
  c->pool.others_hold = others_hold;
  return NEXT;
}

/* Judges, counts and reports a refusal of the pool (facts as the pool saw them; pool_idle: the
 * bytes it held from the driver that the program did not) once its lock is dropped: the
 * device's other pools are looked at now. */
static void oom_refused(oom_facts_t *f, uint64_t rank, uint64_t pool_idle, const char *report,
                        size_t len, int lib) {
  uint64_t idle = ctx_idle_bytes(f->dev);
  f->cap = cap_limit(f->dev);
  f->charged = cap_used(f->dev);
  f->driver = cap_counted_overhead(f->dev);
  f->others_idle = idle > pool_idle ? idle - pool_idle : 0;
  enum oom_verdict v = oom_judge(f);
  oom_tally(f->dev, v);
  trace_refused(f->dev, f->bytes, oom_verdict_name(v), lib);
  trace_poll();
  oom_print(rank, f, v, report, len);
}

/* Refuse: the out-of-memory error with its evidence (shim/accounting/oom.h), from the pool's
 * facts taken under c's lock, which it drops. */
static CUresult refuse(struct ctx *c, struct request *q) {
  static _Thread_local char text[8192];
  oom_facts_t facts = {.dev = c->dev,
                       .bytes = q->bytes,
                       .driver_full = c->pool.driver_full,
                       .others_hold = c->pool.others_hold};
  if (q->spill_full) {
    facts.spill_max = spill_budget(c->dev);
    facts.spilled = spill_used(c->dev);
  }
  bfc_stats_t st;
  bfc_stats(c->pool.bfc, &st);
  facts.free_bytes = st.free_bytes;
  facts.largest = st.largest_free_block_bytes;
  facts.in_capture = capture_any() ? st.deferred_bytes : 0;
  uint64_t rank = oom_rank();
  bool report = oom_wants_report(rank);
  if (report) {
    bfc_format_report(c->pool.bfc, q->bytes, text, sizeof text);
  }
  release_idle(c, false);
  pthread_mutex_unlock(&c->lock);
  oom_refused(&facts, rank, st.pool_bytes - st.bytes_in_use, report ? text : NULL, sizeof text,
              q->lib);
  return CUDA_ERROR_OUT_OF_MEMORY;
}

/* The block's trace row and ledger entry (before a free of it can take them out: c's lock),
 * the idle release, and c's lock dropped. */
static void served(struct ctx *c, struct request *q) {
  if (!q->lender) {
    trace_note(TRACE_ALLOC, c->dev, q->addr, q->bytes, q->held, q->lib);
    ledger_add(c->dev, q->lib, q->held);
    release_idle(c, true);
  }
  pthread_mutex_unlock(&c->lock);
  trace_poll();
}

/* The policy: serve, relieve, borrow, spill, refuse, each step only when the ones before it
 * could not serve the request (the file's opening comment says why in this order). */
CUresult ctx_alloc(CUdeviceptr *dptr, size_t bytes) {
  CUresult rc;
  answer_asks();
  struct ctx *c = ctx_current(&rc);
  if (!c) {
    return rc == CUDA_SUCCESS ? real.cuMemAlloc_v2(dptr, bytes) : rc;
  }
  struct request q = {.bytes = bytes, .lib = ledger_caller()};
  overhead_check(c->dev); /* the driver's own memory, before anything is admitted */
  c = ctx_lock_arena(c);
  c->pool.driver_full = false;
  c->pool.others_hold = 0;
  enum step s = serve(c, &q);
  if (s == NEXT && q.err == -ENOMEM) {
    s = relieve(c, &q);
  }
  bool refused = s == NEXT && (q.err == -ENOMEM || q.err == -EAGAIN);
  if (refused) {
    s = borrow(c, &q);
  }
  if (c->pool.bfc) { /* the program sees one refusal at most, and none when served */
    c->ooms_taken_back += (uint64_t)q.nooms - (q.err == -ENOMEM && !q.lender && q.nooms > 0);
  }
  if (refused && s == NEXT) {
    s = spill(c, &q, dptr);
  }
  if (s == NEXT && !c->pool.bfc) {
    s = TO_DRIVER; /* its context was destroyed while the lock was dropped */
  }
  switch (s) {
  case SERVED:
    served(c, &q);
    *dptr = q.addr;
    return CUDA_SUCCESS;
  case TO_DRIVER:
    pthread_mutex_unlock(&c->lock);
    return real.cuMemAlloc_v2(dptr, bytes);
  case ANSWERED:
    pthread_mutex_unlock(&c->lock);
    return q.rc;
  case NEXT:
    break;
  }
  if (refused) {
    return refuse(c, &q);
  }
  CUresult driver_rc = c->pool.last_driver_rc;
  trace_note(TRACE_ALLOC_FAILURE, c->dev, 0, bytes, 0, q.lib);
  release_idle(c, false);
  pthread_mutex_unlock(&c->lock);
  trace_poll();
  return driver_rc != CUDA_SUCCESS ? driver_rc : CUDA_ERROR_UNKNOWN;
}

CUresult ctx_alloc_pitch(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                         unsigned int element_size) {
  CUresult rc;
  if (!dptr || !pitch || width == 0 || height == 0 ||
      (element_size != 4 && element_size != 8 && element_size != 16)) {
    return real.cuMemAllocPitch_v2(dptr, pitch, width, height, element_size);
  }
  struct ctx *c = ctx_current(&rc);
  if (!c) {
    return rc == CUDA_SUCCESS ? real.cuMemAllocPitch_v2(dptr, pitch, width, height, element_size)
                              : rc;
  }
  size_t align = c->pool.pitch_align;
  size_t row = (width + align - 1) / align * align;
  if (row < width || row > 2147483647u || height > SIZE_MAX / row) {
    return real.cuMemAllocPitch_v2(dptr, pitch, width, height, element_size);
  }
  rc = ctx_alloc(dptr, row * height);
  if (rc == CUDA_SUCCESS) {
    *pitch = row;
  }
  return rc;
}

/* As the driver: with no usable current context nothing is freed (the block stays), and *rc
 * says why. */
static bool no_context(CUresult *rc) {
  int dev;
  CUresult q = cap_current_device(&dev);
  if (q != CUDA_SUCCESS && cap_no_context(q)) {
    *rc = q;
    return true;
  }
  return false;
}

bool ctx_free(uint64_t ptr, bool need_context, void (*forget)(uint64_t ptr), CUresult *rc) {
  struct ctx *c = ctx_owning_locked(ptr); /* found and freed under one hold of its lock */
  if (!c) {
    return false;
  }
  if (need_context && no_context(rc)) {
    pthread_mutex_unlock(&c->lock);
    return true;
  }
  if (forget) {
    forget(ptr); /* before the block can be handed out again */
  }
  uint64_t held = 0, requested = 0;
  uint8_t lib = 0;
  int err = bfc_free_deferred_tagged(c->pool.bfc, ptr, &held, &requested, &lib);
  int dev = c->dev;
  if (err == 0) {
    trace_note(TRACE_FREE, dev, ptr, requested, held, lib);
    release_idle(c, false);
  }
  pthread_mutex_unlock(&c->lock);
  if (err == 0) {
    ledger_sub(dev, lib, held);
  }
  trace_poll();
  if (err == -ENOENT) {
    return false;
  }
  *rc = err == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  return true;
}
