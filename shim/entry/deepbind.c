/* Libraries loaded with RTLD_DEEPBIND. Such a library resolves its own imports in its own scope
 * first (itself, then its dependencies: libc's dlsym and dlopen, the driver) and the global
 * scope, where the preloaded gpucap sits, only after: its CUDA calls, and the dlsym lookups
 * through which the runtime reaches the driver, would bypass gpucap. So gpucap's dlopen
 * (shim/entry/dlsym_entry.S) opens a RTLD_DEEPBIND request itself and then points the imports of
 * dlsym, dlopen and every hooked name of each object that request loaded at gpucap, exactly
 * what the global scope would have bound them to (RELRO pages are made writable for the write
 * and read-only again). Every other dlopen leaves through a tail jump, untouched.
 * dlopen is caller-relative (the caller's RUNPATH, its namespace, $ORIGIN), so a request is
 * opened by gpucap only when the path it names is known to be the one glibc would find for
 * the caller: a path with '/' ($ORIGIN expanded as glibc does), a name already loaded, or one
 * found along the caller's own search path; otherwise (another dynamic string token, another
 * namespace, or a name gpucap's own search path would find elsewhere) it goes to glibc
 * untouched, with a warning that the library may bypass the cap when the process already uses
 * CUDA (never to a program that does not). Thread-safe (no state but the real dlopen).
 */
#include "shim/entry/route.h"
#include "shim/base/log.h"
#include "shim/base/real.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#define REL_TYPE ELF64_R_TYPE /* both targets are 64-bit */
#define REL_SYM ELF64_R_SYM
#if defined(__x86_64__)
#define MACHINE EM_X86_64
#define R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define R_GLOB_DAT R_X86_64_GLOB_DAT
#define R_ABS64 R_X86_64_64
#elif defined(__aarch64__)
#define MACHINE EM_AARCH64
#define R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define R_GLOB_DAT R_AARCH64_GLOB_DAT
#define R_ABS64 R_AARCH64_ABS64
#endif

void *(*gpucap_real_dlopen)(const char *file, int mode);

/* gpucap's own entries (hidden aliases of the exported dlsym and dlopen). */
extern char gpucap_dlsym_entry[], gpucap_dlopen_entry[];

SHIM_UNINSTRUMENTED static void *no_dlopen(const char *file, int mode) {
  (void)file;
  (void)mode;
  return NULL;
}

SHIM_UNINSTRUMENTED static void real_dlopen_init(void) {
  if (__atomic_load_n(&gpucap_real_dlopen, __ATOMIC_ACQUIRE)) {
    return;
  }
  void *(*fn)(const char *, int) = NULL;
  *(void **)&fn = dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.34");
  if (!fn) {
    *(void **)&fn = dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.2.5");
  }
  __atomic_store_n(&gpucap_real_dlopen, fn ? fn : no_dlopen, __ATOMIC_RELEASE);
}

/* ---- Where glibc would find `name` for the object `caller`. ---- */

/* The directories of an object's search path (its RPATH chain, LD_LIBRARY_PATH, its RUNPATH,
 * the default directories), malloc'ed; NULL when the loader cannot say. */
static Dl_serinfo *search_path(void *map) {
  Dl_serinfo size;
  if (dlinfo(map, RTLD_DI_SERINFOSIZE, &size) != 0) {
    return NULL;
  }
  Dl_serinfo *si = malloc(size.dls_size);
  if (si && (dlinfo(map, RTLD_DI_SERINFOSIZE, si) != 0 || dlinfo(map, RTLD_DI_SERINFO, si) != 0)) {
    free(si);
    si = NULL;
  }
  return si;
}

/* Whether dir/name is a shared object glibc would take: an ELF file of this process's class
 * and machine (it skips others, e.g. 32-bit libraries, and goes on searching). */
static bool loadable(const char *dir, const char *name, char *path, size_t len) {
  size_t d = strlen(dir), n = strlen(name);
  if (d + 1 + n + 1 > len) {
    return false;
  }
  memcpy(path, dir, d);
  path[d] = '/';
  memcpy(path + d + 1, name, n + 1);
  ElfW(Ehdr) h;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  bool ok = fd >= 0 && read(fd, &h, sizeof h) == (ssize_t)sizeof h &&
            memcmp(h.e_ident, ELFMAG, SELFMAG) == 0 &&
            h.e_ident[EI_CLASS] == (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) &&
            h.e_machine == MACHINE;
  if (fd >= 0) {
    close(fd);
  }
  return ok;
}

static bool listed(const Dl_serinfo *si, unsigned until, const char *dir) {
  for (unsigned i = 0; i < until; i++) {
    if (strcmp(si->dls_serpath[i].dls_name, dir) == 0) {
      return true;
    }
  }
  return false;
}

