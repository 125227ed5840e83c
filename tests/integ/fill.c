/* fill: one of several jobs sharing a GPU, each filling its device memory, for
 * tests/integ/overhead.sh. Linked with -lcuda (the fake driver), run with or without gpucap.
 *
 *   fill BLOCK STEP...   makes device 0's primary context current, as the CUDA runtime does,
 *                        then runs each STEP in order and prints one line for it:
 *     start        prints "ready", then waits for a line on stdin or its end (the signal that
 *                  lets several jobs go on together)
 *     fill         allocates BLOCK bytes at a time until one is refused: "fill rc=R blocks=K"
 *     alloc        one more block: "alloc rc=R"
 *     free         frees the last block: "free rc=R"
 *     stack:N      cuCtxSetLimit(CU_LIMIT_STACK_SIZE, N): "stack rc=R limit=L" (L as now set)
 *     module:N     loads a module whose image holds N bytes (PTX text): "module rc=R"
 *     unload       unloads it: "unload rc=R"
 *     info         cuMemGetInfo_v2: "info free=F total=T"
 *   Every line ends with " held=H": what the device holds for the process as the fake driver
 *   counts it (its fakecudaDeviceUsage, the figure the fake NVML lists: nvidia-smi's), the
 *   oracle outside gpucap. Exits 0 unless a step could not run at all.
 */
#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCKS_MAX 65536

static CUdeviceptr blocks[BLOCKS_MAX];
static int nblocks;

static unsigned long long held(void) {
  size_t used = 0;
  int contexts = 0;
  return fakecudaDeviceUsage(0, &used, &contexts) == CUDA_SUCCESS ? used : 0;
}

/* A PTX module of `bytes` bytes (one tiny kernel, then a comment to its size), NUL-terminated. */
static char *ptx_of(size_t bytes) {
  static const char head[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                             ".visible .entry pad() { ret; }\n// ";
  if (bytes < sizeof head + 1) {
    bytes = sizeof head + 1;
  }
  char *p = malloc(bytes + 1);
  if (p != NULL) {
    memcpy(p, head, sizeof head - 1);
    memset(p + sizeof head - 1, 'x', bytes - (sizeof head - 1));
    p[bytes - 1] = '\n';
    p[bytes] = '\0';
  }
  return p;
}

int main(int argc, char **argv) {
  CUcontext ctx;
  CUmodule mod = NULL;
  if (argc < 3 || cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS ||
      cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    fprintf(stderr, "fill: usage: fill BLOCK STEP... (or no device)\n");
    return 1;
  }
  size_t block = strtoull(argv[1], NULL, 10);
  for (int i = 2; i < argc; i++) {
    const char *s = argv[i];
    CUresult rc = CUDA_SUCCESS;
    if (strcmp(s, "start") == 0) {
      char line[16];
      printf("ready held=%llu\n", held());
      fflush(stdout);
      if (fgets(line, sizeof line, stdin) == NULL) {
        clearerr(stdin); /* the writer closed: that is the signal too */
      }
      continue;
    }
    if (strcmp(s, "fill") == 0 || strcmp(s, "alloc") == 0) {
      do {
        rc = nblocks < BLOCKS_MAX ? cuMemAlloc_v2(&blocks[nblocks], block) : CUDA_ERROR_UNKNOWN;
        nblocks += rc == CUDA_SUCCESS;
      } while (rc == CUDA_SUCCESS && s[0] == 'f');
      printf("%s rc=%d blocks=%d", s, (int)rc, nblocks);
    } else if (strcmp(s, "free") == 0) {
      rc = nblocks > 0 ? cuMemFree_v2(blocks[--nblocks]) : CUDA_ERROR_INVALID_VALUE;
      printf("free rc=%d", (int)rc);
    } else if (strncmp(s, "stack:", 6) == 0) {
      size_t limit = 0;
      rc = cuCtxSetLimit(CU_LIMIT_STACK_SIZE, strtoull(s + 6, NULL, 10));
      cuCtxGetLimit(&limit, CU_LIMIT_STACK_SIZE);
      printf("stack rc=%d limit=%zu", (int)rc, limit);
    } else if (strncmp(s, "module:", 7) == 0) {
      char *ptx = ptx_of(strtoull(s + 7, NULL, 10));
      rc = ptx ? cuModuleLoadData(&mod, ptx) : CUDA_ERROR_OUT_OF_MEMORY;
      free(ptx);
      printf("module rc=%d", (int)rc);
    } else if (strcmp(s, "unload") == 0) {
      rc = cuModuleUnload(mod);
      printf("unload rc=%d", (int)rc);
    } else if (strcmp(s, "info") == 0) {
      size_t f = 0, t = 0;
      rc = cuMemGetInfo_v2(&f, &t);
      printf("info free=%zu total=%zu", f, t);
    } else {
      fprintf(stderr, "fill: unknown step %s\n", s);
      return 1;
    }
    printf(" held=%llu\n", held());
    fflush(stdout);
  }
  return 0;
}
