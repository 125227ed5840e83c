/* Modules, libraries, kernels, functions and launches.
 *
 * A module is loaded into one context from an image (fk_image.c): its __device__/__constant__
 * variables get device memory there at once (driver-owned: fk_device.driver, never the
 * program's used/peak), its kernels become functions on request. A library is context-
 * independent: it keeps the image and loads a module into a context when a kernel, global or
 * module of it is first needed there (lazy loading) or at load time for the current context
 * (CUDA_MODULE_LOADING=EAGER). A CUkernel may stand wherever a CUfunction is accepted; it
 * means the kernel's function in the current context, as in CUDA 12+. Destroying a context
 * (or resetting a primary one) unloads its modules; their handles stay recognisable and are
 * refused afterwards.
 *
 * A launch executes nothing: it checks its configuration like the driver (grid and block
 * limits, the function's thread and shared-memory limits, parameters present) and queues one
 * work item on its stream per device address found among the parameter bytes (each touching
 * the byte it points at), or one empty item, so that stream order, sync points and the hazard
 * counters treat the kernel as pending work that may use those allocations.
 *
 * Locking: everything runs under fk.lock (the entry points take it). Handles are never freed
 * before exit and are told apart through a registry of live handle pointers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fakecuda/fk.h"

#define SMEM_DEFAULT_MAX 49152 /* dynamic + static shared memory without opting in */
#define SMEM_RESERVED 1024     /* the driver's reserved shared memory per block */

struct fk_fattr { /* a function's settable attributes */
  int max_dynamic_shared, carveout, cache, cluster[3], nonportable_cluster, cluster_sched;
};

struct CUmod_st {
  struct CUctx_st *ctx;
  struct CUlib_st *lib; /* the library it was loaded for, or NULL */
  struct fk_image own;  /* the image of a cuModuleLoad* module */
  struct fk_image *img; /* &own, or the library's */
  int live;
  struct fk_alloc *data;    /* device memory of its variables, or NULL */
  size_t image_bytes;       /* device memory of its code (fk_driver_image) */
  size_t *var_off;          /* offset of each variable in data */
  struct CUfunc_st **funcs; /* each kernel's function, made on first request */
  size_t nfuncs;
};

struct CUfunc_st {
  struct CUmod_st *mod;
  size_t k; /* index of its kernel in the image */
  int loaded;
  struct fk_fattr attr;
};

struct CUlib_st {
  struct fk_image img;
  int live;
  struct CUkern_st **kernels; /* one per kernel of the image */
  struct CUmod_st **mods;     /* modules in contexts */
  size_t nmods, capmods;
};

struct CUkern_st {
  struct CUlib_st *lib;
  size_t k;
  struct fk_fattr attr; /* set through cuKernelSetAttribute, applied to its functions */
};

/* ---- The handle registry. ---- */

enum { H_NONE, H_MODULE, H_FUNCTION, H_LIBRARY, H_KERNEL };

static struct handle_slot {
  const void *p;
  int kind;
} * hset;
static size_t hcap, hcount;

static size_t hslot(const void *p, size_t cap) {
  uintptr_t x = (uintptr_t)p;
  x ^= x >> 17;
  x *= 0x9e3779b97f4a7c15ull;
  return (size_t)(x >> 20) & (cap - 1);
}

static void handle_add(const void *p, int kind) {
  if (2 * (hcount + 1) > hcap) {
    size_t ncap = hcap ? hcap * 2 : 1024;
    struct handle_slot *n = calloc(ncap, sizeof *n);
    if (n == NULL) {
      fk_log("error: out of host memory");
      abort();
    }
    for (size_t i = 0; i < hcap; i++) {
      if (hset[i].p != NULL) {
        size_t j = hslot(hset[i].p, ncap);
        while (n[j].p != NULL) {
          j = (j + 1) & (ncap - 1);
        }
        n[j] = hset[i];
      }
    }
    free(hset);
    hset = n;
    hcap = ncap;
  }
  size_t j = hslot(p, hcap);
  while (hset[j].p != NULL) {
    j = (j + 1) & (hcap - 1);
  }
  hset[j].p = p;
  hset[j].kind = kind;
  hcount++;
}

static int handle_kind(const void *p) {
  if (p == NULL || hcap == 0) {
    return H_NONE;
  }
  for (size_t j = hslot(p, hcap); hset[j].p != NULL; j = (j + 1) & (hcap - 1)) {
    if (hset[j].p == p) {
      return hset[j].kind;
    }
  }
  return H_NONE;
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (p == NULL) {
    fk_log("error: out of host memory");
    abort();
  }
  return p;
}

/* Every module ever loaded (unloaded ones included), for context teardown and exit. */
static struct CUmod_st **mods;
static size_t nmods, capmods;
static struct CUlib_st **libs;
static size_t nlibs, caplibs;

static int dev_sm(int dev) {
  (void)dev;
  return fk.cfg.cc_major * 10 + fk.cfg.cc_minor;
}

/* ---- Loading. ---- */

static int eager_loading(void) {
  const char *m = getenv("CUDA_MODULE_LOADING");
  return m != NULL && strcmp(m, "EAGER") == 0;
}

