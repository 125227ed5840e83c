/* libfk_caller.so: makes a cuGetProcAddress_v2 query from a shared object other than the main
 * program, as a preloaded wrapper would, so test_env.sh can check that the statistics report
 * attributes each query to the object that made it (proc_address_callers). */
#include <dlfcn.h>
#include <string.h>

#include "shim/base/cudadefs.h"

typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t,
                            CUdriverProcAddressQueryResult *);

__attribute__((visibility("default"))) int fkCallerQuery(const char *name, int version);

int fkCallerQuery(const char *name, int version) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  void *sym = h ? dlsym(h, "cuGetProcAddress_v2") : NULL;
  if (sym == NULL) {
    return -1;
  }
  gpa2_fn gpa2;
  memcpy(&gpa2, &sym, sizeof gpa2);
  void *pfn = NULL;
  int rc = (int)gpa2(name, &pfn, version, 0, NULL);
  dlclose(h);
  return rc;
}
