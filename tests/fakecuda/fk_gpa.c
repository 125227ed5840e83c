/* Entry-point resolution: cuGetProcAddress (11030 ABI), cuGetProcAddress_v2 (12000 ABI) and
 * all usable before cuInit (cuGetExportTable: fk_export.c).
 *
 * The table is gpa_table.inc, generated from cudaTypedefs.h (regen.sh): one entry per PFN
 * typedef, sorted by name then version. A query (name, cudaVersion, flags) picks the highest
 * non-per-thread entry at or below cudaVersion; with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
 * a per-thread entry at or below cudaVersion wins (shared/research/cudart-probe.md section 2).
 * The pointer handed out is the fake's own export (the library is linked -Bsymbolic).
 */
#include <string.h>

#include "tests/fakecuda/fk.h"

enum { GPA_PT_NONE, GPA_PT_PTDS, GPA_PT_PTSZ };

struct gpa_entry {
  const char *name;
  int version;
  int pt;
  const char *symbol;
};

static const struct gpa_entry table[] = {
#define GPA_ENTRY(name, version, pt, symbol) {name, version, pt, symbol},
#include "tests/fakecuda/gpa_table.inc"
#undef GPA_ENTRY
};

#define NTABLE (sizeof table / sizeof table[0])

/* First entry whose name is >= name. */
static size_t lower_bound(const char *name) {
  size_t lo = 0, hi = NTABLE;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (strcmp(table[mid].name, name) < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

static CUresult resolve(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                        CUdriverProcAddressQueryResult *status) {
  if (symbol == NULL || pfn == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  /* Only the two documented flag bits exist; a version above the driver's is rejected as
   * documented in cuda.h (and observed: NVIDIA/cccl#6895). */
  if (flags > (CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ||
      cudaVersion > FK_DRIVER_VERSION) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pfn = NULL;
  size_t i = lower_bound(symbol);
  if (i == NTABLE || strcmp(table[i].name, symbol) != 0) {
    if (status != NULL) {
      *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  const struct gpa_entry *base = NULL, *pt = NULL;
  for (; i < NTABLE && strcmp(table[i].name, symbol) == 0; i++) {
    if (table[i].version > cudaVersion) {
      continue;
    }
    if (table[i].pt == GPA_PT_NONE) {
      base = &table[i];
    } else if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
      pt = &table[i];
    }
  }
  if (base == NULL) {
    if (status != NULL) {
      *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  int idx = fk_export_index(pt ? pt->symbol : base->symbol);
  if (idx < 0) { /* regen.sh guarantees every symbol is exported */
    return CUDA_ERROR_UNKNOWN;
  }
  memcpy(pfn, &fk_exports[idx].fn, sizeof(void *));
  if (status != NULL) {
    *status = CU_GET_PROC_ADDRESS_SUCCESS;
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                 cuuint64_t flags) {
  fk_note_caller(__builtin_return_address(0));
  FK_BODY(FK_ANYTIME, resolve(symbol, pfn, cudaVersion, flags, NULL));
}

FK_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags,
                                    CUdriverProcAddressQueryResult *symbolStatus) {
  fk_note_caller(__builtin_return_address(0));
  FK_BODY(FK_ANYTIME, resolve(symbol, pfn, cudaVersion, flags, symbolStatus));
}
