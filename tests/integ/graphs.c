/* graphs: graph memory under a 64 MiB cap, over the fake driver (linked with -lcuda and the
 * fake's test hooks), with gpucap preloaded. Prints TAP; tests/integ/graphs.sh judges the cap
 * itself from the fake's own per-device peak.
 * usage: graphs captured|alternate|refuse|upload|kept|threads|capture|warm|during|unreadable
 * Run with GPUCAP_MEMORY_LIMIT=64MiB (device 0). */
#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/fakecuda/testlib.h"
#include "tests/tap.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#define CAP (64 * MiB)

static CUcontext ctx;

static size_t free_now(void) {
  size_t f = 0, t = 0;
  cuMemGetInfo_v2(&f, &t);
  return f;
}

static cuuint64_t reserved(void) {
  cuuint64_t v = 0;
  cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v);
  return v;
}

/* A graph captured on s: a stream-ordered allocation of `bytes`, a memset, and (when `frees`)
 * its free. */
static CUgraphExec captured(CUstream s, size_t bytes, bool frees, CUdeviceptr *p) {
  CUgraph g;
  CUgraphExec e = NULL;
  CK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(cuMemAllocAsync(p, bytes, s));
  CK(cuMemsetD8Async(*p, 7, bytes, s));
  if (frees) {
    CK(cuMemFreeAsync(*p, s));
  }
  CK(cuStreamEndCapture(s, &g));
  CK(cuGraphInstantiateWithFlags(&e, g, 0));
  CK(cuGraphDestroy(g));
  return e;
}

/* A new graph holding one allocation node of `bytes` on device 0 (in *node; its address in
 * *dptr when dptr is not NULL). */
static CUgraph alloc_graph(size_t bytes, CUgraphNode *node, CUdeviceptr *dptr) {
  CUgraph g;
  CUDA_MEM_ALLOC_NODE_PARAMS p = {0};
  p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.poolProps.location.id = 0;
  p.bytesize = bytes;
  CK(cuGraphCreate(&g, 0));
  CK(cuGraphAddMemAllocNode(node, g, NULL, 0, &p));
  if (dptr) {
    *dptr = p.dptr;
  }
  return g;
}

/* A graph built by hand: an allocation node of `bytes` on device 0 and its free node. */
static CUgraphExec explicit_nodes(size_t bytes) {
  CUgraphNode a, f;
  CUdeviceptr dptr;
  CUgraphExec e = NULL;
  CUgraph g = alloc_graph(bytes, &a, &dptr);
  CK(cuGraphAddMemFreeNode(&f, g, &a, 1, dptr));
  CK(cuGraphInstantiateWithFlags(&e, g, 0));
  CK(cuGraphDestroy(g));
  return e;
}

/* A captured graph that allocates and frees 48 MiB: capturing allocates nothing, launching
 * charges what the graph pool holds, relaunching reuses it, the rest of the cap stays usable. */
static void captured_mode(CUstream s) {
  CUdeviceptr p = 0, q = 0;
  CUgraphExec e = captured(s, 48 * MiB, true, &p);
  TAP_EQ(free_now(), CAP, "capturing and instantiating charge nothing");
  for (int i = 0; i < 5; i++) {
    CK(cuGraphLaunch(e, s));
  }
  CK(cuStreamSynchronize(s));
  TAP_EQ(free_now(), CAP - 48 * MiB, "five launches: the graph pool's 48 MiB are charged once");
  TAP_EQ(cuMemAlloc_v2(&q, 48 * MiB), CUDA_ERROR_OUT_OF_MEMORY,
         "48 MiB more do not fit beside the graph pool");
  CK(cuMemAlloc_v2(&q, 16 * MiB));
  CK(cuMemFree_v2(q));
  CK(cuGraphExecDestroy(e));
  TAP_EQ(free_now(), CAP, "destroyed, the graph's memory is no longer charged");
}

/* Two graphs of 40 MiB each cannot both keep their memory under 64 MiB: each first launch
 * trims the other's idle memory, and every launch succeeds. */
