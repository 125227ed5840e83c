/* cudaMemGetInfo and the device's properties: the program sees the memory it is given (the cap
 * under gpucap) in cudaMemGetInfo, cudaGetDeviceProperties and cudaDeviceGetAttribute-free
 * queries; free memory falls by what it allocates and comes back when it frees; free never
 * passes the total; when the device is full, free memory is less than the chunk refused. */
#include "tests/real/real.h"

int main(void) {
  size_t total = real_total("start");
  cudaDeviceProp prop;
  OK("properties", cudaGetDeviceProperties(&prop, 0));
  CAPFACT("total_global_mem", "%zu", prop.totalGlobalMem);
  CHECK("properties_agree_with_info", prop.totalGlobalMem == total);
  FACT("name", "%s", prop.name);
  FACT("compute_capability", "%d.%d", prop.major, prop.minor);
  size_t f0 = 0, f1 = 0, f2 = 0, t = 0;
  OK("info_0", cudaMemGetInfo(&f0, &t));
  CAPFACT("free_at_start", "%zu", f0);
  void *p = NULL;
  OK("malloc_16m", real_malloc(&p, 16 * MiB));
  OK("info_1", cudaMemGetInfo(&f1, &t));
  CHECK("free_falls_by_the_allocation", f1 + 16 * MiB <= f0);
  OK("free_16m", cudaFree(p));
  OK("info_2", cudaMemGetInfo(&f2, &t));
  CHECK("free_comes_back", f2 == f0);
  CHECK("total_unchanged", t == total);
  /* Full: chunks of 4 MiB until refused, then free is below a chunk. */
  static void *chunks[4096];
  int k = 0;
  while (k < 4096 && real_malloc(&chunks[k], 4 * MiB) == cudaSuccess) {
    k++;
  }
  cudaGetLastError();
  size_t full = 0;
  OK("info_full", cudaMemGetInfo(&full, &t));
  CHECK("free_when_full_below_a_chunk", full < 4 * MiB);
  CHECK("full_within_total", (size_t)k * 4 * MiB <= total);
  for (int i = 0; i < k; i++) {
    cudaFree(chunks[i]);
  }
  OK("info_after_fill", cudaMemGetInfo(&f2, &t));
  CHECK("free_comes_back_after_fill", f2 == f0);
  /* What cudaMemGetInfo calls free can be allocated in one piece (less half a 2 MiB page, the
   * granularity of real devices), as programs that size a cache from it expect. */
  void *small = NULL, *rest = NULL;
  OK("malloc_small", real_malloc(&small, MiB));
  OK("info_small", cudaMemGetInfo(&f2, &t));
  OK("malloc_what_is_free", real_malloc(&rest, f2 - MiB / 2));
  cudaGetLastError();
  if (rest != NULL) {
    cudaFree(rest);
  }
  OK("free_small", cudaFree(small));
  return real_end();
}
