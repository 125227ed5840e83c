/* The explicit graph-node API of the fake driver: kernel, memset, memcpy, empty, child-graph and
 * conditional nodes (cuGraphAdd*Node, and cuGraphAddNode / _v2 with edges: XLA's form),
 * conditional handles, node dependencies, and the updates of an executable graph
 * (cuGraphExec*NodeSetParams, cuGraphExecNodeSetParams, cuGraphNodeSetEnabled).
 *
 * A node's work is what the same operation would queue on a stream (fk_kernel_node_work,
 * fk_memset_node_work, fk_memcpy_node_work), checked as the operation checks it; a launch
 * replays it (fk_graph.c). Child graphs are cloned into their node (or moved); a conditional
 * node owns its body graphs, which the program fills through this API or a capture. Device code
 * never runs, so a conditional handle keeps the value it has at launch: its default with
 * CU_GRAPH_COND_ASSIGN_DEFAULT, else 0 (an IF runs its else body, a WHILE its body never; a WHILE
 * whose default is non-zero runs its body once). Runs under fk.lock.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fakecuda/fk_graph.h"

/* ---- Conditional handles. ---- */

struct cond_handle {
  struct CUgraph_st *graph;
  unsigned def, flags;
};

static struct cond_handle *handles; /* handle value h is handles[h - 1] */
static size_t nhandles, caphandles;

static const struct cond_handle *handle_of(CUgraphConditionalHandle h) {
  return h >= 1 && h <= nhandles ? &handles[h - 1] : NULL;
}

unsigned fk_graph_cond_value(CUgraphConditionalHandle h) {
  const struct cond_handle *c = handle_of(h);
  return c != NULL && (c->flags & CU_GRAPH_COND_ASSIGN_DEFAULT) ? c->def : 0;
}

