/* Finds the real glibc dlsym and the real CUDA driver, lazily and exactly once.
 * Locking: one mutex guards driver adoption; readers check an acquire-loaded flag first so
 * the hot paths cost one atomic load. dlopen/dladdr are called with the mutex held, but never
 * from a path that glibc itself calls back into while holding its loader lock.
 */
#include "shim/base/real.h"

#include "shim/base/log.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

struct real_fns real;
void *(*gpucap_real_dlsym)(void *handle, const char *name);

static pthread_mutex_t adopt_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool adopted;
static void *driver_handle;
static void *driver_base;
static const char *driver_name; /* the adopted driver's file, for the debug log */
static _Thread_local bool loading;

SHIM_UNINSTRUMENTED static void *no_dlsym(void *handle, const char *name) {
  (void)handle;
  (void)name;
  return NULL;
}

SHIM_UNINSTRUMENTED void real_dlsym_init(void) {
  if (__atomic_load_n(&gpucap_real_dlsym, __ATOMIC_ACQUIRE)) {
    return;
  }
  void *(*fn)(void *, const char *) = NULL;
  /* dlvsym is not dlsym, so this cannot recurse into gpucap's own dlsym. */
  *(void **)&fn = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!fn) {
    *(void **)&fn = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  }
  if (!fn) {
    log_msg(LOG_ERROR, "cannot find glibc's dlsym; symbol lookups will fail");
    fn = no_dlsym;
  }
  __atomic_store_n(&gpucap_real_dlsym, fn, __ATOMIC_RELEASE);
}

void *real_driver_sym(const char *name) {
  if (!driver_handle) {
    return NULL;
  }
  real_dlsym_init();
  return gpucap_real_dlsym(driver_handle, name);
}

static void load_entry_points(void) {
#define HOOK(base, version, pt, symbol) *(void **)&real.symbol = real_driver_sym(#symbol);
#include "shim/base/hooks.def"
#undef HOOK
#define LOAD(symbol) *(void **)&real.symbol = real_driver_sym(#symbol);
  REAL_EXTRA(LOAD)
#undef LOAD
}

static bool adopt(void *handle) {
  Dl_info info;
  void *probe = NULL;
  real_dlsym_init();
  probe = gpucap_real_dlsym(handle, "cuInit");
  if (!probe || !dladdr(probe, &info)) {
    dlclose(handle);
    return false;
  }
  driver_handle = handle;
  driver_base = info.dli_fbase;
  load_entry_points();
  driver_name = info.dli_fname ? info.dli_fname : "?";
  return true;
}

bool real_driver_ready(const void *addr) {
  if (atomic_load_explicit(&adopted, memory_order_acquire)) {
    return true;
  }
  if (loading) {
    return false;
  }
  pthread_mutex_lock(&adopt_lock);
  bool ok = atomic_load_explicit(&adopted, memory_order_relaxed);
  if (!ok && addr) {
    Dl_info info;
    if (dladdr(addr, &info) && info.dli_fname) {
      void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
      ok = h && adopt(h);
    }
  }
  if (!ok) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h && !addr) {
      loading = true;
      h = dlopen("libcuda.so.1", RTLD_NOW);
      loading = false;
    }
    ok = h && adopt(h);
  }
  if (ok) {
    atomic_store_explicit(&adopted, true, memory_order_release);
  }
  pthread_mutex_unlock(&adopt_lock);
  return ok;
}

const char *real_driver_name(void) {
  return atomic_load_explicit(&adopted, memory_order_acquire) ? driver_name : NULL;
}

bool real_driver_owns(const void *addr) {
  Dl_info info;
  if (!addr || !atomic_load_explicit(&adopted, memory_order_acquire)) {
    return false;
  }
  return dladdr(addr, &info) && info.dli_fbase == driver_base;
}
