/* TAP test of the fake driver's stream capture and graphs, host functions (run on the driver's
 * own thread, without the driver's lock), stream callbacks and event timing, with
 * FAKECUDA_BACKING=1 so copies and memsets move bytes. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/fakecuda/testlib.h"
#include "tests/tap.h"

static int host_runs;
static pthread_t host_thread;
static unsigned char host_saw;
static CUdeviceptr host_mem;
static pthread_mutex_t program_lock = PTHREAD_MUTEX_INITIALIZER;

static void host_fn(void *arg) {
  pthread_mutex_lock(&program_lock); /* a program's lock, held by its threads around driver calls */
  host_saw = *(volatile unsigned char *)(uintptr_t)host_mem;
  host_thread = pthread_self();
  __atomic_add_fetch(&host_runs, *(int *)arg, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&program_lock);
}

static int callback_runs;
static CUresult callback_status = CUDA_ERROR_UNKNOWN;
static void callback(CUstream s, CUresult status, void *arg) {
  (void)s;
  (void)arg;
  callback_status = status;
  __atomic_add_fetch(&callback_runs, 1, __ATOMIC_SEQ_CST);
}

/* Host functions run on the driver's own thread once their stream reaches them, with no sync
 * point: the program only waits (a bound for hangs, not a timing). */
static int await_runs(int *runs, int want) {
  for (int i = 0; i < 2000 && __atomic_load_n(runs, __ATOMIC_SEQ_CST) < want; i++) {
    usleep(1000);
  }
  return __atomic_load_n(runs, __ATOMIC_SEQ_CST);
}

static void host_work(CUstream s) {
  int one = 1;
  host_runs = 0;
  CK(cuMemAlloc_v2(&host_mem, 4096));
  CK(cuMemsetD8Async(host_mem, 0x3c, 4096, s));
  /* The program holds its lock around its driver calls; the host function waits for it. */
  pthread_mutex_lock(&program_lock);
  CK(cuLaunchHostFunc(s, host_fn, &one));
  CK(cuStreamAddCallback(s, callback, NULL, 0));
  unsigned flags;
  CK(cuStreamGetFlags(s, &flags)); /* the driver stays usable meanwhile */
  pthread_mutex_unlock(&program_lock);
  TAP_EQ(await_runs(&host_runs, 1), 1, "a host function runs with no sync point");
  tap_ok(!pthread_equal(host_thread, pthread_self()), "... on a thread of the driver's");
  TAP_EQ(host_saw, 0x3c, "... after the memset queued before it");
  TAP_EQ(await_runs(&callback_runs, 1), 1, "so does the callback");
  TAP_EQ(callback_status, CUDA_SUCCESS, "... with the stream's status");
  CK(cuStreamSynchronize(s));
  TAP_EQ(host_runs + callback_runs, 2, "each ran once");
  TAP_EQ(cuStreamAddCallback(s, callback, NULL, 1), CUDA_ERROR_INVALID_VALUE, "flags must be 0");
  TAP_EQ(cuLaunchHostFunc(s, NULL, NULL), CUDA_ERROR_INVALID_VALUE, "a NULL function");
  CK(cuMemFree_v2(host_mem));
}

static void timing(CUstream s) {
  CUevent a, b, untimed;
  CK(cuEventCreate(&a, 0));
  CK(cuEventCreate(&b, 0));
  CK(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING));
  float ms = -1;
  TAP_EQ(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE, "events never recorded");
  CK(cuEventRecord(a, s));
  CK(cuEventRecord(b, s));
  CK(cuEventSynchronize(b));
  CK(cuEventElapsedTime(&ms, a, b));
  tap_ok(ms >= 0, "elapsed time between two records: %f ms", (double)ms);
  CK(cuEventRecord(untimed, s));
  TAP_EQ(cuEventElapsedTime(&ms, a, untimed), CUDA_ERROR_INVALID_HANDLE, "an event without timing");
  CK(cuEventDestroy_v2(a));
  CK(cuEventDestroy_v2(b));
  CK(cuEventDestroy_v2(untimed));
}