static CUresult handle_create(CUgraphConditionalHandle *out, CUgraph g, CUcontext ctx, unsigned def,
                              unsigned flags) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_or_current(ctx, &c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (out == NULL || !fk_graph_known(g) || (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (nhandles == caphandles) {
    size_t cap = caphandles ? 2 * caphandles : 16;
    struct cond_handle *h = realloc(handles, cap * sizeof *h);
    if (h == NULL) {
      fk_log("error: out of host memory");
      abort();
    }
    handles = h;
    caphandles = cap;
  }
  handles[nhandles++] = (struct cond_handle){.graph = g, .def = def, .flags = flags};
  *out = nhandles;
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *pHandle_out,
                                               CUgraph hGraph, CUcontext ctx,
                                               unsigned int defaultLaunchValue,
                                               unsigned int flags) {
  FK_BODY(FK_NEED_INIT, handle_create(pHandle_out, hGraph, ctx, defaultLaunchValue, flags));
}

/* ---- Adding nodes. ---- */

int fk_graph_edge_valid(const CUgraphEdgeData *e, const struct fk_node *up, int down) {
  static const unsigned char zero[sizeof e->reserved];
  int up_kernel = up->type == CU_GRAPH_NODE_TYPE_KERNEL;
  int down_kernel = down == CU_GRAPH_NODE_TYPE_KERNEL || down == -1;
  if (memcmp(e->reserved, zero, sizeof zero) != 0 || e->to_port != 0 ||
      e->from_port > CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER ||
      e->type > CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC || (e->from_port != 0 && !up_kernel)) {
    return 0;
  }
  return e->type != CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC ||
         (up_kernel && down_kernel && e->from_port != CU_GRAPH_KERNEL_NODE_PORT_DEFAULT);
}

/* The checks every cuGraphAdd*Node makes: an output, a live graph, dependencies that are
 * distinct nodes of that graph, each joined by a valid edge to a node of type `type`. */
static CUresult add_check(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
                          const CUgraphEdgeData *edges, size_t ndeps, CUgraphNodeType type) {
  if (out == NULL || !fk_graph_known(g) || (ndeps > 0 && deps == NULL)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < ndeps; i++) {
    struct CUgraph_st *owner = NULL;
    const struct fk_node *up = fk_graph_node(deps[i], &owner);
    if (up == NULL || owner != g ||
        (edges != NULL && !fk_graph_edge_valid(&edges[i], up, (int)type))) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t j = 0; j < i; j++) {
      if (deps[j] == deps[i]) {
        return CUDA_ERROR_INVALID_VALUE; /* "may not have any duplicate entries" */
      }
    }
  }
  return CUDA_SUCCESS;
}

/* The dependencies of a node being added: its graph, nodes and their edges. */
struct deps {
  CUgraph g;
  const CUgraphNode *nodes;
  const CUgraphEdgeData *edges;
  size_t n;
};

static CUresult add_work(CUgraphNode *out, struct deps d, CUgraphNodeType type,
                         struct fk_work *work) {
  *out = (CUgraphNode)fk_graph_add(
      d.g, (struct fk_node){.kind = N_WORK, .type = type, .work = work}, d.nodes, d.edges, d.n);
  return CUDA_SUCCESS;
}

/* A node's dependencies as the API passes them, with no edge data. */
static struct deps plain(CUgraph g, const CUgraphNode *nodes, size_t n) {
  return (struct deps){.g = g, .nodes = nodes, .n = n};
}

static CUresult add_kernel(CUgraphNode *out, struct deps d, const CUDA_KERNEL_NODE_PARAMS *p) {
  CUresult rc = add_check(out, d.g, d.nodes, d.edges, d.n, CU_GRAPH_NODE_TYPE_KERNEL);
  struct CUctx_st *c;
  struct fk_work *w = NULL;
  if (rc == CUDA_SUCCESS) {
    rc = fk_kernel_node_work(p, &c, &w);
  }
  return rc == CUDA_SUCCESS ? add_work(out, d, CU_GRAPH_NODE_TYPE_KERNEL, w) : rc;
}

/* The CUDA 10 parameters: no CUkernel, the function's own context. */
static CUDA_KERNEL_NODE_PARAMS kernel_params_v2(const CUDA_KERNEL_NODE_PARAMS_v1 *p) {
  CUDA_KERNEL_NODE_PARAMS v = {0};
  if (p != NULL) {
    memcpy(&v, p, sizeof *p);
  }
  return v;
}

/* The generic API's memset parameters are v1's with the node's context after them. */
static const CUDA_MEMSET_NODE_PARAMS *memset_params_v1(const CUDA_MEMSET_NODE_PARAMS_v2 *p) {
  _Static_assert(offsetof(CUDA_MEMSET_NODE_PARAMS_v2, ctx) == sizeof(CUDA_MEMSET_NODE_PARAMS),
                 "memset node parameters v2 are v1's with a context after them");
  return (const CUDA_MEMSET_NODE_PARAMS *)(const void *)p;
}

FK_API CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                        const CUgraphNode *dependencies, size_t numDependencies,
                                        const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) {
  FK_BODY(FK_NEED_INIT,
          add_kernel(phGraphNode, plain(hGraph, dependencies, numDependencies), nodeParams));
}

FK_API CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                     const CUgraphNode *dependencies, size_t numDependencies,
                                     const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
  CUDA_KERNEL_NODE_PARAMS v = kernel_params_v2(nodeParams);
  FK_BODY(FK_NEED_INIT, add_kernel(phGraphNode, plain(hGraph, dependencies, numDependencies),
                                   nodeParams != NULL ? &v : NULL));
}

static CUresult add_memset(CUgraphNode *out, struct deps d, const CUDA_MEMSET_NODE_PARAMS *p,
                           CUcontext ctx) {
  CUresult rc = add_check(out, d.g, d.nodes, d.edges, d.n, CU_GRAPH_NODE_TYPE_MEMSET);
  struct fk_work *w = NULL;
  if (rc == CUDA_SUCCESS) {
    rc = fk_memset_node_work(p, ctx, &w);
  }
  return rc == CUDA_SUCCESS ? add_work(out, d, CU_GRAPH_NODE_TYPE_MEMSET, w) : rc;
}

FK_API CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                     const CUgraphNode *dependencies, size_t numDependencies,
                                     const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx) {
  FK_BODY(FK_NEED_INIT,
          add_memset(phGraphNode, plain(hGraph, dependencies, numDependencies), memsetParams, ctx));
}

static CUresult add_memcpy(CUgraphNode *out, struct deps d, const CUDA_MEMCPY3D *p, CUcontext ctx) {
  CUresult rc = add_check(out, d.g, d.nodes, d.edges, d.n, CU_GRAPH_NODE_TYPE_MEMCPY);
  struct fk_work *w = NULL;
  if (rc == CUDA_SUCCESS) {
    rc = fk_memcpy_node_work(p, ctx, &w);
  }
  return rc == CUDA_SUCCESS ? add_work(out, d, CU_GRAPH_NODE_TYPE_MEMCPY, w) : rc;
}