enum found { AS_GIVEN, AT_PATH, UNSURE };

/* Where glibc would look for name, a bare file name, on behalf of the object at caller_map:
 * AT_PATH (path filled) when a directory of the caller's own search path has it; AS_GIVEN when
 * opening the name from gpucap finds the same (it is loaded already, or only the cache and
 * the default directories, common to every caller, can have it); UNSURE otherwise. */
static enum found locate(const char *name, void *caller_map, char *path, size_t len) {
  void *loaded = gpucap_real_dlopen(name, RTLD_LAZY | RTLD_NOLOAD);
  if (loaded) {
    dlclose(loaded);
    return AS_GIVEN; /* found by name whoever asks */
  }
  Dl_info info;
  void *mine_map = NULL;
  Dl_serinfo *theirs = search_path(caller_map), *mine = NULL;
  if (dladdr1((void *)gpucap_dlopen_entry, &info, &mine_map, RTLD_DL_LINKMAP)) {
    mine = search_path(mine_map);
  }
  enum found r = UNSURE;
  if (theirs && mine) {
    /* The default directories end both lists. */
    unsigned a = theirs->dls_cnt, b = mine->dls_cnt;
    while (a > 0 && b > 0 &&
           strcmp(theirs->dls_serpath[a - 1].dls_name, mine->dls_serpath[b - 1].dls_name) == 0) {
      a--;
      b--;
    }
    r = AS_GIVEN;
    for (unsigned i = 0; i < a && r == AS_GIVEN; i++) {
      if (loadable(theirs->dls_serpath[i].dls_name, name, path, len)) {
        r = AT_PATH;
      }
    }
    for (unsigned i = 0; i < b && r == AS_GIVEN; i++) {
      const char *dir = mine->dls_serpath[i].dls_name;
      if (!listed(theirs, a, dir) && loadable(dir, name, path, len)) {
        r = UNSURE; /* gpucap's search would find a file the caller's would not */
      }
    }
  }
  free(theirs);
  free(mine);
  return r;
}

/* ---- Pointing a loaded object's imports at gpucap. ---- */

/* gpucap's function for an imported name, or NULL. */
static void *ours(const char *name) {
  if (strcmp(name, "dlsym") == 0) {
    return gpucap_dlsym_entry;
  }
  if (strcmp(name, "dlopen") == 0) {
    return gpucap_dlopen_entry;
  }
  return name[0] == 'c' && name[1] == 'u' ? route_export(name) : NULL;
}

/* A loaded object, as dl_iterate_phdr describes it (under the loader's lock). */
struct object {
  uintptr_t addr;             /* load bias */
  const ElfW(Dyn) * dyn;      /* its dynamic section */
  uintptr_t ro_start, ro_end; /* the pages glibc made read-only after relocation (RELRO) */
  char name[256];
};

struct objects {
  struct object *v;
  size_t n, cap;
};

static int collect(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  struct objects *all = arg;
  if (all->n == all->cap) {
    size_t want = all->cap ? 2 * all->cap : 64;
    struct object *bigger = realloc(all->v, want * sizeof *bigger);
    if (!bigger) {
      return 1;
    }
    all->v = bigger;
    all->cap = want;
  }
  struct object *o = &all->v[all->n++];
  long page = sysconf(_SC_PAGESIZE);
  *o = (struct object){.addr = info->dlpi_addr};
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_DYNAMIC) {
      o->dyn = (const ElfW(Dyn) *)(info->dlpi_addr + ph->p_vaddr);
    } else if (ph->p_type == PT_GNU_RELRO) {
      /* glibc protects whole pages only: the last partial page stays writable. */
      uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
      o->ro_start = lo & ~(uintptr_t)(page - 1);
      o->ro_end = hi & ~(uintptr_t)(page - 1);
    }
  }
  const char *name = info->dlpi_name ? info->dlpi_name : "";
  size_t len = strlen(name);
  if (len >= sizeof o->name) {
    len = sizeof o->name - 1;
  }
  memcpy(o->name, name, len);
  o->name[len] = '\0';
  return 0;
}

/* An object's dynamic-section address d_ptr, relocated (glibc relocates them in place on most
 * targets, not where the dynamic section is read-only). */
static uintptr_t dyn_ptr(const struct object *o, ElfW(Addr) v) {
  return v < o->addr ? o->addr + v : v;
}

