/* Streams, events and the pending-work engine, plus the test hooks that feed and inspect it.
 *
 * Model: every asynchronous operation is a work item appended to a stream's FIFO with a global
 * sequence number. Nothing executes until a sync point completes it; completing an item first
 * completes what it depends on: earlier items of its stream, the work an event it waits for
 * was recorded after, and the legacy default stream's implicit barriers (an item on the legacy
 * stream waits for the earlier items of every blocking stream of its context, an item on a
 * blocking stream, per-thread ones included, for the earlier legacy items). Sequence numbers
 * only grow, so every dependency points to a strictly earlier item and completion terminates.
 * cuStreamQuery / cuEventQuery answer CUDA_ERROR_NOT_READY while work is pending and complete
 * it on the FK_POLLS_TO_COMPLETE-th poll, so polling loops end.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/fakecuda/fk.h"

static int is_blocking(const struct CUstream_st *s) {
  return s->kind == FK_S_THREAD || (s->kind == FK_S_USER && !(s->flags & CU_STREAM_NON_BLOCKING));
}

struct CUstream_st *fk_stream_new(struct CUctx_st *c, int kind, unsigned flags, int priority) {
  struct CUstream_st *s = calloc(1, sizeof *s);
  if (s == NULL) {
    fk_log("error: out of host memory");
    abort();
  }
  s->ctx = c;
  s->kind = kind;
  s->live = 1;
  s->flags = flags;
  s->priority = priority;
  s->id = fk_new_id();
  if (kind == FK_S_THREAD) {
    s->owner = pthread_self();
  }
  fk_ctx_add_stream(c, s);
  if (kind == FK_S_USER) {
    fk_push((void ***)&fk.ustreams, &fk.nustreams, &fk.capustreams, s);
  }
  return s;
}

struct CUstream_st *fk_stream_thread(struct CUctx_st *c) {
  pthread_t me = pthread_self();
  for (size_t i = 0; i < c->nstreams; i++) {
    struct CUstream_st *s = c->streams[i];
    if (s->kind == FK_S_THREAD && s->live && pthread_equal(s->owner, me)) {
      return s;
    }
  }
  return fk_stream_new(c, FK_S_THREAD, 0, 0);
}

CUresult fk_stream_resolve(CUstream h, int ptsz, struct CUstream_st **out) {
  if (h == NULL) {
    h = ptsz ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  }
  if (h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    struct CUctx_st *c;
    CUresult rc = fk_ctx_current(&c);
    if (rc == CUDA_SUCCESS) {
      *out = h == CU_STREAM_LEGACY ? c->legacy : fk_stream_thread(c);
    }
    return rc;
  }
  for (size_t i = 0; i < fk.nustreams; i++) {
    if (fk.ustreams[i] == h) {
      *out = h;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_HANDLE;
}

static void remove_ptr(void **arr, size_t *n, const void *p) {
  for (size_t i = 0; i < *n; i++) {
    if (arr[i] == p) {
      arr[i] = arr[--*n];
      return;
    }
  }
}

struct fk_work *fk_work_new(int kind) {
  struct fk_work *w = calloc(1, sizeof *w);
  if (w == NULL) {
    fk_log("error: out of host memory");
    abort();
  }
  w->kind = kind;
  return w;
}

struct fk_work *fk_work_clone(const struct fk_work *w) {
  struct fk_work *c = fk_work_new(w->kind);
  *c = *w;
  c->next = NULL;
  if (w->staging != NULL) {
    c->staging = malloc(w->count);
    if (c->staging == NULL) {
      fk_log("error: out of host memory");
      abort();
    }
    memcpy(c->staging, w->staging, w->count);
  }
  return c;
}

struct fk_work *fk_work_clone_chain(const struct fk_work *w) {
  struct fk_work *head = NULL, **tail = &head;
  for (; w != NULL; w = w->next) {
    *tail = fk_work_clone(w);
    tail = &(*tail)->next;
  }
  return head;
}

void fk_work_free_chain(struct fk_work *w) {
  while (w != NULL) {
    struct fk_work *next = w->next;
    free(w->staging);
    free(w);
    w = next;
  }
}

void fk_work_enqueue(struct CUstream_st *s, struct fk_work *w) {
  if (s->cap != NULL) {
    fk_capture_record(s, w); /* a capturing stream records instead of executing */
    return;
  }
  w->seq = ++fk.seq;
  w->next = NULL;
  w->stream = s;
  if (s->tail != NULL) {
    s->tail->next = w;
  } else {
    s->head = w;
  }
  s->tail = w;
}