FK_API CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                     const CUgraphNode *dependencies, size_t numDependencies,
                                     const CUDA_MEMCPY3D *copyParams, CUcontext ctx) {
  FK_BODY(FK_NEED_INIT,
          add_memcpy(phGraphNode, plain(hGraph, dependencies, numDependencies), copyParams, ctx));
}

static CUresult add_empty(CUgraphNode *out, struct deps d) {
  CUresult rc = add_check(out, d.g, d.nodes, d.edges, d.n, CU_GRAPH_NODE_TYPE_EMPTY);
  return rc == CUDA_SUCCESS ? add_work(out, d, CU_GRAPH_NODE_TYPE_EMPTY, NULL) : rc;
}

FK_API CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                    const CUgraphNode *dependencies, size_t numDependencies) {
  FK_BODY(FK_NEED_INIT, add_empty(phGraphNode, plain(hGraph, dependencies, numDependencies)));
}

/* A graph that can be embedded: live, no memory nodes and no conditional nodes (cuda.h). */
static int embeddable(const struct CUgraph_st *g) {
  return fk_graph_known(g) && !fk_graph_has_memory_nodes(g) && !fk_graph_has_conditionals(g);
}

/* A child-graph node owning `child` (a clone, or the program's graph moved into it). */
static CUresult add_child(CUgraphNode *out, struct deps d, CUgraph child, int move) {
  CUresult rc = add_check(out, d.g, d.nodes, d.edges, d.n, CU_GRAPH_NODE_TYPE_GRAPH);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (!fk_graph_known(child) || child == d.g || fk_graph_has_conditionals(child) ||
      (move && child->parent != NULL)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (fk_graph_has_memory_nodes(child)) {
    /* cloned: cuda.h refuses them; moved: allowed, not modelled */
    return move ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
  }
  struct fk_node *n =
      fk_graph_add(d.g, (struct fk_node){.kind = N_CHILD, .type = CU_GRAPH_NODE_TYPE_GRAPH},
                   d.nodes, d.edges, d.n);
  if (move) {
    n->child = child;
    child->parent = n;
  } else {
    n->child = fk_graph_copy(child, n); /* "the child graph is cloned in this call" */
  }
  *out = (CUgraphNode)n;
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                         const CUgraphNode *dependencies, size_t numDependencies,
                                         CUgraph childGraph) {
  FK_BODY(FK_NEED_INIT,
          add_child(phGraphNode, plain(hGraph, dependencies, numDependencies), childGraph, 0));
}

static CUresult child_graph(CUgraphNode h, CUgraph *out) {
  const struct fk_node *n = fk_graph_node(h, NULL);
  if (n == NULL || n->kind != N_CHILD || out == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *out = n->child;
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph) {
  FK_BODY(FK_NEED_INIT, child_graph(hNode, phGraph));
}

/* Whether conditional handle h may serve a node of graph g: it was made for g or a graph that
 * (through nodes owning graphs) contains g. */
static int handle_reaches(const struct cond_handle *h, const struct CUgraph_st *g) {
  while (g != NULL) {
    if (h->graph == g) {
      return 1;
    }
    struct CUgraph_st *owner = NULL;
    if (g->parent == NULL || fk_graph_node((CUgraphNode)g->parent, &owner) == NULL) {
      return 0;
    }
    g = owner;
  }
  return 0;
}

static CUresult add_conditional(CUgraphNode *out, struct deps d, CUDA_CONDITIONAL_NODE_PARAMS *p) {
  CUresult rc = add_check(out, d.g, d.nodes, d.edges, d.n, CU_GRAPH_NODE_TYPE_CONDITIONAL);
  struct CUctx_st *c;
  if (rc == CUDA_SUCCESS) {
    rc = fk_ctx_or_current(p->ctx, &c);
  }
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  const struct cond_handle *h = handle_of(p->handle);
  int size_ok = (p->type == CU_GRAPH_COND_TYPE_IF && (p->size == 1 || p->size == 2)) ||
                (p->type == CU_GRAPH_COND_TYPE_WHILE && p->size == 1) ||
                (p->type == CU_GRAPH_COND_TYPE_SWITCH && p->size > 0);
  if (h == NULL || !handle_reaches(h, d.g) || !size_ok || d.g->ctx != c) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct fk_node *n = fk_graph_add(d.g,
                                   (struct fk_node){.kind = N_COND,
                                                    .type = CU_GRAPH_NODE_TYPE_CONDITIONAL,
                                                    .cond_type = (int)p->type,
                                                    .handle = p->handle},
                                   d.nodes, d.edges, d.n);
  n->bodies = calloc(p->size, sizeof *n->bodies);
  if (n->bodies == NULL) {
    fk_log("error: out of host memory");
    abort();
  }
  n->nbodies = p->size;
  for (unsigned b = 0; b < p->size; b++) {
    n->bodies[b] = fk_graph_new(c);
    n->bodies[b]->parent = n;
  }
  p->phGraph_out = n->bodies; /* "CUDA-owned array ... valid for the lifetime of the node" */
  *out = (CUgraphNode)n;
  return CUDA_SUCCESS;
}

/* The generic form: kernel, memset, memcpy, empty, child-graph and conditional nodes (the other
 * types have no model here). */
static CUresult add_node(CUgraphNode *out, struct deps d, CUgraphNodeParams *p) {
  if (p == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  switch (p->type) {
  case CU_GRAPH_NODE_TYPE_KERNEL:
    return add_kernel(out, d, &p->kernel);
  case CU_GRAPH_NODE_TYPE_MEMSET:
    return add_memset(out, d, memset_params_v1(&p->memset), p->memset.ctx);
  case CU_GRAPH_NODE_TYPE_MEMCPY:
    if (p->memcpy.flags != 0 || p->memcpy.reserved != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return add_memcpy(out, d, &p->memcpy.copyParams, p->memcpy.copyCtx);
  case CU_GRAPH_NODE_TYPE_GRAPH:
    if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE &&
        p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return add_child(out, d, p->graph.graph,
                     p->graph.ownership == CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE);
  case CU_GRAPH_NODE_TYPE_EMPTY:
    return add_empty(out, d);
  case CU_GRAPH_NODE_TYPE_CONDITIONAL:
    return add_conditional(out, d, &p->conditional);
  default:
    return CUDA_ERROR_NOT_SUPPORTED;
  }
}

FK_API CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                               const CUgraphNode *dependencies, size_t numDependencies,
                               CUgraphNodeParams *nodeParams) {
  FK_BODY(FK_NEED_INIT,
          add_node(phGraphNode, plain(hGraph, dependencies, numDependencies), nodeParams));
}

FK_API CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                  const CUgraphNode *dependencies,
                                  const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                  CUgraphNodeParams *nodeParams) {
  struct deps d = {hGraph, dependencies, dependencyData, numDependencies};
  FK_BODY(FK_NEED_INIT, add_node(phGraphNode, d, nodeParams));
}

/* ---- Dependencies. ---- */

static CUresult node_deps(CUgraphNode h, CUgraphNode *deps, CUgraphEdgeData *edges, size_t *n) {
  const struct fk_node *node = fk_graph_node(h, NULL);
  if (node == NULL || n == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (deps != NULL) {
    size_t want = *n;
    for (size_t i = 0; i < want; i++) {
      deps[i] = i < node->ndeps ? (CUgraphNode)node->deps[i] : NULL;
      if (edges != NULL && node->edges != NULL && i < node->ndeps) {
        edges[i] = node->edges[i];
      } else if (edges != NULL) {
        memset(&edges[i], 0, sizeof edges[i]); /* a default edge */
      }
    }
    *n = want < node->ndeps ? want : node->ndeps;
    return CUDA_SUCCESS;
  }
  *n = node->ndeps;
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies,
                                           size_t *numDependencies) {
  FK_BODY(FK_NEED_INIT, node_deps(hNode, dependencies, NULL, numDependencies));
}

FK_API CUresult cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode *dependencies,
                                              CUgraphEdgeData *edgeData, size_t *numDependencies) {
  FK_BODY(FK_NEED_INIT, node_deps(hNode, dependencies, edgeData, numDependencies));
}

/* ---- Executable graph updates. ---- */

/* The copy, in graph g of an executable graph (child and body graphs included), of the
 * program's node h; NULL when h is not one of the instantiated graph's. */
static struct fk_node *copy_of(struct CUgraph_st *g, CUgraphNode h) {
  for (size_t i = 0; h != NULL && i < g->n; i++) {
    struct fk_node *n = g->nodes[i];
    if ((CUgraphNode)n->origin == h) {
      return n;
    }
    struct fk_node *in = n->child != NULL ? copy_of(n->child, h) : NULL;
    for (unsigned b = 0; in == NULL && b < n->nbodies; b++) {
      in = copy_of(n->bodies[b], h);
    }
    if (in != NULL) {
      return in;
    }
  }
  return NULL;
}

/* The copy of node h of type `type` in executable graph e, or NULL. */
static struct fk_node *exec_node(CUgraphExec e, CUgraphNode h, CUgraphNodeType type) {
  struct fk_node *n = fk_graph_exec(e) != NULL ? copy_of(e->graph, h) : NULL;
  return n != NULL && n->type == type ? n : NULL;
}

/* Replaces the work of the copy of node h, of type `type`, with w (a chain; NULL on failure). */
static CUresult set_work(CUgraphExec e, CUgraphNode h, CUgraphNodeType type, CUresult made,
                         struct fk_work *w) {
  if (made != CUDA_SUCCESS) {
    return made;
  }
  struct fk_node *n = exec_node(e, h, type);
  if (n == NULL) {
    fk_work_free_chain(w);
    return CUDA_ERROR_INVALID_VALUE;
  }
  fk_work_free_chain(n->work);
  n->work = w;
  return CUDA_SUCCESS;
}

static CUresult exec_kernel(CUgraphExec e, CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS *p) {
  struct CUctx_st *c;
  struct fk_work *w = NULL;
  CUresult rc = exec_node(e, h, CU_GRAPH_NODE_TYPE_KERNEL) != NULL ? fk_kernel_node_work(p, &c, &w)
                                                                   : CUDA_ERROR_INVALID_VALUE;
  return set_work(e, h, CU_GRAPH_NODE_TYPE_KERNEL, rc, w);
}

FK_API CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                  const CUDA_KERNEL_NODE_PARAMS_v2 *nodeParams) {
  FK_BODY(FK_NEED_INIT, exec_kernel(hGraphExec, hNode, nodeParams));
}

FK_API CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                               const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams) {
  CUDA_KERNEL_NODE_PARAMS v = kernel_params_v2(nodeParams);
  FK_BODY(FK_NEED_INIT, exec_kernel(hGraphExec, hNode, nodeParams != NULL ? &v : NULL));
}

