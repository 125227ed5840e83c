/* cudaDeviceReset: everything the program allocated goes with the device's primary context
 * (a pointer from before is unknown afterwards); the runtime starts again on the next call, the
 * memory the program is given is the same after as before (under gpucap: the pool is dropped
 * and its charge returned, so as many chunks fit again; on a GPU the memory free before the
 * first allocation, which the context already took its share of), and data is intact after the
 * reset. */
#include "tests/real/real.h"

int main(void) {
  size_t total = real_total("start");
  size_t room = real_room();
  void *old = NULL, *async_old = NULL;
  OK("malloc_before", real_malloc(&old, 5 * MiB));
  OK("malloc_async_before", cudaMallocAsync(&async_old, 3 * MiB, 0));
  OK("sync_before", cudaDeviceSynchronize());
  /* Keep most of the memory held across the reset: the fill after it must find it free. */
  static void *held[4096];
  int k = 0;
  while (k < 4096 && real_malloc(&held[k], 4 * MiB) == cudaSuccess) {
    k++;
  }
  cudaGetLastError();
  CAPFACT("held_before_reset", "%d", k);
  size_t f0 = 0, t0 = 0;
  OK("info_before", cudaMemGetInfo(&f0, &t0));
  OK("reset", cudaDeviceReset());
  size_t f1 = 0, t1 = 0;
  OK("info_after", cudaMemGetInfo(&f1, &t1));
  CHECK("same_total_after_reset", t1 == total);
  CHECK("memory_back_after_reset", f1 == room);
  cudaPointerAttributes pa;
  OK("old_pointer_attributes", cudaPointerGetAttributes(&pa, old));
  FACT("old_pointer_type", "%d", (int)pa.type);
  int fill = real_fill("after_reset", 4 * MiB, total);
  CHECK("as_many_after_reset", fill >= k + 1);
  /* Data through the new context. */
  void *p = NULL;
  OK("malloc_after", real_malloc(&p, MiB + 3));
  real_put("after_reset", p, MiB + 3, 31);
  real_get_ok("after_reset", p, MiB + 3, 31);
  OK("free_after", cudaFree(p));
  /* A second reset with nothing allocated, then the process ends with nothing held. */
  OK("reset_again", cudaDeviceReset());
  real_over_cap("over", total);
  return real_end();
}
