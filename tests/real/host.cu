/* cudaMallocHost and cudaHostAlloc: page-locked host memory is host memory, which gpucap
 * neither pools nor caps: more of it than the device's memory (the cap under gpucap) is
 * allocated, mapped into the device's address space, used by copies with the bytes intact,
 * and cudaMemGetInfo does not change. */
#include "tests/real/real.h"

int main(void) {
  size_t total = real_total("start");
  size_t free_before = 0, free_after = 0, t = 0;
  OK("info_before", cudaMemGetInfo(&free_before, &t));
  /* Twice what the device reports, in four pieces of pinned memory. */
  size_t piece = total / 2;
  unsigned char *pins[4] = {0};
  OK("malloc_host_0", cudaMallocHost((void **)&pins[0], piece));
  OK("malloc_host_1", cudaMallocHost((void **)&pins[1], piece));
  OK("host_alloc_mapped", cudaHostAlloc((void **)&pins[2], piece, cudaHostAllocMapped));
  OK("host_alloc_portable_wc",
     cudaHostAlloc((void **)&pins[3], piece, cudaHostAllocPortable | cudaHostAllocWriteCombined));
  OK("info_after", cudaMemGetInfo(&free_after, &t));
  CHECK("pinned_leaves_device_free", free_after == free_before);
  unsigned flags = 0;
  OK("host_get_flags", cudaHostGetFlags(&flags, pins[2]));
  FACT("mapped_flags", "%u", flags);
  void *mapped = NULL;
  OK("host_get_device_pointer", cudaHostGetDevicePointer(&mapped, pins[2], 0));
  CHECK("mapped_same_address", mapped == (void *)pins[2]);
  cudaPointerAttributes pa;
  OK("pointer_attributes", cudaPointerGetAttributes(&pa, pins[0]));
  FACT("pointer_type", "%d", (int)pa.type);
  CHECK("pointer_is_host", pa.type == cudaMemoryTypeHost);
  /* Copies through pinned memory. */
  const size_t n = 3 * MiB;
  void *dev = NULL;
  OK("malloc", real_malloc(&dev, n));
  real_pattern(pins[0], n, 9);
  OK("copy_h2d", cudaMemcpy(dev, pins[0], n, cudaMemcpyHostToDevice));
  OK("copy_d2h", cudaMemcpy(pins[1], dev, n, cudaMemcpyDeviceToHost));
  CHECK("pinned_intact", real_pattern_ok(pins[1], n, 9));
  cudaStream_t s;
  OK("stream", cudaStreamCreate(&s));
  memset(pins[3], 0, n);
  OK("copy_async_d2h", cudaMemcpyAsync(pins[3], dev, n, cudaMemcpyDeviceToHost, s));
  OK("sync", cudaStreamSynchronize(s));
  CHECK("pinned_async_intact", real_pattern_ok(pins[3], n, 9));
  OK("stream_destroy", cudaStreamDestroy(s));
  OK("free", cudaFree(dev));
  for (int i = 0; i < 4; i++) {
    char key[32];
    snprintf(key, sizeof key, "free_host_%d", i);
    OK(key, cudaFreeHost(pins[i]));
  }
  EXPECT("free_host_twice", cudaFreeHost(pins[0]), cudaErrorInvalidValue);
  cudaGetLastError();
  return real_end();
}
