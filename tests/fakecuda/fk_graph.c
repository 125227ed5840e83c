/* Stream capture and graphs.
 *
 * A capture sequence starts on one stream (cuStreamBeginCapture) and grows to every stream that
 * waits for an event recorded inside it. While a stream takes part, the work its operations
 * would queue (kernels, copies, memsets, host functions, stream-ordered allocations and frees)
 * becomes nodes of the sequence's graph instead; cuStreamEndCapture on the origin stream ends
 * the sequence for all its streams and hands out the graph. A graph is replayed in capture order:
 * cuGraphLaunch queues a copy of each node's work on the launch stream (more serial than the
 * dependencies require, never less), so sync points, hazards and data effects behave as for the
 * same work queued directly.
 *
 * Graph memory: a captured cuMemAllocAsync gets its address at once (reserved in the device's
 * address space, no memory held), and its memory is taken when the graph is uploaded
 * (cuGraphUpload, or instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) or at the first launch
 * that reaches the node (counted in the device's used and peak bytes, like any program
 * allocation). A free node (or the program's later cuMemFreeAsync / cuMemFree) gives the
 * allocation back to the device's graph pool, which keeps the memory until cuDeviceGraphMemTrim
 * (or until the last graph naming the allocation is destroyed). Memory nodes can also be added
 * explicitly (cuGraphAddMemAllocNode / cuGraphAddMemFreeNode) and read back (cuGraphNodeGetType,
 * cuGraphMemAllocNodeGetParams); a node's handle is its address, stable for the graph's life.
 *
 * Rules the driver enforces and the fake models: waiting for a capturing stream (stream sync or
 * query, a captured event's query or sync, context synchronize) fails with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture; "potentially unsafe" calls
 * (allocation, free, synchronous copies, context synchronize) are refused per the calling
 * thread's capture mode; the legacy stream cannot capture; a capture is ended on its origin
 * stream (THREAD_LOCAL/GLOBAL: by the thread that began it). A capture may also grow an existing
 * graph (cuStreamBeginCaptureToGraph). The explicit node API is fk_gnode.c's. Not modelled: the
 * UNJOINED check of streams that forked from a capture and never joined back.
 *
 * Locking: under fk.lock (entry points). The capture mode is per thread.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/fakecuda/fk_graph.h"

struct fk_capture {
  struct CUgraph_st *graph;
  size_t base;  /* nodes the graph had when the capture began */
  int existing; /* the capture grows a graph of the program's (cuStreamBeginCaptureToGraph) */
  struct CUstream_st *origin;
  unsigned long long id;
  int mode; /* CU_STREAM_CAPTURE_MODE_* */
  int invalid;
  pthread_t thread;
};

static _Thread_local int thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static struct CUgraph_st **graphs;
static size_t ngraphs, capgraphs;
static struct CUgraphExec_st **execs;
static size_t nexecs, capexecs;
static struct fk_capture **captures; /* live capture sequences */
static size_t ncaptures, capcaptures;

static void *xcalloc(size_t size) {
  void *p = calloc(1, size);
  if (p == NULL) {
    fk_log("error: out of host memory");
    abort();
  }
  return p;
}

struct CUgraph_st *fk_graph_new(struct CUctx_st *c) {
  struct CUgraph_st *g = xcalloc(sizeof *g);
  g->ctx = c;
  g->live = 1;
  g->id = fk_new_id();
  fk_push((void ***)&graphs, &ngraphs, &capgraphs, g);
  return g;
}

struct fk_node *fk_graph_add(struct CUgraph_st *g, struct fk_node node, const CUgraphNode *deps,
                             const CUgraphEdgeData *edges, size_t ndeps) {
  struct fk_node *held = xcalloc(sizeof *held);
  *held = node;
  held->ndeps = ndeps;
  held->deps = ndeps > 0 ? xcalloc(ndeps * sizeof *held->deps) : NULL;
  for (size_t i = 0; i < ndeps; i++) {
    held->deps[i] = (struct fk_node *)deps[i];
  }
  if (edges != NULL && ndeps > 0) {
    held->edges = xcalloc(ndeps * sizeof *held->edges);
    memcpy(held->edges, edges, ndeps * sizeof *held->edges);
  }
  fk_push((void ***)&g->nodes, &g->n, &g->cap, held);
  return held;
}

static void node_free(struct fk_node *n) {
  fk_work_free_chain(n->work);
  free(n->bodies);
  free(n->deps);
  free(n->edges);
  free(n);
}

/* Frees g's nodes from the i-th on (the graphs they own are dropped by fk_graph_drop first). */
static void graph_truncate(struct CUgraph_st *g, size_t i) {
  for (size_t k = i; k < g->n; k++) {
    node_free(g->nodes[k]);
  }
  g->n = i;
}

static void graph_clear(struct CUgraph_st *g) {
  graph_truncate(g, 0);
  free(g->nodes);
  g->nodes = NULL;
  g->n = g->cap = 0;
}

/* Discards the nodes of g from the i-th on (a capture that was invalidated): the graph
 * allocations they made, never launched, are released. */