static CUresult exec_memset(CUgraphExec e, CUgraphNode h, const CUDA_MEMSET_NODE_PARAMS *p,
                            CUcontext ctx) {
  struct fk_work *w = NULL;
  CUresult rc = exec_node(e, h, CU_GRAPH_NODE_TYPE_MEMSET) != NULL ? fk_memset_node_work(p, ctx, &w)
                                                                   : CUDA_ERROR_INVALID_VALUE;
  return set_work(e, h, CU_GRAPH_NODE_TYPE_MEMSET, rc, w);
}

FK_API CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                               const CUDA_MEMSET_NODE_PARAMS *memsetParams,
                                               CUcontext ctx) {
  FK_BODY(FK_NEED_INIT, exec_memset(hGraphExec, hNode, memsetParams, ctx));
}

static CUresult exec_memcpy(CUgraphExec e, CUgraphNode h, const CUDA_MEMCPY3D *p, CUcontext ctx) {
  struct fk_work *w = NULL;
  CUresult rc = exec_node(e, h, CU_GRAPH_NODE_TYPE_MEMCPY) != NULL ? fk_memcpy_node_work(p, ctx, &w)
                                                                   : CUDA_ERROR_INVALID_VALUE;
  return set_work(e, h, CU_GRAPH_NODE_TYPE_MEMCPY, rc, w);
}

