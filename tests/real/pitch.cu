/* cudaMallocPitch and cudaMalloc3D: the pitch the runtime hands out, 2D and 3D copies and
 * memsets through the pitch with the bytes intact, pitched allocations filled to the
 * refusal, and a pitched allocation larger than the device refused. */
#include "tests/real/real.h"

/* 2048 rows of 4000 bytes: 8 MiB at the driver's pitch. */
static cudaError_t pitch_rows(void **p, size_t bytes) {
  size_t pitch = 0;
  return cudaMallocPitch(p, &pitch, 4000, bytes / 4096);
}

int main(void) {
  size_t total = real_total("start");
  const size_t w = 1000, h = 300;
  unsigned char *host = (unsigned char *)malloc(w * h), *back = (unsigned char *)calloc(w, h);
  real_pattern(host, w * h, 3);
  void *p = NULL;
  size_t pitch = 0;
  OK("malloc_pitch", cudaMallocPitch(&p, &pitch, w, h));
  real_claim(p, pitch * h);
  FACT("pitch", "%zu", pitch);
  CHECK("pitch_covers_row", pitch >= w && pitch % 256 == 0);
  OK("copy2d_h2d", cudaMemcpy2D(p, pitch, host, w, w, h, cudaMemcpyHostToDevice));
  OK("copy2d_d2h", cudaMemcpy2D(back, w, p, pitch, w, h, cudaMemcpyDeviceToHost));
  CHECK("copy2d_intact", memcmp(host, back, w * h) == 0);
  void *q = NULL;
  size_t qpitch = 0;
  OK("malloc_pitch_q", cudaMallocPitch(&q, &qpitch, w, h));
  OK("copy2d_d2d", cudaMemcpy2D(q, qpitch, p, pitch, w, h, cudaMemcpyDeviceToDevice));
  memset(back, 0, w * h);
  OK("copy2d_d2d_back", cudaMemcpy2D(back, w, q, qpitch, w, h, cudaMemcpyDeviceToHost));
  CHECK("copy2d_d2d_intact", memcmp(host, back, w * h) == 0);
  OK("memset2d", cudaMemset2D(p, pitch, 0x11, w / 2, h));
  OK("memset2d_back", cudaMemcpy2D(back, w, p, pitch, w, h, cudaMemcpyDeviceToHost));
  int ok = 1;
  for (size_t y = 0; y < h; y++) {
    for (size_t x = 0; x < w; x++) {
      ok &= back[y * w + x] == (x < w / 2 ? 0x11 : host[y * w + x]);
    }
  }
  CHECK("memset2d_only_the_columns", ok);
  OK("free_p", cudaFree(p));
  OK("free_q", cudaFree(q));

  /* 3D: 200 x 20 x 10 bytes. */
  cudaExtent ext = make_cudaExtent(200, 20, 10);
  cudaPitchedPtr pp;
  OK("malloc3d", cudaMalloc3D(&pp, ext));
  real_claim(pp.ptr, pp.pitch * ext.height * ext.depth);
  FACT("pitch3d", "%zu", pp.pitch);
  size_t n3 = ext.width * ext.height * ext.depth;
  unsigned char *h3 = (unsigned char *)malloc(n3), *b3 = (unsigned char *)calloc(1, n3);
  real_pattern(h3, n3, 4);
  cudaPitchedPtr hp = make_cudaPitchedPtr(h3, ext.width, ext.width, ext.height);
  cudaPitchedPtr bp = make_cudaPitchedPtr(b3, ext.width, ext.width, ext.height);
  OK("copy3d_h2d", real_copy3d(hp, NULL, pp, NULL, ext, cudaMemcpyHostToDevice));
  OK("copy3d_d2h", real_copy3d(pp, NULL, bp, NULL, ext, cudaMemcpyDeviceToHost));
  CHECK("copy3d_intact", memcmp(h3, b3, n3) == 0);
  OK("memset3d", cudaMemset3D(pp, 0x22, make_cudaExtent(200, 20, 5)));
  OK("memset3d_back", real_copy3d(pp, NULL, bp, NULL, ext, cudaMemcpyDeviceToHost));
  ok = 1;
  for (size_t i = 0; i < n3; i++) {
    ok &= b3[i] == (i < n3 / 2 ? 0x22 : h3[i]);
  }
  CHECK("memset3d_only_the_slices", ok);
  OK("free3d", cudaFree(pp.ptr));

  /* Pitched rows filled to the refusal; one pitched allocation larger than the device. */
  real_fill_with("pitch", 4096 * 2048, total, pitch_rows, cudaFree);
  EXPECT("pitch_over_cap", cudaMallocPitch(&p, &pitch, 4096, total / 4096 + 1024),
         cudaErrorMemoryAllocation);
  EXPECT("pitch_last_error", cudaGetLastError(), cudaErrorMemoryAllocation);
  OK("pitch_goes_on", cudaMallocPitch(&p, &pitch, w, h));
  OK("pitch_goes_on_free", cudaFree(p));
  free(host);
  free(back);
  free(h3);
  free(b3);
  return real_end();
}
