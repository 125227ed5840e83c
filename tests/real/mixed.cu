/* Memory the program gave back is available to every kind of allocation: after cudaMalloc
 * blocks filling the device are freed, stream-ordered, managed and array allocations of half
 * the device succeed, as they do on a device the program no longer holds anything of. */
#include "tests/real/real.h"

int main(void) {
  size_t total = real_total("start");
  real_fill("malloc", 4 * MiB, total);
  void *p = NULL;
  OK("async_after_free", cudaMallocAsync(&p, total / 2, 0));
  if (p != NULL) {
    cudaFreeAsync(p, 0);
  }
  OK("sync", cudaDeviceSynchronize());
  cudaGetLastError();
  p = NULL;
  OK("managed_after_free", cudaMallocManaged(&p, total / 2));
  if (p != NULL) {
    cudaFree(p);
  }
  cudaGetLastError();
  cudaChannelFormatDesc f4 = cudaCreateChannelDesc<float>();
  cudaArray_t a = NULL;
  cudaError_t e = cudaMallocArray(&a, &f4, 8192, total / 2 / (8192 * sizeof(float)));
  FACT("array_after_free", "%s", cudaGetErrorName(e));
  if (e == cudaSuccess) {
    cudaFreeArray(a);
  }
  cudaGetLastError();
  /* And cudaMalloc itself, after all that. */
  real_fill("malloc_again", 4 * MiB, total);
  return real_end();
}