static void graph_discard(struct CUgraph_st *g, size_t i) {
  for (size_t k = i; k < g->n; k++) {
    struct fk_alloc *a = g->nodes[k]->alloc;
    if (a != NULL && !a->graph_phys && !a->graph_live) {
      fk_mem_release(a);
    }
  }
  graph_truncate(g, i);
}

int fk_graph_known(const struct CUgraph_st *g) {
  for (size_t i = 0; i < ngraphs; i++) {
    if (graphs[i] == g) {
      return g->live;
    }
  }
  return 0;
}

struct CUgraphExec_st *fk_graph_exec(CUgraphExec e) {
  for (size_t i = 0; i < nexecs; i++) {
    if (execs[i] == e) {
      return e->live ? e : NULL;
    }
  }
  return NULL;
}

struct CUgraph_st *fk_graph_copy(const struct CUgraph_st *g, struct fk_node *parent) {
  struct CUgraph_st *copy = fk_graph_new(g->ctx);
  copy->parent = parent;
  for (size_t i = 0; i < g->n; i++) {
    const struct fk_node *from = g->nodes[i];
    struct fk_node node = *from;
    node.work = fk_work_clone_chain(from->work);
    node.bodies = NULL;
    node.deps = NULL;
    node.edges = NULL;
    node.origin = from;
    struct fk_node *held = fk_graph_add(copy, node, NULL, NULL, 0);
    if (from->child != NULL) {
      held->child = fk_graph_copy(from->child, held);
    }
    if (from->nbodies > 0) {
      held->bodies = xcalloc(from->nbodies * sizeof *held->bodies);
      for (unsigned b = 0; b < from->nbodies; b++) {
        held->bodies[b] = fk_graph_copy(from->bodies[b], held);
      }
    }
  }
  return copy;
}

int fk_graph_has_memory_nodes(const struct CUgraph_st *g) {
  for (size_t i = 0; i < g->n; i++) {
    const struct fk_node *n = g->nodes[i];
    if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || n->type == CU_GRAPH_NODE_TYPE_MEM_FREE ||
        (n->child != NULL && fk_graph_has_memory_nodes(n->child))) {
      return 1;
    }
  }
  return 0;
}

int fk_graph_has_conditionals(const struct CUgraph_st *g) {
  for (size_t i = 0; i < g->n; i++) {
    const struct fk_node *n = g->nodes[i];
    if (n->kind == N_COND || (n->child != NULL && fk_graph_has_conditionals(n->child))) {
      return 1;
    }
  }
  return 0;
}

/* ---- Capture sequences. ---- */

static void capture_invalidate(struct fk_capture *cap) {
  cap->invalid = 1;
}

/* The node type of a captured work item. */
static CUgraphNodeType captured_type(const struct fk_work *w) {
  switch (w->kind) {
  case FK_W_COPY:
    return CU_GRAPH_NODE_TYPE_MEMCPY;
  case FK_W_SET:
    return CU_GRAPH_NODE_TYPE_MEMSET;
  case FK_W_HOST:
    return CU_GRAPH_NODE_TYPE_HOST;
  case FK_W_WAIT:
    return CU_GRAPH_NODE_TYPE_WAIT_EVENT;
  case FK_W_FREE:
  case FK_W_GRAPH_FREE:
    return CU_GRAPH_NODE_TYPE_MEM_FREE;
  default:
    return CU_GRAPH_NODE_TYPE_KERNEL; /* FK_W_HOOK: a kernel's (or a stream operation's) work */
  }
}

void fk_capture_record(struct CUstream_st *s, struct fk_work *w) {
  if (s->cap->invalid) {
    fk_work_free_chain(w);
    return;
  }
  struct CUgraph_st *g = s->cap->graph;
  w->next = NULL;
  /* the capture linearises its streams: each node depends on the one captured before it */
  CUgraphNode last = g->n > s->cap->base ? (CUgraphNode)g->nodes[g->n - 1] : NULL;
  fk_graph_add(g, (struct fk_node){.kind = N_WORK, .type = captured_type(w), .work = w}, &last,
               NULL, last != NULL);
}

static void detach_streams(struct fk_capture *cap) {
  for (size_t i = 0; i < fk.nctxs; i++) {
    struct CUctx_st *c = fk.ctxs[i];
    for (size_t j = 0; j < c->nstreams; j++) {
      if (c->streams[j]->cap == cap) {
        c->streams[j]->cap = NULL;
      }
    }
  }
  for (size_t i = 0; i < fk.nevents; i++) {
    if (fk.events[i]->cap == cap) {
      fk.events[i]->cap = NULL; /* it names a node of an ended capture: never recorded */
    }
  }
  for (size_t i = 0; i < ncaptures; i++) {
    if (captures[i] == cap) {
      captures[i] = captures[--ncaptures];
      break;
    }
  }
}