/* Writes value at slot, making a RELRO page writable for the time of the write. */
static bool write_slot(uintptr_t slot, uintptr_t value, const struct object *o) {
  if (slot >= o->ro_start && slot < o->ro_end) {
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = slot & ~(uintptr_t)(page - 1);
    if (mprotect((void *)lo, (size_t)page, PROT_READ | PROT_WRITE) != 0) {
      return false;
    }
    __atomic_store_n((uintptr_t *)slot, value, __ATOMIC_RELEASE);
    mprotect((void *)lo, (size_t)page, PROT_READ);
    return true;
  }
  __atomic_store_n((uintptr_t *)slot, value, __ATOMIC_RELEASE);
  return true;
}

/* Points the imports of dlsym, dlopen and the hooked names of object o at gpucap. Returns how
 * many were changed; *failed counts those that could not be written. */
static int patch(const struct object *o, int *failed) {
  const ElfW(Sym) *symtab = NULL;
  const char *strtab = NULL;
  const ElfW(Rela) * rel[2] = {NULL, NULL};
  size_t relsz[2] = {0, 0};
  bool rela_plt = true;
  for (const ElfW(Dyn) *d = o->dyn; d && d->d_tag != DT_NULL; d++) {
    switch (d->d_tag) {
    case DT_SYMTAB:
      symtab = (const ElfW(Sym) *)dyn_ptr(o, d->d_un.d_ptr);
      break;
    case DT_STRTAB:
      strtab = (const char *)dyn_ptr(o, d->d_un.d_ptr);
      break;
    case DT_RELA:
      rel[0] = (const ElfW(Rela) *)dyn_ptr(o, d->d_un.d_ptr);
      break;
    case DT_RELASZ:
      relsz[0] = d->d_un.d_val;
      break;
    case DT_JMPREL:
      rel[1] = (const ElfW(Rela) *)dyn_ptr(o, d->d_un.d_ptr);
      break;
    case DT_PLTRELSZ:
      relsz[1] = d->d_un.d_val;
      break;
    case DT_PLTREL:
      rela_plt = d->d_un.d_val == DT_RELA;
      break;
    default:
      break;
    }
  }
  if (!symtab || !strtab || !rela_plt) {
    return 0;
  }
  int changed = 0;
  for (int t = 0; t < 2; t++) {
    for (size_t i = 0; rel[t] && i < relsz[t] / sizeof(ElfW(Rela)); i++) {
      const ElfW(Rela) *x = &rel[t][i];
      unsigned long type = REL_TYPE(x->r_info);
      if (type != R_JUMP_SLOT && type != R_GLOB_DAT && type != R_ABS64) {
        continue;
      }
      const ElfW(Sym) *sym = &symtab[REL_SYM(x->r_info)];
      void *fn = sym->st_shndx == SHN_UNDEF ? ours(strtab + sym->st_name) : NULL;
      if (!fn) {
        continue; /* not ours, or defined by the object itself */
      }
      uintptr_t slot = o->addr + x->r_offset;
      uintptr_t want = (uintptr_t)fn + (type == R_ABS64 ? (uintptr_t)x->r_addend : 0);
      if (*(const uintptr_t *)slot == want) {
        continue;
      }
      if (write_slot(slot, want, o)) {
        changed++;
      } else {
        ++*failed;
      }
    }
  }
  return changed;
}

/* Whether o is a driver (or a layer that stands for one): its own calls are not the program's. */
static bool is_driver(const struct object *o) {
  void *h = o->name[0] ? gpucap_real_dlopen(o->name, RTLD_LAZY | RTLD_NOLOAD) : NULL;
  bool driver = false;
  if (h) {
    Dl_info info;
    void *init = gpucap_real_dlsym(h, "cuInit");
    driver = init && dladdr(init, &info) && (uintptr_t)info.dli_fbase == o->addr;
    dlclose(h);
  }
  return driver || real_driver_owns((const void *)o->addr);
}

static bool same(const struct object *a, const struct object *b) {
  return a->addr == b->addr && strcmp(a->name, b->name) == 0;
}

/* Opens file (found as the caller's dlopen would find it, at path) and points the imports of
 * every object the call loaded at gpucap. */
static void *open_deep(const char *file, int mode, const char *path) {
  struct objects before = {0}, after = {0};
  dl_iterate_phdr(collect, &before);
  void *h = gpucap_real_dlopen(path, mode);
  if (!h) {
    free(before.v);
    return NULL;
  }
  /* h keeps every object this call loaded from being unloaded meanwhile. */
  dl_iterate_phdr(collect, &after);
  int changed = 0, failed = 0;
  for (size_t i = 0; i < after.n; i++) {
    bool old = false;
    for (size_t j = 0; j < before.n && !old; j++) {
      old = same(&before.v[j], &after.v[i]);
    }
    if (!old && after.v[i].dyn && !is_driver(&after.v[i])) {
      changed += patch(&after.v[i], &failed);
    }
  }
  free(before.v);
  free(after.v);
  if (failed) {
    log_msg(LOG_WARN,
            "%s was loaded with RTLD_DEEPBIND and %d of its CUDA imports could not be "
            "pointed at gpucap: those calls bypass the cap",
            file, failed);
  } else if (changed) {
    log_msg(LOG_DEBUG, "%s was loaded with RTLD_DEEPBIND: %d of its imports now reach gpucap", file,
            changed);
  }
  return h;
}

