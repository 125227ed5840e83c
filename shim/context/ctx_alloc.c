/* A context's allocation path (see shim/context/ctx.h): serves a request from the context's pool,
 * and when the pool cannot, tries in order: retiring the deferred frees the device has finished
 * (one context synchronize retires a whole batch instead of one per cudaFree), the fully free
 * regions of the device's other contexts, and the device's pending stream-ordered frees; only
 * then refuses, with one report per burst of failures (shim/accounting/oom.h). The context's lock
 * is dropped across every synchronize and every wait. Also the admission of memory the pools do not
 * serve (ctx_admit), which gives the pools' wholly free regions back before refusing.
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
  uint64_t mark = bfc_defer_mark(o->pool.bfc), ticket = ctx_sync_begin(o);
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
  if (synced) {
    ctx_sync_end(o, ticket);
  }
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
  ctx_fronts_flush(c, false); /* before the pool shrinks */
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

/* Settles o's deferred frees, its fronts' cached blocks first (they are deferred frees too);
 * arg: the thread's current context, to restore. */
static void settle_of(struct ctx *o, void *arg) {
  ctx_fronts_flush(o, false);
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
  settle_of(o, t->mine); /* cached blocks and deferred frees may free whole regions */
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

/* Ends this call's part in the pool's slow path (pressed: it raised c->pressure; c's lock
 * held): frees take the fronts again once no call is in it. */
static void unpress(struct ctx *c, bool pressed) {
  if (pressed) {
    atomic_fetch_sub_explicit(&c->pressure, 1, memory_order_acq_rel);
  }
}

/* A block's row in the trace, recorded where the pool decided (lock held): for an allocation,
 * the chunk it holds; for a refusal, nothing. */
static void trace_block(struct ctx *c, enum trace_action action, uint64_t addr, uint64_t bytes,
                        int lib) {
  uint64_t held = 0;
  if (action == TRACE_ALLOC && trace_on()) {
    bfc_lookup(c->pool.bfc, addr, NULL, &held, NULL);
  }
  trace_note(action, c->dev, action == TRACE_ALLOC ? addr : 0, bytes, held, lib);
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

/* Borrowing (docs/design.md, "Arenas"): c's pool refused `bytes` after the device's wholly free
 * regions came back, but another arena of c's context may have a free chunk that fits. Called
 * with c's lock held; drops it while each other arena is asked under its own lock (never two
 * at once), and takes it again. Returns the arena that served the block, its trace row and
 * ledger entry made there, with *addr and *held; NULL when none could. */
static struct ctx *borrow(struct ctx *c, uint64_t bytes, int lib, uint64_t *addr, uint64_t *held) {
  CHECK_HELD(&c->lock);
  CUcontext handle = atomic_load_explicit(&c->handle, memory_order_acquire);
  struct ctx *lender = NULL;
  pthread_mutex_unlock(&c->lock);
  int n = ctx_count();
  for (int i = 0; i < n && !lender && handle; i++) {
    struct ctx *o = ctx_slot(i);
    if (o == c || atomic_load_explicit(&o->handle, memory_order_acquire) != handle ||
        atomic_load_explicit(&o->dying, memory_order_acquire)) {
      continue;
    }
    pthread_mutex_lock(&o->lock);
    if (o->pool.bfc && atomic_load_explicit(&o->handle, memory_order_acquire) == handle &&
        bfc_alloc_fit(o->pool.bfc, bytes, (uint8_t)lib, addr, held) == 0) {
      lender = o;
      trace_note(TRACE_ALLOC, o->dev, *addr, bytes, *held, lib);
      ledger_add(o->dev, lib, *held);
    }
    pthread_mutex_unlock(&o->lock);
  }
  pthread_mutex_lock(&c->lock);
  return lender;
}

CUresult ctx_alloc(CUdeviceptr *dptr, size_t bytes) {
  CUresult rc;
  answer_asks();
  struct ctx *c = ctx_current(&rc);
  if (!c) {
    return rc == CUDA_SUCCESS ? real.cuMemAlloc_v2(dptr, bytes) : rc;
  }
  int lib = ledger_caller();
  overhead_check(c->dev); /* the driver's own memory, before anything is admitted */
  uint64_t addr = 0, held = 0;
  bool fronts = ctx_fronts_on(), pressed = false;
  if (fronts && ctx_front_take(c, bytes, lib, &addr, &held)) { /* the thread's own front: no lock */
    *dptr = addr;
    return CUDA_SUCCESS;
  }
  int err, nooms = 0; /* the pool's refusals in this call (counted in its num_ooms) */
  pthread_mutex_lock(&c->lock);
  /* The thread's cached blocks the best fit could choose go back first: held apart, they
   * would make the pool place this request elsewhere, and that drift refused allocations at
   * tight caps that the pool alone served (docs/design.md, "Per-thread fronts"). */
  while (fronts && ctx_front_spill(c, bytes) > 0) {
  }
  c->pool.driver_full = false;
  c->pool.others_hold = 0;
  bool trimmed_others = false;
  for (int tries = 0;; tries++) {
    uint64_t in_use, deferred, free_b, reserved;
    if (!c->pool.bfc) { /* its context was destroyed while the lock was dropped */
      unpress(c, pressed);
      pthread_mutex_unlock(&c->lock);
      return real.cuMemAlloc_v2(dptr, bytes);
    }
    bfc_usage(c->pool.bfc, &in_use, &deferred, &free_b, &reserved);
    /* Retire early, once deferred memory is a quarter of the free memory: waiting until a
     * request fails lets placement drift around the deferred holes and needs a looser cap
     * (docs/benchmarks.md measures both policies). A VMM-backed pool also retires before it
     * grows (the request is more than its free memory): units mapped around a deferred block
     * would keep part of a unit mapped for a fragment once it is freed. */
    bool can_sync = !capture_any(); /* shim/context/capture.h */
    bool due = can_sync && tries == 0 && deferred > 0 &&
               (deferred >= free_b / 4 || (c->pool.vmm && free_b < bytes));
    if (!due) {
      c->pool.last_driver_rc = CUDA_SUCCESS;
      err = fronts ? bfc_alloc_fit(c->pool.bfc, bytes, (uint8_t)lib, &addr, &held) : -ENOSPC;
      while (err == -ENOSPC && fronts && ctx_front_spill(c, 0) > 0) { /* the thread's own first */
        err = bfc_alloc_fit(c->pool.bfc, bytes, (uint8_t)lib, &addr, &held);
      }
      if (err == -ENOSPC) {
        /* The pool would retire, grow or refuse: first every front's cached blocks come
         * back, and until this call ends frees bypass the fronts, so it grows and refuses as
         * it would with no front (docs/design.md, "Per-thread fronts"). */
        if (fronts) {
          if (!pressed) {
            pressed = true;
            atomic_fetch_add_explicit(&c->pressure, 1, memory_order_acq_rel);
          }
          ctx_fronts_flush(c, false);
        }
        /* While a capture goes on nothing deferred can be retired: the pool grows past it. */
        err = can_sync ? bfc_alloc_tagged(c->pool.bfc, bytes, (uint8_t)lib, &addr, &held)
                       : bfc_alloc_nosync(c->pool.bfc, bytes, (uint8_t)lib, &addr, &held);
        nooms += err == -ENOMEM;
      }
      if (err == -ENOMEM && !trimmed_others) {
        /* Other contexts' pools on this device may hold fully free regions under the same
         * cap, and stream-ordered frees not yet reached by their streams hold charges they are
         * about to return: give those back and try once more. */
        trimmed_others = true;
        pthread_mutex_unlock(&c->lock);
        trim_others(c);
        pending_wait(c->dev);
        ordered_relieve(c->dev);
        overhead_recheck(c->dev); /* the driver may hold less than counted */
        pthread_mutex_lock(&c->lock);
        /* Retry once whatever this thread gave back (another thread's relief may have made
         * the room), or (context destroyed meanwhile) let the driver answer above. */
        continue;
      }
      if (err != -EAGAIN || tries >= 16 || !can_sync) {
        break;
      }
    }
    /* Wait for the device work issued before the deferred frees, without holding the pool,
     * then make reusable exactly the blocks this synchronize covered. */
    if (!capture_sync_enter()) {
      continue; /* a capture began meanwhile: no synchronisation (can_sync is now false) */
    }
    uint64_t mark = bfc_defer_mark(c->pool.bfc), ticket = ctx_sync_begin(c);
    pthread_mutex_unlock(&c->lock);
    CUresult sync = real.cuCtxSynchronize();
    capture_sync_leave();
    if (sync == CUDA_SUCCESS) {
      ctx_sync_end(c, ticket);
    }
    pthread_mutex_lock(&c->lock);
    if (sync != CUDA_SUCCESS) {
      unpress(c, pressed);
      pthread_mutex_unlock(&c->lock);
      return sync;
    }
    if (c->pool.bfc) {
      bfc_retire_upto(c->pool.bfc, mark);
    }
  }
  static _Thread_local char oom_text[8192];
  bool refused = err == -ENOMEM || err == -EAGAIN;
  struct ctx *lender = refused && c->pool.bfc ? borrow(c, bytes, lib, &addr, &held) : NULL;
  if (c->pool.bfc) { /* the program sees one refusal at most, and none when served */
    c->ooms_taken_back += (uint64_t)nooms - (err == -ENOMEM && !lender && nooms > 0);
  }
  if (lender) {
    unpress(c, pressed);
    pthread_mutex_unlock(&c->lock);
    trace_poll();
    if (fronts) {
      ctx_front_track(lender, addr, held, bytes, lib);
    }
    *dptr = addr;
    return CUDA_SUCCESS;
  }
  bool spill_full = false;
  if (refused && spill_devices(c->dev)) {
    /* Beyond what the pool can serve under the cap: host memory under the spill budget
     * (docs/design.md, "Beyond the card"), outside every pool, so the pool is left as the
     * refusal left it. Its lock is dropped across the driver's calls. */
    int dev = c->dev;
    bool driver_full = c->pool.driver_full;
    uint64_t others_hold = c->pool.others_hold;
    CUcontext handle = atomic_load_explicit(&c->handle, memory_order_acquire);
    unpress(c, pressed);
    pressed = false;
    pthread_mutex_unlock(&c->lock);
    CUresult rc_spill = passthru_spill(dptr, dev, bytes, CU_MEM_ATTACH_GLOBAL, lib, &spill_full);
    pthread_mutex_lock(&c->lock);
    bool same = c->pool.bfc && atomic_load_explicit(&c->handle, memory_order_acquire) == handle;
    if (rc_spill == CUDA_SUCCESS && same) {
      c->ooms_taken_back += err == -ENOMEM && nooms > 0; /* served: the program saw none */
    }
    if (rc_spill == CUDA_SUCCESS || !spill_full || !same) {
      pthread_mutex_unlock(&c->lock);
      return rc_spill == CUDA_SUCCESS || !spill_full ? rc_spill
                                                     : passthru_refuse_spill(dev, bytes, lib);
    }
    c->pool.driver_full = driver_full;
    c->pool.others_hold = others_hold;
  }
  uint64_t rank = 0, pool_idle = 0;
  oom_facts_t facts = {.dev = c->dev,
                       .bytes = bytes,
                       .driver_full = c->pool.driver_full,
                       .others_hold = c->pool.others_hold};
  if (spill_full) {
    facts.spill_max = spill_budget(c->dev);
    facts.spilled = spill_used(c->dev);
  }
  if (err == 0) {
    *dptr = addr;
  } else if (refused) {
    bfc_stats_t st;
    bfc_stats(c->pool.bfc, &st);
    facts.free_bytes = st.free_bytes;
    facts.largest = st.largest_free_block_bytes;
    facts.in_capture = capture_any() ? st.deferred_bytes : 0;
    pool_idle = st.pool_bytes - st.bytes_in_use;
    rank = oom_rank();
    if (oom_wants_report(rank)) {
      bfc_format_report(c->pool.bfc, bytes, oom_text, sizeof oom_text);
    }
  }
  CUresult driver_rc = c->pool.last_driver_rc;
  int dev = c->dev;
  if (err == 0 || !refused) {
    trace_block(c, err == 0 ? TRACE_ALLOC : TRACE_ALLOC_FAILURE, addr, bytes, lib);
  }
  if (err == 0) {
    ledger_add(dev, lib, held); /* before a free of the block can take it out (its lock) */
  }
  if (c->pool.bfc) {
    release_idle(c, err == 0);
  }
  unpress(c, pressed);
  pthread_mutex_unlock(&c->lock);
  trace_poll();
  if (err == 0) {
    if (fronts) {
      ctx_front_track(c, addr, held, bytes, lib);
    }
    return CUDA_SUCCESS;
  }
  if (refused) {
    oom_refused(&facts, rank, pool_idle, oom_wants_report(rank) ? oom_text : NULL, sizeof oom_text,
                lib);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
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
  /* With fronts off the owner is found and the block freed under one hold of its lock; with
   * fronts on the thread's front is asked first, with no context lock. */
  bool fronts = ctx_fronts_on();
  struct ctx *c = fronts ? ctx_owning(ptr) : ctx_owning_locked(ptr);
  if (!c) {
    return false;
  }
  if (need_context && no_context(rc)) {
    if (!fronts) {
      pthread_mutex_unlock(&c->lock);
    }
    return true;
  }
  if (forget) {
    forget(ptr); /* before the block can be handed out again */
  }
  int known = 0;
  if (fronts) {
    known = ctx_front_free(c, ptr, rc);
    if (known > 0) { /* a block the thread knows, into its front: no lock */
      return true;
    }
    pthread_mutex_lock(&c->lock);
  }
  if (!c->pool.bfc) {
    pthread_mutex_unlock(&c->lock);
    return false; /* its context was destroyed meanwhile: the driver answers */
  }
  uint64_t held = 0, requested = 0;
  uint8_t lib = 0;
  /* A block some front caches was freed already (a double free); one a front knows as live is
   * forgotten there, since it is freed through the pool now. */
  int err = known == 0 && fronts && ctx_fronts_cached(c, ptr, true)
                ? -EALREADY
                : bfc_free_deferred_tagged(c->pool.bfc, ptr, &held, &requested, &lib);
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
