/* CUDA arrays: cudaMallocArray, cudaMalloc3DArray and cudaMallocMipmappedArray, 2D and 3D copies
 * into and out of them with the bytes intact, their descriptors, arrays filled to the refusal
 * and an array larger than the device refused (gpucap charges what the driver's free memory
 * drops by; docs/design.md). The array larger than the device is 3D, in 64 MiB layers of
 * 4096 x 4096 floats: within the extent limits of any device, however large its memory. */
#include "tests/real/real.h"

/* Arrays of 1024 floats a row, as many rows as bytes / 4 KiB. */
static cudaError_t array_alloc(void **p, size_t bytes) {
  cudaChannelFormatDesc f4 = cudaCreateChannelDesc<float>();
  return cudaMallocArray((cudaArray_t *)p, &f4, 1024, bytes / 4096);
}

static cudaError_t array_free(void *p) {
  return cudaFreeArray((cudaArray_t)p);
}

int main(void) {
  size_t total = real_total("start");
  cudaChannelFormatDesc f4 = cudaCreateChannelDesc<float>();
  const size_t w = 300, h = 200;
  float *host = (float *)malloc(w * h * sizeof(float)), *back = (float *)calloc(w * h, 4);
  real_pattern((unsigned char *)host, w * h * sizeof(float), 11);
  cudaArray_t a = NULL;
  OK("malloc_array", cudaMallocArray(&a, &f4, w, h));
  OK("copy_to_array", cudaMemcpy2DToArray(a, 0, 0, host, w * sizeof(float), w * sizeof(float), h,
                                          cudaMemcpyHostToDevice));
  OK("copy_from_array", cudaMemcpy2DFromArray(back, w * sizeof(float), a, 0, 0, w * sizeof(float),
                                              h, cudaMemcpyDeviceToHost));
  CHECK("array_intact", memcmp(host, back, w * h * sizeof(float)) == 0);
  /* Device memory to array and back through a pitched allocation. */
  void *p = NULL;
  size_t pitch = 0;
  OK("malloc_pitch", cudaMallocPitch(&p, &pitch, w * sizeof(float), h));
  OK("copy_array_to_device",
     cudaMemcpy2DFromArray(p, pitch, a, 0, 0, w * sizeof(float), h, cudaMemcpyDeviceToDevice));
  memset(back, 0, w * h * sizeof(float));
  OK("copy_device_to_host",
     cudaMemcpy2D(back, w * sizeof(float), p, pitch, w * sizeof(float), h, cudaMemcpyDeviceToHost));
  CHECK("array_to_device_intact", memcmp(host, back, w * h * sizeof(float)) == 0);
  OK("copy_past_the_array_refused",
     cudaMemcpy2DToArray(a, 4, 0, host, w * sizeof(float), w * sizeof(float), h,
                         cudaMemcpyHostToDevice) == cudaErrorInvalidValue
         ? cudaSuccess
         : cudaErrorUnknown);
  cudaGetLastError();
  cudaChannelFormatDesc got;
  cudaExtent ext;
  unsigned int flags = 0;
  OK("array_info", cudaArrayGetInfo(&got, &ext, &flags, a));
  FACT("array_extent", "%zux%zux%zu", ext.width, ext.height, ext.depth);
  OK("free_array", cudaFreeArray(a));
  OK("free_pitch", cudaFree(p));

  /* 3D array: 64 x 32 x 8 floats, up and down with cudaMemcpy3D. */
  cudaExtent e3 = make_cudaExtent(64, 32, 8);
  cudaArray_t a3 = NULL;
  OK("malloc3d_array", cudaMalloc3DArray(&a3, &f4, e3));
  size_t n3 = 64 * 32 * 8 * sizeof(float);
  unsigned char *h3 = (unsigned char *)malloc(n3), *b3 = (unsigned char *)calloc(1, n3);
  real_pattern(h3, n3, 12);
  cudaPitchedPtr none = {};
  OK("copy3d_to_array", real_copy3d(make_cudaPitchedPtr(h3, 64 * sizeof(float), 64, 32), NULL, none,
                                    a3, e3, cudaMemcpyHostToDevice));
  OK("copy3d_from_array", real_copy3d(none, a3, make_cudaPitchedPtr(b3, 64 * sizeof(float), 64, 32),
                                      NULL, e3, cudaMemcpyDeviceToHost));
  CHECK("array3d_intact", memcmp(h3, b3, n3) == 0);
  OK("free3d_array", cudaFreeArray(a3));

  /* A mipmapped array and its levels. */
  cudaMipmappedArray_t mm = NULL;
  OK("malloc_mipmapped", cudaMallocMipmappedArray(&mm, &f4, make_cudaExtent(256, 256, 0), 4));
  cudaArray_t level = NULL;
  OK("mipmap_level", cudaGetMipmappedArrayLevel(&level, mm, 2));
  OK("level_info", cudaArrayGetInfo(&got, &ext, &flags, level));
  FACT("level_extent", "%zux%zu", ext.width, ext.height);
  OK("free_mipmapped", cudaFreeMipmappedArray(mm));

  /* Arrays of 4 MiB (1024 x 1024 floats) filled to the refusal. */
  real_fill_with("array", 4 * MiB, total, array_alloc, array_free);
  /* Layers of 64 MiB, more of them than the device holds. */
  cudaArray_t big = NULL;
  EXPECT("array_over_cap",
         cudaMalloc3DArray(&big, &f4, make_cudaExtent(4096, 4096, total / (64 * MiB) + 1)),
         cudaErrorMemoryAllocation);
  EXPECT("array_last_error", cudaGetLastError(), cudaErrorMemoryAllocation);
  OK("array_goes_on", cudaMallocArray(&a, &f4, 64, 64));
  OK("array_goes_on_free", cudaFreeArray(a));
  free(host);
  free(back);
  free(h3);
  free(b3);
  return real_end();
}
