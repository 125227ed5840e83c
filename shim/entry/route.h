/* The table of hooked driver entry points (shim/base/hooks.def) and the routing rule that maps a
 * cuGetProcAddress query to the hook of exactly the ABI the driver handed back.
 * Immutable after load; every function here is thread-safe and allocation-free.
 */
#ifndef GPUCAP_SHIM_ROUTE_H
#define GPUCAP_SHIM_ROUTE_H

#include "shim/base/cudadefs.h"

/* Per-thread-default-stream kind of a variant (same names as tests/fakecuda/gpa_table.inc). */
enum gpa_pt { GPA_PT_NONE = 0, GPA_PT_PTDS = 1, GPA_PT_PTSZ = 2 };

struct hook_entry {
  const char *base;   /* name as queried */
  int version;        /* CUDA version of this ABI */
  enum gpa_pt pt;     /* per-thread kind */
  const char *symbol; /* driver export and gpucap export */
  void (*hook)(void); /* gpucap's function with that ABI, or NULL for a PASS variant */
};

/* The whole table, in hooks.def order; `*count` receives its length. */
const struct hook_entry *route_table(int *count);

/* A function pointer as the object pointer dlsym and cuGetProcAddress hand out (POSIX
 * guarantees the two have the same representation). */
void *route_fn_ptr(void (*fn)(void));

/* gpucap's exported hook whose symbol is exactly `symbol`, or NULL. O(table size). */
void *route_export(const char *symbol);

/* The table entry the driver's resolution rule selects for (base, version, flags): the highest
 * version <= `version` among base's entries, switched to its per-thread variant when
 * flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM and one exists at <= `version`.
 * NULL when base is not hooked or no version is low enough. O(table size). */
const struct hook_entry *route_select(const char *base, int version, cuuint64_t flags);

/* What gpucap hands out for a successful driver answer `got` to (base, version, flags): the
 * selected hook, or `got` itself when base or the selected variant is not hooked. Logs at debug
 * level when `got` is not the driver's export of the selected symbol (the rule wins; see
 * docs/design.md). */
void *route_answer(const char *base, int version, cuuint64_t flags, void *got);

#endif
