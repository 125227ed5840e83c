/* Pending stream-ordered frees (see shim/pool/pending.h): a list in age order of {device, bytes,
 * event}, and a few spare events per context to reuse. An entry is credited exactly once (when
 * its event is seen complete, when its context goes, or when its device's stream-ordered memory
 * is freed wholesale) and leaves the list once no thread is querying its event. Events are
 * created without timing (the cheapest kind) in the context of the stream they are recorded on.
 * Locking: `lock` guards the list and the spares; driver calls are made with it released, on
 * entries pinned by their `waiters` count.
 */
#include "shim/pool/pending.h"

#include "shim/accounting/cap.h"
#include "shim/base/fork.h"
#include "shim/base/log.h"
#include "shim/base/real.h"

#include <pthread.h>
#include <stdlib.h>

#define MAX_PENDING 4096 /* beyond this, a new free waits for the oldest */
#define MAX_SPARES 64
#define BATCH 32 /* events queried or waited for per pass, with the lock released */

struct pend {
  uint64_t bytes;
  CUcontext ctx; /* the event's */
  CUevent ev;
  int dev;
  bool ordered; /* of stream-ordered memory (a primary reset frees it) */
  int waiters;  /* threads querying or synchronising ev now */
  bool done;    /* its charge was returned */
  bool dead;    /* ev went with its context: never passed to the driver again */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pend **list;
static size_t npend, cappend;
static struct spare {
  CUcontext ctx;
  CUevent ev;
} spares[MAX_SPARES];
static size_t nspares;

/* Returns e's charge once. Lock held. */
static void finish(struct pend *e) {
  if (!e->done) {
    e->done = true;
    cap_credit(e->dev, e->bytes);
  }
}

/* Removes the finished entries nobody is querying; their live events become spares, or are
 * stored in out[] (up to *nout < max) for the caller to destroy without the lock (entries
 * whose event finds no room stay, finished, for a later sweep). Lock held. */
static void sweep(CUevent *out, size_t *nout, size_t max) {
  size_t kept = 0;
  for (size_t i = 0; i < npend; i++) {
    struct pend *e = list[i];
    bool spare = !e->dead && nspares < MAX_SPARES;
    bool doomed = !e->dead && !spare && *nout < max;
    if (!e->done || e->waiters > 0 || (!e->dead && !spare && !doomed)) {
      list[kept++] = e;
      continue;
    }
    if (spare) {
      spares[nspares++] = (struct spare){.ctx = e->ctx, .ev = e->ev};
    } else if (doomed) {
      out[(*nout)++] = e->ev;
    }
    free(e);
  }
  npend = kept;
}

static void destroy_events(const CUevent *evs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    real.cuEventDestroy_v2(evs[i]);
  }
}

/* Queries (wait: synchronises) the events of the up to BATCH oldest unfinished entries of dev
 * (every device when dev < 0; among the `limit` oldest entries only when limit > 0) and credits
 * those complete. Returns how many completed; *looked counts the entries it took. */
static size_t pass(int dev, bool wait, size_t limit, size_t *looked) {
  struct pend *batch[BATCH];
  size_t n = 0, completed = 0;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < npend && n < BATCH && (limit == 0 || i < limit); i++) {
    struct pend *e = list[i];
    if (!e->done && !e->dead && (dev < 0 || e->dev == dev)) {
      e->waiters++;
      batch[n++] = e;
    }
  }
  pthread_mutex_unlock(&lock);
  CUresult rc[BATCH];
  for (size_t i = 0; i < n; i++) {
    rc[i] = wait ? real.cuEventSynchronize(batch[i]->ev) : real.cuEventQuery(batch[i]->ev);
  }
  CUevent doomed[BATCH];
  size_t ndoomed = 0;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < n; i++) {
    batch[i]->waiters--;
    if (rc[i] == CUDA_SUCCESS) {
      finish(batch[i]);
      completed++;
    } else if (rc[i] != CUDA_ERROR_NOT_READY && !batch[i]->dead) {
      /* Never credited on an error: a later pass, or the context's teardown, decides. */
      log_msg(LOG_DEBUG, "device %d: querying a pending free failed (error %d)", batch[i]->dev,
              rc[i]);
    }
  }
  sweep(doomed, &ndoomed, BATCH);
  pthread_mutex_unlock(&lock);
  destroy_events(doomed, ndoomed);
  *looked = n;
  return completed;
}

/* The context of the stream a free was enqueued on, and that stream as cuEventRecord names
 * it. */
static CUresult stream_context(CUstream stream, bool ptsz, CUcontext *ctx, CUstream *rec) {
  *rec = ptsz && !stream ? CU_STREAM_PER_THREAD : stream;
  if (!stream || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) {
    return real.cuCtxGetCurrent(ctx);
  }
  return real.cuStreamGetCtx(stream, ctx);
}

