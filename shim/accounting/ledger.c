/* The per-library ledger (see shim/accounting/ledger.h).
 *
 * Call sites: a direct-mapped table of LEDGER_SITES atomic words, each (return address << 16 |
 * generation << 8 | library index), so a lookup is one relaxed load and a compare. A miss runs
 * dladdr1 (which takes the loader's lock: never called under a pool lock) and stores the answer;
 * two threads that miss on one slot both store a correct word. A word of another generation is
 * a miss: the generation moves on when a library was unloaded (dlclose), so an address a new
 * library reuses is looked up again. Unloads are seen through dl_iterate_phdr's count of removed
 * objects, read at every miss and every LEDGER_RECHECK-th hit of a thread.
 * Library names: a fixed table under a mutex (taken on a miss only), read without it (an entry
 * is written once, before the count that publishes it).
 */
#include "shim/accounting/ledger.h"

#include "shim/base/check.h"
#include "shim/base/real.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "shim/base/fork.h"

enum {
  LEDGER_SITES = 4096,   /* call-site slots (power of two) */
  LEDGER_RECHECK = 1024, /* hits between two looks at the loader's unload count */
  LEDGER_DEPTH = 32,     /* frames backtrace() looks at, from the hook down */
  LEDGER_SCAN = 16384,   /* bytes above the hook's frame searched for the caller's address */
  DEEPER = 0xff          /* a site in the CUDA runtime or gpucap: look one caller further */
};

_Thread_local struct ledger_thread ledger_thread;

static _Atomic uint64_t sites[LEDGER_SITES];
/* For a site of the CUDA runtime: 1 + where the caller's return address lies on the stack,
 * in bytes above the hook's frame address, as found by the last backtrace; 0: not known. */
static atomic_uint deep_slot[LEDGER_SITES];
static atomic_uint generation = 1; /* low 8 bits are stored in a site word */
static _Atomic unsigned long long unloads_seen;

struct lib {
  char name[LEDGER_NAME_MAX];
  bool program;
};
static struct lib libs[LEDGER_LIBS] = {[LEDGER_UNKNOWN] = {"unknown", false},
                                       [LEDGER_GRAPHS] = {"CUDA graphs", false},
                                       [LEDGER_OTHER] = {"other libraries", false}};
static atomic_int nlibs = LEDGER_GRAPHS + 1; /* entries 0..nlibs-1 are written */
static pthread_mutex_t libs_lock = PTHREAD_MUTEX_INITIALIZER;

struct cell {
  _Atomic uint64_t current, peak;
};
static struct cell cells[GPUCAP_MAX_DEVICES][LEDGER_LIBS];
static struct cell totals[GPUCAP_MAX_DEVICES];

static int count_unloads(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  *(unsigned long long *)arg = info->dlpi_subs;
  return 1; /* the counts are the same in every entry: one is enough */
}

/* Moves the generation on when a library was unloaded since the last look. */
static void check_unloads(void) {
  unsigned long long subs = 0;
  dl_iterate_phdr(count_unloads, &subs);
  unsigned long long seen = atomic_load_explicit(&unloads_seen, memory_order_relaxed);
  if (subs != seen && atomic_compare_exchange_strong_explicit(
                          &unloads_seen, &seen, subs, memory_order_relaxed, memory_order_relaxed)) {
    atomic_fetch_add_explicit(&generation, 1, memory_order_relaxed);
  }
}

/* The table index of a library name, registering it on first sight. */
static int lib_index(const char *name, size_t len, bool program) {
  len = len < LEDGER_NAME_MAX - 1 ? len : LEDGER_NAME_MAX - 1;
  pthread_mutex_lock(&libs_lock);
  int n = atomic_load_explicit(&nlibs, memory_order_relaxed);
  int found = LEDGER_OTHER;
  for (int i = LEDGER_GRAPHS + 1; i < n; i++) { /* never a fixed line: a file may be so named */
    if (libs[i].program == program && strncmp(libs[i].name, name, len) == 0 &&
        libs[i].name[len] == '\0') {
      found = i;
      break;
    }
  }
  if (found == LEDGER_OTHER && n < LEDGER_OTHER) {
    memcpy(libs[n].name, name, len);
    libs[n].name[len] = '\0';
    libs[n].program = program;
    found = n;
    atomic_store_explicit(&nlibs, n + 1, memory_order_release);
  }
  pthread_mutex_unlock(&libs_lock);
  return found;
}

