/* cudaMallocManaged: memory the host writes and reads directly and copies move to and from
 * device memory with the bytes intact; prefetch and advice; attach-host allocations; managed
 * memory larger than the device. gpucap charges managed memory to the cap (docs/
 * compatibility.md), so what cudaMemGetInfo shows after a managed allocation and whether one
 * larger than the device succeeds depend on the cap (~ facts). */
#include "tests/real/real.h"

int main(void) {
  size_t total = real_total("start");
  const size_t n = 4 * MiB + 5;
  unsigned char *m = NULL, *m2 = NULL;
  OK("managed", cudaMallocManaged((void **)&m, n));
  real_pattern(m, n, 7); /* the host writes managed memory directly */
  size_t free_before = 0, free_after = 0, t = 0;
  void *dev = NULL;
  OK("malloc", real_malloc(&dev, n));
  OK("info_before", cudaMemGetInfo(&free_before, &t));
  OK("managed_attach_host", cudaMallocManaged((void **)&m2, n, cudaMemAttachHost));
  OK("info_after", cudaMemGetInfo(&free_after, &t));
  CAPFACT("managed_reduces_free", "%d", free_after < free_before);
  cudaMemLocation loc = {};
  loc.type = cudaMemLocationTypeDevice;
  loc.id = 0;
  OK("prefetch_device", cudaMemPrefetchAsync(m, n, loc, 0, 0));
  OK("advise_read_mostly", cudaMemAdvise(m, n, cudaMemAdviseSetReadMostly, loc));
  OK("copy_managed_to_device", cudaMemcpy(dev, m, n, cudaMemcpyDefault));
  OK("copy_device_to_managed", cudaMemcpy(m2, dev, n, cudaMemcpyDefault));
  OK("sync", cudaDeviceSynchronize());
  CHECK("managed_intact", real_pattern_ok(m2, n, 7));
  cudaMemLocation host = {};
  host.type = cudaMemLocationTypeHost;
  OK("prefetch_host", cudaMemPrefetchAsync(m2, n, host, 0, 0));
  OK("memset_managed", cudaMemset(m2, 0x33, n));
  OK("sync_memset", cudaDeviceSynchronize());
  CHECK("memset_managed_seen", m2[0] == 0x33 && m2[n - 1] == 0x33);
  cudaPointerAttributes pa;
  OK("pointer_attributes", cudaPointerGetAttributes(&pa, m));
  FACT("pointer_type", "%d", (int)pa.type);
  CHECK("pointer_is_managed", pa.type == cudaMemoryTypeManaged);
  OK("free_managed", cudaFree(m));
  OK("free_managed2", cudaFree(m2));
  OK("free_device", cudaFree(dev));
  /* Managed memory is not limited by the device's memory (it pages), but gpucap charges it. */
  void *big = NULL;
  cudaError_t e = cudaMallocManaged(&big, total + 4 * MiB);
  CAPFACT("managed_over_total", "%s", cudaGetErrorName(e));
  cudaGetLastError();
  if (e == cudaSuccess) {
    cudaFree(big);
  }
  real_over_cap("over", total);
  return real_end();
}
