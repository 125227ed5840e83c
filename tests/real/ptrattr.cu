/* cudaPointerGetAttributes on every kind of memory a program holds: device memory (at its start
 * and inside it), pinned, mapped and managed memory, ordinary host memory, and device memory
 * the program has freed (then it is ordinary memory to the runtime, as before it was
 * allocated). */
#include "tests/real/real.h"

static void attrs(const char *name, const void *p, const void *base) {
  cudaPointerAttributes a;
  memset(&a, 0x5c, sizeof a);
  char key[64];
  snprintf(key, sizeof key, "%s_rc", name);
  OK(key, cudaPointerGetAttributes(&a, p));
  long dp =
      a.devicePointer == NULL ? -1 : (long)((const char *)a.devicePointer - (const char *)base);
  long hp = a.hostPointer == NULL ? -1 : (long)((const char *)a.hostPointer - (const char *)base);
  printf("%s=type %d device %d devptr %+ld hostptr %+ld\n", name, (int)a.type, a.device, dp, hp);
}

int main(void) {
  void *d = NULL, *pinned = NULL, *mapped = NULL, *managed = NULL, *gone = NULL;
  OK("malloc", real_malloc(&d, 3 * MiB));
  OK("malloc_host", cudaMallocHost(&pinned, MiB));
  OK("host_alloc_mapped", cudaHostAlloc(&mapped, MiB, cudaHostAllocMapped));
  OK("managed", cudaMallocManaged(&managed, MiB));
  OK("malloc_then_free", real_malloc(&gone, MiB));
  OK("free", cudaFree(gone));
  char *plain = (char *)malloc(4096);
  attrs("device", d, d);
  attrs("device_inside", (char *)d + 4096 + 7, d);
  attrs("device_last_byte", (char *)d + 3 * MiB - 1, d);
  attrs("pinned", pinned, pinned);
  attrs("mapped", mapped, mapped);
  attrs("managed", managed, managed);
  attrs("pageable", plain, plain);
  attrs("freed_device", gone, gone);
  OK("free_device", cudaFree(d));
  attrs("freed_again", d, d);
  OK("free_host", cudaFreeHost(pinned));
  OK("free_mapped", cudaFreeHost(mapped));
  OK("free_managed", cudaFree(managed));
  free(plain);
  return real_end();
}
