/* Built by tests/integ/cudart.sh against the toolkit's real libcudart (shared and static).
 * Over the fake driver the runtime's initialisation stops at NVIDIA's private export tables,
 * after its whole driver-resolution phase; this program only has to start it and report. */
#include <cuda_runtime_api.h>
#include <stdio.h>

int main(void) {
  int version = 0, count = -1;
  void *p = NULL;
  cudaError_t v = cudaRuntimeGetVersion(&version);
  cudaError_t c = cudaGetDeviceCount(&count);
  cudaError_t m = cudaMalloc(&p, 1 << 20);
  printf("runtime=%d version_rc=%d count_rc=%d malloc_rc=%d\n", version, (int)v, (int)c, (int)m);
  return 0;
}
