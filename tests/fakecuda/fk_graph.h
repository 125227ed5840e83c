/* Graphs of the fake driver, shared by fk_graph.c (stream capture, graph memory, instantiation
 * and launch) and fk_gnode.c (the explicit node API and executable-graph updates).
 *
 * A graph is a list of nodes in the order they were added; every dependency of a node was added
 * before it, so replaying the list in order honours the dependencies (more serially than the
 * device would, never less). A node replays a chain of work items (kernels, copies, memsets;
 * empty nodes none), a graph allocation, an embedded child graph, or a conditional node's body
 * graph. Graphs, nodes and executable graphs are never freed before unload, so stale handles are
 * recognised. Everything here runs under fk.lock.
 */
#ifndef GPUCAP_TESTS_FAKECUDA_FK_GRAPH_H
#define GPUCAP_TESTS_FAKECUDA_FK_GRAPH_H

#include "tests/fakecuda/fk.h"

enum { N_WORK, N_ALLOC, N_CHILD, N_COND };

struct fk_node {
  int kind;
  CUgraphNodeType type;     /* what cuGraphNodeGetType answers */
  struct fk_work *work;     /* N_WORK: the items to replay, a chain through ->next (empty: NULL) */
  struct fk_alloc *alloc;   /* N_ALLOC: the graph allocation it makes */
  struct CUgraph_st *child; /* N_CHILD: the embedded graph (owned by the node) */
  struct CUgraph_st **bodies;      /* N_COND: its body graphs (owned by the node) */
  unsigned nbodies;                /* N_COND */
  int cond_type;                   /* N_COND: CU_GRAPH_COND_TYPE_* */
  CUgraphConditionalHandle handle; /* N_COND */
  struct fk_node **deps;           /* the dependencies it was added with */
  CUgraphEdgeData *edges;          /* ... and their edges (NULL: all default) */
  size_t ndeps;
  const struct fk_node *origin; /* in an executable graph's copy: the node it copies */
  int disabled;                 /* in an executable graph's copy: cuGraphNodeSetEnabled(0) */
};

struct CUgraph_st {
  struct CUctx_st *ctx;
  int live;
  struct fk_node *parent; /* a child graph or conditional body: the node that owns it */
  struct fk_node **nodes; /* each held on its own: its address is its CUgraphNode handle */
  size_t n, cap;
  unsigned long long id;
};

struct CUgraphExec_st {
  struct CUgraph_st *graph; /* an instantiated copy */
  int live;
};

/* A new empty graph of context c (registered; never freed before unload). */
struct CUgraph_st *fk_graph_new(struct CUctx_st *c);

/* Appends node to g with the dependencies deps[0..ndeps) and their edges (NULL: default),
 * both copied; returns the held node. */
struct fk_node *fk_graph_add(struct CUgraph_st *g, struct fk_node node, const CUgraphNode *deps,
                             const CUgraphEdgeData *edges, size_t ndeps);

/* Whether edge e may join node `up` to a node of type `down` (-1: not known yet, a capture):
 * cuda.h's rules (to_port 0, reserved bytes 0, a known type; non-default ports only from kernel
 * nodes; programmatic edges only between kernel nodes, from the programmatic or launch-order
 * port). Every edge is honoured by the fake's replay in order, which is at least as strict. */
int fk_graph_edge_valid(const CUgraphEdgeData *e, const struct fk_node *up, int down);

/* Whether g is a live graph; the live node h of any live graph (its graph in *owner), or NULL. */
int fk_graph_known(const struct CUgraph_st *g);
struct fk_node *fk_graph_node(CUgraphNode h, struct CUgraph_st **owner);

/* A live executable graph, or NULL. */
struct CUgraphExec_st *fk_graph_exec(CUgraphExec e);

/* A copy of g for an executable graph (nodes, chains, child and body graphs copied; allocation
 * nodes share their allocation), each node remembering the node it copies. */
struct CUgraph_st *fk_graph_copy(const struct CUgraph_st *g, struct fk_node *parent);

/* Ends g's life: its unused graph allocations released, its owned graphs dropped, its nodes
 * freed. */
void fk_graph_drop(struct CUgraph_st *g);

/* Whether g (or a graph it owns) holds memory nodes or conditional nodes. */
int fk_graph_has_memory_nodes(const struct CUgraph_st *g);
int fk_graph_has_conditionals(const struct CUgraph_st *g);

/* The value a conditional handle holds when its graph is launched (fk_gnode.c): its default
 * with CU_GRAPH_COND_ASSIGN_DEFAULT, else 0; device code that would set it never runs. */
unsigned fk_graph_cond_value(CUgraphConditionalHandle h);

/* Frees the conditional handles (at unload, from fk_graph_teardown). */
void fk_gnode_teardown(void);

#endif
