/* cudaMalloc / cudaFree with cudaMemcpy and cudaMemset: bytes written to device memory come back
 * intact through host-to-device, device-to-device and device-to-host copies (the fake driver
 * keeps real bytes with FAKECUDA_BACKING=1); the device's memory is seen, filled to the
 * refusal and given back; an allocation larger than the device fails and the program goes on. */
#include "tests/real/real.h"

int main(void) {
  size_t total = real_total("start");
  const size_t n = 3 * MiB + 123;
  unsigned char *host = (unsigned char *)malloc(n), *back = (unsigned char *)malloc(n);
  void *a = NULL, *b = NULL;
  OK("malloc_a", real_malloc(&a, n));
  OK("malloc_b", real_malloc(&b, n));
  real_pattern(host, n, 1);
  OK("copy_h2d", cudaMemcpy(a, host, n, cudaMemcpyHostToDevice));
  OK("copy_d2d", cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
  memset(back, 0, n);
  OK("copy_d2h", cudaMemcpy(back, b, n, cudaMemcpyDeviceToHost));
  CHECK("intact_through_d2d", real_pattern_ok(back, n, 1));
  OK("copy_default", cudaMemcpy(back, a, n, cudaMemcpyDefault));
  CHECK("intact_default", real_pattern_ok(back, n, 1));
  OK("memset", cudaMemset(a, 0x5a, n));
  OK("copy_after_memset", cudaMemcpy(back, a, n, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    bad += back[i] != 0x5a;
  }
  CHECK("memset_seen", bad == 0);
  /* Many small allocations, each with its own bytes. */
  enum { SMALL = 200 };
  void *small[SMALL];
  int ok = 1;
  for (int i = 0; i < SMALL; i++) {
    unsigned char v[64];
    real_pattern(v, sizeof v, (unsigned)i);
    ok &= real_malloc(&small[i], 64 + (size_t)i * 40) == cudaSuccess &&
          cudaMemcpy(small[i], v, sizeof v, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  for (int i = 0; i < SMALL; i += 2) {
    ok &= cudaFree(small[i]) == cudaSuccess;
  }
  for (int i = 1; i < SMALL; i += 2) {
    unsigned char v[64];
    ok &= cudaMemcpy(v, small[i], sizeof v, cudaMemcpyDeviceToHost) == cudaSuccess &&
          real_pattern_ok(v, sizeof v, (unsigned)i);
    ok &= cudaFree(small[i]) == cudaSuccess;
  }
  CHECK("small_blocks_intact", ok);
  EXPECT("double_free", cudaFree(small[1]), cudaErrorInvalidValue);
  cudaGetLastError();
  OK("free_a", cudaFree(a));
  OK("free_b", cudaFree(b));
  OK("free_null", cudaFree(NULL));
  real_fill("fill", 8 * MiB, total);
  real_over_cap("over", total);
  free(host);
  free(back);
  return real_end();
}
