/* What every driver hook starts with: gpucap started (shim/entry/init.h) and the driver's entry
 * points the hook needs present, or the driver's own answer before it can be reached. Hooks include
 * this header; nothing below them does.
 */
#ifndef GPUCAP_SHIM_PROLOGUE_H
#define GPUCAP_SHIM_PROLOGUE_H

#include "shim/base/export.h"
#include "shim/entry/init.h"
#include "shim/accounting/ledger.h"
#include "shim/base/real.h"

/* The first statement of a hook: returns `rc` from it unless gpucap has started and `needed`
 * (the driver entry points the hook calls, e.g. real.cuMemAlloc_v2) holds. A hook that may
 * charge an allocation starts with LEDGER_ENTER() (shim/accounting/ledger.h) before it, in the
 * exported function itself. */
#define HOOK_PROLOGUE_OR(rc, needed)                                                               \
  do {                                                                                             \
    if (!init_ready(NULL) || !(needed)) {                                                          \
      return (rc);                                                                                 \
    }                                                                                              \
  } while (0)

/* HOOK_PROLOGUE_OR with CUDA_ERROR_NOT_INITIALIZED: what the driver answers before cuInit, and
 * what a driver without that entry point can be taken to answer. */
#define HOOK_PROLOGUE(needed) HOOK_PROLOGUE_OR(CUDA_ERROR_NOT_INITIALIZED, needed)

#endif
