/* TAP test of the fake driver's explicit graph-node API, as XLA's command buffers use it:
 * kernel, memset, memcpy, empty, child-graph and conditional nodes, their dependencies, capture
 * into an existing graph, and the updates of an executable graph (node parameters, child
 * graphs, enabled flags). With FAKECUDA_BACKING=1 the bytes show which nodes ran, and when.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/fakecuda/testlib.h"
#include "tests/tap.h"

#define N 4096

static CUstream s;
static CUfunction kern;

static unsigned char byte_at(CUdeviceptr p) {
  return *(volatile unsigned char *)(uintptr_t)p;
}

static CUgraphNode memset_node(CUgraph g, const CUgraphNode *deps, size_t n, CUdeviceptr dst,
                               unsigned char value) {
  CUDA_MEMSET_NODE_PARAMS p = {
      .dst = dst, .value = value, .elementSize = 1, .width = N, .height = 1};
  CUgraphNode node = NULL;
  CK(cuGraphAddMemsetNode(&node, g, deps, n, &p, NULL));
  return node;
}

static CUDA_MEMCPY3D d2d(CUdeviceptr dst, CUdeviceptr src) {
  CUDA_MEMCPY3D c = {0};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst;
  c.WidthInBytes = N;
  c.Height = 1;
  c.Depth = 1;
  return c;
}

static void launch_and_wait(CUgraphExec e) {
  CK(cuGraphLaunch(e, s));
  CK(cuStreamSynchronize(s));
}

/* Kernel, memset, memcpy and empty nodes, their dependencies and a launch. */
static void work_nodes(CUdeviceptr a, CUdeviceptr b) {
  CUgraph g;
  CK(cuGraphCreate(&g, 0));
  CUgraphNode set = memset_node(g, NULL, 0, b, 0x5a), copy, k, empty, bad;
  CUDA_MEMCPY3D c = d2d(a, b);
  CK(cuGraphAddMemcpyNode(&copy, g, &set, 1, &c, NULL));
  CUDA_KERNEL_NODE_PARAMS kp = {.func = kern,
                                .gridDimX = 1,
                                .gridDimY = 1,
                                .gridDimZ = 1,
                                .blockDimX = 32,
                                .blockDimY = 1,
                                .blockDimZ = 1};
  void *args[] = {&a};
  kp.kernelParams = args;
  CK(cuGraphAddKernelNode_v2(&k, g, &copy, 1, &kp));
  CUgraphNode both[2] = {set, k};
  CK(cuGraphAddEmptyNode(&empty, g, both, 2));
  size_t n = 0;
  CK(cuGraphGetNodes(g, NULL, &n));
  TAP_EQ(n, 4, "four nodes");
  CUgraphNodeType t;
  CK(cuGraphNodeGetType(k, &t));
  TAP_EQ(t, CU_GRAPH_NODE_TYPE_KERNEL, "a kernel node");
  CK(cuGraphNodeGetType(copy, &t));
  TAP_EQ(t, CU_GRAPH_NODE_TYPE_MEMCPY, "a memcpy node");
  CK(cuGraphNodeGetType(set, &t));
  TAP_EQ(t, CU_GRAPH_NODE_TYPE_MEMSET, "a memset node");
  CK(cuGraphNodeGetType(empty, &t));
  TAP_EQ(t, CU_GRAPH_NODE_TYPE_EMPTY, "an empty node");
  CUgraphNode deps[3] = {NULL, NULL, NULL};
  n = 3;
  CK(cuGraphNodeGetDependencies(empty, deps, &n));
  tap_ok(n == 2 && deps[0] == set && deps[1] == k && deps[2] == NULL,
         "the empty node depends on the memset and the kernel");
  n = 0;
  CK(cuGraphNodeGetDependencies_v2(set, NULL, NULL, &n));
  TAP_EQ(n, 0, "the memset is a root");

  CUgraphNode dup[2] = {set, set};
  TAP_EQ(cuGraphAddEmptyNode(&bad, g, dup, 2), CUDA_ERROR_INVALID_VALUE, "duplicate dependencies");
  CUDA_MEMSET_NODE_PARAMS past = {
      .dst = b + 1, .value = 0, .elementSize = 1, .width = N, .height = 1};
  TAP_EQ(cuGraphAddMemsetNode(&bad, g, NULL, 0, &past, NULL), CUDA_ERROR_INVALID_VALUE,
         "a memset past its allocation");
  static unsigned char pageable[N];
  CUDA_MEMCPY3D from_host = d2d(a, 0);
  from_host.srcMemoryType = CU_MEMORYTYPE_HOST;
  from_host.srcHost = pageable;
  TAP_EQ(cuGraphAddMemcpyNode(&bad, g, NULL, 0, &from_host, NULL), CUDA_ERROR_INVALID_VALUE,
         "a memcpy node from pageable memory");
  kp.blockDimX = 2048;
  TAP_EQ(cuGraphAddKernelNode_v2(&bad, g, NULL, 0, &kp), CUDA_ERROR_INVALID_VALUE,
         "a kernel node of 2048 threads per block");
  CK(cuGraphGetNodes(g, NULL, &n));
  TAP_EQ(n, 4, "refused nodes are not added");

  CUgraphExec e;
  CK(cuGraphInstantiateWithFlags(&e, g, 0));
  CK(cuGraphLaunch(e, s));
  tap_ok(fakecudaPendingWork() >= 3 && byte_at(a) == 0, "a launch queues the nodes' work");
  CK(cuStreamSynchronize(s));
  tap_ok(byte_at(b) == 0x5a && byte_at(a + N - 1) == 0x5a,
         "memset, then the copy that depends on it, ran in order");

  /* Updates of the executable graph leave the graph itself alone. */
  CUDA_MEMSET_NODE_PARAMS again = {
      .dst = b, .value = 0x11, .elementSize = 1, .width = N, .height = 1};
  CK(cuGraphExecMemsetNodeSetParams(e, set, &again, NULL));
  launch_and_wait(e);
  TAP_EQ(byte_at(a), 0x11, "an updated memset node sets the new value");
  TAP_EQ(cuGraphExecMemsetNodeSetParams(e, set, &past, NULL), CUDA_ERROR_INVALID_VALUE,
         "an update past the allocation");
  launch_and_wait(e);
  TAP_EQ(byte_at(a), 0x11, "a refused update keeps the node as it was");
  CUDA_MEMCPY3D back = d2d(b, a);
  TAP_EQ(cuGraphExecMemcpyNodeSetParams(e, set, &back, NULL), CUDA_ERROR_INVALID_VALUE,
         "memcpy parameters for a memset node");
  CK(cuGraphExecKernelNodeSetParams_v2(e, k,
                                       &(CUDA_KERNEL_NODE_PARAMS){.func = kern,
                                                                  .gridDimX = 1,
                                                                  .gridDimY = 1,
                                                                  .gridDimZ = 1,
                                                                  .blockDimX = 64,
                                                                  .blockDimY = 1,
                                                                  .blockDimZ = 1,
                                                                  .kernelParams = (void *[]){&b}}));
  CK(cuGraphLaunch(e, s));
  TAP_EQ(fakecudaClaim(b, 1), 3, "the updated kernel touches b (with the memset and the copy)");
  CK(cuStreamSynchronize(s));

  /* Enabled flags: kernel, memset and memcpy nodes only. */
  CK(cuGraphNodeSetEnabled(e, set, 0));
  unsigned on = 1;
  CK(cuGraphNodeGetEnabled(e, set, &on));
  TAP_EQ(on, 0, "a disabled memset node");
  CK(cuMemsetD8_v2(a, 0, N));
  CK(cuMemsetD8_v2(b, 0x33, N));
  CK(cuCtxSynchronize());
  launch_and_wait(e);
  TAP_EQ(byte_at(a), 0x33, "... does nothing when launched; the copy still runs");
  CK(cuGraphNodeSetEnabled(e, set, 1));
  TAP_EQ(cuGraphNodeSetEnabled(e, empty, 0), CUDA_ERROR_INVALID_VALUE,
         "an empty node cannot be disabled");
  CK(cuGraphExecDestroy(e));
  CK(cuGraphDestroy(g));
}