static void capture_and_replay(CUstream s, CUstream t) {
  CUdeviceptr d;
  CK(cuMemAlloc_v2(&d, 4096));
  CK(cuMemsetD8_v2(d, 0, 4096));
  CK(cuCtxSynchronize());
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  CK(cuStreamIsCapturing(s, &st));
  TAP_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE, "not capturing before the capture");

  int two = 2;
  host_runs = 0;
  CK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(cuStreamIsCapturing(s, &st));
  TAP_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE, "capturing");
  cuuint64_t id = 0;
  CK(cuStreamGetCaptureInfo(s, &st, &id));
  tap_ok(id != 0, "a capture has an id");
  CK(cuMemsetD8Async(d, 7, 4096, s));
  CK(cuLaunchHostFunc(s, host_fn, &two));
  /* fork into t and join back */
  CUevent fork_ev, join_ev;
  CK(cuEventCreate(&fork_ev, CU_EVENT_DISABLE_TIMING));
  CK(cuEventCreate(&join_ev, CU_EVENT_DISABLE_TIMING));
  CK(cuEventRecord(fork_ev, s));
  TAP_EQ(cuEventQuery(fork_ev), CUDA_ERROR_CAPTURED_EVENT, "a captured event cannot be queried");
  CK(cuStreamWaitEvent(t, fork_ev, 0));
  CK(cuStreamIsCapturing(t, &st));
  TAP_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE, "a stream that waits on a captured event joins");
  CK(cuMemsetD8Async(d + 1024, 9, 1024, t));
  CK(cuEventRecord(join_ev, t));
  CK(cuStreamWaitEvent(s, join_ev, 0));
  CUdeviceptr x;
  TAP_EQ(cuMemAlloc_v2(&x, 64), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
         "cuMemAlloc during a global-mode capture");
  CUgraph g = NULL;
  TAP_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "... invalidates it");
  tap_ok(g == NULL, "... and no graph comes out");
  CK(cuStreamIsCapturing(t, &st));
  TAP_EQ(st, CU_STREAM_CAPTURE_STATUS_NONE, "the joined stream left the capture too");

  /* Again, with cuMemAlloc allowed by the thread's relaxed mode. */
  CK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(cuMemsetD8Async(d, 7, 4096, s));
  CK(cuLaunchHostFunc(s, host_fn, &two));
  CK(cuEventRecord(fork_ev, s));
  CK(cuStreamWaitEvent(t, fork_ev, 0));
  CK(cuMemsetD8Async(d + 1024, 9, 1024, t));
  CK(cuEventRecord(join_ev, t));
  CK(cuStreamWaitEvent(s, join_ev, 0));
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CK(cuThreadExchangeStreamCaptureMode(&mode));
  TAP_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL, "the thread's mode was global");
  CK(cuMemAlloc_v2(&x, 64));
  CK(cuMemFree_v2(x));
  CK(cuThreadExchangeStreamCaptureMode(&mode));
  TAP_EQ(fakecudaPendingWork(), 0, "captured work is not queued");
  TAP_EQ(host_runs, 0, "... and nothing ran");
  CK(cuStreamEndCapture(s, &g));
  size_t n = 0;
  CK(cuGraphGetNodes(g, NULL, &n));
  TAP_EQ(n, 3, "three nodes: two memsets and a host function");

  CUgraphExec e;
  CK(cuGraphInstantiateWithFlags(&e, g, 0));
  CK(cuGraphLaunch(e, s));
  CK(cuGraphLaunch(e, s));
  tap_ok(fakecudaPendingWork() > 0, "a launch queues the graph's work");
  CK(cuStreamSynchronize(s));
  TAP_EQ(host_runs, 4, "two launches ran the host function twice");
  unsigned char b[4096];
  CK(cuMemcpyDtoH_v2(b, d, sizeof b));
  tap_ok(b[0] == 7 && b[1023] == 7 && b[1024] == 9 && b[2047] == 9 && b[2048] == 7,
         "the replayed memsets wrote the device memory");
  CK(cuGraphExecDestroy(e));
  CK(cuGraphDestroy(g));
  TAP_EQ(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE, "a destroyed graph");
  CK(cuEventDestroy_v2(fork_ev));
  CK(cuEventDestroy_v2(join_ev));
  CK(cuMemFree_v2(d));
}

