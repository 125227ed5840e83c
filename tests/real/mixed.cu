/* Memory the program gave back is available to every kind of allocation: after cudaMalloc
 * blocks filling the device are freed, stream-ordered, managed and array allocations of half
 * what was free at the start succeed, as they do on a device the program no longer holds
 * anything of (on a GPU the context holds part of the total from the start). */
#include "tests/real/real.h"

int main(void) {
  size_t total = real_total("start");
  const size_t room = real_room();
  real_fill("malloc", 4 * MiB, total);
  void *p = NULL;
  OK("async_after_free", cudaMallocAsync(&p, room / 2, 0));
  if (p != NULL) {
    cudaFreeAsync(p, 0);
  }
  OK("sync", cudaDeviceSynchronize());
  cudaGetLastError();
  p = NULL;
  OK("managed_after_free", cudaMallocManaged(&p, room / 2));
  if (p != NULL) {
    cudaFree(p);
  }
  cudaGetLastError();
  cudaChannelFormatDesc f4 = cudaCreateChannelDesc<float>();
  cudaArray_t a = NULL;
  cudaError_t e = cudaMallocArray(&a, &f4, 8192, room / 2 / (8192 * sizeof(float)));
  FACT("array_after_free", "%s", cudaGetErrorName(e));
  if (e == cudaSuccess) {
    cudaFreeArray(a);
  }
  cudaGetLastError();
  /* And cudaMalloc itself, after all that. */
  real_fill("malloc_again", 4 * MiB, total);
  return real_end();
}