static void alternate_mode(CUstream s) {
  CUdeviceptr p = 0;
  CUgraphExec a = captured(s, 40 * MiB, true, &p);
  CUgraphExec b = explicit_nodes(40 * MiB);
  for (int i = 0; i < 4; i++) {
    TAP_EQ(cuGraphLaunch(i % 2 ? b : a, s), CUDA_SUCCESS, "launch %d (graph %c)", i,
           i % 2 ? 'b' : 'a');
    CK(cuStreamSynchronize(s));
  }
  tap_ok(reserved() <= CAP, "the graph pools hold no more than the cap (%llu bytes)",
         (unsigned long long)reserved());
  tap_ok(free_now() == CAP - reserved(), "get-info shows what the graph pools hold as used");
  CK(cuGraphExecDestroy(a));
  CK(cuGraphExecDestroy(b));
}

/* A graph whose allocations exceed what is left is refused before the driver maps anything;
 * the program can go on. */
static void refuse_mode(CUstream s) {
  CUdeviceptr p = 0, q = 0;
  CUgraphExec big = captured(s, 80 * MiB, true, &p);
  TAP_EQ(cuGraphLaunch(big, s), CUDA_ERROR_OUT_OF_MEMORY, "an 80 MiB graph under a 64 MiB cap");
  TAP_EQ(reserved(), 0, "the driver mapped nothing for it");
  CK(cuMemAllocAsync(&q, 40 * MiB, s));
  CUgraphExec mid = explicit_nodes(32 * MiB);
  TAP_EQ(cuGraphLaunch(mid, s), CUDA_ERROR_OUT_OF_MEMORY,
         "32 MiB of graph memory beside 40 MiB allocated");
  CK(cuMemFreeAsync(q, s));
  CK(cuStreamSynchronize(s));
  TAP_EQ(cuGraphLaunch(mid, s), CUDA_SUCCESS, "the same launch once the 40 MiB are freed");
  CK(cuStreamSynchronize(s));
  CK(cuGraphExecDestroy(mid));
  CK(cuGraphExecDestroy(big));
}

/* An upload maps the memory ahead of the launches: it is admitted and charged then. */
static void upload_mode(CUstream s) {
  CUgraphExec e = explicit_nodes(24 * MiB);
  CK(cuGraphUpload(e, s));
  TAP_EQ(free_now(), CAP - 24 * MiB, "an upload charges the graph's memory");
  CUgraphExec big = explicit_nodes(48 * MiB);
  CUDA_GRAPH_INSTANTIATE_PARAMS ip = {.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD,
                                      .hUploadStream = s};
  CUgraphNode a;
  CUgraph g = alloc_graph(48 * MiB, &a, NULL);
  CUgraphExec up = NULL;
  CUresult rc = cuGraphInstantiateWithParams(&up, g, &ip);
  tap_ok(rc == CUDA_SUCCESS,
         "instantiating with an upload (the other graph's idle memory is "
         "trimmed to make room): %d",
         (int)rc);
  tap_ok(reserved() <= CAP, "the graph pools hold no more than the cap (%llu bytes)",
         (unsigned long long)reserved());
  CK(cuGraphExecDestroy(up));
  CK(cuGraphDestroy(g));
  CK(cuGraphExecDestroy(big));
  CK(cuGraphExecDestroy(e));
}

/* A graph allocation the program keeps after the launch and frees itself: freed, its memory
 * stays in the graph pool (charged) until the program trims it. */
static void kept_mode(CUstream s) {
  CUdeviceptr p = 0, q = 0;
  CUgraphExec e = captured(s, 40 * MiB, false, &p);
  CK(cuGraphLaunch(e, s));
  CK(cuStreamSynchronize(s));
  TAP_EQ(free_now(), CAP - 40 * MiB, "the live graph allocation is charged");
  CK(cuMemFreeAsync(p, s));
  CK(cuStreamSynchronize(s));
  TAP_EQ(free_now(), CAP - 40 * MiB, "freed, its memory is still in the graph pool");
  TAP_EQ(cuMemAlloc_v2(&q, 40 * MiB), CUDA_ERROR_OUT_OF_MEMORY, "so 40 MiB more do not fit");
  CK(cuDeviceGraphMemTrim(0));
  TAP_EQ(free_now(), CAP, "trimmed, the charge is back");
  CK(cuMemAlloc_v2(&q, 40 * MiB));
  TAP_EQ(cuGraphLaunch(e, s), CUDA_ERROR_OUT_OF_MEMORY,
         "relaunching after a trim is admitted again (and does not fit now)");
  CK(cuMemFree_v2(q));
  CK(cuGraphExecDestroy(e));
}

/* A capture going on while the pool would synchronise its context to reuse deferred frees:
 * the synchronisation would invalidate the capture, so gpucap does without it. The block freed
 * before the capture began was retired as it began, so the allocation during it is served. */