CUresult fk_capture_unsafe(void) {
  pthread_t me = pthread_self();
  int refused = 0;
  for (size_t i = 0; i < ncaptures; i++) {
    struct fk_capture *cap = captures[i];
    int mine = pthread_equal(cap->thread, me);
    int prohibits = cap->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
                    ((mine && thread_mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
                     (!mine && thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                      cap->mode == CU_STREAM_CAPTURE_MODE_GLOBAL));
    if (prohibits) {
      capture_invalidate(cap);
      refused = 1;
    }
  }
  return refused ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult fk_capture_sync_check(struct CUstream_st *s) {
  if (s->cap == NULL) {
    return CUDA_SUCCESS;
  }
  capture_invalidate(s->cap);
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

int fk_capture_active(const struct CUctx_st *c) {
  for (size_t i = 0; i < c->nstreams; i++) {
    if (c->streams[i]->cap != NULL) {
      return 1;
    }
  }
  return 0;
}

CUresult fk_capture_wait(struct CUstream_st *s, struct fk_capture *cap, int external) {
  if (cap == NULL) {
    if (external) {
      return CUDA_SUCCESS; /* an external event node: the graph waits for it when launched */
    }
    capture_invalidate(s->cap);
    return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  }
  if (s->cap == NULL) {
    if (s->kind == FK_S_LEGACY) {
      capture_invalidate(cap);
      return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    s->cap = cap; /* fork: s joins the capture */
    return cap->invalid ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
  }
  if (s->cap != cap) {
    capture_invalidate(s->cap);
    capture_invalidate(cap);
    return CUDA_ERROR_STREAM_CAPTURE_MERGE;
  }
  return s->cap->invalid ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

/* Begins a capture on stream h into a new graph, or into the program's graph `into` (after its
 * nodes deps[0..ndeps) joined by edges, which the fake's linear replay already orders). */
static CUresult begin_capture(CUstream h, int ptsz, int mode, struct CUgraph_st *into,
                              const CUgraphNode *deps, const CUgraphEdgeData *edges, size_t ndeps) {
  if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (into != NULL && (!fk_graph_known(into) || (ndeps > 0 && deps == NULL))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < ndeps; i++) {
    struct CUgraph_st *owner = NULL;
    const struct fk_node *up = fk_graph_node(deps[i], &owner);
    if (up == NULL || owner != into || (edges != NULL && !fk_graph_edge_valid(&edges[i], up, -1))) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (s->kind == FK_S_LEGACY) {
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot be captured */
  }
  if (s->cap != NULL) {
    return CUDA_ERROR_ILLEGAL_STATE; /* already capturing */
  }
  if (into != NULL && into->ctx != s->ctx) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct fk_capture *cap = xcalloc(sizeof *cap);
  cap->graph = into != NULL ? into : fk_graph_new(s->ctx);
  cap->existing = into != NULL;
  cap->base = cap->graph->n;
  cap->origin = s;
  cap->id = fk_new_id();
  cap->mode = mode;
  cap->thread = pthread_self();
  fk_push((void ***)&captures, &ncaptures, &capcaptures, cap);
  s->cap = cap;
  return CUDA_SUCCESS;
}

FK_API CUresult cuStreamBeginCapture(CUstream hStream) {
  FK_BODY(FK_NEED_INIT,
          begin_capture(hStream, 0, CU_STREAM_CAPTURE_MODE_GLOBAL, NULL, NULL, NULL, 0));
}

FK_API CUresult cuStreamBeginCapture_ptsz(CUstream hStream) {
  FK_BODY(FK_NEED_INIT,
          begin_capture(hStream, 1, CU_STREAM_CAPTURE_MODE_GLOBAL, NULL, NULL, NULL, 0));
}

FK_API CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
  FK_BODY(FK_NEED_INIT, begin_capture(hStream, 0, (int)mode, NULL, NULL, NULL, 0));
}

FK_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
  FK_BODY(FK_NEED_INIT, begin_capture(hStream, 1, (int)mode, NULL, NULL, NULL, 0));
}

static CUresult begin_capture_to_graph(CUstream h, int ptsz, CUgraph g, const CUgraphNode *deps,
                                       const CUgraphEdgeData *edges, size_t ndeps, int mode) {
  if (g == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return begin_capture(h, ptsz, mode, g, deps, edges, ndeps);
}

FK_API CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                            const CUgraphNode *dependencies,
                                            const CUgraphEdgeData *dependencyData,
                                            size_t numDependencies, CUstreamCaptureMode mode) {
  FK_BODY(FK_NEED_INIT, begin_capture_to_graph(hStream, 0, hGraph, dependencies, dependencyData,
                                               numDependencies, (int)mode));
}

FK_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                 const CUgraphNode *dependencies,
                                                 const CUgraphEdgeData *dependencyData,
                                                 size_t numDependencies, CUstreamCaptureMode mode) {
  FK_BODY(FK_NEED_INIT, begin_capture_to_graph(hStream, 1, hGraph, dependencies, dependencyData,
                                               numDependencies, (int)mode));
}

static CUresult end_capture(CUstream h, int ptsz, CUgraph *out) {
  if (out == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct fk_capture *cap = s->cap;
  if (cap == NULL) {
    return CUDA_ERROR_ILLEGAL_STATE; /* not capturing */
  }
  if (cap->origin != s) {
    capture_invalidate(cap);
    return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  }
  if (cap->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(cap->thread, pthread_self())) {
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  }
  detach_streams(cap);
  struct CUgraph_st *g = cap->graph;
  int invalid = cap->invalid, existing = cap->existing;
  size_t base = cap->base;
  free(cap);
  if (invalid) {
    graph_discard(g, base); /* the program's own graph keeps what it had before */
    g->live = existing;
    *out = NULL;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  *out = g;
  return CUDA_SUCCESS;
}

FK_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) {
  FK_BODY(FK_NEED_INIT, end_capture(hStream, 0, phGraph));
}

FK_API CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
  FK_BODY(FK_NEED_INIT, end_capture(hStream, 1, phGraph));
}

static CUstreamCaptureStatus status_of(const struct CUstream_st *s) {
  return s->cap == NULL    ? CU_STREAM_CAPTURE_STATUS_NONE
         : s->cap->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                           : CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

static CUresult is_capturing(CUstream h, int ptsz, CUstreamCaptureStatus *status) {
  if (status == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (s->kind == FK_S_LEGACY && fk_capture_active(s->ctx)) {
    return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; /* asking makes it depend on capturing work */
  }
  *status = status_of(s);
  return CUDA_SUCCESS;
}

FK_API CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
  FK_BODY(FK_NEED_INIT, is_capturing(hStream, 0, captureStatus));
}

FK_API CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus) {
  FK_BODY(FK_NEED_INIT, is_capturing(hStream, 1, captureStatus));
}

/* The last node of the capture (the stream's dependency set as the fake linearises it). */
static const CUgraphNode *capture_deps(const struct fk_capture *cap, size_t *n) {
  static _Thread_local CUgraphNode last;
  if (cap == NULL || cap->graph->n == 0) {
    *n = 0;
    return NULL;
  }
  last = (CUgraphNode)cap->graph->nodes[cap->graph->n - 1];
  *n = 1;
  return &last;
}

static CUresult capture_info(CUstream h, int ptsz, CUstreamCaptureStatus *status, cuuint64_t *id,
                             CUgraph *graph, const CUgraphNode **deps,
                             const CUgraphEdgeData **edges, size_t *ndeps) {
  struct CUstream_st *s;
  CUresult rc = is_capturing(h, ptsz, status);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  fk_stream_resolve(h, ptsz, &s);
  struct fk_capture *cap = *status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? s->cap : NULL;
  if (id != NULL && cap != NULL) {
    *id = cap->id;
  }
  if (graph != NULL) {
    *graph = cap != NULL ? cap->graph : NULL;
  }
  size_t n = 0;
  const CUgraphNode *d = capture_deps(cap, &n);
  if (deps != NULL) {
    *deps = d;
  }
  if (edges != NULL) {
    *edges = NULL; /* all default edges */
  }
  if (ndeps != NULL) {
    *ndeps = n;
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                       cuuint64_t *id_out) {
  FK_BODY(FK_NEED_INIT,
          capture_info(hStream, 0, captureStatus_out, id_out, NULL, NULL, NULL, NULL));
}

FK_API CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream,
                                            CUstreamCaptureStatus *captureStatus_out,
                                            cuuint64_t *id_out) {
  FK_BODY(FK_NEED_INIT,
          capture_info(hStream, 1, captureStatus_out, id_out, NULL, NULL, NULL, NULL));
}

FK_API CUresult cuStreamGetCaptureInfo_v2(CUstream hStream,
                                          CUstreamCaptureStatus *captureStatus_out,
                                          cuuint64_t *id_out, CUgraph *graph_out,
                                          const CUgraphNode **dependencies_out,
                                          size_t *numDependencies_out) {
  FK_BODY(FK_NEED_INIT, capture_info(hStream, 0, captureStatus_out, id_out, graph_out,
                                     dependencies_out, NULL, numDependencies_out));
}

FK_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
                                               CUstreamCaptureStatus *captureStatus_out,
                                               cuuint64_t *id_out, CUgraph *graph_out,
                                               const CUgraphNode **dependencies_out,
                                               size_t *numDependencies_out) {
  FK_BODY(FK_NEED_INIT, capture_info(hStream, 1, captureStatus_out, id_out, graph_out,
                                     dependencies_out, NULL, numDependencies_out));
}

FK_API CUresult cuStreamGetCaptureInfo_v3(CUstream hStream,
                                          CUstreamCaptureStatus *captureStatus_out,
                                          cuuint64_t *id_out, CUgraph *graph_out,
                                          const CUgraphNode **dependencies_out,
                                          const CUgraphEdgeData **edgeData_out,
                                          size_t *numDependencies_out) {
  FK_BODY(FK_NEED_INIT, capture_info(hStream, 0, captureStatus_out, id_out, graph_out,
                                     dependencies_out, edgeData_out, numDependencies_out));
}

FK_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                               CUstreamCaptureStatus *captureStatus_out,
                                               cuuint64_t *id_out, CUgraph *graph_out,
                                               const CUgraphNode **dependencies_out,
                                               const CUgraphEdgeData **edgeData_out,
                                               size_t *numDependencies_out) {
  FK_BODY(FK_NEED_INIT, capture_info(hStream, 1, captureStatus_out, id_out, graph_out,
                                     dependencies_out, edgeData_out, numDependencies_out));
}

static CUresult exchange_mode(CUstreamCaptureMode *mode) {
  if (mode == NULL || (int)*mode < CU_STREAM_CAPTURE_MODE_GLOBAL ||
      (int)*mode > CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int old = thread_mode;
  thread_mode = (int)*mode;
  *mode = (CUstreamCaptureMode)old;
  return CUDA_SUCCESS;
}

FK_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
  FK_BODY(FK_NEED_INIT, exchange_mode(mode));
}

/* ---- Graph memory. ---- */

/* A graph allocation node of size bytes on dev appended to g: its address is reserved at once
 * (no memory held). */
static CUresult alloc_node(struct CUgraph_st *g, const CUgraphNode *deps, size_t ndeps, int dev,
                           size_t size, CUdeviceptr *out, struct fk_node **node) {
  size_t span = (size + FK_ALLOC_ALIGN - 1) / FK_ALLOC_ALIGN * FK_ALLOC_ALIGN;
  if (span < size || span > fk.dev[dev].total) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  uintptr_t base = fk_mem_carve(fk.dev[dev].va_base, fk.dev[dev].va_base + fk.dev[dev].va_size,
                                span, FK_ALLOC_ALIGN);
  if (base == 0) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  struct fk_alloc *a = fk_mem_new(FK_K_GRAPH, base, size, span, dev);
  a->ctx = g->ctx; /* freed with it, like everything made in a context */
  struct fk_node *n = fk_graph_add(
      g, (struct fk_node){.kind = N_ALLOC, .type = CU_GRAPH_NODE_TYPE_MEM_ALLOC, .alloc = a}, deps,
      NULL, ndeps);
  if (node != NULL) {
    *node = n;
  }
  *out = base;
  return CUDA_SUCCESS;
}

CUresult fk_graph_alloc(struct CUstream_st *s, int dev, size_t size, CUdeviceptr *out) {
  if (s->cap->invalid) {
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  struct CUgraph_st *g = s->cap->graph;
  CUgraphNode last = g->n > s->cap->base ? (CUgraphNode)g->nodes[g->n - 1] : NULL;
  return alloc_node(g, &last, last != NULL, dev, size, out, NULL);
}

/* Whether g frees allocation a itself (a free node after its allocation node). */
static int graph_frees(const struct CUgraph_st *g, const struct fk_alloc *a) {
  for (size_t i = 0; i < g->n; i++) {
    const struct fk_work *w = g->nodes[i]->work;
    if (w != NULL && w->kind == FK_W_FREE && w->dst.alloc_id == a->id) {
      return 1;
    }
  }
  return 0;
}

/* A launch of g reaches an allocation node: the allocation takes its memory (once; it stays in
 * the graph pool) and is live. Still live from an earlier launch, it may be allocated again
 * only when g frees it itself: that earlier launch's free is then ahead in stream order. */
static CUresult graph_alloc_take(const struct CUgraph_st *g, struct fk_alloc *a) {
  if (a->graph_live && !graph_frees(g, a)) {
    return CUDA_ERROR_INVALID_VALUE; /* allocated again before being freed */
  }
  CUresult rc = fk_mem_graph_memory(a, 1);
  if (rc == CUDA_SUCCESS) {
    a->graph_live = 1;
  }
  return rc;
}

CUresult fk_graph_free(struct fk_alloc *a, struct CUstream_st *s) {
  if (!a->graph_live) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct fk_work *w = fk_work_new(FK_W_GRAPH_FREE);
  w->dst.addr = a->base;
  w->dst.alloc_id = a->id;
  if (s == NULL) {
    fk_work_execute(w);
    return CUDA_SUCCESS;
  }
  w->dev = s->ctx->dev;
  fk_work_enqueue(s, w);
  return CUDA_SUCCESS;
}

/* Releases the memory of graph allocations of dev that are not live (cuDeviceGraphMemTrim). */
static void trim(int dev) {
  for (size_t i = 0; i < fk_nallocs; i++) {
    struct fk_alloc *a = fk_allocs[i];
    if (a->kind == FK_K_GRAPH && a->dev == dev && a->graph_phys && !a->graph_live) {
      fk_mem_graph_memory(a, 0);
    }
  }
}

static CUresult graph_mem_trim(CUdevice dev) {
  if (dev < 0 || dev >= fk.ndev) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  fk_sync_device(dev);
  trim(dev);
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGraphMemTrim(CUdevice device) {
  FK_BODY(FK_NEED_INIT, graph_mem_trim(device));
}

static CUresult graph_mem_attr(CUdevice dev, int attr, void *value, int set) {
  if (dev < 0 || dev >= fk.ndev) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  if (value == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  cuuint64_t used = 0, reserved = 0;
  for (size_t i = 0; i < fk_nallocs; i++) {
    const struct fk_alloc *a = fk_allocs[i];
    if (a->kind == FK_K_GRAPH && a->dev == dev) {
      used += a->graph_live ? a->span : 0;
      reserved += a->graph_phys ? a->span : 0;
    }
  }
  static cuuint64_t high_used[FK_MAX_DEVICES], high_reserved[FK_MAX_DEVICES];
  high_used[dev] = used > high_used[dev] ? used : high_used[dev];
  high_reserved[dev] = reserved > high_reserved[dev] ? reserved : high_reserved[dev];
  switch (attr) {
  case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
  case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
    if (set) {
      return CUDA_ERROR_INVALID_VALUE; /* only the high watermarks can be reset */
    }
    *(cuuint64_t *)value = attr == CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT ? used : reserved;
    return CUDA_SUCCESS;
  case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
  case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: {
    cuuint64_t *high = attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH ? high_used : high_reserved;
    if (set) {
      if (*(cuuint64_t *)value != 0) {
        return CUDA_ERROR_INVALID_VALUE; /* "may only be set to 0" */
      }
      high[dev] = attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH ? used : reserved;
    } else {
      *(cuuint64_t *)value = high[dev];
    }
    return CUDA_SUCCESS;
  }
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

FK_API CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                             void *value) {
  FK_BODY(FK_NEED_INIT, graph_mem_attr(device, (int)attr, value, 0));
}

FK_API CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                             void *value) {
  FK_BODY(FK_NEED_INIT, graph_mem_attr(device, (int)attr, value, 1));
}

/* ---- Graphs and executable graphs. ---- */

static CUresult graph_create(CUgraph *out, unsigned flags) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (out == NULL || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *out = fk_graph_new(c);
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
  FK_BODY(FK_NEED_INIT, graph_create(phGraph, flags));
}

/* Allocations of graph g that the program no longer uses (never allocated or freed since) go
 * when the last graph naming them goes. */
static void release_allocs(struct CUgraph_st *g) {
  for (size_t i = 0; i < g->n; i++) {
    struct fk_alloc *a = g->nodes[i]->alloc;
    if (a == NULL || a->graph_live) {
      continue;
    }
    int named = 0;
    for (size_t j = 0; j < ngraphs && !named; j++) {
      struct CUgraph_st *o = graphs[j];
      for (size_t k = 0; o != g && o->live && k < o->n && !named; k++) {
        named = o->nodes[k]->alloc == a;
      }
    }
    if (!named) {
      fk_mem_release(a);
    }
  }
}

void fk_graph_drop(struct CUgraph_st *g) {
  g->live = 0;
  release_allocs(g);
  for (size_t i = 0; i < g->n; i++) {
    struct fk_node *n = g->nodes[i];
    if (n->child != NULL) {
      fk_graph_drop(n->child);
    }
    for (unsigned b = 0; b < n->nbodies; b++) {
      fk_graph_drop(n->bodies[b]);
    }
  }
  graph_clear(g);
}

static CUresult graph_destroy(CUgraph g) {
  if (!fk_graph_known(g) || g->parent != NULL) {
    return CUDA_ERROR_INVALID_VALUE; /* a child or body graph belongs to its node */
  }
  fk_graph_drop(g);
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphDestroy(CUgraph hGraph) {
  FK_BODY(FK_NEED_INIT, graph_destroy(hGraph));
}

static CUresult graph_nodes(CUgraph g, CUgraphNode *nodes, size_t *n) {
  if (n == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!fk_graph_known(g)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (nodes != NULL) {
    for (size_t i = 0; i < *n && i < g->n; i++) {
      nodes[i] = (CUgraphNode)g->nodes[i];
    }
    if (*n > g->n) {
      for (size_t i = g->n; i < *n; i++) {
        nodes[i] = NULL;
      }
    }
  }
  *n = g->n;
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes) {
  FK_BODY(FK_NEED_INIT, graph_nodes(hGraph, nodes, numNodes));
}

struct fk_node *fk_graph_node(CUgraphNode h, struct CUgraph_st **owner) {
  for (size_t i = 0; h != NULL && i < ngraphs; i++) {
    struct CUgraph_st *g = graphs[i];
    for (size_t k = 0; g->live && k < g->n; k++) {
      if ((CUgraphNode)g->nodes[k] == h) {
        if (owner != NULL) {
          *owner = g;
        }
        return g->nodes[k];
      }
    }
  }
  return NULL;
}

static CUresult node_type(CUgraphNode h, CUgraphNodeType *type) {
  const struct fk_node *n = fk_graph_node(h, NULL);
  if (n == NULL || type == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *type = n->type;
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type) {
  FK_BODY(FK_NEED_INIT, node_type(hNode, type));
}

static CUresult alloc_node_params(CUgraphNode h, CUDA_MEM_ALLOC_NODE_PARAMS *out) {
  const struct fk_node *n = fk_graph_node(h, NULL);
  if (n == NULL || n->kind != N_ALLOC || out == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  memset(out, 0, sizeof *out);
  out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  out->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  out->poolProps.location.id = n->alloc->dev;
  out->bytesize = n->alloc->size;
  out->dptr = n->alloc->base;
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode,
                                             CUDA_MEM_ALLOC_NODE_PARAMS *params_out) {
  FK_BODY(FK_NEED_INIT, alloc_node_params(hNode, params_out));
}

/* The checks of a memory node: an output, a top-level live graph (child and body graphs hold
 * no memory nodes), and dependencies that are nodes of that graph. */
static CUresult add_check(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps) {
  if (out == NULL || !fk_graph_known(g) || g->parent != NULL || (ndeps > 0 && deps == NULL)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < ndeps; i++) {
    struct CUgraph_st *owner = NULL;
    if (fk_graph_node(deps[i], &owner) == NULL || owner != g) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

static CUresult add_alloc_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                               CUDA_MEM_ALLOC_NODE_PARAMS *p) {
  CUresult rc = add_check(out, g, deps, ndeps);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (p == NULL || p->bytesize == 0 || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE || p->poolProps.location.id < 0 ||
      p->poolProps.location.id >= fk.ndev || (p->accessDescCount > 0 && p->accessDescs == NULL)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct fk_node *n;
  rc = alloc_node(g, deps, ndeps, p->poolProps.location.id, p->bytesize, &p->dptr, &n);
  if (rc == CUDA_SUCCESS) {
    *out = (CUgraphNode)n;
  }
  return rc;
}

FK_API CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                       const CUgraphNode *dependencies, size_t numDependencies,
                                       CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams) {
  FK_BODY(FK_NEED_INIT,
          add_alloc_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams));
}

static CUresult add_free_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                              CUdeviceptr dptr) {
  CUresult rc = add_check(out, g, deps, ndeps);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct fk_alloc *a = fk_mem_find((uintptr_t)dptr);
  if (a == NULL || a->base != (uintptr_t)dptr || (a->kind != FK_K_GRAPH && a->kind != FK_K_ASYNC)) {
    return CUDA_ERROR_INVALID_VALUE; /* only graph and stream-ordered allocations */
  }
  struct fk_work *w = fk_work_new(FK_W_FREE);
  w->dst.addr = a->base;
  w->dst.alloc_id = a->id;
  *out = (CUgraphNode)fk_graph_add(
      g, (struct fk_node){.kind = N_WORK, .type = CU_GRAPH_NODE_TYPE_MEM_FREE, .work = w}, deps,
      NULL, ndeps);
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                      const CUgraphNode *dependencies, size_t numDependencies,
                                      CUdeviceptr dptr) {
  FK_BODY(FK_NEED_INIT, add_free_node(phGraphNode, hGraph, dependencies, numDependencies, dptr));
}

static CUresult instantiate(CUgraphExec *out, CUgraph g, unsigned long long flags) {
  if (out == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!fk_graph_known(g) || g->parent != NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  unsigned long long known =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
      CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (flags & ~known) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUgraphExec_st *e = xcalloc(sizeof *e);
  e->graph = fk_graph_copy(g, NULL);
  e->live = 1;
  fk_push((void ***)&execs, &nexecs, &capexecs, e);
  *out = e;
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                            unsigned long long flags) {
  FK_BODY(FK_NEED_INIT, instantiate(phGraphExec, hGraph, flags));
}

static CUresult instantiate_v1(CUgraphExec *out, CUgraph g, CUgraphNode *err_node, char *log,
                               size_t log_size) {
  if (err_node != NULL) {
    *err_node = NULL;
  }
  if (log != NULL && log_size > 0) {
    log[0] = '\0';
  }
  return instantiate(out, g, 0);
}

FK_API CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                   CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize) {
  FK_BODY(FK_NEED_INIT, instantiate_v1(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize));
}

FK_API CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                      CUgraphNode *phErrorNode, char *logBuffer,
                                      size_t bufferSize) {
  FK_BODY(FK_NEED_INIT, instantiate_v1(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize));
}

static CUresult graph_upload(CUgraphExec e, CUstream h, int ptsz);

static CUresult instantiate_params(CUgraphExec *out, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
  if (p == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  p->result_out = CUDA_GRAPH_INSTANTIATE_SUCCESS;
  p->hErrNode_out = NULL;
  CUresult rc = instantiate(out, g, p->flags);
  if (rc == CUDA_SUCCESS && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)) {
    rc = graph_upload(*out, p->hUploadStream, 0);
  }
  if (rc != CUDA_SUCCESS) {
    p->result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
  }
  return rc;
}

FK_API CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
  FK_BODY(FK_NEED_INIT, instantiate_params(phGraphExec, hGraph, instantiateParams));
}

FK_API CUresult cuGraphInstantiateWithParams_ptsz(
    CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
  FK_BODY(FK_NEED_INIT, instantiate_params(phGraphExec, hGraph, instantiateParams));
}

static CUresult exec_destroy(CUgraphExec e) {
  if (fk_graph_exec(e) == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  e->live = 0;
  fk_graph_drop(e->graph);
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  FK_BODY(FK_NEED_INIT, exec_destroy(hGraphExec));
}

/* Queues the work of g's nodes on s in order: each work item a copy, a child graph's nodes in
 * its place, a conditional node's body as its handle's value selects. */
static CUresult launch_nodes(const struct CUgraph_st *g, struct CUstream_st *s) {
  for (size_t i = 0; i < g->n; i++) {
    const struct fk_node *n = g->nodes[i];
    CUresult rc = CUDA_SUCCESS;
    if (n->disabled) {
      continue;
    }
    if (n->kind == N_ALLOC) {
      if (s->cap != NULL) {
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* memory nodes in a child graph */
      }
      rc = graph_alloc_take(g, n->alloc);
    } else if (n->kind == N_CHILD) {
      rc = launch_nodes(n->child, s);
    } else if (n->kind == N_COND) {
      unsigned v = fk_graph_cond_value(n->handle);
      /* IF: body 0 when non-zero, else body 1 if any; SWITCH: body v; WHILE: body 0 while
       * non-zero, which only device code could change: once */
      unsigned body = n->cond_type == CU_GRAPH_COND_TYPE_SWITCH ? v : (v != 0 ? 0 : 1);
      if (n->cond_type == CU_GRAPH_COND_TYPE_WHILE && v == 0) {
        body = n->nbodies;
      }
      rc = body < n->nbodies ? launch_nodes(n->bodies[body], s) : CUDA_SUCCESS;
    } else {
      for (const struct fk_work *from = n->work; from != NULL; from = from->next) {
        struct fk_work *w = fk_work_clone(from);
        if (w->kind == FK_W_FREE) {
          struct fk_alloc *a = fk_mem_by_id(w->dst.alloc_id);
          if (a != NULL && a->kind == FK_K_GRAPH) {
            w->kind = FK_W_GRAPH_FREE; /* a free node of a graph allocation */
          } else if (a != NULL) {
            a->freeing = 1;
          }
        }
        fk_work_enqueue(s, w);
      }
    }
    if (rc != CUDA_SUCCESS) {
      return rc;
    }
  }
  return CUDA_SUCCESS;
}

static CUresult graph_launch(CUgraphExec e, CUstream h, int ptsz) {
  if (fk_graph_exec(e) == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (s->ctx != e->graph->ctx) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return launch_nodes(e->graph, s);
}

FK_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, graph_launch(hGraphExec, hStream, 0));
}

FK_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, graph_launch(hGraphExec, hStream, 1));
}

/* An upload maps the memory of the graph's allocations ahead of its launches (nothing else to
 * stage on a device that runs nothing); they stay unallocated until a launch reaches them. */
static CUresult back_allocs(struct CUgraph_st *g) {
  for (size_t i = 0; i < g->n; i++) {
    if (g->nodes[i]->kind == N_ALLOC) {
      CUresult rc = fk_mem_graph_memory(g->nodes[i]->alloc, 1);
      if (rc != CUDA_SUCCESS) {
        return rc;
      }
    }
  }
  return CUDA_SUCCESS;
}

static CUresult graph_upload(CUgraphExec e, CUstream h, int ptsz) {
  if (fk_graph_exec(e) == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUstream_st *s;
  CUresult rc = fk_stream_resolve(h, ptsz, &s);
  if (rc == CUDA_SUCCESS && s->ctx != e->graph->ctx) {
    rc = CUDA_ERROR_INVALID_CONTEXT;
  }
  return rc == CUDA_SUCCESS ? back_allocs(e->graph) : rc;
}

FK_API CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, graph_upload(hGraphExec, hStream, 0));
}

FK_API CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  FK_BODY(FK_NEED_INIT, graph_upload(hGraphExec, hStream, 1));
}

/* ---- Teardown. ---- */

void fk_graph_free_ctx(struct CUctx_st *c) {
  for (size_t i = 0; i < ncaptures;) {
    if (captures[i]->origin->ctx == c) {
      struct fk_capture *cap = captures[i];
      detach_streams(cap); /* removes it from captures */
      fk_graph_drop(cap->graph);
      free(cap);
    } else {
      i++;
    }
  }
  for (size_t i = 0; i < nexecs; i++) {
    if (execs[i]->live && execs[i]->graph->ctx == c) {
      exec_destroy(execs[i]);
    }
  }
  for (size_t i = 0; i < ngraphs; i++) {
    if (graphs[i]->live && graphs[i]->ctx == c) {
      fk_graph_drop(graphs[i]);
    }
  }
}

void fk_graph_teardown(void) {
  fk_gnode_teardown();
  for (size_t i = 0; i < ncaptures; i++) {
    free(captures[i]);
  }
  for (size_t i = 0; i < ngraphs; i++) {
    graph_clear(graphs[i]);
    free(graphs[i]);
  }
  for (size_t i = 0; i < nexecs; i++) {
    free(execs[i]);
  }
  free(captures);
  free(graphs);
  free(execs);
  captures = NULL;
  graphs = NULL;
  execs = NULL;
  ncaptures = ngraphs = nexecs = capcaptures = capgraphs = capexecs = 0;
}
