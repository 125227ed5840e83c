/* The decision half of gpucap's dlsym (the entry is shim/entry/dlsym_entry.S).
 *
 * Only exact hooked names are answered (never a "cu" prefix: cudaMalloc, cublasCreate pass
 * untouched), and only for explicit handles and RTLD_DEFAULT: the caller's handle is looked
 * up with glibc's dlsym first, and the hook is handed out only when that lookup landed in the
 * CUDA driver or on gpucap's own export. RTLD_NEXT always goes to glibc through the tail jump.
 */
#include "shim/entry/route.h"
#include "shim/entry/init.h"
#include "shim/entry/nvml.h"
#include "shim/base/real.h"

#include <dlfcn.h>
#include <string.h>

void *gpucap_dlsym_pre(void *handle, const char *name);

__attribute__((visibility("hidden"))) SHIM_UNINSTRUMENTED void *gpucap_dlsym_pre(void *handle,
                                                                                 const char *name) {
  real_dlsym_init();
  if (name && name[0] == 'n' && name[1] == 'v' && handle != RTLD_NEXT) {
    return nvml_dlsym(handle, name);
  }
  if (!name || name[0] != 'c' || name[1] != 'u' || handle == RTLD_NEXT) {
    return NULL;
  }
  void *hook = route_export(name);
  if (!hook) {
    return NULL;
  }
  void *found = gpucap_real_dlsym(handle, name);
  if (!found) {
    return NULL; /* glibc runs again through the tail jump and sets dlerror() */
  }
  if (found == hook) {
    return hook;
  }
  if (init_ready(found) && real_driver_owns(found)) {
    return hook;
  }
  return found;
}
