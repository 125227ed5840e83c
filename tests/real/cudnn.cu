/* cuDNN: a handle, a 2D convolution forward pass with the algorithm cuDNN picks and the
 * workspace it asks for (allocated by the program), on a stream of the program's own, and a
 * handle asked for when the device is full. The fake runs no device code: statuses, workspace
 * sizes and queued work are checked, never the convolution's result. */
#include <cudnn.h>

#include "tests/real/real.h"

static void dnn(const char *name, cudnnStatus_t st, cudnnStatus_t want) {
  real_status(name, st, want, cudnnGetErrorString(st));
}
#define DNN(name, call) dnn((name), (call), CUDNN_STATUS_SUCCESS)

int main(void) {
  size_t total = real_total("start");
  FACT("cudnn_version", "%zu", cudnnGetVersion());
  cudnnHandle_t h;
  DNN("create", cudnnCreate(&h));
  cudaStream_t s;
  OK("stream", cudaStreamCreate(&s));
  DNN("set_stream", cudnnSetStream(h, s));
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  DNN("x_desc", cudnnCreateTensorDescriptor(&xd));
  DNN("y_desc", cudnnCreateTensorDescriptor(&yd));
  DNN("w_desc", cudnnCreateFilterDescriptor(&wd));
  DNN("conv_desc", cudnnCreateConvolutionDescriptor(&cd));
  const int N = 8, C = 16, H = 32, W = 32, K = 32;
  DNN("x_set", cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
  DNN("w_set", cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, 3, 3));
  DNN("conv_set", cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                                  CUDNN_DATA_FLOAT));
  int on = 0, oc = 0, oh = 0, ow = 0;
  DNN("output_dim", cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &on, &oc, &oh, &ow));
  FACT("output", "%dx%dx%dx%d", on, oc, oh, ow);
  DNN("y_set", cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, on, oc, oh, ow));
  float *x = NULL, *w = NULL, *y = NULL;
  OK("malloc_x", real_malloc((void **)&x, (size_t)N * C * H * W * sizeof(float)));
  OK("malloc_w", real_malloc((void **)&w, (size_t)K * C * 9 * sizeof(float)));
  OK("malloc_y", real_malloc((void **)&y, (size_t)on * oc * oh * ow * sizeof(float)));
  OK("memset_x", cudaMemsetAsync(x, 0, (size_t)N * C * H * W * sizeof(float), s));
  cudnnConvolutionFwdAlgoPerf_t perf[8];
  int found = 0;
  DNN("get_algorithm", cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, 8, &found, perf));
  CHECK("an_algorithm", found > 0);
  cudnnConvolutionFwdAlgo_t algo = perf[0].algo;
  FACT("algorithm", "%d", (int)algo);
  size_t wsz = 0;
  DNN("workspace_size", cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, algo, &wsz));
  FACT("workspace_bytes", "%zu", wsz);
  void *ws = NULL;
  if (wsz > 0) {
    OK("malloc_workspace", real_malloc(&ws, wsz));
  }
  const float one = 1.0f, zero = 0.0f;
  DNN("forward", cudnnConvolutionForward(h, &one, xd, x, wd, w, cd, algo, ws, wsz, &zero, yd, y));
  OK("stream_sync", cudaStreamSynchronize(s));
  DNN("destroy", cudnnDestroy(h));
  OK("free_workspace", cudaFree(ws));

  /* Full: what a handle needs in device memory, if anything, is not there; after room it is. */
  static void *ballast[8192];
  int nb = real_ballast(ballast, 8192);
  cudnnStatus_t st = cudnnCreate(&h);
  FACT("create_when_full", "%s", cudnnGetErrorString(st));
  if (st == CUDNN_STATUS_SUCCESS) {
    cudnnDestroy(h);
  }
  cudaGetLastError();
  real_ballast_free(ballast, nb);
  DNN("create_after_room", cudnnCreate(&h));
  DNN("destroy_after_room", cudnnDestroy(h));
  DNN("x_destroy", cudnnDestroyTensorDescriptor(xd));
  DNN("y_destroy", cudnnDestroyTensorDescriptor(yd));
  DNN("w_destroy", cudnnDestroyFilterDescriptor(wd));
  DNN("conv_destroy", cudnnDestroyConvolutionDescriptor(cd));
  OK("free_x", cudaFree(x));
  OK("free_w", cudaFree(w));
  OK("free_y", cudaFree(y));
  OK("stream_destroy", cudaStreamDestroy(s));
  real_over_cap("over", total);
  return real_end();
}