static void complete(struct CUstream_st *s, uint64_t upto);

/* Completes the implicit legacy-stream dependencies of an operation at position seq in s. */
static void barrier(struct CUstream_st *s, uint64_t seq) {
  struct CUctx_st *c = s->ctx;
  if (s->kind == FK_S_LEGACY) {
    for (size_t i = 0; i < c->nstreams; i++) {
      if (is_blocking(c->streams[i])) {
        complete(c->streams[i], seq);
      }
    }
  } else if (is_blocking(s)) {
    complete(c->legacy, seq);
  }
}

void fk_work_execute(struct fk_work *w) {
  switch (w->kind) {
  case FK_W_COPY:
  case FK_W_SET:
    fk_mem_effect(w);
    break;
  case FK_W_FREE:
    fk_mem_free_effect(w);
    break;
  case FK_W_HOOK:
    fk_managed_access(w); /* a kernel: what it may touch of managed memory comes to its device */
    break;
  case FK_W_HOST: {
    /* Host functions run in stream order, on the driver's host-function thread (fk_host.c) or
     * at a sync point that reaches them first, without the driver's lock: they may take the
     * program's locks, which its other threads hold while they call the driver. */
    int dropped = fk_callout_begin();
    if (w->host_fn != NULL) {
      w->host_fn(w->host_arg);
    } else {
      w->callback(w->callback_stream, CUDA_SUCCESS, w->host_arg);
    }
    fk_callout_end(dropped);
    break;
  }
  case FK_W_GRAPH_FREE: {
    struct fk_alloc *a = fk_mem_by_id(w->dst.alloc_id);
    if (a != NULL) {
      a->graph_live = 0;
    }
    break;
  }
  default:
    break;
  }
  free(w->staging);
  free(w);
}

/* Completes the items of s with seq <= upto, in order, each after its dependencies. Recursion
 * into s itself only ever asks for items older than its head, so the head stays put. */
static void complete(struct CUstream_st *s, uint64_t upto) {
  while (s->head != NULL && s->head->seq <= upto) {
    struct fk_work *w = s->head;
    if (w->kind == FK_W_WAIT) {
      fk_stream_reach(w->wait_stream, w->wait_seq);
    }
    barrier(s, w->seq - 1);
    s->head = w->next;
    if (s->head == NULL) {
      s->tail = NULL;
    }
    fk_work_execute(w);
  }
  if (s->head == NULL) {
    s->polls = 0;
  }
}

void fk_stream_reach(struct CUstream_st *s, uint64_t seq) {
  barrier(s, seq);
  complete(s, seq);
}

void fk_sync_ctx(struct CUctx_st *c) {
  for (size_t i = 0; i < c->nstreams; i++) {
    complete(c->streams[i], UINT64_MAX);
  }
}

void fk_sync_device(int dev) {
  for (size_t i = 0; i < fk.nctxs; i++) {
    if (fk.ctxs[i]->dev == dev) {
      fk_sync_ctx(fk.ctxs[i]);
    }
  }
}

void fk_sync_all(void) {
  for (size_t i = 0; i < fk.nctxs; i++) {
    fk_sync_ctx(fk.ctxs[i]);
  }
}

