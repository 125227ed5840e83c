/* TAP checks of the fake driver's modules, libraries, kernels and launches over device code
 * that nvcc built from tests/fakecuda/module.cu (test_module.sh passes the files: a cubin, a
 * fat binary, the same zstd- and LZ4-compressed, PTX text, PTX-only for compute_80, and a
 * cubin for sm_80 alone). FAKECUDA_BACKING=1: variables hold their initial bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/fakecuda/testlib.h"
#include "tests/tap.h"

/* The whole file, NUL-terminated (owned by the caller), or exits. */
static void *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  char *buf = malloc(1 << 20);
  if (f == NULL || buf == NULL) {
    printf("Bail out! cannot read %s\n", path);
    exit(1);
  }
  size_t n = fread(buf, 1, (1 << 20) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* Every image of module.cu holds the same kernels and variables. */
static void contents(const char *what, CUmodule m) {
  CUfunction f;
  CK(cuModuleGetFunction(&f, m, "bounded"));
  TAP_EQ(cuModuleGetFunction(&f, m, "helper"), CUDA_ERROR_NOT_FOUND,
         "%s: a device function is not a kernel", what);
  TAP_EQ(cuModuleGetFunction(&f, m, "nope"), CUDA_ERROR_NOT_FOUND, "%s: an unknown name", what);
  unsigned count = 0;
  CK(cuModuleGetFunctionCount(&count, m));
  TAP_EQ(count, 4, "%s: four kernels", what);
  CUdeviceptr p;
  size_t bytes = 0;
  CK(cuModuleGetGlobal_v2(&p, &bytes, m, "table"));
  TAP_EQ(bytes, 400, "%s: table is 100 floats", what);
  CK(cuModuleGetGlobal_v2(&p, &bytes, m, "params"));
  TAP_EQ(bytes, 16, "%s: a __constant__ variable", what);
  TAP_EQ(cuModuleGetGlobal_v2(&p, &bytes, m, "missing"), CUDA_ERROR_NOT_FOUND,
         "%s: an unknown variable", what);
  size_t off = 0, size = 0;
  CK(cuModuleGetFunction(&f, m, "uses_helper"));
  CK(cuFuncGetParamInfo(f, 1, &off, &size));
  tap_ok(off == 8 && size == 8, "%s: uses_helper's double is at 8, 8 bytes", what);
  CK(cuFuncGetParamInfo(f, 2, &off, &size));
  tap_ok(off == 16 && size == 1, "%s: ... its char at 16, 1 byte", what);
  TAP_EQ(cuFuncGetParamInfo(f, 3, &off, &size), CUDA_ERROR_INVALID_VALUE, "%s: no fourth parameter",
         what);
}

static void cubin_details(CUmodule m) {
  CUfunction bounded, shared, dynamic;
  CK(cuModuleGetFunction(&bounded, m, "bounded"));
  CK(cuModuleGetFunction(&shared, m, "shared_user"));
  CK(cuModuleGetFunction(&dynamic, m, "dynamic_user"));
  int v = 0;
  CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, bounded));
  TAP_EQ(v, 256, "__launch_bounds__(256) limits the block");
  CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, shared));
  TAP_EQ(v, 4096, "static shared memory of shared_user");
  /* Its section holds only the reserved 1 KiB (no barrier: no .nv.info attribute 0x4c). */
  CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, dynamic));
  TAP_EQ(v, 0, "a kernel with only dynamic shared memory has no static shared memory");
  CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, bounded));
  tap_ok(v > 0 && v <= 255, "registers from the cubin: %d", v);
  CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_BINARY_VERSION, bounded));
  TAP_EQ(v, 90, "binary version of an sm_90 cubin");
  CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared));
  TAP_EQ(v, 49152 - 4096, "dynamic shared memory left without opting in");
  CK(cuFuncSetAttribute(shared, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100000));
  TAP_EQ(cuFuncSetAttribute(shared, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1 << 20),
         CUDA_ERROR_INVALID_VALUE, "more than the opt-in maximum");
  TAP_EQ(cuFuncSetAttribute(shared, CU_FUNC_ATTRIBUTE_NUM_REGS, 4), CUDA_ERROR_INVALID_VALUE,
         "a read-only attribute");
  int blocks = 0;
  CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, bounded, 256, 0));
  tap_ok(blocks >= 1 && blocks <= 8, "occupancy of bounded at 256 threads: %d blocks", blocks);
  int grid = 0, block = 0;
  CK(cuOccupancyMaxPotentialBlockSize(&grid, &block, bounded, NULL, 0, 0));
  tap_ok(block > 0 && block <= 256 && grid >= 132, "potential block size %d, grid %d", block, grid);

  /* The variables hold their initial bytes. */
  CUdeviceptr p;
  float t[2] = {0, 0};
  CK(cuModuleGetGlobal_v2(&p, NULL, m, "table"));
  CK(cuMemcpyDtoH_v2(t, p, sizeof t));
  tap_ok(t[0] == 1.0f && t[1] == 2.0f, "table's initializer: %g %g", (double)t[0], (double)t[1]);
  int c[4] = {0};
  CK(cuModuleGetGlobal_v2(&p, NULL, m, "params"));
  CK(cuMemcpyDtoH_v2(c, p, sizeof c));
  tap_ok(c[0] == 7 && c[3] == 10, "params's initializer");
  int one = 1;
  CK(cuModuleGetGlobal_v2(&p, NULL, m, "counter"));
  CK(cuMemcpyHtoD_v2(p, &one, sizeof one));
  CK(cuMemcpyDtoH_v2(c, p, sizeof one));
  TAP_EQ(c[0], 1, "a variable can be written and read back");

  /* Launches: the checks, and the kernel as pending work on its stream. */
  CUdeviceptr a;
  CK(cuMemAlloc_v2(&a, 4096));
  int n = 64;
  void *args[] = {&a, &n};
  CK(cuLaunchKernel(bounded, 4, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
  tap_ok(fakecudaPendingWork() > 0, "a launch is pending work");
  TAP_EQ(fakecudaClaim(a, 4), 1, "... on the memory its pointer argument names");
  CK(cuCtxSynchronize());
  TAP_EQ(fakecudaPendingWork(), 0, "a synchronize completes it");
  TAP_EQ(cuLaunchKernel(bounded, 1, 1, 1, 512, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE,
         "more threads than the launch bounds");
  TAP_EQ(cuLaunchKernel(bounded, 0, 1, 1, 32, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE,
         "an empty grid");
  TAP_EQ(cuLaunchKernel(bounded, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE,
         "no parameters for a kernel that has some");
  void *sargs[] = {&a};
  TAP_EQ(cuLaunchKernel(shared, 1, 1, 1, 32, 1, 1, 200000, NULL, sargs, NULL),
         CUDA_ERROR_INVALID_VALUE, "more dynamic shared memory than allowed");
  CK(cuLaunchKernel(shared, 1, 1, 1, 32, 1, 1, 100000, NULL, sargs, NULL));
  CK(cuLaunchKernel(dynamic, 1, 1, 1, 32, 1, 1, 49152, NULL, sargs, NULL));
  TAP_EQ(cuLaunchKernel(dynamic, 1, 1, 1, 32, 1, 1, 49153, NULL, sargs, NULL),
         CUDA_ERROR_INVALID_VALUE, "48 KiB of dynamic shared memory at most without opting in");
  size_t argsize = 16;
  struct {
    CUdeviceptr a;
    int n;
  } packed = {a, 1};
  void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &argsize,
                   CU_LAUNCH_PARAM_END};
  CK(cuLaunchKernel(bounded, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra));
  CK(cuCtxSynchronize());
  CK(cuMemFree_v2(a));
}

static void library(const void *image) {
  CUlibrary lib;
  CK(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
  CUkernel k;
  CK(cuLibraryGetKernel(&k, lib, "bounded"));
  TAP_EQ(cuLibraryGetKernel(&k, lib, "helper"), CUDA_ERROR_NOT_FOUND, "library: no device fn");
  CK(cuLibraryGetKernel(&k, lib, "bounded"));
  const char *name = NULL;
  CK(cuKernelGetName(&name, k));
  tap_ok(name != NULL && strcmp(name, "bounded") == 0, "kernel name");
  CUfunction f;
  CK(cuKernelGetFunction(&f, k));
  int v = 0;
  CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
  TAP_EQ(v, 256, "the library kernel's function has its launch bounds");
  CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, (CUfunction)(void *)k));
  TAP_EQ(v, 256, "a CUkernel stands for its function");
  CUdeviceptr a, g;
  size_t bytes;
  CK(cuMemAlloc_v2(&a, 1024));
  int n = 1;
  void *args[] = {&a, &n};
  CK(cuLaunchKernel((CUfunction)(void *)k, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
  CK(cuLibraryGetGlobal(&g, &bytes, lib, "table"));
  TAP_EQ(bytes, 400, "a library variable");
  CK(cuCtxSynchronize());
  CK(cuMemFree_v2(a));
  CK(cuLibraryUnload(lib));
  TAP_EQ(cuKernelGetFunction(&f, k), CUDA_ERROR_INVALID_HANDLE, "a kernel of an unloaded library");
  TAP_EQ(cuLibraryUnload(lib), CUDA_ERROR_INVALID_VALUE, "unloading twice");
}

int main(int argc, char **argv) {
  if (argc != 8) {
    printf("Bail out! usage: module_check CUBIN FATBIN ZSTD LZ4 PTX PTX80 SM80\n");
    return 1;
  }
  void *images[7];
  for (int i = 0; i < 7; i++) {
    images[i] = slurp(argv[1 + i]);
  }
  setenv("FAKECUDA_BACKING", "1", 1);
  CK(cuInit(0));
  CUcontext ctx;
  CK(cuCtxCreate_v2(&ctx, 0, 0));
  static const char *names[] = {"cubin",          "fat binary", "zstd fat binary",
                                "LZ4 fat binary", "PTX",        "PTX for compute_80"};
  CUmodule mods[6];
  size_t before = used(), fresh = before; /* a new context's own memory (fk_driver.c) */
  for (int i = 0; i < 6; i++) {
    CK(cuModuleLoadData(&mods[i], images[i]));
    contents(names[i], mods[i]);
  }
  tap_ok(used() > before, "module variables take device memory (%zu bytes)", used() - before);
  cubin_details(mods[0]);
  cubin_details(mods[2]);
  CUmodule m;
  TAP_EQ(cuModuleLoadData(&m, images[6]), CUDA_ERROR_NO_BINARY_FOR_GPU,
         "a fat binary for sm_80 alone does not load on 9.0");
  TAP_EQ(cuModuleLoadData(&m, "not an image"), CUDA_ERROR_INVALID_PTX, "junk text");
  library(images[1]);
  CUfunction f;
  CK(cuModuleUnload(mods[1]));
  TAP_EQ(cuModuleGetFunction(&f, mods[1], "bounded"), CUDA_ERROR_INVALID_HANDLE,
         "an unloaded module");
  TAP_EQ(cuModuleUnload(mods[1]), CUDA_ERROR_INVALID_VALUE, "unloading twice");
  CK(cuCtxDestroy_v2(ctx));
  TAP_EQ(used(), 0, "destroying the context unloads its modules");
  CK(cuCtxCreate_v2(&ctx, 0, 0));
  TAP_EQ(used(), fresh, "... and their memory is free");
  TAP_EQ(cuModuleGetFunction(&f, mods[0], "bounded"), CUDA_ERROR_INVALID_HANDLE,
         "a module of a destroyed context");
  TAP_EQ(fakecudaHazards(), 2, "the two claims of launched-on memory were the only hazards");
  CK(cuCtxDestroy_v2(ctx));
  for (int i = 0; i < 7; i++) {
    free(images[i]);
  }
  return tap_done();
}