/* What code at addr is: DEEPER (the CUDA runtime or gpucap), or a library index. */
static int resolve(const void *addr) {
  static const char gpucap_anchor = 0;
  Dl_info info, mine;
  struct link_map *map = NULL;
  if (!dladdr1(addr, &info, (void **)&map, RTLD_DL_LINKMAP) || !info.dli_fname) {
    return LEDGER_UNKNOWN;
  }
  if (dladdr(&gpucap_anchor, &mine) && mine.dli_fbase == info.dli_fbase) {
    return DEEPER;
  }
  bool program = map != NULL && map->l_name != NULL && map->l_name[0] == '\0';
  const char *base = program ? program_invocation_short_name : strrchr(info.dli_fname, '/');
  base = base == NULL ? info.dli_fname : base + (base[0] == '/');
  if (!program && strncmp(base, "libcudart.so", 12) == 0) {
    return DEEPER;
  }
  /* "libcublas.so.13" -> "libcublas"; a Python extension module by its dotted name:
   * ".../site-packages/cupy_backends/cuda/api/runtime.cpython-312-x86_64-linux-gnu.so" ->
   * "cupy_backends.cuda.api.runtime" (its file name alone is often "runtime" or "_core"). */
  const char *so = program ? NULL : strstr(base, ".so");
  const char *py = program ? NULL : strstr(base, ".cpython-");
  size_t len = py != NULL ? (size_t)(py - base) : so != NULL ? (size_t)(so - base) : strlen(base);
  const char *pkg = py != NULL ? strstr(info.dli_fname, "-packages/") : NULL;
  if (pkg != NULL && pkg + 10 < base) {
    char dotted[LEDGER_NAME_MAX];
    size_t n = 0;
    for (const char *c = pkg + 10; c < base + len && n < sizeof dotted - 1; c++) {
      dotted[n++] = *c == '/' ? '.' : *c;
    }
    return lib_index(dotted, n, false);
  }
  return lib_index(base, len, program);
}

static uint64_t hash_slot(uintptr_t addr) {
  return ((uint64_t)addr * UINT64_C(0x9e3779b97f4a7c15)) >> 52; /* 12 bits: LEDGER_SITES */
}

/* The call-site word that says addr is idx in generation gen. */
static uint64_t site_word(uintptr_t addr, unsigned gen, unsigned idx) {
  return ((uint64_t)addr << 16) | ((uint64_t)(gen & 0xff) << 8) | idx;
}

/* The index (or DEEPER) of the code at addr, from the call-site table when it knows it. */
static int site(const void *addr, unsigned gen) {
  uintptr_t a = (uintptr_t)addr;
  _Atomic uint64_t *slot = &sites[hash_slot(a)];
  uint64_t w = atomic_load_explicit(slot, memory_order_relaxed);
  if ((w & ~(uint64_t)0xff) == site_word(a, gen, 0)) {
    return (int)(w & 0xff);
  }
  int idx = resolve(addr);
  atomic_store_explicit(slot, site_word(a, gen, (unsigned)idx), memory_order_relaxed);
  return idx;
}

/* The word at p on the calling thread's stack, between frames: not instrumented, since a
 * sanitizer's redzones there are not gpucap's to police. */
SHIM_UNINSTRUMENTED __attribute__((noinline)) static const void *stack_word(uintptr_t p) {
  return *(const void *const volatile *)p;
}

/* The end of the calling thread's stack (cached per thread; NULL when not known). */
static const char *stack_end(struct ledger_thread *t) {
  if (t->stack_hi == NULL) {
    pthread_attr_t a;
    void *lo = NULL;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
      if (pthread_attr_getstack(&a, &lo, &size) == 0) {
        t->stack_hi = (const char *)lo + size;
      }
      pthread_attr_destroy(&a);
    }
  }
  return t->stack_hi;
}

/* Learns where, above the hook's frame, the stack holds `ret` (the first caller outside the
 * runtime, which backtrace() found), for the runtime's call site in slot. */
static void learn_slot(struct ledger_thread *t, uint64_t slot, const void *ret) {
  const char *hi = stack_end(t);
  uintptr_t from = ((uintptr_t)t->cfa + sizeof(void *) - 1) & ~(uintptr_t)(sizeof(void *) - 1);
  for (uintptr_t p = from;
       hi != NULL && p + sizeof(void *) <= (uintptr_t)hi && p - from < LEDGER_SCAN;
       p += sizeof(void *)) {
    if (stack_word(p) == ret) {
      atomic_store_explicit(&deep_slot[slot], (unsigned)(p - (uintptr_t)t->cfa) + 1,
                            memory_order_relaxed);
      return;
    }
  }
}

/* The first frame below the hook that is neither the CUDA runtime nor gpucap. `slot`: the
 * call-site slot of the hook's caller (in the runtime). The runtime reaches the driver from a
 * given call site through the same frames each time, so the caller's return address lies at
 * the same distance above the hook's frame: read there first (one load, checked to name a
 * library), and walk the stack with backtrace() only to learn or relearn that distance. */
static int deeper(struct ledger_thread *t, uint64_t slot, unsigned gen) {
  unsigned at = atomic_load_explicit(&deep_slot[slot], memory_order_relaxed);
  if (at != 0 && t->stack_hi != NULL && t->cfa + at - 1 + sizeof(void *) <= t->stack_hi) {
    const void *ret = stack_word((uintptr_t)(t->cfa + at - 1));
    int idx = site(ret, gen);
    if (idx != DEEPER && idx != LEDGER_UNKNOWN) {
      return idx;
    }
  }
  void *frames[LEDGER_DEPTH];
  int n = backtrace(frames, LEDGER_DEPTH);
  bool inside = false; /* past the frames above gpucap's own: a sanitizer's backtrace()
                        * interceptor comes first */
  for (int i = 0; i < n; i++) {
    int idx = site(frames[i], gen);
    if (idx == DEEPER) {
      inside = true;
    } else if (inside) {
      learn_slot(t, slot, frames[i]);
      return idx;
    }
  }
  return LEDGER_UNKNOWN;
}