FK_API CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                               const CUDA_MEMCPY3D *copyParams, CUcontext ctx) {
  FK_BODY(FK_NEED_INIT, exec_memcpy(hGraphExec, hNode, copyParams, ctx));
}

/* Whether a and b have the same topology: node for node the same kinds and types, their child
 * and body graphs too. */
static int same_shape(const struct CUgraph_st *a, const struct CUgraph_st *b) {
  if (a->n != b->n) {
    return 0;
  }
  for (size_t i = 0; i < a->n; i++) {
    const struct fk_node *x = a->nodes[i], *y = b->nodes[i];
    if (x->type != y->type || x->nbodies != y->nbodies ||
        (x->child == NULL) != (y->child == NULL) ||
        (x->child != NULL && !same_shape(x->child, y->child))) {
      return 0;
    }
    for (unsigned k = 0; k < x->nbodies; k++) {
      if (!same_shape(x->bodies[k], y->bodies[k])) {
        return 0;
      }
    }
  }
  return 1;
}

/* After a child graph's copy was replaced by a copy of another graph of the same shape, its
 * nodes still stand for the instantiated graph's nodes (those of `orig`). */
static void keep_origins(struct CUgraph_st *copy, const struct CUgraph_st *orig) {
  for (size_t i = 0; i < copy->n; i++) {
    copy->nodes[i]->origin = orig->nodes[i];
    if (copy->nodes[i]->child != NULL) {
      keep_origins(copy->nodes[i]->child, orig->nodes[i]->child);
    }
    for (unsigned b = 0; b < copy->nodes[i]->nbodies; b++) {
      keep_origins(copy->nodes[i]->bodies[b], orig->nodes[i]->bodies[b]);
    }
  }
}