/* Makes the module of image img (owned by lib, or moved into the module) in context c. */
static CUresult module_new(struct CUctx_st *c, struct fk_image *img, struct CUlib_st *lib,
                           struct CUmod_st **out) {
  struct CUmod_st *m = xcalloc(1, sizeof *m);
  if (lib != NULL) {
    m->img = &lib->img;
    m->lib = lib;
  } else {
    m->own = *img;
    m->img = &m->own;
  }
  m->ctx = c;
  CUresult irc = fk_driver_image(c, m->img->len, &m->image_bytes);
  if (irc != CUDA_SUCCESS) {
    if (lib == NULL) {
      *img = m->own; /* the caller still owns it */
    }
    free(m);
    return irc;
  }
  size_t total = 0;
  m->var_off = xcalloc(m->img->nglobals, sizeof *m->var_off);
  for (size_t i = 0; i < m->img->nglobals; i++) {
    total = (total + 255) & ~(size_t)255;
    m->var_off[i] = total;
    total += m->img->globals[i].size;
  }
  if (total > 0) {
    CUresult rc = fk_mem_device_alloc(FK_K_MODULE, c->dev, total, c, &m->data);
    if (rc != CUDA_SUCCESS) {
      fk_driver_image_release(c, m->image_bytes);
      free(m->var_off);
      if (lib == NULL) {
        *img = m->own; /* the caller still owns it */
      }
      free(m);
      return rc;
    }
    if (fk.cfg.backing) {
      memset((void *)m->data->base, 0, total);
      for (size_t i = 0; i < m->img->nglobals; i++) {
        if (m->img->globals[i].init != NULL) {
          memcpy((void *)(m->data->base + m->var_off[i]), m->img->globals[i].init,
                 m->img->globals[i].size);
        }
      }
    }
  }
  m->funcs = xcalloc(m->img->nkernels, sizeof *m->funcs);
  m->nfuncs = m->img->nkernels;
  m->live = 1;
  handle_add(m, H_MODULE);
  fk_push((void ***)&mods, &nmods, &capmods, m);
  *out = m;
  return CUDA_SUCCESS;
}

static void module_unload(struct CUmod_st *m) {
  m->live = 0;
  fk_driver_image_release(m->ctx, m->image_bytes);
  m->image_bytes = 0;
  if (m->data != NULL) {
    fk_mem_release(m->data);
    m->data = NULL;
  }
  if (m->lib != NULL) {
    struct CUlib_st *l = m->lib;
    for (size_t i = 0; i < l->nmods; i++) {
      if (l->mods[i] == m) {
        l->mods[i] = l->mods[--l->nmods];
        break;
      }
    }
  } else {
    fk_image_free(&m->own);
  }
}

CUresult fk_module_load(CUmodule *mod, const void *image, int kind) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (mod == NULL || image == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct fk_image img;
  char err[128];
  rc = fk_image_load(image, kind, dev_sm(c->dev), &img, err, sizeof err);
  if (rc != CUDA_SUCCESS) {
    fk_trace("module load refused: %s", err);
    return rc;
  }
  struct CUmod_st *m;
  rc = module_new(c, &img, NULL, &m);
  if (rc != CUDA_SUCCESS) {
    fk_image_free(&img);
    return rc;
  }
  fk_trace("module %p: %zu kernels, %zu variables, %s sm_%d", (void *)m, img.nkernels, img.nglobals,
           img.is_ptx ? "PTX" : "cubin", img.sm);
  *mod = m;
  return CUDA_SUCCESS;
}

void fk_module_free_ctx(struct CUctx_st *c) {
  for (size_t i = 0; i < nmods; i++) {
    if (mods[i]->live && mods[i]->ctx == c) {
      module_unload(mods[i]);
    }
  }
}

void fk_module_teardown(void) {
  for (size_t i = 0; i < nmods; i++) {
    if (mods[i]->live) {
      module_unload(mods[i]);
    }
    for (size_t k = 0; k < mods[i]->nfuncs; k++) {
      free(mods[i]->funcs[k]);
    }
  }
  for (size_t i = 0; i < nlibs; i++) {
    struct CUlib_st *l = libs[i];
    for (size_t k = 0; k < l->img.nkernels; k++) {
      free(l->kernels[k]);
    }
    free(l->kernels);
    free(l->mods);
    fk_image_free(&l->img);
    free(l);
  }
  for (size_t i = 0; i < nmods; i++) {
    free(mods[i]->funcs);
    free(mods[i]->var_off);
    free(mods[i]);
  }
  free(mods);
  free(libs);
  free(hset);
  mods = NULL;
  libs = NULL;
  hset = NULL;
  nmods = capmods = nlibs = caplibs = hcap = hcount = 0;
}

static CUresult module_live(CUmodule m) {
  return handle_kind(m) == H_MODULE && m->live ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult loading_mode(CUmoduleLoadingMode *mode) {
  if (mode == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *mode = eager_loading() ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

FK_API CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode) {
  FK_BODY(FK_NEED_INIT, loading_mode(mode));
}

FK_API CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  FK_BODY(FK_NEED_INIT, fk_module_load(module, image, FK_IMAGE_ANY));
}

FK_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                   CUjit_option *options, void **optionValues) {
  (void)options;
  (void)optionValues;
  (void)numOptions; /* JIT options only tune a compilation the fake does not do */
  FK_BODY(FK_NEED_INIT, fk_module_load(module, image, FK_IMAGE_ANY));
}

FK_API CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) {
  FK_BODY(FK_NEED_INIT, fk_module_load(module, fatCubin, FK_IMAGE_ANY));
}

/* Reads a whole file into a NUL-terminated buffer. */
static void *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  while (buf != NULL) {
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (n < cap) {
      break;
    }
    char *nb = realloc(buf, cap * 2 + 1);
    if (nb == NULL) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  fclose(f);
  if (buf != NULL) {
    buf[n] = '\0';
  }
  return buf;
}