static void capture_rules(CUstream s) {
  TAP_EQ(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
         CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "the legacy stream cannot capture");
  TAP_EQ(cuStreamBeginCapture_v2(s, (CUstreamCaptureMode)3), CUDA_ERROR_INVALID_VALUE,
         "an unknown mode");
  CK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  TAP_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_ERROR_ILLEGAL_STATE,
         "a stream captures once at a time");
  CUdeviceptr x;
  CK(cuMemAlloc_v2(&x, 64)); /* a relaxed capture prohibits nothing */
  TAP_EQ(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
         "synchronising a capturing stream");
  CUstreamCaptureStatus st;
  CK(cuStreamIsCapturing(s, &st));
  TAP_EQ(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED, "... invalidated the capture");
  CUgraph g;
  TAP_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "ending it says so");
  CK(cuMemFree_v2(x));
  CK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  TAP_EQ(cuCtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
         "synchronising the context during a capture");
  TAP_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "... invalidates it");
  TAP_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE, "ending a capture that is over");
}

static void graph_memory(CUstream s) {
  size_t before = used();
  CK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr p = 0;
  CK(cuMemAllocAsync(&p, 3 * MiB, s));
  tap_ok(p != 0, "a captured allocation has its address at once");
  CK(cuMemsetD8Async(p, 1, 3 * MiB, s));
  CUgraph g;
  CK(cuStreamEndCapture(s, &g));
  TAP_EQ(used(), before, "... but holds no memory before a launch");
  CUgraphExec e;
  CK(cuGraphInstantiateWithFlags(&e, g, 0));
  CK(cuGraphLaunch(e, s));
  CK(cuStreamSynchronize(s));
  TAP_EQ(used(), before + 3 * MiB, "a launch takes the allocation's memory");
  cuuint64_t v = 0;
  CK(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v));
  TAP_EQ(v, 3 * MiB, "graph memory in use");
  TAP_EQ(cuGraphLaunch(e, s), CUDA_ERROR_INVALID_VALUE,
         "relaunching before the allocation is freed");
  CK(cuMemFreeAsync(p, s));
  CK(cuStreamSynchronize(s));
  CK(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v));
  TAP_EQ(v, 0, "freed, it is no longer in use");
  TAP_EQ(used(), before + 3 * MiB, "... but the graph pool keeps its memory");
  CK(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v));
  TAP_EQ(v, 3 * MiB, "graph memory reserved");
  CK(cuGraphLaunch(e, s));
  CK(cuStreamSynchronize(s));
  TAP_EQ(used(), before + 3 * MiB, "a second launch reuses the pool's memory");
  CK(cuMemFreeAsync(p, s));
  CK(cuStreamSynchronize(s));
  CK(cuDeviceGraphMemTrim(0));
  TAP_EQ(used(), before, "trimming gives the memory back");
  CK(cuGraphExecDestroy(e));
  CK(cuGraphDestroy(g));
  TAP_EQ(used(), before, "nothing is left after the graphs are gone");
}

