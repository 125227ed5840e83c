/* Module and library loads and unloads: the driver keeps their code (and, loaded eagerly, a
 * library's) in the current context's device memory, its own memory for the process, so each is
 * measured around the call (shim/accounting/overhead.h). Loads the runtime makes through its
 * private tables, and lazy loads at a kernel's first launch, pass no hook: the next measurement
 * counts them. No lock of its own.
 */
#include "shim/accounting/cap.h"
#include "shim/entry/prologue.h"
#include "shim/accounting/overhead.h"

/* The device whose memory a load into the current context takes, or -1 (none current). */
static int current_device(void) {
  int dev = -1;
  return cap_current_device(&dev) == CUDA_SUCCESS ? dev : -1;
}

/* Runs `call` (an expression giving the driver's CUresult) measured as a module change;
 * teardown: an unload. */
#define MEASURED(name, teardown, call)                                                             \
  do {                                                                                             \
    struct overhead_call m_;                                                                       \
    overhead_before(&m_, current_device(), teardown);                                              \
    CUresult rc_ = (call);                                                                         \
    overhead_after(&m_, OVERHEAD_MODULES, name, rc_);                                              \
    return rc_;                                                                                    \
  } while (0)

GPUCAP_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname) {
  HOOK_PROLOGUE(real.cuModuleLoad);
  MEASURED("cuModuleLoad", false, real.cuModuleLoad(module, fname));
}

GPUCAP_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  HOOK_PROLOGUE(real.cuModuleLoadData);
  MEASURED("cuModuleLoadData", false, real.cuModuleLoadData(module, image));
}

GPUCAP_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image,
                                          unsigned int numOptions, CUjit_option *options,
                                          void **optionValues) {
  HOOK_PROLOGUE(real.cuModuleLoadDataEx);
  MEASURED("cuModuleLoadDataEx", false,
           real.cuModuleLoadDataEx(module, image, numOptions, options, optionValues));
}

GPUCAP_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) {
  HOOK_PROLOGUE(real.cuModuleLoadFatBinary);
  MEASURED("cuModuleLoadFatBinary", false, real.cuModuleLoadFatBinary(module, fatCubin));
}

GPUCAP_EXPORT CUresult cuModuleUnload(CUmodule hmod) {
  HOOK_PROLOGUE(real.cuModuleUnload);
  MEASURED("cuModuleUnload", true, real.cuModuleUnload(hmod));
}

GPUCAP_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code,
                                         CUjit_option *jitOptions, void **jitOptionsValues,
                                         unsigned int numJitOptions,
                                         CUlibraryOption *libraryOptions,
                                         void **libraryOptionValues,
                                         unsigned int numLibraryOptions) {
  HOOK_PROLOGUE(real.cuLibraryLoadData);
  MEASURED("cuLibraryLoadData", false,
           real.cuLibraryLoadData(library, code, jitOptions, jitOptionsValues, numJitOptions,
                                  libraryOptions, libraryOptionValues, numLibraryOptions));
}

GPUCAP_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName,
                                             CUjit_option *jitOptions, void **jitOptionsValues,
                                             unsigned int numJitOptions,
                                             CUlibraryOption *libraryOptions,
                                             void **libraryOptionValues,
                                             unsigned int numLibraryOptions) {
  HOOK_PROLOGUE(real.cuLibraryLoadFromFile);
  MEASURED("cuLibraryLoadFromFile", false,
           real.cuLibraryLoadFromFile(library, fileName, jitOptions, jitOptionsValues,
                                      numJitOptions, libraryOptions, libraryOptionValues,
                                      numLibraryOptions));
}

GPUCAP_EXPORT CUresult cuLibraryUnload(CUlibrary library) {
  HOOK_PROLOGUE(real.cuLibraryUnload);
  MEASURED("cuLibraryUnload", true, real.cuLibraryUnload(library));
}
