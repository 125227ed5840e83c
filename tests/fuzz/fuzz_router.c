/* fuzz_router: the cuGetProcAddress routing rule of shim/entry/route.c (route_select, route_answer,
 * route_export) against the driver's rule applied to tests/fakecuda/gpa_table.inc, the table
 * generated from <cudaTypedefs.h>: for a (name, version, flags) query the driver answers the
 * highest non-per-thread ABI at or below the version, or with the per-thread flag the highest
 * per-thread one; gpucap must hand out the hook of exactly that ABI for every hooked variant,
 * and the driver's own pointer for PASS variants, other names and unresolvable queries.
 *
 * shim/entry/route.c is compiled in (white-box, as tests/unit/test_bfc_check.c does with bfc.c)
 * with the hook functions replaced by distinct stubs, so no other shim code is linked;
 * real_driver_sym and log_msg are stubs that record what they were asked. Inputs: a mode byte, a
 * version, flags and a name (raw bytes, or a table name with fuzzed edits). A failed check aborts.
 */
#include "shim/base/cudadefs.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Distinct stand-ins for gpucap's hook functions: the table only takes their addresses. */
#if defined(__x86_64__)
#define HOOK(base, version, pt, symbol)                                                            \
  __asm__(".pushsection .text\n.globl " #symbol "\n.type " #symbol ", @function\n" #symbol         \
          ":\n\tud2\n.popsection");
#else
#define PRAGMA(x) _Pragma(#x)
#define HOOK(base, version, pt, symbol) PRAGMA(weak symbol)
#endif
#include "shim/base/hooks.def"
#undef HOOK

#include "shim/entry/route.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define require(cond, ...)                                                                         \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_router: check failed at line %d: %s: ", __LINE__, #cond);              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

/* ---------------------------------------------------------------- stubs for route.c */

static const char *asked;     /* the last name real_driver_sym was asked for */
static int logged;            /* log_msg calls */
static char driver_sym_dummy; /* what the stub driver "exports" */

void *real_driver_sym(const char *name) {
  asked = name;
  return &driver_sym_dummy;
}

void log_msg(enum log_level level, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  (void)level;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  logged++;
}

/* ---------------------------------------------------------------- the driver's rule */

struct gpa {
  const char *name;
  int version;
  int pt;
  const char *symbol;
};

static const struct gpa gpa[] = {
#define GPA_ENTRY(name, version, pt, symbol) {name, version, pt, symbol},
#include "tests/fakecuda/gpa_table.inc"
#undef GPA_ENTRY
};
enum { NGPA = sizeof gpa / sizeof gpa[0] };

/* The symbol the driver resolves (name, version, flags) to, or NULL (CUDA_ERROR_NOT_FOUND). */
static const char *driver_rule(const char *name, int version, cuuint64_t flags) {
  const struct gpa *plain = NULL, *pt = NULL;
  for (int i = 0; i < NGPA; i++) {
    const struct gpa *e = &gpa[i];
    if (strcmp(e->name, name) != 0 || e->version > version) {
      continue;
    }
    if (e->pt == GPA_PT_NONE) {
      plain = !plain || e->version > plain->version ? e : plain;
    } else if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
      pt = !pt || e->version > pt->version ? e : pt;
    }
  }
  if (plain == NULL) {
    return NULL;
  }
  return pt ? pt->symbol : plain->symbol;
}

static int hooked_base(const char *name) {
  int n = 0;
  const struct hook_entry *t = route_table(&n);
  for (int i = 0; i < n; i++) {
    if (strcmp(t[i].base, name) == 0) {
      return 1;
    }
  }
  return 0;
}

/* Once: every hook entry is an answer the driver gives, and every export is distinct. */
static void check_table(void) {
  int n = 0;
  const struct hook_entry *t = route_table(&n);
  require(n > 0, "empty hook table");
  for (int i = 0; i < n; i++) {
    cuuint64_t flags = t[i].pt == GPA_PT_NONE ? 0 : CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    const char *want = driver_rule(t[i].base, t[i].version, flags);
    require(want && strcmp(want, t[i].symbol) == 0, "%s@%d is not the driver's %s", t[i].base,
            t[i].version, t[i].symbol);
    /* A PASS variant (no hook) is exported by nobody but the driver. */
    require(route_export(t[i].symbol) == route_fn_ptr(t[i].hook), "export of %s", t[i].symbol);
    for (int j = 0; j < i; j++) {
      require(strcmp(t[i].symbol, t[j].symbol) != 0, "%s listed twice", t[i].symbol);
#if defined(__x86_64__)
      require(t[i].hook == NULL || t[i].hook != t[j].hook, "%s and %s share a hook", t[i].symbol,
              t[j].symbol);
#endif
    }
  }
}

