/* TAP checks of the fake driver's own device memory (fk_driver.c, fk_mem.c's pages), from the
 * figures a program and NVML see: cuMemGetInfo_v2 and fakecudaDeviceUsage (what the fake NVML
 * lists for the process). test_driver.sh runs it once per setting:
 *
 *   driver_check model [CUBIN]  the defaults: contexts, limits, pages, modules; with CUBIN (nvcc's
 *                               deep.cu) a launch that needs a deeper stack
 *   driver_check full           FAKECUDA_MEMORY too small for a context: creation is refused
 *   driver_check off            FAKECUDA_DRIVER_MEMORY=off: none of it
 *   driver_check custom         FAKECUDA_CONTEXT_MEMORY=0, FAKECUDA_PAGE_SIZE=64KiB
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/fakecuda/testlib.h"
#include "tests/tap.h"

#define KiB ((size_t)1 << 10)
#define THREADS ((size_t)132 * 2048)   /* an H100's resident threads: 132 SMs x 2048 */
#define CONTEXT ((size_t)128 * MiB)    /* FAKECUDA_CONTEXT_MEMORY's default */
#define LIMITS ((size_t)(1 + 8) * MiB) /* the printf FIFO and heap limits' defaults */
#define PAGE ((size_t)2 * MiB)

/* What the process holds on device 0, as the fake NVML lists it. */
static size_t held(void) {
  size_t used = 0;
  int contexts = 0;
  return fakecudaDeviceUsage(0, &used, &contexts) == CUDA_SUCCESS ? used : (size_t)-1;
}

/* The file's bytes (owned by the caller) and their count, or NULL. */
static void *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *buf = malloc(4 << 20);
  *len = f && buf ? fread(buf, 1, (4 << 20) - 1, f) : 0;
  if (f) {
    fclose(f);
  }
  if (*len == 0) {
    free(buf);
    return NULL;
  }
  buf[*len] = '\0';
  return buf;
}

/* Allocations held in 2 MiB pages: large ones alone, page-aligned; small ones packed. */
static void pages(size_t base) {
  CUdeviceptr tiny, small, big, mid, other;
  CK(cuMemAlloc_v2(&tiny, 1));
  TAP_EQ(held(), base + PAGE, "1 byte takes a whole page");
  TAP_EQ(used(), base + PAGE, "... which cuMemGetInfo shows too");
  CK(cuMemAlloc_v2(&small, KiB));
  TAP_EQ(held(), base + PAGE, "1 KiB more is packed into the same page");
  CK(cuMemAlloc_v2(&big, 3 * MiB));
  TAP_EQ(held(), base + 3 * PAGE, "3 MiB takes two pages of its own");
  TAP_EQ(big % PAGE, 0, "... page-aligned");
  CK(cuMemAlloc_v2(&mid, 1536 * KiB));
  TAP_EQ(held(), base + 3 * PAGE, "1.5 MiB fits in the shared page's room");
  CK(cuMemAlloc_v2(&other, MiB));
  TAP_EQ(held(), base + 4 * PAGE, "1 MiB more does not, and takes a new shared page");
  TAP_EQ(other / PAGE, (other + MiB - 1) / PAGE, "... never straddling two pages");
  CK(cuMemFree_v2(tiny));
  CK(cuMemFree_v2(small));
  TAP_EQ(held(), base + 4 * PAGE, "a page stays while an allocation lies in it");
  CK(cuMemFree_v2(mid));
  TAP_EQ(held(), base + 3 * PAGE, "... and goes with its last");
  CK(cuMemFree_v2(big));
  CK(cuMemFree_v2(other));
  TAP_EQ(held(), base, "every page given back");
}

/* The stack, FIFO and heap limits size the driver's reservations. */
static void limits(size_t base) {
  size_t v = 0;
  CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4 * KiB));
  TAP_EQ(held(), base + 3 * KiB * THREADS, "a 4 KiB stack reserves 3 KiB more per resident thread");
  CK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
  TAP_EQ(v, 4 * KiB, "... and is the limit");
  TAP_EQ(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, MiB), CUDA_ERROR_OUT_OF_MEMORY,
         "a 1 MiB stack (264 GiB of local memory) does not fit: out of memory");
  CK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
  TAP_EQ(v, 4 * KiB, "... the limit unchanged");
  TAP_EQ(held(), base + 3 * KiB * THREADS, "... and the reservation");
  CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, KiB));
  TAP_EQ(held(), base, "lowering the stack gives the local memory back");
  CK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 64 * MiB));
  CK(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 2 * MiB));
  TAP_EQ(held(), base + 56 * MiB + MiB, "a 64 MiB heap and a 2 MiB FIFO are reserved");
  CK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 8 * MiB));
  CK(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, MiB));
  TAP_EQ(held(), base, "... and given back at their defaults");
}