static void *deepbind_open(const char *file, int mode, void *caller, long *handled);

/* The C half of gpucap's dlopen (the entry is shim/entry/dlsym_entry.S): *handled = 0 makes the
 * entry tail-jump to glibc's dlopen with the caller's return address in place. */
void *gpucap_dlopen_pre(const char *file, int mode, void *caller, long *handled);

__attribute__((visibility("hidden"))) SHIM_UNINSTRUMENTED void *
gpucap_dlopen_pre(const char *file, int mode, void *caller, long *handled) {
  real_dlopen_init();
  real_dlsym_init();
  *handled = 0;
  if (!(mode & RTLD_DEEPBIND) || !file || gpucap_real_dlopen == no_dlopen) {
    return NULL;
  }
  return deepbind_open(file, mode, caller, handled);
}

/* file with $ORIGIN / ${ORIGIN} replaced by the directory of the object at map, as glibc
 * expands it, into out; false for any other dynamic string token ($LIB, $PLATFORM: their
 * values are glibc's own), in secure-execution mode (glibc restricts $ORIGIN there), or when
 * the result does not fit. */
static bool expand_origin(const char *file, void *map, char *out, size_t len) {
  const char *name = ((const struct link_map *)map)->l_name;
  char dir[4096];
  if (getauxval(AT_SECURE)) {
    return false;
  }
  ssize_t n;
  if (name && name[0]) {
    n = realpath(name, dir) ? (ssize_t)strlen(dir) : -1;
  } else {
    n = readlink("/proc/self/exe", dir, sizeof dir - 1); /* the main program */
  }
  if (n <= 0 || (size_t)n >= sizeof dir) {
    return false;
  }
  dir[n] = '\0';
  char *slash = strrchr(dir, '/');
  if (!slash) {
    return false;
  }
  *(slash == dir ? slash + 1 : slash) = '\0';
  size_t o = 0;
  for (const char *p = file; *p;) {
    size_t skip = strncmp(p, "$ORIGIN", 7) == 0 ? 7 : strncmp(p, "${ORIGIN}", 9) == 0 ? 9 : 0;
    const char *put = skip ? dir : p;
    size_t k = skip ? strlen(dir) : 1;
    if (!skip && *p == '$') {
      return false;
    }
    if (o + k >= len) {
      return false;
    }
    memcpy(out + o, put, k);
    o += k;
    p += skip ? skip : 1;
  }
  out[o] = '\0';
  return true;
}

/* Whether the process uses CUDA already (a warning about CUDA must not reach a program that
 * does not). */
static bool cuda_in_use(void) {
  void *h = gpucap_real_dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (h) {
    dlclose(h);
  }
  return h != NULL;
}

static void *deepbind_open(const char *file, int mode, void *caller, long *handled) {
  Dl_info info;
  void *caller_map = NULL;
  Lmid_t ns = LM_ID_BASE;
  char path[4096], expanded[4096];
  enum found where = UNSURE;
  bool ok;
  if (dladdr1(caller, &info, &caller_map, RTLD_DL_LINKMAP) && caller_map) {
    ok = dlinfo(caller_map, RTLD_DI_LMID, &ns) == 0 && ns == LM_ID_BASE;
  } else {
    /* glibc takes the main program for a caller outside every object. */
    void *self = gpucap_real_dlopen(NULL, RTLD_LAZY);
    ok = self && dlinfo(self, RTLD_DI_LINKMAP, &caller_map) == 0 && caller_map;
  }
  if (ok && strchr(file, '$')) {
    ok = expand_origin(file, caller_map, expanded, sizeof expanded);
    file = ok ? expanded : file;
  }
  if (ok) {
    where = strchr(file, '/') ? AS_GIVEN : locate(file, caller_map, path, sizeof path);
  }
  if (where == UNSURE) {
    if (cuda_in_use()) {
      log_msg(LOG_WARN,
              "%s is being loaded with RTLD_DEEPBIND in a way gpucap cannot reproduce "
              "for its caller: its CUDA calls may bypass the cap",
              file);
    }
    return NULL;
  }
  *handled = 1;
  return open_deep(file, mode, where == AT_PATH ? path : file);
}
