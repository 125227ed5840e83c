/* Built by tests/integ/cudart.sh against the toolkit's real libcudart (shared and static): the
 * runtime's whole start-up (entry points, private export tables, integrity handshake, primary
 * context) over the fake driver, then one allocation and its free. With the argument `exit`:
 * a block freed and one kept, then exit, where the runtime's teardown releases its primary
 * context. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

/* 8 MiB used on the device and freed, 4 MiB kept until the process ends. */
static int at_exit(void) {
  void *freed = NULL, *kept = NULL;
  int rc = (int)cudaMalloc(&freed, 8 << 20) | (int)cudaMalloc(&kept, 4 << 20) |
           (int)cudaMemset(freed, 1, 8 << 20) | (int)cudaFree(freed);
  printf("exit_rc=%d\n", rc);
  return rc;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "exit") == 0) {
    return at_exit();
  }
  int version = 0, count = -1;
  void *p = NULL;
  size_t free_b = 0, total_b = 0;
  cudaError_t v = cudaRuntimeGetVersion(&version);
  cudaError_t c = cudaGetDeviceCount(&count);
  cudaError_t m = cudaMalloc(&p, 1 << 20);
  cudaError_t i = cudaMemGetInfo(&free_b, &total_b);
  cudaError_t f = cudaFree(p);
  printf("runtime=%d version_rc=%d count_rc=%d count=%d malloc_rc=%d info_rc=%d total=%zu "
         "free_rc=%d\n",
         version, (int)v, (int)c, count, (int)m, (int)i, total_b, (int)f);
  return 0;
}