/* Whether reaching position seq of s would complete anything. */
static int pending_upto(const struct CUstream_st *s, uint64_t seq) {
  if (s->head != NULL && s->head->seq <= seq) {
    return 1;
  }
  const struct CUctx_st *c = s->ctx;
  if (s->kind == FK_S_LEGACY) {
    for (size_t i = 0; i < c->nstreams; i++) {
      const struct CUstream_st *t = c->streams[i];
      if (is_blocking(t) && t->head != NULL && t->head->seq <= seq) {
        return 1;
      }
    }
  } else if (is_blocking(s)) {
    return c->legacy->head != NULL && c->legacy->head->seq <= seq;
  }
  return 0;
}

/* One poll of a stream or event position: SUCCESS when nothing is pending, else NOT_READY,
 * except that the FK_POLLS_TO_COMPLETE-th poll completes the work and succeeds. */
static CUresult poll(struct CUstream_st *s, uint64_t seq, int *polls) {
  if (!pending_upto(s, seq)) {
    *polls = 0;
    return CUDA_SUCCESS;
  }
  if (++*polls < FK_POLLS_TO_COMPLETE) {
    return CUDA_ERROR_NOT_READY;
  }
  fk_stream_reach(s, seq);
  *polls = 0;
  return CUDA_SUCCESS;
}

static int touches(const struct fk_range *r, uintptr_t addr, size_t n) {
  return r->n != 0 && r->addr < addr + n && addr < r->addr + r->n;
}

int fk_work_overlapping(uintptr_t addr, size_t n) {
  int count = 0;
  for (size_t i = 0; i < fk.nctxs; i++) {
    struct CUctx_st *c = fk.ctxs[i];
    for (size_t j = 0; j < c->nstreams; j++) {
      for (struct fk_work *w = c->streams[j]->head; w != NULL; w = w->next) {
        if ((w->kind == FK_W_COPY || w->kind == FK_W_SET || w->kind == FK_W_HOOK) &&
            (touches(&w->dst, addr, n) || touches(&w->src, addr, n))) {
          count++;
        }
      }
    }
  }
  return count;
}

void fk_stream_kill_ctx(struct CUctx_st *c) {
  for (size_t i = 0; i < c->nstreams; i++) {
    struct CUstream_st *s = c->streams[i];
    if (s->kind != FK_S_LEGACY && s->live) {
      s->live = 0;
      if (s->kind == FK_S_USER) {
        remove_ptr((void **)fk.ustreams, &fk.nustreams, s);
      }
    }
  }
  for (size_t i = 0; i < fk.nevents;) {
    if (fk.events[i]->ctx == c) {
      struct CUevent_st *e = fk.events[i];
      fk.events[i] = fk.events[--fk.nevents];
      fk_ipc_event_drop(e);
      free(e);
    } else {
      i++;
    }
  }
}

/* ---- Streams. ---- */

static CUresult stream_create(CUstream *ph, unsigned flags, int priority) {
  if (ph == NULL || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  /* Priorities outside [greatest, least] = [-5, 0] are clamped, as documented. */
  priority = priority > 0 ? 0 : priority < -5 ? -5 : priority;
  *ph = fk_stream_new(c, FK_S_USER, flags, priority);
  return CUDA_SUCCESS;
}

FK_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags) {
  FK_BODY(FK_NEED_INIT, stream_create(phStream, Flags, 0));
}

FK_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority) {
  FK_BODY(FK_NEED_INIT, stream_create(phStream, flags, priority));
}

static CUresult stream_destroy(CUstream h) {
  if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, 0, &s);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  /* Pending work stays queued and completes at a later device-wide sync point, as the real
   * driver releases a busy stream's resources only once its work is done. */
  s->live = 0;
  remove_ptr((void **)fk.ustreams, &fk.nustreams, s);
  return CUDA_SUCCESS;
}

FK_API CUresult cuStreamDestroy_v2(CUstream hStream) {
  FK_BODY(FK_NEED_INIT, stream_destroy(hStream));
}