/* A child graph is cloned into its node; an executable graph's child can be replaced by a graph
 * of the same shape. */
static void child_graphs(CUdeviceptr a) {
  CUgraph child, g, other, clone;
  CK(cuGraphCreate(&child, 0));
  memset_node(child, NULL, 0, a, 0x21);
  CK(cuGraphCreate(&g, 0));
  CUgraphNode node, bad;
  CK(cuGraphAddChildGraphNode(&node, g, NULL, 0, child));
  CK(cuGraphChildGraphNodeGetGraph(node, &clone));
  tap_ok(clone != NULL && clone != child, "the node holds a clone of the child graph");
  memset_node(child, NULL, 0, a, 0x22); /* not in the clone */
  CUgraphExec e;
  CK(cuGraphInstantiateWithFlags(&e, g, 0));
  launch_and_wait(e);
  TAP_EQ(byte_at(a), 0x21, "the child's node ran, not the one added to the original later");
  CK(cuGraphCreate(&other, 0));
  memset_node(other, NULL, 0, a, 0x23);
  CK(cuGraphExecChildGraphNodeSetParams(e, node, other));
  launch_and_wait(e);
  TAP_EQ(byte_at(a), 0x23, "a child replaced by a graph of the same shape");
  TAP_EQ(cuGraphExecChildGraphNodeSetParams(e, node, child), CUDA_ERROR_INVALID_VALUE,
         "... but not by one of another shape");
  CUgraph with_alloc;
  CK(cuGraphCreate(&with_alloc, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS ap = {0};
  ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  ap.bytesize = MiB;
  CUgraphNode an;
  CK(cuGraphAddMemAllocNode(&an, with_alloc, NULL, 0, &ap));
  TAP_EQ(cuGraphAddChildGraphNode(&bad, g, NULL, 0, with_alloc), CUDA_ERROR_INVALID_VALUE,
         "a child graph with memory nodes is refused");
  TAP_EQ(cuGraphAddMemAllocNode(&bad, clone, NULL, 0, &ap), CUDA_ERROR_INVALID_VALUE,
         "... and so is a memory node added to a child graph");
  TAP_EQ(cuGraphDestroy(clone), CUDA_ERROR_INVALID_VALUE, "a child graph belongs to its node");
  CK(cuGraphExecDestroy(e));
  CK(cuGraphDestroy(with_alloc));
  CK(cuGraphDestroy(other));
  CK(cuGraphDestroy(g));
  CK(cuGraphDestroy(child));
}

/* A conditional node of type `type` with `size` bodies, each body i a memset of a to 0x40 + i;
 * the byte of a after a launch names the body that ran (0 for none). */
static int conditional(CUgraphConditionalNodeType type, unsigned size, unsigned def, unsigned flags,
                       CUdeviceptr a) {
  CUgraph g;
  CK(cuGraphCreate(&g, 0));
  CUgraphConditionalHandle h;
  CK(cuGraphConditionalHandleCreate(&h, g, NULL, def, flags));
  CUgraphNodeParams p;
  memset(&p, 0, sizeof p);
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.handle = h;
  p.conditional.type = type;
  p.conditional.size = size;
  CUgraphNode node;
  CK(cuGraphAddNode(&node, g, NULL, 0, &p));
  for (unsigned i = 0; i < size; i++) {
    memset_node(p.conditional.phGraph_out[i], NULL, 0, a, (unsigned char)(0x40 + i));
  }
  CUgraphExec e;
  CK(cuGraphInstantiateWithFlags(&e, g, 0));
  CK(cuMemsetD8_v2(a, 0, N));
  CK(cuCtxSynchronize());
  launch_and_wait(e);
  CK(cuGraphExecDestroy(e));
  CK(cuGraphDestroy(g));
  int v = byte_at(a);
  return v == 0 ? -1 : v - 0x40;
}

static void conditionals(CUdeviceptr a) {
  TAP_EQ(conditional(CU_GRAPH_COND_TYPE_IF, 1, 1, CU_GRAPH_COND_ASSIGN_DEFAULT, a), 0,
         "IF with the default value 1 assigned at launch: its body");
  TAP_EQ(conditional(CU_GRAPH_COND_TYPE_IF, 2, 1, 0, a), 1,
         "IF whose value nothing set (0): its else body");
  TAP_EQ(conditional(CU_GRAPH_COND_TYPE_WHILE, 1, 0, CU_GRAPH_COND_ASSIGN_DEFAULT, a), -1,
         "WHILE with 0: no body");
  TAP_EQ(conditional(CU_GRAPH_COND_TYPE_WHILE, 1, 1, CU_GRAPH_COND_ASSIGN_DEFAULT, a), 0,
         "WHILE with 1: its body once (no device code clears it)");
  TAP_EQ(conditional(CU_GRAPH_COND_TYPE_SWITCH, 3, 2, CU_GRAPH_COND_ASSIGN_DEFAULT, a), 2,
         "SWITCH with 2: body 2");
  TAP_EQ(conditional(CU_GRAPH_COND_TYPE_SWITCH, 3, 3, CU_GRAPH_COND_ASSIGN_DEFAULT, a), -1,
         "SWITCH past its bodies: none");

  CUgraph g, other;
  CK(cuGraphCreate(&g, 0));
  CK(cuGraphCreate(&other, 0));
  CUgraphConditionalHandle h;
  TAP_EQ(cuGraphConditionalHandleCreate(&h, g, NULL, 0, 2), CUDA_ERROR_INVALID_VALUE,
         "unknown handle flags");
  CK(cuGraphConditionalHandleCreate(&h, other, NULL, 0, 0));
  CUgraphNodeParams p;
  memset(&p, 0, sizeof p);
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.handle = h;
  p.conditional.type = CU_GRAPH_COND_TYPE_IF;
  p.conditional.size = 1;
  CUgraphNode node;
  TAP_EQ(cuGraphAddNode(&node, g, NULL, 0, &p), CUDA_ERROR_INVALID_VALUE,
         "a handle made for another graph");
  CK(cuGraphConditionalHandleCreate(&h, g, NULL, 0, 0));
  p.conditional.handle = h;
  p.conditional.type = CU_GRAPH_COND_TYPE_WHILE;
  p.conditional.size = 2;
  TAP_EQ(cuGraphAddNode(&node, g, NULL, 0, &p), CUDA_ERROR_INVALID_VALUE,
         "a WHILE node of two bodies");
  p.conditional.size = 1;
  CK(cuGraphAddNode(&node, g, NULL, 0, &p));
  CUgraph holder;
  CK(cuGraphCreate(&holder, 0));
  TAP_EQ(cuGraphAddChildGraphNode(&node, holder, NULL, 0, g), CUDA_ERROR_INVALID_VALUE,
         "a child graph with a conditional node is refused");
  CK(cuGraphDestroy(holder));
  CK(cuGraphDestroy(other));
  CK(cuGraphDestroy(g));
}

/* The generic API (cuGraphAddNode_v2, cuGraphExecNodeSetParams) and edges, as XLA uses them:
 * kernel nodes joined by programmatic edges. */
static void generic_nodes(CUdeviceptr a, CUdeviceptr b) {
  CUgraph g, moved;
  CK(cuGraphCreate(&g, 0));
  void *args[] = {&a};
  CUgraphNodeParams p;
  memset(&p, 0, sizeof p);
  p.type = CU_GRAPH_NODE_TYPE_KERNEL;
  p.kernel = (CUDA_KERNEL_NODE_PARAMS){.func = kern,
                                       .gridDimX = 1,
                                       .gridDimY = 1,
                                       .gridDimZ = 1,
                                       .blockDimX = 32,
                                       .blockDimY = 1,
                                       .blockDimZ = 1,
                                       .kernelParams = args};
  CUgraphNode k1, k2, set, bad;
  CK(cuGraphAddNode_v2(&k1, g, NULL, NULL, 0, &p));
  CUgraphEdgeData pdl = {.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC,
                         .type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC};
  CK(cuGraphAddNode_v2(&k2, g, &k1, &pdl, 1, &p));
  CUgraphNode dep = NULL;
  CUgraphEdgeData back = {0};
  size_t n = 1;
  CK(cuGraphNodeGetDependencies_v2(k2, &dep, &back, &n));
  tap_ok(n == 1 && dep == k1 && back.type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC &&
             back.from_port == CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC,
         "a programmatic edge between two kernel nodes, read back");
  memset(&p, 0, sizeof p);
  p.type = CU_GRAPH_NODE_TYPE_MEMSET;
  p.memset = (CUDA_MEMSET_NODE_PARAMS_v2){
      .dst = b, .value = 0x71, .elementSize = 1, .width = N, .height = 1};
  TAP_EQ(cuGraphAddNode_v2(&bad, g, &k2, &pdl, 1, &p), CUDA_ERROR_INVALID_VALUE,
         "a programmatic edge into a memset node");
  CUgraphEdgeData to_port = {.to_port = 1};
  TAP_EQ(cuGraphAddNode_v2(&bad, g, &k2, &to_port, 1, &p), CUDA_ERROR_INVALID_VALUE,
         "an edge into port 1");
  CK(cuGraphAddNode_v2(&set, g, &k2, NULL, 1, &p));
  memset(&p, 0, sizeof p);
  p.type = CU_GRAPH_NODE_TYPE_MEMCPY;
  p.memcpy.copyParams = d2d(a, b);
  CUgraphNode copy;
  CK(cuGraphAddNode_v2(&copy, g, &set, NULL, 1, &p));
  CK(cuGraphCreate(&moved, 0));
  memset_node(moved, NULL, 0, b, 0x72);
  memset(&p, 0, sizeof p);
  p.type = CU_GRAPH_NODE_TYPE_GRAPH;
  p.graph.graph = moved;
  p.graph.ownership = CU_GRAPH_CHILD_GRAPH_OWNERSHIP_MOVE;
  CUgraphNode child;
  CK(cuGraphAddNode_v2(&child, g, &copy, NULL, 1, &p));
  TAP_EQ(cuGraphDestroy(moved), CUDA_ERROR_INVALID_VALUE, "a moved child graph is its node's");
  memset(&p, 0, sizeof p);
  p.type = CU_GRAPH_NODE_TYPE_HOST;
  TAP_EQ(cuGraphAddNode_v2(&bad, g, NULL, NULL, 0, &p), CUDA_ERROR_NOT_SUPPORTED,
         "a host node through cuGraphAddNode: not modelled");
  CUgraphExec e;
  CK(cuGraphInstantiateWithFlags(&e, g, 0));
  launch_and_wait(e);
  tap_ok(byte_at(a) == 0x71 && byte_at(b) == 0x72, "kernels, memset, copy, then the moved child");
  memset(&p, 0, sizeof p);
  p.type = CU_GRAPH_NODE_TYPE_MEMSET;
  p.memset = (CUDA_MEMSET_NODE_PARAMS_v2){
      .dst = b, .value = 0x73, .elementSize = 1, .width = N, .height = 1};
  CK(cuGraphExecNodeSetParams(e, set, &p));
  launch_and_wait(e);
  TAP_EQ(byte_at(a), 0x73, "cuGraphExecNodeSetParams updates a memset node");
  CK(cuGraphExecDestroy(e));
  CK(cuGraphDestroy(g));
}

/* A capture that grows an existing graph. */
static void capture_into(CUdeviceptr a) {
  CUgraph g, out = NULL;
  CK(cuGraphCreate(&g, 0));
  CUgraphNode first = memset_node(g, NULL, 0, a, 0x61);
  CK(cuStreamBeginCaptureToGraph(s, g, &first, NULL, 1, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(cuMemsetD8Async(a, 0x62, N, s));
  CK(cuStreamEndCapture(s, &out));
  tap_ok(out == g, "the capture ends with the graph it grew");
  size_t n = 0;
  CK(cuGraphGetNodes(g, NULL, &n));
  TAP_EQ(n, 2, "... which holds its node and the captured one");
  CUgraphExec e;
  CK(cuGraphInstantiateWithFlags(&e, g, 0));
  launch_and_wait(e);
  TAP_EQ(byte_at(a), 0x62, "the captured memset runs after the graph's own");
  CK(cuGraphExecDestroy(e));
  CK(cuStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(cuMemsetD8Async(a, 0x63, N, s));
  TAP_EQ(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "a sync invalidates it");
  TAP_EQ(cuStreamEndCapture(s, &out), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
         "an invalidated capture into a graph");
  CK(cuGraphGetNodes(g, NULL, &n));
  TAP_EQ(n, 2, "... leaves the graph with the nodes it had");
  CK(cuGraphDestroy(g));
}

int main(void) {
  static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                            ".visible .entry touch(.param .u64 p) { ret; }\n";
  setenv("FAKECUDA_BACKING", "1", 1);
  CK(cuInit(0));
  CUcontext c;
  CK(cuCtxCreate_v2(&c, 0, 0));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUmodule m;
  CK(cuModuleLoadData(&m, ptx));
  CK(cuModuleGetFunction(&kern, m, "touch"));
  CUdeviceptr a, b;
  CK(cuMemAlloc_v2(&a, N));
  CK(cuMemAlloc_v2(&b, N));
  work_nodes(a, b);
  child_graphs(a);
  conditionals(a);
  generic_nodes(a, b);
  capture_into(a);
  TAP_EQ(fakecudaHazards(), 1, "the one claim above was the only hazard");
  TAP_EQ(fakecudaPendingWork(), 0, "no work left");
  CK(cuCtxDestroy_v2(c));
  return tap_done();
}