/* Memory nodes added by hand, read back, and an upload that maps their memory ahead. */
static void memory_nodes(CUstream s) {
  size_t before = used();
  CUgraph g;
  CK(cuGraphCreate(&g, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS params = {0};
  params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  params.poolProps.location.id = 0;
  params.bytesize = 2 * MiB;
  CUgraphNode a, f, bad;
  CK(cuGraphAddMemAllocNode(&a, g, NULL, 0, &params));
  tap_ok(params.dptr != 0, "an allocation node has its address at once");
  CK(cuGraphAddMemFreeNode(&f, g, &a, 1, params.dptr));
  CUgraphNodeType type;
  CK(cuGraphNodeGetType(a, &type));
  TAP_EQ(type, CU_GRAPH_NODE_TYPE_MEM_ALLOC, "the allocation node's type");
  CK(cuGraphNodeGetType(f, &type));
  TAP_EQ(type, CU_GRAPH_NODE_TYPE_MEM_FREE, "the free node's type");
  CUDA_MEM_ALLOC_NODE_PARAMS back;
  CK(cuGraphMemAllocNodeGetParams(a, &back));
  tap_ok(back.bytesize == 2 * MiB && back.dptr == params.dptr &&
             back.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
             back.poolProps.location.id == 0,
         "its parameters read back");
  TAP_EQ(cuGraphMemAllocNodeGetParams(f, &back), CUDA_ERROR_INVALID_VALUE,
         "a free node has no allocation parameters");
  params.bytesize = 0;
  TAP_EQ(cuGraphAddMemAllocNode(&bad, g, NULL, 0, &params), CUDA_ERROR_INVALID_VALUE,
         "an allocation of 0 bytes");
  params.bytesize = MiB;
  TAP_EQ(cuGraphAddMemAllocNode(&bad, g, NULL, 1, &params), CUDA_ERROR_INVALID_VALUE,
         "dependencies without an array");
  TAP_EQ(cuGraphAddMemFreeNode(&bad, g, NULL, 0, params.dptr + 512), CUDA_ERROR_INVALID_VALUE,
         "a free node of an interior address");
  size_t n = 0;
  CK(cuGraphGetNodes(g, NULL, &n));
  CUgraphNode nodes[4];
  CK(cuGraphGetNodes(g, nodes, &n));
  tap_ok(n == 2 && nodes[0] == a && nodes[1] == f, "the graph lists the same two handles");
  TAP_EQ(used(), before, "no memory before an upload");
  CUgraphExec e;
  CK(cuGraphInstantiateWithFlags(&e, g, 0));
  CK(cuGraphUpload(e, s));
  TAP_EQ(used(), before + 2 * MiB, "an upload maps the graph's memory");
  cuuint64_t v = 1;
  CK(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v));
  TAP_EQ(v, 0, "... without allocating it");
  for (int i = 0; i < 3; i++) {
    CK(cuGraphLaunch(e, s)); /* allocates and frees: relaunching is legal */
  }
  CK(cuStreamSynchronize(s));
  TAP_EQ(used(), before + 2 * MiB, "launches reuse the uploaded memory");
  CK(cuGraphExecDestroy(e));
  CK(cuGraphDestroy(g));
  TAP_EQ(cuGraphNodeGetType(a, &type), CUDA_ERROR_INVALID_VALUE, "a node of a destroyed graph");
  TAP_EQ(used(), before, "nothing is left after the graphs are gone");
}

/* A context's destruction frees the graph memory of its graphs, allocations still live and
 * frees still queued included. */
static void context_teardown(void) {
  CUcontext mine, other;
  CK(cuCtxGetCurrent(&mine));
  size_t before = used();
  CK(cuCtxCreate_v2(&other, 0, 0));
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr kept = 0, freed = 0;
  CUgraph g;
  CUgraphExec e;
  CK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(cuMemAllocAsync(&kept, 2 * MiB, s));
  CK(cuMemAllocAsync(&freed, 2 * MiB, s));
  CK(cuMemFreeAsync(freed, s));
  CK(cuStreamEndCapture(s, &g));
  CK(cuGraphInstantiateWithFlags(&e, g, 0));
  CK(cuGraphLaunch(e, s)); /* the free node is still queued */
  TAP_EQ(used(), before + 4 * MiB, "the launch took both allocations' memory");
  CK(cuCtxDestroy_v2(other));
  CK(cuCtxSetCurrent(mine));
  TAP_EQ(used(), before, "destroying the context freed all of it");
}

int main(void) {
  setenv("FAKECUDA_DRIVER_MEMORY", "off", 1); /* exact figures: test_driver.c has the driver's */
  setenv("FAKECUDA_BACKING", "1", 1);
  CK(cuInit(0));
  CUcontext c;
  CK(cuCtxCreate_v2(&c, 0, 0));
  CUstream s, t;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
  host_work(s);
  timing(s);
  capture_and_replay(s, t);
  capture_rules(s);
  graph_memory(s);
  memory_nodes(s);
  context_teardown();
  TAP_EQ(fakecudaHazards(), 0, "no hazards");
  CK(cuCtxDestroy_v2(c));
  return tap_done();
}