static CUresult stream_sync(CUstream h, int ptsz) {
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc == CUDA_SUCCESS) {
    rc = fk_capture_sync_check(s);
  }
  if (rc == CUDA_SUCCESS) {
    fk_stream_reach(s, fk.seq);
  }
  return rc;
}

FK_API CUresult cuStreamSynchronize(CUstream hStream) {
  FK_BODY(FK_NEED_INIT, stream_sync(hStream, 0));
}

FK_API CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
  FK_BODY(FK_NEED_INIT, stream_sync(hStream, 1));
}

static CUresult stream_query(CUstream h, int ptsz) {
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc == CUDA_SUCCESS) {
    rc = fk_capture_sync_check(s);
  }
  return rc != CUDA_SUCCESS ? rc : poll(s, fk.seq, &s->polls);
}

FK_API CUresult cuStreamQuery(CUstream hStream) {
  FK_BODY(FK_NEED_INIT, stream_query(hStream, 0));
}

FK_API CUresult cuStreamQuery_ptsz(CUstream hStream) {
  FK_BODY(FK_NEED_INIT, stream_query(hStream, 1));
}

struct CUevent_st *fk_event_find(CUevent h) {
  for (size_t i = 0; i < fk.nevents; i++) {
    if (fk.events[i] == h) {
      return h;
    }
  }
  return NULL;
}

void fk_event_add(struct CUevent_st *e) {
  fk_push((void ***)&fk.events, &fk.nevents, &fk.capevents, e);
}

static CUresult stream_wait_event(CUstream h, CUevent he, unsigned flags, int ptsz) {
  if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct CUevent_st *e = fk_event_find(he);
  if (e == NULL) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (e->cap != NULL || s->cap != NULL) {
    return fk_capture_wait(s, e->cap, flags & CU_EVENT_WAIT_EXTERNAL);
  }
  if (flags != CU_EVENT_WAIT_DEFAULT) {
    return CUDA_ERROR_INVALID_VALUE; /* WAIT_EXTERNAL is only valid during stream capture */
  }
  if (e->ipc != NULL) {
    return fk_ipc_event_complete(e); /* its record completed its work (fk_ipcevent.c) */
  }
  if (e->recorded && pending_upto(e->stream, e->seq)) {
    struct fk_work *w = fk_work_new(FK_W_WAIT);
    w->wait_stream = e->stream;
    w->wait_seq = e->seq;
    fk_work_enqueue(s, w);
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  FK_BODY(FK_NEED_INIT, stream_wait_event(hStream, hEvent, Flags, 0));
}

FK_API CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  FK_BODY(FK_NEED_INIT, stream_wait_event(hStream, hEvent, Flags, 1));
}

static CUresult stream_get_flags(CUstream h, unsigned *flags, int ptsz) {
  if (flags == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc == CUDA_SUCCESS) {
    *flags = s->flags;
  }
  return rc;
}

FK_API CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags) {
  FK_BODY(FK_NEED_INIT, stream_get_flags(hStream, flags, 0));
}

FK_API CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags) {
  FK_BODY(FK_NEED_INIT, stream_get_flags(hStream, flags, 1));
}

static CUresult stream_get_priority(CUstream h, int *priority, int ptsz) {
  if (priority == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc == CUDA_SUCCESS) {
    *priority = s->priority;
  }
  return rc;
}

FK_API CUresult cuStreamGetPriority(CUstream hStream, int *priority) {
  FK_BODY(FK_NEED_INIT, stream_get_priority(hStream, priority, 0));
}

FK_API CUresult cuStreamGetPriority_ptsz(CUstream hStream, int *priority) {
  FK_BODY(FK_NEED_INIT, stream_get_priority(hStream, priority, 1));
}

static CUresult stream_get_ctx(CUstream h, CUcontext *pctx, int ptsz) {
  if (pctx == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc == CUDA_SUCCESS) {
    *pctx = s->ctx;
  }
  return rc;
}