/* ledger_caller's slow path: a miss, or the thread's periodic look for unloads. */
static int caller_slow(const void *ret) {
  check_unloads(); /* an unloaded library's addresses must not be taken for it */
  unsigned gen = atomic_load_explicit(&generation, memory_order_relaxed);
  int idx = site(ret, gen);
  return idx == DEEPER ? deeper(&ledger_thread, hash_slot((uintptr_t)ret), gen) : idx;
}

int ledger_caller(void) {
#ifdef GPUCAP_NO_LEDGER
  return LEDGER_UNKNOWN;
#endif
  struct ledger_thread *t = &ledger_thread;
  uintptr_t a = (uintptr_t)t->ret;
  t->ret = NULL; /* one charge per LEDGER_ENTER: a charge without one is not misattributed */
  if (a == 0) {
    return LEDGER_UNKNOWN;
  }
  unsigned gen = atomic_load_explicit(&generation, memory_order_relaxed);
  uint64_t w = atomic_load_explicit(&sites[hash_slot(a)], memory_order_relaxed);
  if ((w & ~(uint64_t)0xff) == site_word(a, gen, 0) && ++t->lookups < LEDGER_RECHECK) {
    int idx = (int)(w & 0xff);
    return idx == DEEPER ? deeper(t, hash_slot(a), gen) : idx;
  }
  t->lookups = 0;
  return caller_slow((const void *)a);
}

const char *ledger_name(int lib) {
  if (lib < 0 || lib >= LEDGER_LIBS ||
      (lib >= atomic_load_explicit(&nlibs, memory_order_acquire) && lib != LEDGER_OTHER)) {
    return NULL;
  }
  return libs[lib].name;
}

static void raise_peak(struct cell *c, uint64_t now) {
  uint64_t peak = atomic_load_explicit(&c->peak, memory_order_relaxed);
  while (now > peak && !atomic_compare_exchange_weak_explicit(
                           &c->peak, &peak, now, memory_order_relaxed, memory_order_relaxed)) {
  }
}

/* Device dev's cell of library lib ("unknown" for an index out of range); NULL in a build that
 * keeps no ledger. */
static struct cell *cell_of(int dev, int lib) {
  CHECK_DEVICE(dev);
#ifdef GPUCAP_NO_LEDGER
  return NULL;
#endif
  return &cells[dev][lib >= 0 && lib < LEDGER_LIBS ? lib : LEDGER_UNKNOWN];
}

void ledger_add(int dev, int lib, uint64_t bytes) {
  struct cell *c = cell_of(dev, lib);
  if (c != NULL) {
    raise_peak(c, atomic_fetch_add_explicit(&c->current, bytes, memory_order_relaxed) + bytes);
    raise_peak(&totals[dev],
               atomic_fetch_add_explicit(&totals[dev].current, bytes, memory_order_relaxed) +
                   bytes);
  }
}

void ledger_sub(int dev, int lib, uint64_t bytes) {
  struct cell *c = cell_of(dev, lib);
  if (c != NULL) {
    atomic_fetch_sub_explicit(&c->current, bytes, memory_order_relaxed);
    atomic_fetch_sub_explicit(&totals[dev].current, bytes, memory_order_relaxed);
  }
}

void ledger_each(void (*fn)(void *arg, const struct ledger_line *l), void *arg) {
  int n = atomic_load_explicit(&nlibs, memory_order_acquire);
  for (int dev = 0; dev < GPUCAP_MAX_DEVICES; dev++) {
    if (atomic_load_explicit(&totals[dev].peak, memory_order_relaxed) == 0) {
      continue;
    }
    for (int i = 0; i < LEDGER_LIBS; i++) {
      struct cell *c = &cells[dev][i];
      uint64_t peak = atomic_load_explicit(&c->peak, memory_order_relaxed);
      if (peak == 0 || (i >= n && i != LEDGER_OTHER)) {
        continue;
      }
      struct ledger_line l = {dev, libs[i].name, libs[i].program,
                              atomic_load_explicit(&c->current, memory_order_relaxed), peak};
      fn(arg, &l);
    }
  }
}

void ledger_total(int dev, uint64_t *current, uint64_t *peak) {
  *current = atomic_load_explicit(&totals[dev].current, memory_order_relaxed);
  *peak = atomic_load_explicit(&totals[dev].peak, memory_order_relaxed);
}

void ledger_init(void) {
  void *frame[2];
  int saved = errno;
  (void)backtrace(frame, 2); /* glibc dlopens libgcc_s here, once */
  errno = saved;
}

/* A fork child holds no device memory: every count starts over (the names stay). */
static void fork_child(void) {
  memset(cells, 0, sizeof cells);
  memset(totals, 0, sizeof totals);
  pthread_mutex_init(&libs_lock, NULL);
}
FORK_CHILD(fork_child)