static void capture_mode(CUstream s) {
  CUdeviceptr a = 0, b = 0, p = 0;
  CUgraph g = NULL;
  CK(cuMemAlloc_v2(&a, 32 * MiB));
  CK(cuMemFree_v2(a)); /* a deferred pool free */
  CK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CK(cuMemAllocAsync(&p, MiB, s));
  CK(cuMemFreeAsync(p, s));
  TAP_EQ(cuMemAlloc_v2(&b, 16 * MiB), CUDA_SUCCESS, "an allocation during the capture");
  TAP_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS, "the capture was not invalidated");
  CK(cuMemFree_v2(b));
  if (g) {
    CK(cuGraphDestroy(g));
  }
  CK(cuMemAlloc_v2(&b, 48 * MiB)); /* after the capture: the deferred memory is reused */
  CK(cuMemFree_v2(b));
}

/* Captures a kernel on s in global mode, the calling thread relaxed around its allocations as
 * PyTorch's caching allocator is: `bytes` allocated with cuMemAlloc_v2 in `n` blocks while the
 * capture goes on (each answer in rc[]), written by a captured memset, then the graph launched.
 * Returns how many of the allocations succeeded; they are freed after the launch. */
static int capture_allocs(CUstream s, size_t bytes, int n, CUresult *rc) {
  CUdeviceptr p[16] = {0};
  CUgraph g = NULL;
  CUgraphExec e = NULL;
  int served = 0;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  for (int i = 0; i < n && i < 16; i++) {
    CK(cuThreadExchangeStreamCaptureMode(&mode));
    rc[i] = cuMemAlloc_v2(&p[i], bytes);
    CK(cuThreadExchangeStreamCaptureMode(&mode));
    if (rc[i] == CUDA_SUCCESS) {
      served++;
      CK(cuMemsetD8Async(p[i], (unsigned char)i, bytes, s));
    }
  }
  TAP_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS, "  the capture ends, not invalidated");
  if (g) {
    CK(cuGraphInstantiateWithFlags(&e, g, 0));
    CK(cuGraphLaunch(e, s));
    CK(cuStreamSynchronize(s));
    CK(cuGraphExecDestroy(e));
    CK(cuGraphDestroy(g));
  }
  for (int i = 0; i < n && i < 16; i++) {
    if (p[i]) {
      CK(cuMemFree_v2(p[i]));
    }
  }
  return served;
}

/* Warm up, free, capture (what torch.cuda.graph() does): 48 MiB in 2 MiB blocks used on the
 * stream and freed, then a capture whose allocations need new blocks. The freed blocks are
 * retired as the capture begins (its last chance to synchronise), so the capture reuses them:
 * under the 64 MiB cap, 12 more 2 MiB blocks fit only that way. */
static void warm_mode(CUstream s) {
  CUdeviceptr p[24];
  CUresult rc[12];
  for (int i = 0; i < 24; i++) {
    CK(cuMemAlloc_v2(&p[i], 2 * MiB));
    CK(cuMemsetD8Async(p[i], 1, 2 * MiB, s));
  }
  for (int i = 0; i < 24; i++) {
    CK(cuMemFree_v2(p[i])); /* deferred: the stream may still be writing them */
  }
  TAP_EQ(capture_allocs(s, 2 * MiB, 12, rc), 12, "warm-up then capture: 12 new 2 MiB blocks");
}

/* Frees made while a capture goes on cannot be retired until it ends (gpucap may not wait for
 * the device): the pool grows past them instead, and refuses only what nothing but they could
 * serve, with the verdict that says so (read by graphs.sh). */
static void during_mode(CUstream s) {
  CUdeviceptr big = 0;
  CUresult rc[3];
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CUgraph g = NULL;
  CK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(cuThreadExchangeStreamCaptureMode(&mode));
  TAP_EQ(cuMemAlloc_v2(&big, 40 * MiB), CUDA_SUCCESS, "during a capture: 40 MiB");
  CK(cuMemFree_v2(big)); /* deferred, and no synchronisation until the capture ends */
  rc[0] = cuMemAlloc_v2(&big, 16 * MiB);
  TAP_EQ(rc[0], CUDA_SUCCESS, "  16 MiB beside the 40 MiB freed during it: the pool grows");
  rc[1] = cuMemAlloc_v2(&(CUdeviceptr){0}, 16 * MiB);
  TAP_EQ(rc[1], CUDA_ERROR_OUT_OF_MEMORY,
         "  16 MiB more: only the freed 40 MiB could serve, so out of memory");
  CK(cuThreadExchangeStreamCaptureMode(&mode));
  TAP_EQ(cuStreamEndCapture(s, &g), CUDA_SUCCESS, "  the capture ends, not invalidated");
  CK(cuGraphDestroy(g));
  CK(cuMemFree_v2(big));
  TAP_EQ(capture_allocs(s, 16 * MiB, 3, rc), 3,
         "after it: the freed memory serves a next capture's 48 MiB");
}

