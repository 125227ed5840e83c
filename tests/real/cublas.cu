/* cuBLAS: a handle (cuBLAS reserves its own workspace in device memory when it is created),
 * single-precision GEMMs with that workspace on the legacy stream, a stream of the program's
 * and the per-thread stream (cuBLAS finds the workspace of each stream through the driver's
 * private tools-context table), with a workspace of the program's own on a stream, and a handle
 * asked for when the device is full: cuBLAS answers its own allocation failure and the program
 * goes on once it has made room. The fake runs no device code: a GEMM's status, the device
 * work it queued (the fake's pending-work counter) and the memory it took are checked, never
 * its result. */
#include <cublas_v2.h>

#include "tests/real/real.h"

#define BLAS(name, call) blas((name), (call))
static void blas(const char *name, cublasStatus_t st) {
  real_status(name, st, CUBLAS_STATUS_SUCCESS, cublasGetStatusName(st));
}

static size_t free_now(const char *name) {
  size_t f = 0, t = 0;
  OK(name, cudaMemGetInfo(&f, &t));
  return f;
}

/* An SGEMM with cuBLAS's own workspace on stream s: it succeeds, queues device work, takes no
 * device memory beyond what cublasCreate reserved, and its work completes with the stream. */
static void own_workspace_gemm(const char *name, cublasHandle_t h, cudaStream_t s, int n,
                               const float *a, const float *b, float *c) {
  const float one = 1.0f, zero = 0.0f;
  char key[96];
  snprintf(key, sizeof key, "%s_set_stream", name);
  BLAS(key, cublasSetStream(h, s)); /* also drops any workspace the program had set */
  snprintf(key, sizeof key, "%s_free_before", name);
  size_t before = free_now(key);
  int pending = real_pending();
  BLAS(name, cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n));
  snprintf(key, sizeof key, "%s_free_after", name);
  size_t after = free_now(key);
  snprintf(key, sizeof key, "%s_takes_no_memory", name);
  real_check(key, after == before, "cudaMemGetInfo's free memory unchanged");
  real_queued_then_done(name, pending, s);
}

int main(void) {
  size_t total = real_total("start");
  const int n = 256;
  float *a = NULL, *b = NULL, *c = NULL;
  OK("malloc_a", real_malloc((void **)&a, n * n * sizeof(float)));
  OK("malloc_b", real_malloc((void **)&b, n * n * sizeof(float)));
  OK("malloc_c", real_malloc((void **)&c, n * n * sizeof(float)));
  float *host = (float *)malloc(n * n * sizeof(float));
  for (int i = 0; i < n * n; i++) {
    host[i] = (float)(i % 17) / 16.0f;
  }
  BLAS("set_matrix_a", cublasSetMatrix(n, n, sizeof(float), host, n, a, n));
  BLAS("set_matrix_b", cublasSetMatrix(n, n, sizeof(float), host, n, b, n));
  size_t f0 = 0, f1 = 0, t = 0;
  OK("info_before_create", cudaMemGetInfo(&f0, &t));
  cublasHandle_t h;
  BLAS("create", cublasCreate(&h));
  OK("info_after_create", cudaMemGetInfo(&f1, &t));
  FACT("create_takes_device_memory", "%d", f1 < f0);
  const float one = 1.0f, zero = 0.0f;
  /* With cuBLAS's own workspace: on the legacy stream, a stream of the program's, and the
   * per-thread stream. */
  cudaStream_t s;
  OK("stream", cudaStreamCreate(&s));
  own_workspace_gemm("sgemm_own_workspace", h, 0, n, a, b, c);
  own_workspace_gemm("sgemm_own_workspace_stream", h, s, n, a, b, c);
  own_workspace_gemm("sgemm_own_workspace_per_thread", h, cudaStreamPerThread, n, a, b, c);
  OK("sync_own_workspace", cudaDeviceSynchronize());
  /* With the program's workspace, on a stream of its own. */
  BLAS("set_stream", cublasSetStream(h, s));
  void *ws = NULL;
  const size_t wsz = 8 * MiB;
  OK("malloc_workspace", real_malloc(&ws, wsz));
  BLAS("set_workspace", cublasSetWorkspace(h, ws, wsz));
  BLAS("sgemm", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, n, n, n, &one, a, n, b, n, &zero, c, n));
  BLAS("sgemm_again",
       cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, c, n, a, n, &one, b, n));
  OK("stream_sync", cudaStreamSynchronize(s));
  BLAS("get_matrix", cublasGetMatrix(n, n, sizeof(float), c, n, host, n));
  BLAS("destroy", cublasDestroy(h));
  OK("stream_destroy", cudaStreamDestroy(s));

  /* Full: a handle cannot get its workspace; after making room it can. */
  static void *ballast[8192];
  int nb = real_ballast(ballast, 8192);
  cublasStatus_t st = cublasCreate(&h);
  printf("create_when_full=%s\n", cublasGetStatusName(st));
  CHECK("create_when_full_refused", st == CUBLAS_STATUS_ALLOC_FAILED);
  if (st == CUBLAS_STATUS_SUCCESS) {
    cublasDestroy(h);
  }
  cudaGetLastError();
  real_ballast_free(ballast, nb);
  BLAS("create_after_room", cublasCreate(&h));
  BLAS("set_workspace_after_room", cublasSetWorkspace(h, ws, wsz));
  BLAS("sgemm_after_room",
       cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n));
  OK("sync_after_room", cudaDeviceSynchronize());
  BLAS("destroy_after_room", cublasDestroy(h));
  OK("free_workspace", cudaFree(ws));
  OK("free_a", cudaFree(a));
  OK("free_b", cudaFree(b));
  OK("free_c", cudaFree(c));
  real_over_cap("over", total);
  free(host);
  return real_end();
}