FK_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx) {
  FK_BODY(FK_NEED_INIT, stream_get_ctx(hStream, pctx, 0));
}

FK_API CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx) {
  FK_BODY(FK_NEED_INIT, stream_get_ctx(hStream, pctx, 1));
}

/* The fake has no green contexts: every stream is a regular context's, and its green context is
 * NULL (cuda.h: "NULL if the stream is not associated with any green context"). */
static CUresult stream_get_ctx_v2(CUstream h, CUcontext *pctx, CUgreenCtx *pgreen, int ptsz) {
  if (pgreen == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  CUresult rc = stream_get_ctx(h, pctx, ptsz);
  if (rc == CUDA_SUCCESS) {
    *pgreen = NULL;
  }
  return rc;
}

FK_API CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx) {
  FK_BODY(FK_NEED_INIT, stream_get_ctx_v2(hStream, pCtx, pGreenCtx, 0));
}

FK_API CUresult cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx) {
  FK_BODY(FK_NEED_INIT, stream_get_ctx_v2(hStream, pCtx, pGreenCtx, 1));
}

static CUresult stream_get_green_ctx(CUstream h, CUgreenCtx *pgreen) {
  CUcontext ctx;
  return stream_get_ctx_v2(h, &ctx, pgreen, 0);
}

FK_API CUresult cuStreamGetGreenCtx(CUstream hStream, CUgreenCtx *phCtx) {
  FK_BODY(FK_NEED_INIT, stream_get_green_ctx(hStream, phCtx));
}

/* ---- Events. ---- */

static CUresult event_create(CUevent *ph, unsigned flags) {
  unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (ph == NULL || (flags & ~known) != 0 ||
      ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct CUevent_st *e = calloc(1, sizeof *e);
  if (e == NULL) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  e->ctx = c;
  e->flags = flags;
  if (flags & CU_EVENT_INTERPROCESS) {
    rc = fk_ipc_event_new(e);
    if (rc != CUDA_SUCCESS) {
      free(e);
      return rc;
    }
  }
  fk_event_add(e);
  *ph = e;
  return CUDA_SUCCESS;
}

FK_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags) {
  FK_BODY(FK_NEED_INIT, event_create(phEvent, Flags));
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static CUresult event_record(CUevent he, CUstream h, int ptsz, unsigned flags) {
  struct CUevent_st *e = fk_event_find(he);
  if (e == NULL) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (s->ctx != e->ctx) {
    return CUDA_ERROR_INVALID_HANDLE; /* event and stream must share a context */
  }
  if ((flags & CU_EVENT_RECORD_EXTERNAL) && s->cap == NULL) {
    return CUDA_ERROR_INVALID_VALUE; /* "invalid outside of stream capture" */
  }
  e->cap = s->cap; /* recorded into a capture: a dependency inside the graph */
  e->recorded = s->cap == NULL;
  e->stream = s;
  e->seq = fk.seq;
  e->polls = 0;
  e->ms = now_ms();
  if (e->ipc != NULL && e->recorded) {
    /* Another process may wait for it while this one never reaches a sync point: the work it
     * follows completes now (fk_ipcevent.c). */
    int had_work = pending_upto(s, e->seq);
    fk_stream_reach(s, e->seq);
    fk_ipc_event_recorded(e, had_work);
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, event_record(hEvent, hStream, 0, 0));
}

FK_API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, event_record(hEvent, hStream, 1, 0));
}

FK_API CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
  FK_BODY(FK_NEED_INIT, event_record(hEvent, hStream, 0, flags));
}

FK_API CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags) {
  FK_BODY(FK_NEED_INIT, event_record(hEvent, hStream, 1, flags));
}

static CUresult event_query(CUevent he) {
  struct CUevent_st *e = fk_event_find(he);
  if (e == NULL) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (e->cap != NULL) {
    return CUDA_ERROR_CAPTURED_EVENT;
  }
  if (e->ipc != NULL) {
    return fk_ipc_event_query(e); /* recorded here or in another process */
  }
  return e->recorded ? poll(e->stream, e->seq, &e->polls) : CUDA_SUCCESS;
}

