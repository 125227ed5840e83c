/* badpool: a deliberately wrong allocator, preloaded in place of gpucap to prove that the
 * integrity and memcheck checks can fail. BADPOOL=reuse hands a freed block to the next request
 * of a size it fits at once, without waiting for the device work still using it (what a pool
 * must never do); BADPOOL=overlap hands out the previous block again every 16th allocation;
 * BADPOOL=leak loses 64 bytes of host memory per allocation. It interposes
 * only cuMemAlloc_v2 and cuMemFree_v2 (and cuMemFreeAsync) and forwards the rest to the driver.
 * Single lock; test use only.
 */
#include "shim/base/cudadefs.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

enum { KEEP = 64 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  CUdeviceptr ptr;
  size_t size;
} kept[KEEP], live[4096];
static int nkept, nlive;
static CUdeviceptr last, ghosts[4096];
static int nghosts;
static unsigned long count;

static CUresult (*next_alloc)(CUdeviceptr *, size_t);
static CUresult (*next_free)(CUdeviceptr);

static void init(void) {
  if (!next_alloc) {
    *(void **)&next_alloc = dlsym(RTLD_NEXT, "cuMemAlloc_v2");
    *(void **)&next_free = dlsym(RTLD_NEXT, "cuMemFree_v2");
  }
}

static int mode_is(const char *m) {
  const char *v = getenv("BADPOOL");
  return v && strcmp(v, m) == 0;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) {
  init();
  if (mode_is("leak")) {
    char *lost = malloc(64);
    if (lost != NULL) {
      lost[0] = 1; /* the only pointer to it is dropped here */
    }
  }
  pthread_mutex_lock(&lock);
  if (dptr && mode_is("reuse")) {
    for (int i = 0; i < nkept; i++) {
      if (kept[i].size >= bytes) {
        *dptr = kept[i].ptr;
        live[nlive].ptr = kept[i].ptr;
        live[nlive++].size = kept[i].size;
        kept[i] = kept[--nkept];
        pthread_mutex_unlock(&lock);
        return CUDA_SUCCESS;
      }
    }
  }
  if (dptr && mode_is("overlap") && last && ++count % 16 == 0 && nghosts < 4096) {
    *dptr = last;
    ghosts[nghosts++] = last;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&lock);
  CUresult rc = next_alloc(dptr, bytes);
  pthread_mutex_lock(&lock);
  if (rc == CUDA_SUCCESS && nlive < 4096) {
    live[nlive].ptr = *dptr;
    live[nlive++].size = bytes;
    last = *dptr;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  init();
  pthread_mutex_lock(&lock);
  for (int i = 0; i < nghosts; i++) {
    if (ghosts[i] == dptr) { /* the second owner of an overlapping block */
      ghosts[i] = ghosts[--nghosts];
      pthread_mutex_unlock(&lock);
      return CUDA_SUCCESS;
    }
  }
  for (int i = 0; i < nlive; i++) {
    if (live[i].ptr == dptr) {
      if (mode_is("reuse") && nkept < KEEP) {
        kept[nkept++] = live[i];
        live[i] = live[--nlive];
        pthread_mutex_unlock(&lock);
        return CUDA_SUCCESS; /* "freed" at once, work still pending */
      }
      live[i] = live[--nlive];
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return next_free(dptr);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  (void)stream;
  return cuMemFree_v2(dptr);
}
