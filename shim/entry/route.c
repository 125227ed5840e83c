/* The hook table built from shim/base/hooks.def, and the cuGetProcAddress routing rule.
 * The rule is the driver's own (docs/design.md, "Routing"): highest ABI version not above
 * the request, per-thread variant on request. Read-only data; no locks needed.
 */
#include "shim/entry/route.h"

#include "shim/base/log.h"
#include "shim/base/real.h"

#include <string.h>

static const struct hook_entry table[] = {
#define HOOK(base, version, pt, symbol) {#base, version, pt, #symbol, (void (*)(void)) & symbol},
#define PASS(base, version, pt, symbol) {#base, version, pt, #symbol, NULL},
#include "shim/base/hooks.def"
#undef PASS
#undef HOOK
};

enum { TABLE_LEN = sizeof table / sizeof table[0] };

const struct hook_entry *route_table(int *count) {
  *count = TABLE_LEN;
  return table;
}

SHIM_UNINSTRUMENTED void *route_fn_ptr(void (*fn)(void)) {
  union {
    void (*fn)(void);
    void *ptr;
  } u = {.fn = fn};
  return u.ptr;
}

SHIM_UNINSTRUMENTED void *route_export(const char *symbol) {
  for (int i = 0; i < TABLE_LEN; i++) {
    if (table[i].hook && strcmp(table[i].symbol, symbol) == 0) {
      return route_fn_ptr(table[i].hook);
    }
  }
  return NULL;
}

const struct hook_entry *route_select(const char *base, int version, cuuint64_t flags) {
  const struct hook_entry *plain = NULL, *per_thread = NULL;
  for (int i = 0; i < TABLE_LEN; i++) {
    const struct hook_entry *e = &table[i];
    if (e->version > version || strcmp(e->base, base) != 0) {
      continue;
    }
    if (e->pt == GPA_PT_NONE) {
      if (!plain || e->version > plain->version) {
        plain = e;
      }
    } else if (!per_thread || e->version > per_thread->version) {
      per_thread = e;
    }
  }
  if ((flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && per_thread) {
    return per_thread;
  }
  return plain;
}

void *route_answer(const char *base, int version, cuuint64_t flags, void *got) {
  const struct hook_entry *e = route_select(base, version, flags);
  if (!e || !e->hook) {
    return got;
  }
  void *exported = real_driver_sym(e->symbol);
  if (exported != got) {
    log_msg(LOG_DEBUG,
            "cuGetProcAddress(%s, %d, %llu): driver answered %p, its %s is %p; "
            "routing by the version rule",
            base, version, (unsigned long long)flags, got, e->symbol, exported);
  }
  return route_fn_ptr(e->hook);
}
