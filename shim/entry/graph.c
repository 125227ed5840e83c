/* Graph memory (see shim/entry/graph.h): executable graphs with allocation nodes, the admission of
 * their memory before a launch or upload maps it, and each device's charge for its graph pool.
 *
 * At instantiation gpucap reads the graph's allocation nodes (cuGraphGetNodes,
 * cuGraphNodeGetType, cuGraphMemAllocNodeGetParams) and records, per executable graph, the
 * bytes they allocate on each device: its footprint. Graphs cannot nest allocation nodes in
 * child graphs, so the top-level nodes are all of them. An executable graph whose memory the
 * pool may not hold ("unbacked": never launched, or the pool was trimmed, or another graph's
 * first launch may have reused idle memory) is admitted for its whole footprint before the
 * launch; a backed one for nothing, as the driver reuses its memory. If that does not fit,
 * gpucap trims the device's idle graph memory (cuDeviceGraphMemTrim) and tries once more, then
 * refuses the launch with CUDA_ERROR_OUT_OF_MEMORY before the driver maps anything. After every
 * call that can change the pool (launch, upload, trim, destroy, reset) the device's charge is
 * set to what the driver says its graph pool holds (and the ledger's "CUDA graphs" line with
 * it), and the admission is returned. A driver that maps more than the footprint (rounding) is
 * charged what it mapped. A graph whose
 * allocation nodes cannot all be read is refused at instantiation with the driver's error
 * (failing closed: its memory could not be admitted).
 *
 * Locking: one mutex over the table and the charges, held across the launches and uploads of
 * graphs with allocation nodes (which it serialises) and the queries that settle them; graphs
 * without allocation nodes never take it.
 */
#include "shim/entry/graph.h"

#include "shim/accounting/cap.h"
#include "shim/base/fork.h"
#include "shim/context/ctx.h"
#include "shim/entry/prologue.h"
#include "shim/accounting/ledger.h"
#include "shim/base/log.h"
#include "shim/pool/passthru.h"
#include "shim/base/real.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* An executable graph with allocation nodes. */
struct gexec {
  CUgraphExec exec;
  CUcontext ctx; /* current at instantiation: the graph's */
  bool backed;   /* the graph pool holds its memory from an earlier launch or upload */
  uint64_t bytes[GPUCAP_MAX_DEVICES];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct gexec **table;
static size_t nexecs, capexecs;
static atomic_size_t listed;                 /* nexecs, read without the lock */
static uint64_t charged[GPUCAP_MAX_DEVICES]; /* the graph pool's memory last seen, charged */

/* The bytes g's allocation nodes take on each device, in bytes[] (zeroed first). Returns
 * CUDA_SUCCESS; NOT_FOUND when the driver cannot list g's nodes (then instantiation gets the
 * driver's own answer for g); or the error of a node that cannot be read, whose memory gpucap
 * could then not admit. */
static CUresult footprint(CUgraph g, uint64_t bytes[GPUCAP_MAX_DEVICES]) {
  memset(bytes, 0, GPUCAP_MAX_DEVICES * sizeof *bytes);
  size_t n = 0;
  if (!real.cuGraphGetNodes || !real.cuGraphNodeGetType || !real.cuGraphMemAllocNodeGetParams ||
      real.cuGraphGetNodes(g, NULL, &n) != CUDA_SUCCESS) {
    return CUDA_ERROR_NOT_FOUND;
  }
  CUgraphNode *nodes = n ? calloc(n, sizeof *nodes) : NULL;
  size_t got = n;
  if (n && !nodes) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult rc = n ? real.cuGraphGetNodes(g, nodes, &got) : CUDA_SUCCESS;
  for (size_t i = 0; rc == CUDA_SUCCESS && i < n && i < got; i++) {
    CUgraphNodeType type;
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    rc = real.cuGraphNodeGetType(nodes[i], &type);
    if (rc != CUDA_SUCCESS || type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
      continue;
    }
    rc = real.cuGraphMemAllocNodeGetParams(nodes[i], &p);
    if (rc != CUDA_SUCCESS) {
      continue;
    }
    int dev = p.poolProps.location.id;
    if (p.poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
      continue; /* not device memory: not the cap's */
    }
    if (dev < 0 || dev >= GPUCAP_MAX_DEVICES || bytes[dev] + p.bytesize < bytes[dev]) {
      rc = CUDA_ERROR_NOT_SUPPORTED; /* memory on a device gpucap does not track */
    } else {
      bytes[dev] += p.bytesize;
    }
  }
  free(nodes);
  return rc;
}

static bool any(const uint64_t bytes[GPUCAP_MAX_DEVICES]) {
  for (int d = 0; d < GPUCAP_MAX_DEVICES; d++) {
    if (bytes[d]) {
      return true;
    }
  }
  return false;
}

/* Lock held. */
static struct gexec *find(CUgraphExec exec, size_t *at) {
  for (size_t i = 0; i < nexecs; i++) {
    if (table[i]->exec == exec) {
      if (at) {
        *at = i;
      }
      return table[i];
    }
  }
  return NULL;
}

/* Sets dev's charge to what its graph pool holds (kept when the driver cannot say). Lock held. */
static void settle(int dev) {
  cuuint64_t held = 0;
  if (!real.cuDeviceGetGraphMemAttribute ||
      real.cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &held) !=
          CUDA_SUCCESS) {
    return;
  }
  if (held > charged[dev]) {
    cap_add(dev, held - charged[dev]);
    ledger_add(dev, LEDGER_GRAPHS, held - charged[dev]);
  } else {
    cap_credit(dev, charged[dev] - held);
    ledger_sub(dev, LEDGER_GRAPHS, charged[dev] - held);
  }
  charged[dev] = held;
}

