/* Graph memory: a stream capture of cudaMallocAsync / cudaMemsetAsync / cudaMemcpyAsync /
 * cudaFreeAsync instantiated and launched again and again with the bytes intact, the graph pool
 * keeping the memory between launches (the rest of the device stays usable beside it, what it
 * holds does not fit twice), cudaDeviceGraphMemTrim giving it back, a launch that does not fit
 * refused with the runtime's out-of-memory error and the program going on, and a graph built
 * by hand (cudaGraphAddMemAllocNode / cudaGraphAddMemFreeNode) uploaded ahead of its launch.
 * Sizes are parts of the memory free at the start (on a GPU, less than the total). */
#include "tests/real/real.h"

static unsigned long long graph_attr(cudaGraphMemAttributeType a) {
  unsigned long long v = 0;
  cudaDeviceGetGraphMemAttribute(0, a, &v);
  return v;
}

int main(void) {
  size_t total = real_total("start");
  const size_t room = real_room(), big = room / 4 * 3, n = 2 * MiB;
  cudaStream_t s;
  OK("stream", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned char *host;
  OK("host_buffer", cudaMallocHost((void **)&host, 2 * n));
  real_pattern(host, n, 9);

  void *p = NULL;
  cudaGraph_t g;
  cudaGraphExec_t e;
  OK("begin_capture", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  OK("captured_malloc", cudaMallocAsync(&p, big, s));
  OK("captured_memset", cudaMemsetAsync(p, 0, big, s));
  OK("captured_h2d", cudaMemcpyAsync(p, host, n, cudaMemcpyHostToDevice, s));
  OK("captured_d2h", cudaMemcpyAsync(host + n, p, n, cudaMemcpyDeviceToHost, s));
  OK("captured_free", cudaFreeAsync(p, s));
  OK("end_capture", cudaStreamEndCapture(s, &g));
  FACT("reserved_after_capture", "%llu", graph_attr(cudaGraphMemAttrReservedMemCurrent));
  OK("instantiate", cudaGraphInstantiate(&e, g, 0));
  for (int i = 0; i < 3; i++) {
    memset(host + n, 0, n);
    OK("launch", cudaGraphLaunch(e, s));
    OK("launch_sync", cudaStreamSynchronize(s));
    CHECK("launch_intact", real_pattern_ok(host + n, n, 9));
  }
  CHECK("pool_holds_the_graph", graph_attr(cudaGraphMemAttrReservedMemCurrent) >= big);
  FACT("used_after_launches", "%llu", graph_attr(cudaGraphMemAttrUsedMemCurrent));
  void *q = NULL;
  OK("malloc_beside_pool", real_malloc(&q, room / 8));
  OK("free_beside_pool", cudaFree(q));
  EXPECT("malloc_over_pool", cudaMalloc(&q, room / 2), cudaErrorMemoryAllocation);
  cudaGetLastError();
  OK("trim", cudaDeviceGraphMemTrim(0));
  FACT("reserved_after_trim", "%llu", graph_attr(cudaGraphMemAttrReservedMemCurrent));
  OK("malloc_after_trim", real_malloc(&q, room / 2));
  EXPECT("launch_refused", cudaGraphLaunch(e, s), cudaErrorMemoryAllocation);
  EXPECT("launch_refused_reported", cudaGetLastError(), cudaErrorMemoryAllocation);
  OK("free_after_refusal", cudaFree(q));
  OK("launch_goes_on", cudaGraphLaunch(e, s));
  OK("launch_goes_on_sync", cudaStreamSynchronize(s));
  CHECK("launch_goes_on_intact", real_pattern_ok(host + n, n, 9));
  OK("exec_destroy", cudaGraphExecDestroy(e));
  OK("graph_destroy", cudaGraphDestroy(g));
  OK("trim_after_destroy", cudaDeviceGraphMemTrim(0));

  /* By hand: an allocation node and its free node, uploaded before the launch. */
  cudaMemAllocNodeParams ap = {};
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = room / 2;
  cudaGraphNode_t an, fn;
  OK("graph_create", cudaGraphCreate(&g, 0));
  OK("add_alloc_node", cudaGraphAddMemAllocNode(&an, g, NULL, 0, &ap));
  OK("add_free_node", cudaGraphAddMemFreeNode(&fn, g, &an, 1, ap.dptr));
  OK("instantiate_by_hand", cudaGraphInstantiate(&e, g, 0));
  OK("upload", cudaGraphUpload(e, s));
  CHECK("upload_maps", graph_attr(cudaGraphMemAttrReservedMemCurrent) >= room / 2);
  OK("launch_by_hand", cudaGraphLaunch(e, s));
  OK("launch_by_hand_sync", cudaStreamSynchronize(s));
  OK("exec_destroy_by_hand", cudaGraphExecDestroy(e));
  OK("graph_destroy_by_hand", cudaGraphDestroy(g));
  OK("trim_at_end", cudaDeviceGraphMemTrim(0));
  FACT("reserved_at_end", "%llu", graph_attr(cudaGraphMemAttrReservedMemCurrent));
  OK("free_host", cudaFreeHost(host));
  OK("stream_destroy", cudaStreamDestroy(s));
  real_over_cap("over", total);
  return real_end();
}
