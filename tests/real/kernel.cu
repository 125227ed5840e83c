/* Kernels using the memory: launches on the legacy stream and on a stream of the program's own,
 * blocks freed while kernels that use them may still run and allocated again (each block the
 * program receives is claimed: the fake driver counts a hazard when queued device work still
 * touches it), launch errors that the program catches and gets past, and the kernel's
 * attributes and occupancy. The fake runs no device code: only the API's answers, the queued
 * work and the hazards are checked, never what a kernel would have computed. */
#include "tests/real/real.h"

__global__ void scale(float *x, int n, float by) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    x[i] *= by;
  }
}

__global__ void axpy(float *y, const float *x, int n, float a) {
  extern __shared__ float tile[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    tile[threadIdx.x] = x[i];
    y[i] += a * tile[threadIdx.x];
  }
}

int main(void) {
  size_t total = real_total("start");
  const int n = 1 << 20;
  float *x = NULL, *y = NULL;
  OK("malloc_x", real_malloc((void **)&x, n * sizeof(float)));
  OK("malloc_y", real_malloc((void **)&y, n * sizeof(float)));
  OK("memset_x", cudaMemset(x, 0, n * sizeof(float)));
  scale<<<(n + 255) / 256, 256>>>(x, n, 2.0f);
  OK("launch_scale", cudaGetLastError());
  axpy<<<(n + 255) / 256, 256, 256 * sizeof(float)>>>(y, x, n, 3.0f);
  OK("launch_axpy", cudaGetLastError());
  OK("sync", cudaDeviceSynchronize());

  /* Launch errors: caught, reported once, and the program goes on. */
  /* (Which code names these is the driver's and the runtime's business: a real H100 is said to
   * answer cudaErrorInvalidConfiguration to too many threads; only the refusal is checked.) */
  scale<<<1, 4096>>>(x, n, 1.0f);
  cudaError_t e = cudaGetLastError();
  CHECK("too_many_threads_refused", e != cudaSuccess);
  FACT("too_many_threads", "%s", cudaGetErrorName(e));
  axpy<<<1, 256, 1 << 30>>>(y, x, n, 1.0f);
  e = cudaGetLastError();
  CHECK("too_much_shared_refused", e != cudaSuccess);
  FACT("too_much_shared", "%s", cudaGetErrorName(e));
  EXPECT("cleared", cudaGetLastError(), cudaSuccess);
  scale<<<1, 256>>>(x, 256, 1.0f);
  OK("launch_after_errors", cudaGetLastError());

  cudaFuncAttributes fa;
  OK("func_attributes", cudaFuncGetAttributes(&fa, scale));
  FACT("scale_max_threads", "%d", fa.maxThreadsPerBlock);
  int blocks = 0;
  OK("occupancy", cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, scale, 256, 0));
  FACT("scale_blocks_per_sm", "%d", blocks);

  /* Kernels queued on a stream over blocks that are then freed without waiting, and blocks
   * allocated again until the device is full: none may come back while its kernel is queued. */
  cudaStream_t s;
  OK("stream", cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  static float *blk[4096];
  const size_t bn = 2 * MiB / sizeof(float);
  int k = 0, launched = 1;
  while (k < 4096 && real_malloc((void **)&blk[k], bn * sizeof(float)) == cudaSuccess) {
    scale<<<(unsigned)((bn + 255) / 256), 256, 0, s>>>(blk[k], (int)bn, 0.5f);
    launched &= cudaGetLastError() == cudaSuccess;
    k++;
  }
  cudaGetLastError();
  CAPFACT("blocks", "%d", k);
  CHECK("every_launch_accepted", launched);
  int freed = 1;
  for (int i = 0; i < k; i++) {
    freed &= cudaFree(blk[i]) == cudaSuccess;
  }
  CHECK("freed_while_queued", freed);
  int again = 0;
  while (again < k && real_malloc((void **)&blk[again], bn * sizeof(float)) == cudaSuccess) {
    again++;
  }
  cudaGetLastError();
  CHECK("as_many_again", again == k);
  for (int i = 0; i < again; i++) {
    cudaFree(blk[i]);
  }
  OK("stream_sync", cudaStreamSynchronize(s));
  OK("stream_destroy", cudaStreamDestroy(s));
  OK("free_x", cudaFree(x));
  OK("free_y", cudaFree(y));
  real_over_cap("over", total);
  OK("final_sync", cudaDeviceSynchronize());
  return real_end();
}