/* Every executable graph with memory on dev but `keep` may have lost it. Lock held. */
static void unback(int dev, const struct gexec *keep) {
  for (size_t i = 0; i < nexecs; i++) {
    if (table[i] != keep && table[i]->bytes[dev]) {
      table[i]->backed = false;
    }
  }
}

/* Admits what mapping bytes[] may add (everything unless `backed`) into admitted[], trimming a
 * device's idle graph memory once when it does not fit. Returns CUDA_SUCCESS, or
 * CUDA_ERROR_OUT_OF_MEMORY with nothing admitted. Lock held. */
static CUresult admit(const uint64_t bytes[GPUCAP_MAX_DEVICES], bool backed,
                      uint64_t admitted[GPUCAP_MAX_DEVICES]) {
  memset(admitted, 0, GPUCAP_MAX_DEVICES * sizeof *admitted);
  for (int d = 0; d < GPUCAP_MAX_DEVICES && !backed; d++) {
    if (!bytes[d] || cap_charge(d, bytes[d])) {
      admitted[d] = bytes[d];
      continue;
    }
    if (real.cuDeviceGraphMemTrim && real.cuDeviceGraphMemTrim(d) == CUDA_SUCCESS) {
      settle(d);
      unback(d, NULL);
    }
    if (!ctx_admit(d, bytes[d])) {
      for (int e = 0; e < d; e++) {
        cap_credit(e, admitted[e]);
      }
      log_msg(LOG_DEBUG, "device %d: a graph launch needs %llu bytes of graph memory", d,
              (unsigned long long)bytes[d]);
      return passthru_refuse_as(d, bytes[d], LEDGER_GRAPHS);
    }
    admitted[d] = bytes[d];
  }
  return CUDA_SUCCESS;
}

/* After a launch or upload that may have mapped x's memory: settles each device x allocates
 * on and returns the admission. A first mapping that grew the pool by less than x's
 * footprint reused idle memory that other graphs may count on. Lock held. */
static void mapped(struct gexec *x, const uint64_t admitted[GPUCAP_MAX_DEVICES], CUresult rc) {
  for (int d = 0; d < GPUCAP_MAX_DEVICES; d++) {
    if (x->bytes[d]) {
      uint64_t before = charged[d];
      settle(d);
      if (admitted[d] && rc == CUDA_SUCCESS && charged[d] - before < x->bytes[d] &&
          charged[d] >= before) {
        unback(d, x);
      }
      cap_credit(d, admitted[d]);
    }
  }
  if (rc == CUDA_SUCCESS) {
    x->backed = true;
  }
}

/* Lock held. Returns false when the host cannot record it. */
static bool list(struct gexec *x) {
  if (nexecs == capexecs) {
    size_t cap = capexecs ? 2 * capexecs : 16;
    struct gexec **t = realloc(table, cap * sizeof *t);
    if (!t) {
      return false;
    }
    table = t;
    capexecs = cap;
  }
  table[nexecs++] = x;
  atomic_store_explicit(&listed, nexecs, memory_order_relaxed);
  return true;
}

/* Lock held. */
static void unlist(size_t at) {
  free(table[at]);
  table[at] = table[--nexecs];
  atomic_store_explicit(&listed, nexecs, memory_order_relaxed);
}