static CUresult exec_child(CUgraphExec e, CUgraphNode h, CUgraph child) {
  struct fk_node *n = exec_node(e, h, CU_GRAPH_NODE_TYPE_GRAPH);
  if (n == NULL || !embeddable(child) || !same_shape(n->child, child)) {
    return CUDA_ERROR_INVALID_VALUE; /* "the topology ... must match" */
  }
  fk_graph_drop(n->child);
  n->child = fk_graph_copy(child, n);
  keep_origins(n->child, n->origin->child);
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   CUgraph childGraph) {
  FK_BODY(FK_NEED_INIT, exec_child(hGraphExec, hNode, childGraph));
}

/* The generic update: kernel, memset, memcpy and child-graph nodes. */
static CUresult exec_node_params(CUgraphExec e, CUgraphNode h, CUgraphNodeParams *p) {
  if (p == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  switch (p->type) {
  case CU_GRAPH_NODE_TYPE_KERNEL:
    return exec_kernel(e, h, &p->kernel);
  case CU_GRAPH_NODE_TYPE_MEMSET:
    return exec_memset(e, h, memset_params_v1(&p->memset), p->memset.ctx);
  case CU_GRAPH_NODE_TYPE_MEMCPY:
    return p->memcpy.flags != 0 || p->memcpy.reserved != 0
               ? CUDA_ERROR_INVALID_VALUE
               : exec_memcpy(e, h, &p->memcpy.copyParams, p->memcpy.copyCtx);
  case CU_GRAPH_NODE_TYPE_GRAPH:
    return exec_child(e, h, p->graph.graph);
  default:
    return CUDA_ERROR_NOT_SUPPORTED;
  }
}

FK_API CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
                                         CUgraphNodeParams *nodeParams) {
  FK_BODY(FK_NEED_INIT, exec_node_params(hGraphExec, hNode, nodeParams));
}

/* "Currently only kernel, memset and memcpy nodes are supported." */
static struct fk_node *switchable(CUgraphExec e, CUgraphNode h) {
  struct fk_node *n = fk_graph_exec(e) != NULL ? copy_of(e->graph, h) : NULL;
  int ok =
      n != NULL && (n->type == CU_GRAPH_NODE_TYPE_KERNEL || n->type == CU_GRAPH_NODE_TYPE_MEMSET ||
                    n->type == CU_GRAPH_NODE_TYPE_MEMCPY);
  return ok ? n : NULL;
}

static CUresult set_enabled(CUgraphExec e, CUgraphNode h, unsigned enabled) {
  struct fk_node *n = switchable(e, h);
  if (n == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  n->disabled = enabled == 0;
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode,
                                      unsigned int isEnabled) {
  FK_BODY(FK_NEED_INIT, set_enabled(hGraphExec, hNode, isEnabled));
}

static CUresult get_enabled(CUgraphExec e, CUgraphNode h, unsigned *enabled) {
  const struct fk_node *n = switchable(e, h);
  if (n == NULL || enabled == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *enabled = !n->disabled;
  return CUDA_SUCCESS;
}

FK_API CUresult cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode,
                                      unsigned int *isEnabled) {
  FK_BODY(FK_NEED_INIT, get_enabled(hGraphExec, hNode, isEnabled));
}

void fk_gnode_teardown(void) {
  free(handles);
  handles = NULL;
  nhandles = caphandles = 0;
}