FK_API CUresult cuEventQuery(CUevent hEvent) {
  FK_BODY(FK_NEED_INIT, event_query(hEvent));
}

static CUresult event_sync(CUevent he) {
  struct CUevent_st *e = fk_event_find(he);
  if (e == NULL) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (e->cap != NULL) {
    return CUDA_ERROR_CAPTURED_EVENT;
  }
  if (e->ipc != NULL) {
    return fk_ipc_event_complete(e);
  }
  if (e->recorded) {
    fk_stream_reach(e->stream, e->seq);
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuEventSynchronize(CUevent hEvent) {
  FK_BODY(FK_NEED_INIT, event_sync(hEvent));
}

static CUresult event_destroy(CUevent he) {
  struct CUevent_st *e = fk_event_find(he);
  if (e == NULL) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  remove_ptr((void **)fk.events, &fk.nevents, e);
  fk_ipc_event_drop(e);
  free(e);
  return CUDA_SUCCESS;
}

FK_API CUresult cuEventDestroy_v2(CUevent hEvent) {
  FK_BODY(FK_NEED_INIT, event_destroy(hEvent));
}

/* Both events recorded and complete, timing enabled: the time between their records (the
 * fake's work takes no time, so this is host time between the two cuEventRecord calls). */
static CUresult elapsed(float *ms, CUevent hs, CUevent he) {
  if (ms == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUevent_st *a = fk_event_find(hs), *b = fk_event_find(he);
  if (a == NULL || b == NULL || !a->recorded || !b->recorded ||
      ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (pending_upto(a->stream, a->seq) || pending_upto(b->stream, b->seq)) {
    return CUDA_ERROR_NOT_READY;
  }
  *ms = (float)(b->ms - a->ms);
  return CUDA_SUCCESS;
}

FK_API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
  FK_BODY(FK_NEED_INIT, elapsed(pMilliseconds, hStart, hEnd));
}

FK_API CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
  FK_BODY(FK_NEED_INIT, elapsed(pMilliseconds, hStart, hEnd));
}

/* ---- Host functions and callbacks: work items that run host code in stream order. ---- */

static CUresult launch_host(CUstream h, int ptsz, void (*fn)(void *),
                            void (*cb)(CUstream, CUresult, void *), unsigned flags, void *arg) {
  if ((fn == NULL && cb == NULL) || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (cb != NULL && s->cap != NULL) {
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* callbacks cannot be captured */
  }
  struct fk_work *w = fk_work_new(FK_W_HOST);
  w->dev = s->ctx->dev;
  w->host_fn = fn;
  w->callback = cb;
  w->callback_stream = h;
  w->host_arg = arg;
  int captured = s->cap != NULL;
  fk_work_enqueue(s, w);
  if (!captured) {
    fk_host_notify();
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData) {
  FK_BODY(FK_NEED_INIT, launch_host(hStream, 0, fn, NULL, 0, userData));
}

FK_API CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData) {
  FK_BODY(FK_NEED_INIT, launch_host(hStream, 1, fn, NULL, 0, userData));
}

FK_API CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
                                    unsigned int flags) {
  FK_BODY(FK_NEED_INIT, launch_host(hStream, 0, NULL, callback, flags, userData));
}

FK_API CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback,
                                         void *userData, unsigned int flags) {
  FK_BODY(FK_NEED_INIT, launch_host(hStream, 1, NULL, callback, flags, userData));
}

static CUresult stream_get_id(CUstream h, unsigned long long *id, int ptsz) {
  if (id == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc == CUDA_SUCCESS) {
    *id = s->id;
  }
  return rc;
}

FK_API CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId) {
  FK_BODY(FK_NEED_INIT, stream_get_id(hStream, streamId, 0));
}