/* How an instantiation reaches the driver. */
enum inst { INST_V1, INST_V2, INST_FLAGS, INST_PARAMS, INST_PARAMS_PTSZ };

struct inst_args {
  CUgraphNode *err_node;
  char *log;
  size_t log_size;
  unsigned long long flags;
  CUDA_GRAPH_INSTANTIATE_PARAMS *params;
};

static CUresult inst_call(enum inst how, CUgraphExec *out, CUgraph g, const struct inst_args *a) {
  __typeof__(real.cuGraphInstantiate) v1 =
      how == INST_V1 ? real.cuGraphInstantiate : real.cuGraphInstantiate_v2;
  __typeof__(real.cuGraphInstantiateWithParams) wp = how == INST_PARAMS
                                                         ? real.cuGraphInstantiateWithParams
                                                         : real.cuGraphInstantiateWithParams_ptsz;
  switch (how) {
  case INST_V1:
  case INST_V2:
    return v1 ? v1(out, g, a->err_node, a->log, a->log_size) : CUDA_ERROR_NOT_SUPPORTED;
  case INST_FLAGS:
    return real.cuGraphInstantiateWithFlags ? real.cuGraphInstantiateWithFlags(out, g, a->flags)
                                            : CUDA_ERROR_NOT_SUPPORTED;
  default:
    return wp ? wp(out, g, a->params) : CUDA_ERROR_NOT_SUPPORTED;
  }
}

static CUresult instantiate(enum inst how, CUgraphExec *out, CUgraph g, const struct inst_args *a) {
  HOOK_PROLOGUE(true);
  struct gexec *x = calloc(1, sizeof *x);
  if (!x) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult rc = out ? footprint(g, x->bytes) : CUDA_ERROR_NOT_FOUND;
  if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_NOT_FOUND) {
    free(x); /* memory gpucap cannot see would pass the cap at the first launch */
    log_msg(LOG_WARN,
            "a graph's allocation nodes cannot be read (CUDA error %d): "
            "its instantiation is refused, as its memory could not be capped",
            (int)rc);
    return rc;
  }
  if (rc != CUDA_SUCCESS || !any(x->bytes)) {
    free(x);
    return inst_call(how, out, g, a); /* nothing to admit, or the driver's own error */
  }
  /* An upload at instantiation maps the memory at once (CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD). */
  bool upload = a->params && (a->params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);
  uint64_t admitted[GPUCAP_MAX_DEVICES];
  pthread_mutex_lock(&lock);
  rc = admit(x->bytes, !upload, admitted);
  if (rc == CUDA_SUCCESS) {
    rc = inst_call(how, out, g, a);
    if (upload) {
      mapped(x, admitted, rc);
    }
  }
  if (rc == CUDA_SUCCESS) {
    x->exec = *out;
    if (real.cuCtxGetCurrent) {
      real.cuCtxGetCurrent(&x->ctx);
    }
    size_t at;
    if (find(x->exec, &at)) {
      unlist(at); /* a handle the driver reused: that graph was destroyed unseen */
    }
    if (list(x)) {
      x = NULL; /* the table holds it now */
    } else {
      log_msg(LOG_WARN, "out of host memory: a graph's memory is charged only as it is mapped");
    }
  }
  free(x);
  pthread_mutex_unlock(&lock);
  return rc;
}

GPUCAP_EXPORT CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                          CUgraphNode *phErrorNode, char *logBuffer,
                                          size_t bufferSize) {
  struct inst_args a = {.err_node = phErrorNode, .log = logBuffer, .log_size = bufferSize};
  return instantiate(INST_V1, phGraphExec, hGraph, &a);
}

GPUCAP_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                             CUgraphNode *phErrorNode, char *logBuffer,
                                             size_t bufferSize) {
  struct inst_args a = {.err_node = phErrorNode, .log = logBuffer, .log_size = bufferSize};
  return instantiate(INST_V2, phGraphExec, hGraph, &a);
}

GPUCAP_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                                   unsigned long long flags) {
  struct inst_args a = {.flags = flags};
  return instantiate(INST_FLAGS, phGraphExec, hGraph, &a);
}

GPUCAP_EXPORT CUresult cuGraphInstantiateWithParams(
    CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
  struct inst_args a = {.params = instantiateParams};
  return instantiate(INST_PARAMS, phGraphExec, hGraph, &a);
}

GPUCAP_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(
    CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams) {
  struct inst_args a = {.params = instantiateParams};
  return instantiate(INST_PARAMS_PTSZ, phGraphExec, hGraph, &a);
}