/* Threads launching their own graphs at once (made beforehand: TAP output is not
 * thread-safe). */
struct launcher {
  CUstream s;
  CUgraphExec e;
  int odd; /* answers other than success or out of memory */
};

static void *launcher(void *arg) {
  struct launcher *l = arg;
  cuCtxSetCurrent(ctx);
  for (int i = 0; i < 200; i++) {
    CUresult rc = cuGraphLaunch(l->e, l->s);
    l->odd += rc != CUDA_SUCCESS && rc != CUDA_ERROR_OUT_OF_MEMORY;
    if (i % 7 == 0) {
      cuDeviceGraphMemTrim(0);
    }
    cuStreamSynchronize(l->s);
  }
  return NULL;
}

/* Run with FAKECUDA_FAIL=cuGraphMemAllocNodeGetParams:1: gpucap cannot read the 80 MiB
 * allocation node, so it cannot admit the graph's memory: the instantiation is refused with
 * the driver's error rather than let through uncharged; a readable graph then works. */
static void unreadable_mode(CUstream s) {
  CUgraphNode a;
  CUgraphExec e = NULL;
  CUgraph g = alloc_graph(80 * MiB, &a, NULL);
  CUresult rc = cuGraphInstantiateWithFlags(&e, g, 0);
  tap_ok(rc != CUDA_SUCCESS, "a graph whose allocation node cannot be read is refused (%d)", rc);
  if (rc == CUDA_SUCCESS) {
    cuGraphLaunch(e, s); /* what the refusal prevents: 80 MiB mapped under a 64 MiB cap */
    cuStreamSynchronize(s);
    cuGraphExecDestroy(e);
  }
  CK(cuGraphDestroy(g));
  CUgraphExec ok = explicit_nodes(32 * MiB);
  TAP_EQ(cuGraphLaunch(ok, s), CUDA_SUCCESS, "a readable graph launches afterwards");
  CK(cuStreamSynchronize(s));
  CK(cuGraphExecDestroy(ok));
}

static void threads_mode(void) {
  struct launcher l[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    CUdeviceptr p = 0;
    CK(cuStreamCreate(&l[i].s, CU_STREAM_NON_BLOCKING));
    l[i].e = i % 2 ? explicit_nodes(24 * MiB) : captured(l[i].s, 24 * MiB, true, &p);
    l[i].odd = 0;
  }
  for (int i = 0; i < 4; i++) {
    pthread_create(&t[i], NULL, launcher, &l[i]);
  }
  int odd = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    odd += l[i].odd;
    CK(cuGraphExecDestroy(l[i].e));
  }
  TAP_EQ(odd, 0, "every launch succeeded or was refused for memory");
  CK(cuDeviceGraphMemTrim(0));
  TAP_EQ(free_now(), CAP, "nothing stays charged once the graphs are gone");
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  CUdevice dev;
  CUstream s;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  if (strcmp(mode, "captured") == 0) {
    captured_mode(s);
  } else if (strcmp(mode, "alternate") == 0) {
    alternate_mode(s);
  } else if (strcmp(mode, "refuse") == 0) {
    refuse_mode(s);
  } else if (strcmp(mode, "upload") == 0) {
    upload_mode(s);
  } else if (strcmp(mode, "kept") == 0) {
    kept_mode(s);
  } else if (strcmp(mode, "capture") == 0) {
    capture_mode(s);
  } else if (strcmp(mode, "warm") == 0) {
    warm_mode(s);
  } else if (strcmp(mode, "during") == 0) {
    during_mode(s);
  } else if (strcmp(mode, "unreadable") == 0) {
    unreadable_mode(s);
  } else if (strcmp(mode, "threads") == 0) {
    threads_mode();
  } else {
    tap_ok(false, "unknown mode '%s'", mode);
  }
  TAP_EQ(fakecudaHazards(), 0, "no hazards");
  return tap_done();
}
