/* Stream-ordered allocation: cudaMallocAsync / cudaFreeAsync on a stream with the bytes intact
 * through asynchronous copies, the device's default pool and its attributes, a pool of the
 * program's own (cudaMemPoolCreate, cudaMallocFromPoolAsync, a size limit, made the device's
 * current pool), trimming, stream-ordered allocations filled to the refusal, and one larger
 * than the device refused. */
#include "tests/real/real.h"

static unsigned long long attr(cudaMemPool_t pool, cudaMemPoolAttr a) {
  unsigned long long v = 0;
  cudaMemPoolGetAttribute(pool, a, &v);
  return v;
}

/* Stream-ordered allocations on one stream, each claimed. */
static cudaStream_t stream;

static cudaError_t async_alloc(void **p, size_t bytes) {
  cudaError_t e = cudaMallocAsync(p, bytes, stream);
  if (e == cudaSuccess) {
    real_claim(*p, bytes);
  }
  return e;
}

static cudaError_t async_free(void *p) {
  return cudaFreeAsync(p, stream);
}

int main(void) {
  size_t total = real_total("start");
  cudaStream_t s;
  OK("stream", cudaStreamCreate(&s));
  const size_t n = 2 * MiB + 77;
  unsigned char *host, *back;
  OK("host_buffers", cudaMallocHost((void **)&host, 2 * n));
  back = host + n;
  real_pattern(host, n, 5);
  void *a = NULL, *b = NULL;
  OK("malloc_async_a", cudaMallocAsync(&a, n, s));
  OK("malloc_async_b", cudaMallocAsync(&b, n, s));
  OK("copy_async_h2d", cudaMemcpyAsync(a, host, n, cudaMemcpyHostToDevice, s));
  OK("copy_async_d2d", cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s));
  OK("copy_async_d2h", cudaMemcpyAsync(back, b, n, cudaMemcpyDeviceToHost, s));
  OK("free_async_a", cudaFreeAsync(a, s));
  OK("free_async_b", cudaFreeAsync(b, s));
  OK("sync", cudaStreamSynchronize(s));
  CHECK("async_intact", real_pattern_ok(back, n, 5));

  cudaMemPool_t def = NULL, cur = NULL;
  OK("default_pool", cudaDeviceGetDefaultMemPool(&def, 0));
  OK("current_pool", cudaDeviceGetMemPool(&cur, 0));
  CHECK("current_is_default", cur == def);
  FACT("default_threshold", "%llu", attr(def, cudaMemPoolAttrReleaseThreshold));
  OK("malloc_async_c", cudaMallocAsync(&a, 3 * MiB, s));
  FACT("default_used", "%llu", attr(def, cudaMemPoolAttrUsedMemCurrent));
  cudaPointerAttributes pa;
  OK("pointer_attributes", cudaPointerGetAttributes(&pa, a));
  FACT("pointer_type", "%d", (int)pa.type);
  OK("free_async_c", cudaFreeAsync(a, s));
  OK("sync_c", cudaStreamSynchronize(s));
  FACT("default_used_after", "%llu", attr(def, cudaMemPoolAttrUsedMemCurrent));
  FACT("default_reserved_after", "%llu", attr(def, cudaMemPoolAttrReservedMemCurrent));
  EXPECT("destroy_default", cudaMemPoolDestroy(def), cudaErrorInvalidValue);
  cudaGetLastError();

  /* A pool of the program's own, limited to 8 MiB. */
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  props.maxSize = 8 * MiB;
  cudaMemPool_t mine = NULL;
  OK("pool_create", cudaMemPoolCreate(&mine, &props));
  unsigned long long keep = 4 * MiB;
  OK("pool_threshold", cudaMemPoolSetAttribute(mine, cudaMemPoolAttrReleaseThreshold, &keep));
  void *c = NULL, *d = NULL;
  OK("from_pool", cudaMallocFromPoolAsync(&c, 6 * MiB, mine, s));
  EXPECT("from_pool_past_max_size", cudaMallocFromPoolAsync(&d, 4 * MiB, mine, s),
         cudaErrorMemoryAllocation);
  cudaGetLastError();
  OK("from_pool_copy", cudaMemcpyAsync(c, host, n, cudaMemcpyHostToDevice, s));
  memset(back, 0, n);
  OK("from_pool_copy_back", cudaMemcpyAsync(back, c, n, cudaMemcpyDeviceToHost, s));
  OK("from_pool_free", cudaFreeAsync(c, s));
  OK("from_pool_sync", cudaStreamSynchronize(s));
  CHECK("from_pool_intact", real_pattern_ok(back, n, 5));
  FACT("pool_used", "%llu", attr(mine, cudaMemPoolAttrUsedMemCurrent));
  FACT("pool_used_high", "%llu", attr(mine, cudaMemPoolAttrUsedMemHigh));
  FACT("pool_reserved_kept", "%llu", attr(mine, cudaMemPoolAttrReservedMemCurrent));
  OK("pool_trim", cudaMemPoolTrimTo(mine, 0));
  FACT("pool_reserved_trimmed", "%llu", attr(mine, cudaMemPoolAttrReservedMemCurrent));
  OK("set_current", cudaDeviceSetMemPool(0, mine));
  OK("malloc_async_current", cudaMallocAsync(&d, MiB, s));
  FACT("current_pool_used", "%llu", attr(mine, cudaMemPoolAttrUsedMemCurrent));
  CHECK("from_current_pool", attr(mine, cudaMemPoolAttrUsedMemCurrent) == MiB);
  OK("free_async_current", cudaFreeAsync(d, s));
  OK("pool_destroy", cudaMemPoolDestroy(mine));
  OK("current_back_to_default", cudaDeviceGetMemPool(&cur, 0));
  CHECK("destroyed_pool_not_current", cur == def);
  OK("sync_destroy", cudaStreamSynchronize(s));

  /* Stream-ordered allocations filled to the refusal, and one larger than the device. */
  stream = s;
  real_fill_with("async", 8 * MiB, total, async_alloc, async_free);
  OK("async_fill_sync", cudaStreamSynchronize(s));
  EXPECT("async_over_cap", cudaMallocAsync(&a, total + 4 * MiB, s), cudaErrorMemoryAllocation);
  EXPECT("async_last_error", cudaGetLastError(), cudaErrorMemoryAllocation);
  OK("async_goes_on", cudaMallocAsync(&a, MiB, s));
  OK("async_goes_on_free", cudaFreeAsync(a, s));
  OK("final_sync", cudaStreamSynchronize(s));
  OK("stream_destroy", cudaStreamDestroy(s));
  OK("host_free", cudaFreeHost(host));
  return real_end();
}