/* How a launch or an upload reaches the driver. */
enum run { RUN_LAUNCH, RUN_LAUNCH_PTSZ, RUN_UPLOAD, RUN_UPLOAD_PTSZ };

static CUresult run_call(enum run how, CUgraphExec exec, CUstream stream) {
  __typeof__(real.cuGraphLaunch) fn = how == RUN_LAUNCH        ? real.cuGraphLaunch
                                      : how == RUN_LAUNCH_PTSZ ? real.cuGraphLaunch_ptsz
                                      : how == RUN_UPLOAD      ? real.cuGraphUpload
                                                               : real.cuGraphUpload_ptsz;
  return fn ? fn(exec, stream) : CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult run(enum run how, CUgraphExec exec, CUstream stream) {
  HOOK_PROLOGUE(true);
  if (!atomic_load_explicit(&listed, memory_order_relaxed)) {
    return run_call(how, exec, stream);
  }
  pthread_mutex_lock(&lock);
  struct gexec *x = find(exec, NULL);
  if (!x) {
    pthread_mutex_unlock(&lock);
    return run_call(how, exec, stream); /* no allocation nodes */
  }
  uint64_t admitted[GPUCAP_MAX_DEVICES];
  CUresult rc = admit(x->bytes, x->backed, admitted);
  if (rc == CUDA_SUCCESS) {
    rc = run_call(how, exec, stream);
    mapped(x, admitted, rc);
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

GPUCAP_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return run(RUN_LAUNCH, hGraphExec, hStream);
}

GPUCAP_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return run(RUN_LAUNCH_PTSZ, hGraphExec, hStream);
}

GPUCAP_EXPORT CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  return run(RUN_UPLOAD, hGraphExec, hStream);
}

GPUCAP_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return run(RUN_UPLOAD_PTSZ, hGraphExec, hStream);
}

/* Settles every device some graph memory is charged to. Lock held. */
static void settle_charged(void) {
  for (int d = 0; d < GPUCAP_MAX_DEVICES; d++) {
    if (charged[d]) {
      settle(d);
    }
  }
}

GPUCAP_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  HOOK_PROLOGUE(real.cuGraphExecDestroy);
  CUresult rc = real.cuGraphExecDestroy(hGraphExec);
  if (rc == CUDA_SUCCESS && atomic_load_explicit(&listed, memory_order_relaxed)) {
    pthread_mutex_lock(&lock);
    size_t at;
    if (find(hGraphExec, &at)) {
      unlist(at);
    }
    settle_charged();
    pthread_mutex_unlock(&lock);
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuGraphDestroy(CUgraph hGraph) {
  HOOK_PROLOGUE(real.cuGraphDestroy);
  CUresult rc = real.cuGraphDestroy(hGraph);
  if (rc == CUDA_SUCCESS && atomic_load_explicit(&listed, memory_order_relaxed)) {
    pthread_mutex_lock(&lock);
    settle_charged(); /* the last graph naming an unused allocation frees its memory */
    pthread_mutex_unlock(&lock);
  }
  return rc;
}

GPUCAP_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) {
  HOOK_PROLOGUE(real.cuDeviceGraphMemTrim);
  CUresult rc = real.cuDeviceGraphMemTrim(device);
  if (rc == CUDA_SUCCESS && device >= 0 && device < GPUCAP_MAX_DEVICES) {
    pthread_mutex_lock(&lock);
    settle(device);
    unback(device, NULL);
    pthread_mutex_unlock(&lock);
  }
  return rc;
}

void graph_forget_context(CUcontext ctx) {
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < nexecs;) {
    if (table[i]->ctx == ctx) {
      unlist(i);
    } else {
      i++;
    }
  }
  settle_charged();
  pthread_mutex_unlock(&lock);
}

void graph_forget_device(CUcontext primary, int dev) {
  graph_forget_context(primary); /* other contexts' graphs keep their memory */
  pthread_mutex_lock(&lock);
  unback(dev, NULL);
  pthread_mutex_unlock(&lock);
}

/* In a fork child: no graph, nothing charged. */
static void fork_child(void) {
  pthread_mutex_init(&lock, NULL);
  for (size_t i = 0; i < nexecs; i++) {
    free(table[i]);
  }
  nexecs = 0;
  atomic_store_explicit(&listed, 0, memory_order_relaxed);
  memset(charged, 0, sizeof charged);
}
FORK_CHILD(fork_child)