static CUresult module_load_file(CUmodule *module, const char *path) {
  if (module == NULL || path == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  void *data = read_file(path);
  if (data == NULL) {
    return CUDA_ERROR_FILE_NOT_FOUND;
  }
  rc = fk_module_load(module, data, FK_IMAGE_ANY);
  free(data);
  return rc;
}

FK_API CUresult cuModuleLoad(CUmodule *module, const char *fname) {
  FK_BODY(FK_NEED_INIT, module_load_file(module, fname));
}

static CUresult module_unload_checked(CUmodule m) {
  if (module_live(m) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (m->lib != NULL) {
    return CUDA_ERROR_NOT_PERMITTED; /* a library's module: cuLibraryUnload owns it */
  }
  module_unload(m);
  return CUDA_SUCCESS;
}

FK_API CUresult cuModuleUnload(CUmodule hmod) {
  FK_BODY(FK_NEED_INIT, module_unload_checked(hmod));
}

/* ---- Functions. ---- */

static struct CUfunc_st *module_function(struct CUmod_st *m, size_t k) {
  if (m->funcs[k] == NULL) {
    struct CUfunc_st *f = xcalloc(1, sizeof *f);
    f->mod = m;
    f->k = k;
    f->attr.carveout = -1;
    f->loaded = eager_loading();
    if (m->lib != NULL && m->lib->kernels[k] != NULL) {
      f->attr = m->lib->kernels[k]->attr;
    }
    handle_add(f, H_FUNCTION);
    m->funcs[k] = f;
  }
  return m->funcs[k];
}

static CUresult module_get_function(CUfunction *hfunc, CUmodule m, const char *name) {
  if (hfunc == NULL || name == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (module_live(m) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  struct fk_ksym *k = fk_image_kernel(m->img, name);
  if (k == NULL) {
    return CUDA_ERROR_NOT_FOUND;
  }
  *hfunc = module_function(m, (size_t)(k - m->img->kernels));
  return CUDA_SUCCESS;
}

FK_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  FK_BODY(FK_NEED_INIT, module_get_function(hfunc, hmod, name));
}

static CUresult module_get_global(CUdeviceptr *dptr, size_t *bytes, CUmodule m, const char *name) {
  if (name == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (module_live(m) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  struct fk_gsym *g = fk_image_global(m->img, name);
  if (g == NULL) {
    return CUDA_ERROR_NOT_FOUND;
  }
  if (dptr != NULL) {
    *dptr = m->data->base + m->var_off[g - m->img->globals];
  }
  if (bytes != NULL) {
    *bytes = g->size;
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
                                     const char *name) {
  FK_BODY(FK_NEED_INIT, module_get_global(dptr, bytes, hmod, name));
}

static CUresult module_function_count(unsigned *count, CUmodule m) {
  if (count == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (module_live(m) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *count = (unsigned)m->img->nkernels;
  return CUDA_SUCCESS;
}

FK_API CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule hmod) {
  FK_BODY(FK_NEED_INIT, module_function_count(count, hmod));
}

static CUresult module_enumerate(CUfunction *fns, unsigned n, CUmodule m) {
  if (fns == NULL && n > 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (module_live(m) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  for (size_t i = 0; i < n && i < m->img->nkernels; i++) {
    fns[i] = module_function(m, i);
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions,
                                           CUmodule mod) {
  FK_BODY(FK_NEED_INIT, module_enumerate(functions, numFunctions, mod));
}

int fk_module_walk(CUmodule m, fk_walk_fn fn, void *user) {
  if (fn == NULL || module_live(m) != CUDA_SUCCESS) {
    return 0;
  }
  size_t n = m->img->nkernels;
  for (size_t i = 0; i < n; i++) {
    fn(user, module_function(m, i), m);
  }
  return (int)n;
}

/* ---- Libraries and kernels. ---- */

/* The module of library l in context c, loaded now if it is not there yet. */
static CUresult library_module(struct CUlib_st *l, struct CUctx_st *c, struct CUmod_st **out) {
  for (size_t i = 0; i < l->nmods; i++) {
    if (l->mods[i]->ctx == c && l->mods[i]->live) {
      *out = l->mods[i];
      return CUDA_SUCCESS;
    }
  }
  struct CUmod_st *m;
  CUresult rc = module_new(c, NULL, l, &m);
  if (rc == CUDA_SUCCESS) {
    fk_push((void ***)&l->mods, &l->nmods, &l->capmods, m);
    *out = m;
  }
  return rc;
}

/* Library options: CU_LIBRARY_BINARY_IS_PRESERVED takes no value and is invalid for a file;
 * the host function-and-data table needs one. JIT options only tune a compilation the fake
 * does not do; their values must be there. */
static CUresult library_options(unsigned njit, void **jitv, const CUlibraryOption *opts,
                                unsigned nopt, void **vals, int from_file) {
  if (njit > 0 && jitv == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (nopt > 0 && opts == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (unsigned i = 0; i < nopt; i++) {
    if (opts[i] == CU_LIBRARY_BINARY_IS_PRESERVED) {
      if (from_file) {
        return CUDA_ERROR_INVALID_VALUE;
      }
    } else if (opts[i] != CU_LIBRARY_HOST_UNIVERSAL_FUNCTION_AND_DATA_TABLE || vals == NULL) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

static CUresult library_load(CUlibrary *library, const void *code) {
  if (library == NULL || code == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  /* The device code chosen for device 0's architecture (every fake device has the same). */
  struct CUlib_st *l = xcalloc(1, sizeof *l);
  char err[128];
  CUresult rc = fk_image_load(code, FK_IMAGE_ANY, dev_sm(0), &l->img, err, sizeof err);
  if (rc != CUDA_SUCCESS) {
    fk_trace("library load refused: %s", err);
    free(l);
    return rc;
  }
  l->kernels = xcalloc(l->img.nkernels, sizeof *l->kernels);
  l->live = 1;
  handle_add(l, H_LIBRARY);
  fk_push((void ***)&libs, &nlibs, &caplibs, l);
  struct CUctx_st *c;
  if (eager_loading() && fk_ctx_current(&c) == CUDA_SUCCESS) {
    struct CUmod_st *m;
    rc = library_module(l, c, &m);
    if (rc != CUDA_SUCCESS) {
      l->live = 0;
      return rc;
    }
  }
  fk_trace("library %p: %zu kernels, %zu variables", (void *)l, l->img.nkernels, l->img.nglobals);
  *library = l;
  return CUDA_SUCCESS;
}

FK_API CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                  void **jitOptionsValues, unsigned int numJitOptions,
                                  CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                  unsigned int numLibraryOptions) {
  (void)jitOptions;
  CUresult rc = fk_enter(__func__, FK_NEED_INIT);
  if (rc == CUDA_SUCCESS) {
    rc = library_options(numJitOptions, jitOptionsValues, libraryOptions, numLibraryOptions,
                         libraryOptionValues, 0);
  }
  if (rc == CUDA_SUCCESS) {
    rc = library_load(library, code);
  }
  return fk_leave(rc);
}

static CUresult library_load_file(CUlibrary *library, const char *path) {
  if (path == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  void *data = read_file(path);
  if (data == NULL) {
    return CUDA_ERROR_FILE_NOT_FOUND;
  }
  CUresult rc = library_load(library, data);
  free(data);
  return rc;
}

FK_API CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName,
                                      CUjit_option *jitOptions, void **jitOptionsValues,
                                      unsigned int numJitOptions, CUlibraryOption *libraryOptions,
                                      void **libraryOptionValues, unsigned int numLibraryOptions) {
  (void)jitOptions;
  CUresult rc = fk_enter(__func__, FK_NEED_INIT);
  if (rc == CUDA_SUCCESS) {
    rc = library_options(numJitOptions, jitOptionsValues, libraryOptions, numLibraryOptions,
                         libraryOptionValues, 1);
  }
  if (rc == CUDA_SUCCESS) {
    rc = library_load_file(library, fileName);
  }
  return fk_leave(rc);
}

static CUresult library_live(CUlibrary l) {
  return handle_kind(l) == H_LIBRARY && l->live ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult library_unload(CUlibrary l) {
  if (library_live(l) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  while (l->nmods > 0) {
    module_unload(l->mods[l->nmods - 1]);
  }
  l->live = 0;
  return CUDA_SUCCESS;
}

FK_API CUresult cuLibraryUnload(CUlibrary library) {
  FK_BODY(FK_NEED_INIT, library_unload(library));
}

static struct CUkern_st *library_kernel(struct CUlib_st *l, size_t k) {
  if (l->kernels[k] == NULL) {
    struct CUkern_st *kn = xcalloc(1, sizeof *kn);
    kn->lib = l;
    kn->k = k;
    kn->attr.carveout = -1;
    handle_add(kn, H_KERNEL);
    l->kernels[k] = kn;
  }
  return l->kernels[k];
}

static CUresult library_get_kernel(CUkernel *pk, CUlibrary l, const char *name) {
  if (pk == NULL || name == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (library_live(l) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  struct fk_ksym *k = fk_image_kernel(&l->img, name);
  if (k == NULL) {
    return CUDA_ERROR_NOT_FOUND;
  }
  *pk = library_kernel(l, (size_t)(k - l->img.kernels));
  return CUDA_SUCCESS;
}

FK_API CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
  FK_BODY(FK_NEED_INIT, library_get_kernel(pKernel, library, name));
}

static CUresult library_kernel_count(unsigned *count, CUlibrary l) {
  if (count == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (library_live(l) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *count = (unsigned)l->img.nkernels;
  return CUDA_SUCCESS;
}

FK_API CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib) {
  FK_BODY(FK_NEED_INIT, library_kernel_count(count, lib));
}

static CUresult library_enumerate(CUkernel *ks, unsigned n, CUlibrary l) {
  if (ks == NULL && n > 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (library_live(l) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  for (size_t i = 0; i < n && i < l->img.nkernels; i++) {
    ks[i] = library_kernel(l, i);
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int numKernels,
                                          CUlibrary lib) {
  FK_BODY(FK_NEED_INIT, library_enumerate(kernels, numKernels, lib));
}

static CUresult library_get_module(CUmodule *pmod, CUlibrary l) {
  if (pmod == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (library_live(l) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  return rc != CUDA_SUCCESS ? rc : library_module(l, c, pmod);
}

FK_API CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library) {
  FK_BODY(FK_NEED_INIT, library_get_module(pMod, library));
}

static CUresult library_get_global(CUdeviceptr *dptr, size_t *bytes, CUlibrary l,
                                   const char *name) {
  if (name == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (library_live(l) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (fk_image_global(&l->img, name) == NULL) {
    return CUDA_ERROR_NOT_FOUND;
  }
  struct CUctx_st *c;
  struct CUmod_st *m;
  CUresult rc = fk_ctx_current(&c);
  if (rc == CUDA_SUCCESS) {
    rc = library_module(l, c, &m);
  }
  return rc != CUDA_SUCCESS ? rc : module_get_global(dptr, bytes, m, name);
}

FK_API CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
                                   const char *name) {
  FK_BODY(FK_NEED_INIT, library_get_global(dptr, bytes, library, name));
}

static CUresult library_no_symbol(CUlibrary l, const char *name) {
  if (name == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  /* Managed variables and unified functions are not modelled: none is ever found. */
  return library_live(l) != CUDA_SUCCESS ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_NOT_FOUND;
}

FK_API CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library,
                                    const char *name) {
  (void)dptr;
  (void)bytes;
  FK_BODY(FK_NEED_INIT, library_no_symbol(library, name));
}

FK_API CUresult cuLibraryGetUnifiedFunction(void **fptr, CUlibrary library, const char *symbol) {
  (void)fptr;
  FK_BODY(FK_NEED_INIT, library_no_symbol(library, symbol));
}

static CUresult kernel_live(CUkernel k) {
  return handle_kind(k) == H_KERNEL && k->lib->live ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* The function of kernel k in the current context. */
static CUresult kernel_function(CUkernel k, struct CUfunc_st **out) {
  struct CUctx_st *c;
  struct CUmod_st *m;
  CUresult rc = fk_ctx_current(&c);
  if (rc == CUDA_SUCCESS) {
    rc = library_module(k->lib, c, &m);
  }
  if (rc == CUDA_SUCCESS) {
    *out = module_function(m, k->k);
  }
  return rc;
}

static CUresult kernel_get_function(CUfunction *pf, CUkernel k) {
  if (pf == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (kernel_live(k) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return kernel_function(k, pf);
}

FK_API CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
  FK_BODY(FK_NEED_INIT, kernel_get_function(pFunc, kernel));
}

static CUresult kernel_get_library(CUlibrary *pl, CUkernel k) {
  if (pl == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (kernel_live(k) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *pl = k->lib;
  return CUDA_SUCCESS;
}

FK_API CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel) {
  FK_BODY(FK_NEED_INIT, kernel_get_library(pLib, kernel));
}

/* ---- Attributes (of functions and kernels). ---- */

/* Threads per block the kernel can launch with: its launch bounds and the register file. */
static int max_threads(const struct fk_ksym *k) {
  int limit = k->max_threads < 1024 ? k->max_threads : 1024;
  if (k->regs > 0) {
    int per_warp = ((k->regs + 7) / 8) * 8 * 32; /* registers are allocated per warp */
    int warps = fk_dev_attr(12, 0) / per_warp;   /* MAX_REGISTERS_PER_BLOCK */
    if (warps * 32 < limit) {
      limit = warps * 32;
    }
  }
  return limit;
}

static int smem_optin_max(const struct fk_ksym *k) {
  return fk_dev_attr(97, 0) - k->static_shared; /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
}

static int dynamic_smem_limit(const struct fk_ksym *k, const struct fk_fattr *a) {
  int dflt = SMEM_DEFAULT_MAX - k->static_shared;
  return a->max_dynamic_shared > dflt ? a->max_dynamic_shared : (dflt > 0 ? dflt : 0);
}

static CUresult attr_get(int *pi, int attr, const struct fk_image *img, const struct fk_ksym *k,
                         const struct fk_fattr *a) {
  switch (attr) {
  case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    *pi = max_threads(k);
    break;
  case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    *pi = k->static_shared;
    break;
  case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    *pi = 0;
    break;
  case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    *pi = k->local_bytes;
    break;
  case CU_FUNC_ATTRIBUTE_NUM_REGS:
    *pi = k->regs;
    break;
  case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    *pi = img->sm;
    break;
  case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
    *pi = img->sm;
    break;
  case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
    *pi = 0;
    break;
  case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
    *pi = dynamic_smem_limit(k, a);
    break;
  case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
    *pi = a->carveout;
    break;
  case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
    *pi = 0;
    break;
  case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
  case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
  case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    *pi = a->cluster[attr - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH];
    break;
  case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    *pi = a->nonportable_cluster;
    break;
  case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
    *pi = a->cluster_sched;
    break;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

static CUresult attr_set(struct fk_fattr *a, const struct fk_ksym *k, int attr, int value) {
  switch (attr) {
  case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
    if (value < 0 || value > smem_optin_max(k)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    a->max_dynamic_shared = value;
    return CUDA_SUCCESS;
  case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
    if (value < -1 || value > 100) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    a->carveout = value;
    return CUDA_SUCCESS;
  case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
  case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
  case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    if (value < 0 || value > 16) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    a->cluster[attr - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] = value;
    return CUDA_SUCCESS;
  case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    a->nonportable_cluster = value != 0;
    return CUDA_SUCCESS;
  case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
    if (value < 0 || value > 2) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    a->cluster_sched = value;
    return CUDA_SUCCESS;
  default:
    return CUDA_ERROR_INVALID_VALUE; /* read-only or unknown */
  }
}

/* Resolves a CUfunction argument, which may also be a CUkernel (its function in the current
 * context). */
static CUresult function_of(CUfunction h, struct CUfunc_st **out) {
  switch (handle_kind(h)) {
  case H_FUNCTION:
    if (!h->mod->live) {
      return CUDA_ERROR_INVALID_HANDLE;
    }
    *out = h;
    return CUDA_SUCCESS;
  case H_KERNEL: {
    CUkernel k = (CUkernel)(void *)h;
    return kernel_live(k) != CUDA_SUCCESS ? CUDA_ERROR_INVALID_HANDLE : kernel_function(k, out);
  }
  default:
    return CUDA_ERROR_INVALID_HANDLE;
  }
}

static struct fk_ksym *func_ksym(const struct CUfunc_st *f) {
  return &f->mod->img->kernels[f->k];
}

static CUresult func_get_attribute(int *pi, int attr, CUfunction h) {
  if (pi == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUfunc_st *f;
  CUresult rc = function_of(h, &f);
  return rc != CUDA_SUCCESS ? rc : attr_get(pi, attr, f->mod->img, func_ksym(f), &f->attr);
}

FK_API CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc) {
  FK_BODY(FK_NEED_INIT, func_get_attribute(pi, (int)attrib, hfunc));
}

static CUresult func_set_attribute(CUfunction h, int attr, int value) {
  struct CUfunc_st *f;
  CUresult rc = function_of(h, &f);
  return rc != CUDA_SUCCESS ? rc : attr_set(&f->attr, func_ksym(f), attr, value);
}

FK_API CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  FK_BODY(FK_NEED_INIT, func_set_attribute(hfunc, (int)attrib, value));
}

static CUresult func_set_cache(CUfunction h, int config) {
  struct CUfunc_st *f;
  CUresult rc = function_of(h, &f);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  f->attr.cache = config;
  return CUDA_SUCCESS;
}

FK_API CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  FK_BODY(FK_NEED_INIT, func_set_cache(hfunc, (int)config));
}

static CUresult func_set_smem_config(CUfunction h, int config) {
  struct CUfunc_st *f;
  CUresult rc = function_of(h, &f);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  /* Bank size is fixed on this architecture: accepted and ignored, as documented. */
  return config < 0 || config > 2 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

FK_API CUresult cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config) {
  FK_BODY(FK_NEED_INIT, func_set_smem_config(hfunc, (int)config));
}

static CUresult func_get_module(CUmodule *pm, CUfunction h) {
  if (pm == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUfunc_st *f;
  CUresult rc = function_of(h, &f);
  if (rc == CUDA_SUCCESS) {
    *pm = f->mod;
  }
  return rc;
}

FK_API CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc) {
  FK_BODY(FK_NEED_INIT, func_get_module(hmod, hfunc));
}

static CUresult func_get_name(const char **name, CUfunction h) {
  if (name == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUfunc_st *f;
  CUresult rc = function_of(h, &f);
  if (rc == CUDA_SUCCESS) {
    *name = func_ksym(f)->name;
  }
  return rc;
}

FK_API CUresult cuFuncGetName(const char **name, CUfunction hfunc) {
  FK_BODY(FK_NEED_INIT, func_get_name(name, hfunc));
}

static CUresult param_info(const struct fk_ksym *k, size_t i, size_t *off, size_t *size) {
  if ((int)i >= k->nparams || i >= FK_MAX_PARAMS) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (off != NULL) {
    *off = k->params[i].offset;
  }
  if (size != NULL) {
    *size = k->params[i].size;
  }
  return CUDA_SUCCESS;
}

static CUresult func_param_info(CUfunction h, size_t i, size_t *off, size_t *size) {
  struct CUfunc_st *f;
  CUresult rc = function_of(h, &f);
  return rc != CUDA_SUCCESS ? rc : param_info(func_ksym(f), i, off, size);
}

FK_API CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
                                   size_t *paramSize) {
  FK_BODY(FK_NEED_INIT, func_param_info(func, paramIndex, paramOffset, paramSize));
}

static CUresult func_is_loaded(CUfunctionLoadingState *state, CUfunction h) {
  if (state == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUfunc_st *f;
  CUresult rc = function_of(h, &f);
  if (rc == CUDA_SUCCESS) {
    *state = f->loaded ? CU_FUNCTION_LOADING_STATE_LOADED : CU_FUNCTION_LOADING_STATE_UNLOADED;
  }
  return rc;
}

FK_API CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction hfunc) {
  FK_BODY(FK_NEED_INIT, func_is_loaded(state, hfunc));
}

static CUresult func_load(CUfunction h) {
  struct CUfunc_st *f;
  CUresult rc = function_of(h, &f);
  if (rc == CUDA_SUCCESS) {
    f->loaded = 1;
  }
  return rc;
}

FK_API CUresult cuFuncLoad(CUfunction hfunc) {
  FK_BODY(FK_NEED_INIT, func_load(hfunc));
}

static CUresult kernel_get_attribute(int *pi, int attr, CUkernel k, CUdevice dev) {
  if (pi == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (kernel_live(k) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (dev < 0 || dev >= fk.ndev) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  return attr_get(pi, attr, &k->lib->img, &k->lib->img.kernels[k->k], &k->attr);
}

FK_API CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel,
                                     CUdevice dev) {
  FK_BODY(FK_NEED_INIT, kernel_get_attribute(pi, (int)attrib, kernel, dev));
}

static CUresult kernel_set_attribute(int attr, int value, CUkernel k, CUdevice dev) {
  if (kernel_live(k) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (dev < 0 || dev >= fk.ndev) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  CUresult rc = attr_set(&k->attr, &k->lib->img.kernels[k->k], attr, value);
  for (size_t i = 0; rc == CUDA_SUCCESS && i < k->lib->nmods; i++) {
    struct CUfunc_st *f = k->lib->mods[i]->funcs[k->k];
    if (f != NULL) {
      f->attr = k->attr;
    }
  }
  return rc;
}

FK_API CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel,
                                     CUdevice dev) {
  FK_BODY(FK_NEED_INIT, kernel_set_attribute((int)attrib, val, kernel, dev));
}

static CUresult kernel_set_cache(CUkernel k, int config, CUdevice dev) {
  if (kernel_live(k) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (dev < 0 || dev >= fk.ndev) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  k->attr.cache = config;
  return CUDA_SUCCESS;
}

FK_API CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, kernel_set_cache(kernel, (int)config, dev));
}

static CUresult kernel_get_name(const char **name, CUkernel k) {
  if (name == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (kernel_live(k) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *name = k->lib->img.kernels[k->k].name;
  return CUDA_SUCCESS;
}

FK_API CUresult cuKernelGetName(const char **name, CUkernel hfunc) {
  FK_BODY(FK_NEED_INIT, kernel_get_name(name, hfunc));
}

static CUresult kernel_param_info(CUkernel k, size_t i, size_t *off, size_t *size) {
  if (kernel_live(k) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return param_info(&k->lib->img.kernels[k->k], i, off, size);
}

FK_API CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset,
                                     size_t *paramSize) {
  FK_BODY(FK_NEED_INIT, kernel_param_info(kernel, paramIndex, paramOffset, paramSize));
}

/* ---- Occupancy. ---- */

/* Resident blocks per multiprocessor of f at blockSize threads and dyn bytes of dynamic
 * shared memory (the CUDA occupancy calculator's limits: blocks, warps, registers, shared
 * memory). */
static int blocks_per_sm(const struct fk_ksym *k, int block, size_t dyn) {
  if (block <= 0 || block > max_threads(k)) {
    return 0;
  }
  int warps = (block + 31) / 32;
  int by_blocks = fk_dev_attr(106, 0);            /* MAX_BLOCKS_PER_MULTIPROCESSOR */
  int by_warps = fk_dev_attr(39, 0) / 32 / warps; /* MAX_THREADS_PER_MULTIPROCESSOR */
  int n = by_blocks < by_warps ? by_blocks : by_warps;
  if (k->regs > 0) {
    int per_block = ((k->regs + 7) / 8) * 8 * 32 * warps;
    int by_regs = fk_dev_attr(82, 0) / per_block; /* MAX_REGISTERS_PER_MULTIPROCESSOR */
    n = by_regs < n ? by_regs : n;
  }
  size_t smem = (size_t)k->static_shared + dyn + SMEM_RESERVED;
  size_t by_smem = (size_t)fk_dev_attr(81, 0) / smem; /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
  return by_smem < (size_t)n ? (int)by_smem : n;
}

static CUresult occupancy_blocks(int *num, CUfunction h, int block, size_t dyn) {
  if (num == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUfunc_st *f;
  CUresult rc = function_of(h, &f);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (block <= 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *num = blocks_per_sm(func_ksym(f), block, dyn);
  return CUDA_SUCCESS;
}

FK_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
                                                            int blockSize, size_t dynamicSMemSize) {
  FK_BODY(FK_NEED_INIT, occupancy_blocks(numBlocks, func, blockSize, dynamicSMemSize));
}

FK_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks,
                                                                     CUfunction func, int blockSize,
                                                                     size_t dynamicSMemSize,
                                                                     unsigned int flags) {
  FK_BODY(FK_NEED_INIT, flags > CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE
                            ? CUDA_ERROR_INVALID_VALUE
                            : occupancy_blocks(numBlocks, func, blockSize, dynamicSMemSize));
}

static CUresult occupancy_block_size(int *min_grid, int *block_size, CUfunction h,
                                     CUoccupancyB2DSize b2d, size_t dyn, int limit,
                                     unsigned flags) {
  if (min_grid == NULL || block_size == NULL || flags > CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUfunc_st *f;
  CUresult rc = function_of(h, &f);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  const struct fk_ksym *k = func_ksym(f);
  int top = max_threads(k);
  if (limit > 0 && limit < top) {
    top = limit;
  }
  int best_block = 0, best_warps = -1;
  for (int b = (top / 32) * 32; b > 0; b -= 32) {
    size_t d = b2d != NULL ? b2d(b) : dyn;
    int warps = blocks_per_sm(k, b, d) * (b / 32);
    if (warps > best_warps) {
      best_warps = warps;
      best_block = b;
    }
  }
  if (best_block == 0) {
    best_block = top; /* fewer than 32 threads allowed */
    best_warps = blocks_per_sm(k, top, b2d != NULL ? b2d(top) : dyn);
  }
  *block_size = best_block;
  *min_grid = (best_warps * 32 / best_block) * fk_dev_attr(16, 0); /* MULTIPROCESSOR_COUNT */
  return CUDA_SUCCESS;
}

FK_API CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
                                                 CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                 size_t dynamicSMemSize, int blockSizeLimit) {
  FK_BODY(FK_NEED_INIT,
          occupancy_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                               dynamicSMemSize, blockSizeLimit, 0));
}

FK_API CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(
    int *minGridSize, int *blockSize, CUfunction func,
    CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize, int blockSizeLimit,
    unsigned int flags) {
  FK_BODY(FK_NEED_INIT,
          occupancy_block_size(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                               dynamicSMemSize, blockSizeLimit, flags));
}

static CUresult occupancy_dyn_smem(size_t *out, CUfunction h, int blocks, int block) {
  if (out == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUfunc_st *f;
  CUresult rc = function_of(h, &f);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  const struct fk_ksym *k = func_ksym(f);
  if (blocks <= 0 || block <= 0 || blocks_per_sm(k, block, 0) < blocks) {
    *out = 0;
    return CUDA_SUCCESS;
  }
  size_t per = (size_t)fk_dev_attr(81, 0) / (size_t)blocks;
  size_t fixed = (size_t)k->static_shared + SMEM_RESERVED;
  size_t cap = (size_t)smem_optin_max(k);
  *out = per > fixed ? (per - fixed < cap ? per - fixed : cap) : 0;
  return CUDA_SUCCESS;
}

FK_API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func,
                                                        int numBlocks, int blockSize) {
  FK_BODY(FK_NEED_INIT, occupancy_dyn_smem(dynamicSmemSize, func, numBlocks, blockSize));
}

/* ---- Launches. ---- */

static CUresult check_dims(const struct CUfunc_st *f, unsigned gx, unsigned gy, unsigned gz,
                           unsigned bx, unsigned by, unsigned bz, unsigned smem) {
  const struct fk_ksym *k = &f->mod->img->kernels[f->k];
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || gx > 2147483647u ||
      gy > 65535 || gz > 65535 || bx > 1024 || by > 1024 || bz > 64 ||
      (unsigned long long)bx * by * bz > (unsigned long long)max_threads(k)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if ((int)smem > dynamic_smem_limit(k, &f->attr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

/* The work of a kernel on device dev: one item per device address among its parameter bytes
 * (each touching the byte it points at), or one item touching nothing; a chain through ->next. */
static struct fk_work *kernel_items(int dev, const unsigned char *args, size_t len) {
  struct fk_work *head = NULL, **tail = &head;
  for (size_t off = 0; off + sizeof(uintptr_t) <= len; off += sizeof(uintptr_t)) {
    uintptr_t v;
    memcpy(&v, args + off, sizeof v);
    struct fk_alloc *a = v != 0 ? fk_mem_find(v) : NULL;
    if (a != NULL && a->kind != FK_K_HOST) {
      struct fk_work *w = fk_work_new(FK_W_HOOK);
      w->dev = dev;
      w->dst.addr = v;
      w->dst.n = 1;
      w->dst.alloc_id = a->id;
      *tail = w;
      tail = &w->next;
    }
  }
  if (head == NULL) {
    head = fk_work_new(FK_W_HOOK);
    head->dev = dev;
  }
  return head;
}

/* Queues the kernel on s. */
static void enqueue_kernel(struct CUstream_st *s, const unsigned char *args, size_t len) {
  struct fk_work *w = kernel_items(s->ctx->dev, args, len);
  while (w != NULL) {
    struct fk_work *next = w->next;
    fk_work_enqueue(s, w);
    w = next;
  }
}

/* Gathers the parameter bytes from kernelParams (one pointer per parameter) or extra
 * (CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE); exactly one of them must be given when the kernel
 * has parameters. */
static CUresult gather_params(const struct fk_ksym *k, void **params, void **extra,
                              unsigned char **buf, size_t *len) {
  *buf = NULL;
  *len = 0;
  if (params != NULL && extra != NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t total = (size_t)k->param_bytes;
  for (int i = 0; i < k->nparams; i++) {
    size_t end = (size_t)k->params[i].offset + k->params[i].size;
    total = end > total ? end : total;
  }
  if (total == 0) {
    return CUDA_SUCCESS;
  }
  if (params == NULL && extra == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  unsigned char *b = xcalloc(total, 1);
  if (params != NULL) {
    for (int i = 0; i < k->nparams; i++) {
      if (params[i] == NULL) {
        free(b);
        return CUDA_ERROR_INVALID_VALUE;
      }
      memcpy(b + k->params[i].offset, params[i], k->params[i].size);
    }
  } else {
    void *ptr = NULL;
    size_t size = 0;
    int have_size = 0;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        ptr = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1] != NULL) {
        size = *(size_t *)extra[i + 1];
        have_size = 1;
      } else {
        free(b);
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    if (ptr == NULL || !have_size || size < total) {
      free(b);
      return CUDA_ERROR_INVALID_VALUE;
    }
    memcpy(b, ptr, total);
  }
  *buf = b;
  *len = total;
  return CUDA_SUCCESS;
}

static CUresult launch(CUfunction h, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned smem, CUstream hs, void **params,
                       void **extra, int ptsz, int cooperative) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct CUfunc_st *f;
  rc = function_of(h, &f);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (f->mod->ctx != c) {
    return CUDA_ERROR_INVALID_HANDLE; /* a function of another context */
  }
  struct CUstream_st *s;
  rc = fk_stream_resolve(hs, ptsz, &s);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (s->ctx != c) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  rc = check_dims(f, gx, gy, gz, bx, by, bz, smem);
  if (rc == CUDA_SUCCESS && cooperative &&
      (unsigned long long)gx * gy * gz >
          (unsigned long long)blocks_per_sm(func_ksym(f), (int)(bx * by * bz), smem) *
              (unsigned long long)fk_dev_attr(16, 0)) {
    rc = CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  }
  unsigned char *args;
  size_t len;
  if (rc == CUDA_SUCCESS) {
    rc = gather_params(func_ksym(f), params, extra, &args, &len);
  }
  if (rc == CUDA_SUCCESS) {
    rc = fk_driver_launch(c, (size_t)func_ksym(f)->local_bytes); /* a deeper stack, if needed */
    if (rc != CUDA_SUCCESS) {
      free(args);
    }
  }
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  f->loaded = 1;
  enqueue_kernel(s, args, len);
  free(args);
  return CUDA_SUCCESS;
}

FK_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                               unsigned int gridDimZ, unsigned int blockDimX,
                               unsigned int blockDimY, unsigned int blockDimZ,
                               unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                               void **extra) {
  FK_BODY(FK_NEED_INIT, launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                               sharedMemBytes, hStream, kernelParams, extra, 0, 0));
}

FK_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX,
                                    unsigned int blockDimY, unsigned int blockDimZ,
                                    unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra) {
  FK_BODY(FK_NEED_INIT, launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                               sharedMemBytes, hStream, kernelParams, extra, 1, 0));
}

FK_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                          unsigned int gridDimY, unsigned int gridDimZ,
                                          unsigned int blockDimX, unsigned int blockDimY,
                                          unsigned int blockDimZ, unsigned int sharedMemBytes,
                                          CUstream hStream, void **kernelParams) {
  FK_BODY(FK_NEED_INIT, launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                               sharedMemBytes, hStream, kernelParams, NULL, 0, 1));
}

FK_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                               unsigned int gridDimY, unsigned int gridDimZ,
                                               unsigned int blockDimX, unsigned int blockDimY,
                                               unsigned int blockDimZ, unsigned int sharedMemBytes,
                                               CUstream hStream, void **kernelParams) {
  FK_BODY(FK_NEED_INIT, launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                               sharedMemBytes, hStream, kernelParams, NULL, 1, 1));
}

CUresult fk_kernel_node_work(const CUDA_KERNEL_NODE_PARAMS *p, struct CUctx_st **ctx,
                             struct fk_work **out) {
  if (p == NULL || (p->func == NULL && p->kern == NULL)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct fk_work *w;
  CUresult rc = fk_ctx_current(ctx);
  struct CUfunc_st *f = NULL;
  if (p->func != NULL) {
    rc = function_of(p->func, &f); /* a function runs in its module's context */
  } else if (rc == CUDA_SUCCESS) {
    rc = function_of((CUfunction)(void *)p->kern, &f);
  }
  if (rc != CUDA_SUCCESS) {
    return rc == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : rc;
  }
  *ctx = f->mod->ctx;
  rc = check_dims(f, p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY,
                  p->blockDimZ, p->sharedMemBytes);
  unsigned char *args;
  size_t len;
  if (rc == CUDA_SUCCESS) {
    rc = gather_params(func_ksym(f), p->kernelParams, p->extra, &args, &len);
  }
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  f->loaded = 1;
  w = kernel_items((*ctx)->dev, args, len);
  free(args);
  *out = w;
  return CUDA_SUCCESS;
}

static CUresult launch_ex(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra,
                          int ptsz) {
  if (cfg == NULL || (cfg->numAttrs > 0 && cfg->attrs == NULL)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int cooperative = 0;
  for (unsigned i = 0; i < cfg->numAttrs; i++) {
    const CUlaunchAttribute *a = &cfg->attrs[i];
    if (a->id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) {
      cooperative = a->value.cooperative != 0;
    } else if (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      unsigned x = a->value.clusterDim.x, y = a->value.clusterDim.y, z = a->value.clusterDim.z;
      if (x == 0 || y == 0 || z == 0 || cfg->gridDimX % x || cfg->gridDimY % y ||
          cfg->gridDimZ % z || x * y * z > 8 || fk.cfg.cc_major < 9) {
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;
      }
    }
  }
  return launch(f, cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ, cfg->blockDimX, cfg->blockDimY,
                cfg->blockDimZ, cfg->sharedMemBytes, cfg->hStream, params, extra, ptsz,
                cooperative);
}

FK_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                 void **extra) {
  FK_BODY(FK_NEED_INIT, launch_ex(config, f, kernelParams, extra, 0));
}

FK_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                      void **kernelParams, void **extra) {
  FK_BODY(FK_NEED_INIT, launch_ex(config, f, kernelParams, extra, 1));
}

static CUresult cluster_query(int *out, CUfunction h, const CUlaunchConfig *cfg, int size) {
  if (out == NULL || cfg == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUfunc_st *f;
  CUresult rc = function_of(h, &f);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (fk.cfg.cc_major < 9) {
    return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  int bps = blocks_per_sm(func_ksym(f), (int)(cfg->blockDimX * cfg->blockDimY * cfg->blockDimZ),
                          cfg->sharedMemBytes);
  /* clusters are at most 8 blocks (portable size), spread over the GPCs' SMs */
  *out = size ? (bps > 0 ? 8 : 0) : bps * fk_dev_attr(16, 0) / 8;
  return CUDA_SUCCESS;
}

FK_API CUresult cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func,
                                                   const CUlaunchConfig *config) {
  FK_BODY(FK_NEED_INIT, cluster_query(clusterSize, func, config, 1));
}

FK_API CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
                                             const CUlaunchConfig *config) {
  FK_BODY(FK_NEED_INIT, cluster_query(numClusters, func, config, 0));
}