FK_API CUresult cuStreamGetId_ptsz(CUstream hStream, unsigned long long *streamId) {
  FK_BODY(FK_NEED_INIT, stream_get_id(hStream, streamId, 1));
}

/* The tools-context table's stream look-ups (fk_export.c). */
CUresult fk_stream_object(CUcontext ctx, CUstream h, int ptsz, struct CUstream_st **out) {
  if (out == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUctx_st *c;
  CUresult rc = fk_ctx_or_current(ctx, &c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (h == NULL) {
    h = ptsz ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  }
  if (h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    *out = h == CU_STREAM_LEGACY ? c->legacy : fk_stream_thread(c);
    return CUDA_SUCCESS;
  }
  return fk_stream_resolve(h, ptsz, out);
}

CUresult fk_stream_object_id(const struct CUstream_st *s, unsigned long long *id) {
  if (s == NULL || id == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < fk.nctxs; i++) {
    const struct CUctx_st *c = fk.ctxs[i];
    for (size_t j = 0; j < c->nstreams; j++) {
      if (c->streams[j] == s) {
        if (!s->live || !c->active) {
          return CUDA_ERROR_INVALID_HANDLE;
        }
        *id = s->id;
        return CUDA_SUCCESS;
      }
    }
  }
  return CUDA_ERROR_INVALID_HANDLE;
}

/* ---- Test hooks. ---- */

static CUresult enqueue_hook(CUstream h, CUdeviceptr p, size_t n) {
  if (n == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, 0, &s);
  if (rc == CUDA_SUCCESS) {
    struct fk_work *w = fk_work_new(FK_W_HOOK);
    w->dst.addr = (uintptr_t)p;
    w->dst.n = n;
    fk_work_enqueue(s, w);
  }
  return rc;
}

FK_API CUresult fakecudaEnqueueWork(CUstream hStream, CUdeviceptr dptr, size_t bytes) {
  FK_BODY(FK_NEED_INIT, enqueue_hook(hStream, dptr, bytes));
}

FK_API int fakecudaClaim(CUdeviceptr dptr, size_t bytes) {
  pthread_mutex_lock(&fk.lock);
  int n = fk_work_overlapping((uintptr_t)dptr, bytes);
  if (n > 0) {
    fk.hazards++;
  }
  pthread_mutex_unlock(&fk.lock);
  return n;
}

int fk_work_pending(void) {
  int n = 0;
  for (size_t i = 0; i < fk.nctxs; i++) {
    struct CUctx_st *c = fk.ctxs[i];
    for (size_t j = 0; j < c->nstreams; j++) {
      for (struct fk_work *w = c->streams[j]->head; w != NULL; w = w->next) {
        n += w->kind != FK_W_WAIT;
      }
    }
  }
  return n;
}

FK_API int fakecudaPendingWork(void) {
  pthread_mutex_lock(&fk.lock);
  int n = fk_work_pending();
  pthread_mutex_unlock(&fk.lock);
  return n;
}

void fk_stream_teardown(void) {
  for (size_t i = 0; i < fk.nctxs; i++) {
    struct CUctx_st *c = fk.ctxs[i];
    for (size_t j = 0; j < c->nstreams; j++) {
      struct fk_work *w = c->streams[j]->head;
      while (w != NULL) {
        struct fk_work *next = w->next;
        free(w->staging);
        free(w);
        w = next;
      }
      free(c->streams[j]);
    }
    free(c->streams);
    free(c->cls);
    free(c);
  }
  for (size_t i = 0; i < fk.nevents; i++) {
    free(fk.events[i]);
  }
  free(fk.ctxs);
  free(fk.ustreams);
  free(fk.events);
  fk.ctxs = NULL;
  fk.ustreams = NULL;
  fk.events = NULL;
  fk.nctxs = fk.capctxs = fk.nustreams = fk.capustreams = fk.nevents = fk.capevents = 0;
}
