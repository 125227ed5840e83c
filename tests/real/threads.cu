/* Several host threads allocating, copying and freeing at once (built with
 * --default-stream per-thread, so each thread's default stream is its own and the runtime uses
 * the driver's per-thread entry points): every thread's bytes stay intact, and afterwards the
 * memory free at the start can be filled again (every byte came back). */
#include <pthread.h>

#include "tests/real/real.h"

enum { THREADS = 6, ROUNDS = 40 };
static int thread_ok[THREADS];

static void *worker(void *arg) {
  int id = (int)(long)arg, ok = 1;
  unsigned char host[8192], back[8192];
  for (int r = 0; r < ROUNDS; r++) {
    size_t n = 512 + (size_t)((id * 7919 + r * 104729) % 7680);
    void *p = NULL, *q = NULL;
    real_pattern(host, n, (unsigned)(id * 1000 + r));
    ok &= real_malloc(&p, n) == cudaSuccess;
    ok &= cudaMallocAsync(&q, n, 0) == cudaSuccess;
    ok &= cudaMemcpyAsync(p, host, n, cudaMemcpyHostToDevice, 0) == cudaSuccess;
    ok &= cudaMemcpyAsync(q, p, n, cudaMemcpyDeviceToDevice, 0) == cudaSuccess;
    ok &= cudaMemcpyAsync(back, q, n, cudaMemcpyDeviceToHost, 0) == cudaSuccess;
    ok &= cudaFreeAsync(q, 0) == cudaSuccess;
    ok &= cudaStreamSynchronize(0) == cudaSuccess;
    ok &= real_pattern_ok(back, n, (unsigned)(id * 1000 + r));
    ok &= cudaFree(p) == cudaSuccess;
  }
  thread_ok[id] = ok;
  return NULL;
}

int main(void) {
  size_t total = real_total("start");
  const size_t room = real_room();
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) {
    pthread_create(&t[i], NULL, worker, (void *)(long)i);
  }
  int all = 1;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    all &= thread_ok[i];
  }
  CHECK("every_thread_intact", all);
  OK("sync", cudaDeviceSynchronize());
  int after = real_fill("after", 4 * MiB, total);
  CHECK("whole_memory_after", (size_t)after == room / (4 * MiB));
  real_over_cap("over", total);
  return real_end();
}
