/* Two devices: cudaSetDevice selects where memory comes from, each device shows its own memory
 * (its own cap under gpucap), peer access and peer copies move bytes between them intact, each
 * device fills to its own refusal and refuses an allocation larger than itself while the other
 * goes on. */
#include "tests/real/real.h"

int main(void) {
  int count = 0;
  OK("device_count", cudaGetDeviceCount(&count));
  FACT("devices", "%d", count);
  if (count < 2) {
    return real_end() + 1;
  }
  size_t total[2];
  void *buf[2] = {0};
  const size_t n = 3 * MiB + 9;
  unsigned char *host = (unsigned char *)malloc(n), *back = (unsigned char *)calloc(1, n);
  for (int d = 0; d < 2; d++) {
    char key[32];
    OK(d ? "set_device_1" : "set_device_0", cudaSetDevice(d));
    snprintf(key, sizeof key, "dev%d", d);
    total[d] = real_total(key);
    OK(d ? "malloc_1" : "malloc_0", real_malloc(&buf[d], n));
    cudaPointerAttributes pa;
    OK(d ? "attributes_1" : "attributes_0", cudaPointerGetAttributes(&pa, buf[d]));
    printf("device_of_buffer_%d=%d\n", d, pa.device);
  }
  int can = 0;
  OK("can_access_peer", cudaDeviceCanAccessPeer(&can, 0, 1));
  FACT("can_access_peer_0_1", "%d", can);
  OK("set_device_0_again", cudaSetDevice(0));
  OK("enable_peer", cudaDeviceEnablePeerAccess(1, 0));
  real_pattern(host, n, 41);
  OK("copy_h2d_0", cudaMemcpy(buf[0], host, n, cudaMemcpyHostToDevice));
  OK("copy_peer", cudaMemcpyPeer(buf[1], 1, buf[0], 0, n));
  OK("set_device_1_again", cudaSetDevice(1));
  OK("copy_d2h_1", cudaMemcpy(back, buf[1], n, cudaMemcpyDeviceToHost));
  CHECK("peer_copy_intact", real_pattern_ok(back, n, 41));
  real_pattern(host, n, 42);
  OK("copy_h2d_1", cudaMemcpy(buf[1], host, n, cudaMemcpyHostToDevice));
  OK("copy_default_1_to_0", cudaMemcpy(buf[0], buf[1], n, cudaMemcpyDefault));
  OK("sync_1", cudaDeviceSynchronize());
  OK("set_device_0_third", cudaSetDevice(0));
  memset(back, 0, n);
  OK("copy_d2h_0", cudaMemcpy(back, buf[0], n, cudaMemcpyDeviceToHost));
  CHECK("uva_copy_intact", real_pattern_ok(back, n, 42));
  /* Each device alone: fill, refuse, go on. Device 1's fill while device 0 is full. */
  for (int d = 0; d < 2; d++) {
    char key[32];
    OK(d ? "set_device_1_fill" : "set_device_0_fill", cudaSetDevice(d));
    snprintf(key, sizeof key, "dev%d", d);
    real_fill(key, 4 * MiB, total[d]);
    snprintf(key, sizeof key, "dev%d_over", d);
    real_over_cap(key, total[d]);
    OK(d ? "free_1" : "free_0", cudaFree(buf[d]));
  }
  free(host);
  free(back);
  return real_end();
}