/* A spare event of ctx, or a new one made in it (made current for the call). */
static CUresult event_in(CUcontext ctx, CUevent *ev) {
  pthread_mutex_lock(&lock);
  for (size_t i = nspares; i-- > 0;) {
    if (spares[i].ctx == ctx) {
      *ev = spares[i].ev;
      spares[i] = spares[--nspares];
      pthread_mutex_unlock(&lock);
      return CUDA_SUCCESS;
    }
  }
  pthread_mutex_unlock(&lock);
  CUcontext mine = NULL, popped;
  CUresult rc = real.cuCtxGetCurrent(&mine);
  if (rc != CUDA_SUCCESS || mine == ctx) {
    return rc == CUDA_SUCCESS ? real.cuEventCreate(ev, CU_EVENT_DISABLE_TIMING) : rc;
  }
  if ((rc = real.cuCtxPushCurrent_v2(ctx)) != CUDA_SUCCESS) {
    return rc;
  }
  rc = real.cuEventCreate(ev, CU_EVENT_DISABLE_TIMING);
  if (real.cuCtxPopCurrent_v2(&popped) != CUDA_SUCCESS) {
    real.cuCtxSetCurrent(mine); /* never leave the program in another context */
  }
  return rc;
}

void pending_add(int dev, uint64_t bytes, bool ordered, CUstream stream, bool ptsz) {
  CUcontext ctx = NULL;
  CUstream rec;
  CUevent ev = NULL;
  struct pend *e = malloc(sizeof *e);
  CUresult rc = e ? stream_context(stream, ptsz, &ctx, &rec) : CUDA_ERROR_OUT_OF_MEMORY;
  if (rc == CUDA_SUCCESS && (rc = event_in(ctx, &ev)) == CUDA_SUCCESS &&
      (rc = real.cuEventRecord(ev, rec)) != CUDA_SUCCESS) {
    real.cuEventDestroy_v2(ev);
  }
  if (rc == CUDA_SUCCESS) {
    *e = (struct pend){.bytes = bytes, .ctx = ctx, .ev = ev, .dev = dev, .ordered = ordered};
    pthread_mutex_lock(&lock);
    bool room = npend < cappend;
    if (!room) {
      size_t want = cappend ? 2 * cappend : 64;
      struct pend **bigger = realloc(list, want * sizeof *bigger);
      if (bigger) {
        list = bigger;
        cappend = want;
        room = true;
      }
    }
    if (room) {
      list[npend++] = e;
    }
    size_t backlog = npend;
    pthread_mutex_unlock(&lock);
    if (room) {
      /* Keep the list short: look at the oldest frees (the stream has likely passed them), and
       * beyond MAX_PENDING wait for them. */
      size_t looked;
      pass(-1, backlog > MAX_PENDING, 2, &looked);
      return;
    }
    real.cuEventSynchronize(ev); /* recorded: wait for it instead of tracking it */
    real.cuEventDestroy_v2(ev);
    free(e);
    cap_credit(dev, bytes);
    return;
  }
  free(e);
  /* No event: wait for the stream itself. */
  if (real.cuStreamSynchronize(ptsz && !stream ? CU_STREAM_PER_THREAD : stream) == CUDA_SUCCESS) {
    cap_credit(dev, bytes);
    return;
  }
  log_msg(LOG_WARN,
          "device %d: cannot tell when a stream-ordered free of %llu bytes completes "
          "(error %d); its charge stays",
          dev, (unsigned long long)bytes, rc);
}

void pending_poll(int dev) {
  size_t looked;
  pass(dev, false, 0, &looked);
}

bool pending_wait(int dev) {
  size_t looked, total = 0;
  /* Each pass takes the oldest unfinished entries; stop when none is left or a pass finished
   * none (an event that keeps failing must not make this loop forever). */
  while (pass(dev, true, 0, &looked) > 0) {
    total++;
  }
  return total > 0;
}

/* Finishes the entries whose event went with ctx (marking them dead), or with ctx NULL the
 * stream-ordered ones of dev. */
static void drop(CUcontext ctx, int dev) {
  CUevent doomed[BATCH];
  size_t ndoomed = 0;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < npend; i++) {
    struct pend *e = list[i];
    if (ctx && e->ctx == ctx) {
      e->dead = true;
      finish(e);
    } else if (!ctx && e->dev == dev && e->ordered) {
      finish(e);
    }
  }
  for (size_t i = nspares; ctx && i-- > 0;) {
    if (spares[i].ctx == ctx) {
      spares[i] = spares[--nspares];
    }
  }
  sweep(doomed, &ndoomed, BATCH);
  pthread_mutex_unlock(&lock);
  destroy_events(doomed, ndoomed);
}

void pending_drop_context(CUcontext ctx) {
  if (ctx) {
    drop(ctx, -1);
  }
}

void pending_drop_device(int dev) {
  drop(NULL, dev);
}

/* A fork child's list as the parent left it: kept, not freed (volatile, so the store stays), so
 * that leak checkers see it reachable. */
static struct pend **volatile inherited;

/* In a fork child: forget every pending free (the parent's streams are not the child's). */
static void fork_child(void) {
  pthread_mutex_init(&lock, NULL);
  /* Nothing was held across fork: another thread may have been changing the list, so it is
   * abandoned unread (its events and memory are the parent's). */
  inherited = list;
  list = NULL;
  npend = cappend = 0;
  nspares = 0;
}
FORK_CHILD(fork_child)
