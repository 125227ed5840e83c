/* Out of memory and cudaGetLastError: allocations the device cannot hold, of every kind, fail
 * with cudaErrorMemoryAllocation; the error is reported once by cudaGetLastError (and seen
 * before that by cudaPeekAtLastError), it is not sticky (synchronisation and later calls
 * succeed), and the program goes on: after freeing what it held, the allocation that failed
 * succeeds. Halves are of the memory free at the start (on a GPU the context holds some of the
 * total). */
#include "tests/real/real.h"

int main(void) {
  size_t total = real_total("start");
  size_t room = real_room();
  void *half = NULL, *rest = NULL;
  OK("malloc_half", real_malloc(&half, room / 2));
  EXPECT("malloc_rest_refused", cudaMalloc(&rest, room / 2 + 8 * MiB), cudaErrorMemoryAllocation);
  EXPECT("peek_sees_it", cudaPeekAtLastError(), cudaErrorMemoryAllocation);
  EXPECT("get_reports_it", cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT("then_cleared", cudaGetLastError(), cudaSuccess);
  OK("not_sticky_sync", cudaDeviceSynchronize());
  OK("free_half", cudaFree(half));
  OK("malloc_rest_after_free", real_malloc(&rest, room / 2 + 8 * MiB));
  OK("free_rest", cudaFree(rest));
  /* Every kind of device allocation larger than the device. */
  void *p = NULL;
  size_t pitch = 0;
  cudaPitchedPtr pp;
  EXPECT("malloc_over", cudaMalloc(&p, total + MiB), cudaErrorMemoryAllocation);
  EXPECT("pitch_over", cudaMallocPitch(&p, &pitch, 8192, total / 8192 + 1024),
         cudaErrorMemoryAllocation);
  EXPECT("malloc3d_over", cudaMalloc3D(&pp, make_cudaExtent(8192, 1024, total / (8 * MiB) + 8)),
         cudaErrorMemoryAllocation);
  EXPECT("async_over", cudaMallocAsync(&p, total + MiB, 0), cudaErrorMemoryAllocation);
  EXPECT("last_error_is_the_last", cudaGetLastError(), cudaErrorMemoryAllocation);
  OK("sync_after_refusals", cudaDeviceSynchronize());
  /* A refusal in the middle of work: earlier allocations keep their bytes. */
  const size_t n = 2 * MiB;
  void *keep = NULL;
  OK("malloc_keep", real_malloc(&keep, n));
  real_put("keep", keep, n, 61);
  EXPECT("refused_while_holding", cudaMalloc(&p, total), cudaErrorMemoryAllocation);
  cudaGetLastError();
  real_get_ok("keep", keep, n, 61);
  OK("free_keep", cudaFree(keep));
  real_over_cap("over", total);
  return real_end();
}