/* ---------------------------------------------------------------- one query */

static void query(const char *name, int version, cuuint64_t flags) {
  const struct hook_entry *e = route_select(name, version, flags);
  /* Flags outside the two documented bits make the driver fail, so gpucap never routes them;
   * route_select must still be total and safe. */
  int valid_flags = flags <= 3;
  const char *want = driver_rule(name, version, flags);
  if (valid_flags) {
    if (hooked_base(name) && want != NULL) {
      require(e != NULL && strcmp(e->symbol, want) == 0,
              "(%s, %d, %llu): gpucap picks %s, the driver %s", name, version,
              (unsigned long long)flags, e ? e->symbol : "nothing", want);
    } else {
      require(e == NULL, "(%s, %d, %llu): gpucap picks %s, the driver %s", name, version,
              (unsigned long long)flags, e->symbol, want ? want : "nothing (NOT_FOUND)");
    }
  }
  if (e != NULL) {
    require(strcmp(e->base, name) == 0 && e->version <= version, "selected a foreign entry");
  }
  /* route_answer: the hook when the rule selects one, else the driver's pointer untouched. */
  static char got;
  asked = NULL;
  void *routed = route_answer(name, version, flags, &got);
  if (e == NULL || e->hook == NULL) {
    require(routed == &got, "(%s, %d): an unhooked answer was replaced", name, version);
  } else {
    require(routed == route_fn_ptr(e->hook), "(%s, %d): not the selected hook", name, version);
    require(asked != NULL && strcmp(asked, e->symbol) == 0, "cross-check asked for %s",
            asked ? asked : "nothing");
  }
  void *exp = route_export(name);
  int n = 0;
  const struct hook_entry *t = route_table(&n);
  int listed = 0;
  for (int i = 0; i < n; i++) {
    listed |= t[i].hook != NULL && strcmp(t[i].symbol, name) == 0;
  }
#if defined(__x86_64__)
  require((exp != NULL) == listed, "route_export(%s)", name);
#else
  (void)exp;
  (void)listed;
#endif
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int checked;
  static char name[512];
  if (!checked) {
    check_table();
    checked = 1;
  }
  if (size < 6) {
    return 0;
  }
  unsigned mode = data[0];
  int32_t version;
  memcpy(&version, data + 1, sizeof version);
  cuuint64_t flags = data[5];
  data += 6;
  size -= 6;
  if (mode & 0x80 && size >= 8) {
    memcpy(&flags, data, 8); /* wide flags now and then */
    data += 8;
    size -= 8;
  }
  if (mode & 0x40) {
    version = (int)(version % 14000); /* mostly real CUDA versions */
  }
  size_t n = size < sizeof name - 1 ? size : sizeof name - 1;
  if (mode & 1 && size >= 2) {
    /* A table name, then the rest of the input as an edit: 0 keep, 1 cut the last bytes,
     * 2 append the bytes, 3 replace one byte. */
    unsigned idx = ((unsigned)data[0] << 8 | data[1]) % (unsigned)NGPA;
    const char *base = gpa[idx].name;
    size_t bl = strlen(base);
    memcpy(name, base, bl + 1);
    const uint8_t *rest = data + 2;
    size_t rl = size - 2;
    switch ((mode >> 1) & 3) {
    case 1:
      name[rl < bl ? bl - rl : 0] = '\0';
      break;
    case 2:
      rl = rl < sizeof name - 1 - bl ? rl : sizeof name - 1 - bl;
      memcpy(name + bl, rest, rl);
      name[bl + rl] = '\0';
      break;
    case 3:
      if (rl > 0 && bl > 0) {
        name[rest[0] % bl] = (char)(rl > 1 ? rest[1] : 0);
      }
      break;
    default:
      break;
    }
  } else {
    memcpy(name, data, n);
    name[n] = '\0';
  }
  query(name, version, flags);
  return 0;
}
