/* deeploader: loads a library by its bare name with RTLD_DEEPBIND, from a library whose own
 * RUNPATH is the only place that name can be found (dlopen searches the caller's RUNPATH: an
 * interposed dlopen must keep that). Test helper for tests/integ/deepbind.sh. */
#include <dlfcn.h>
#include <stddef.h>

__attribute__((visibility("default"))) void *deep_load(const char *name);

void *deep_load(const char *name) {
  /* Not a tail call: the return address dlopen sees must be this library's. */
  void *volatile handle = dlopen(name, RTLD_NOW | RTLD_DEEPBIND);
  return handle;
}