/* A module's code, and a launch of a kernel whose threads need 16 KiB of stack. */
static void module(size_t base, const char *cubin) {
  size_t len = 0, v = 0;
  void *image = cubin ? slurp(cubin, &len) : NULL;
  if (image == NULL) {
    tap_skip("a module's code and a deep launch", "no cubin of deep.cu (no nvcc)");
    return;
  }
  CUmodule m;
  CUfunction f;
  CK(cuModuleLoadData(&m, image));
  size_t code = (len + 511) / 512 * 512;
  TAP_EQ(held(), base + code, "the module's image takes its size (%zu bytes)", len);
  CK(cuModuleGetFunction(&f, m, "deep"));
  int local = 0;
  CK(cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f));
  tap_ok(local > (int)KiB, "deep needs %d bytes of stack per thread", local);
  CUdeviceptr a;
  CK(cuMemAlloc_v2(&a, 16 * KiB));
  int i = 3;
  void *args[] = {&a, &i};
  CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
  CK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
  size_t stack = ((size_t)local + 15) / 16 * 16;
  TAP_EQ(v, stack, "the launch raised the stack limit to the kernel's need");
  TAP_EQ(held(), base + code + PAGE + (stack - KiB) * THREADS,
         "... reserving its local memory for every resident thread");
  CK(cuCtxSynchronize());
  CK(cuMemFree_v2(a));
  CK(cuModuleUnload(m));
  CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, KiB));
  TAP_EQ(held(), base, "unloading and lowering the stack give it all back");
  free(image);
}

static int model(const char *cubin) {
  const size_t context = CONTEXT + KiB * THREADS + LIMITS;
  CK(cuInit(0));
  TAP_EQ(held(), 0, "no context, no memory");
  CUcontext primary, created;
  CK(cuDevicePrimaryCtxRetain(&primary, 0));
  TAP_EQ(held(), context, "a context holds %zu MiB (128 MiB + 264 MiB of local memory + 9 MiB)",
         context / MiB);
  CK(cuCtxSetCurrent(primary));
  TAP_EQ(used(), context, "... in cuMemGetInfo_v2");
  pages(context);
  limits(context);
  module(context, cubin);
  CK(cuCtxCreate_v2(&created, 0, 0));
  TAP_EQ(held(), 2 * context, "a second context costs as much");
  CK(cuCtxDestroy_v2(created));
  TAP_EQ(held(), context, "destroying it gives its memory back");
  CK(cuDevicePrimaryCtxReset(0));
  TAP_EQ(held(), 0, "a reset gives the primary context's back");
  CK(cuDevicePrimaryCtxRetain(&primary, 0));
  TAP_EQ(held(), context, "retaining it again takes it again");
  CK(cuDevicePrimaryCtxRelease(0));
  CK(cuDevicePrimaryCtxRelease(0));
  TAP_EQ(held(), 0, "the last release gives it back");
  return tap_done();
}

static int full(void) {
  CUcontext c;
  CK(cuInit(0));
  TAP_EQ(cuDevicePrimaryCtxRetain(&c, 0), CUDA_ERROR_OUT_OF_MEMORY,
         "a device smaller than a context: retaining its primary context is out of memory");
  TAP_EQ(cuCtxCreate_v2(&c, 0, 0), CUDA_ERROR_OUT_OF_MEMORY, "... and so is creating one");
  TAP_EQ(held(), 0, "nothing is held");
  CUcontext cur = (CUcontext)1;
  CK(cuCtxGetCurrent(&cur));
  tap_ok(cur == NULL, "no context was made current");
  return tap_done();
}

static int off(void) {
  CUcontext c;
  CUdeviceptr p;
  CK(cuInit(0));
  CK(cuDevicePrimaryCtxRetain(&c, 0));
  CK(cuCtxSetCurrent(c));
  TAP_EQ(held(), 0, "FAKECUDA_DRIVER_MEMORY=off: a context holds nothing");
  CK(cuMemAlloc_v2(&p, 1));
  TAP_EQ(held(), 512, "... and 1 byte takes 512");
  CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 64 * KiB));
  TAP_EQ(held(), 512, "... and the stack limit reserves nothing");
  CK(cuMemFree_v2(p));
  return tap_done();
}

static int custom(void) {
  CUcontext c;
  CUdeviceptr p;
  CK(cuInit(0));
  CK(cuDevicePrimaryCtxRetain(&c, 0));
  CK(cuCtxSetCurrent(c));
  TAP_EQ(held(), KiB * THREADS + LIMITS,
         "FAKECUDA_CONTEXT_MEMORY=0: local memory, FIFO and heap only");
  CK(cuMemAlloc_v2(&p, 1));
  TAP_EQ(held(), KiB * THREADS + LIMITS + 64 * KiB,
         "FAKECUDA_PAGE_SIZE=64KiB: 1 byte takes 64 KiB");
  CK(cuMemFree_v2(p));
  return tap_done();
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "model") == 0) {
    return model(argc > 2 ? argv[2] : NULL);
  }
  if (strcmp(mode, "full") == 0) {
    return full();
  }
  if (strcmp(mode, "off") == 0) {
    return off();
  }
  if (strcmp(mode, "custom") == 0) {
    return custom();
  }
  printf("Bail out! usage: driver_check model [CUBIN] | full | off | custom\n");
  return 1;
}
