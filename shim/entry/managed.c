/* The program's own hints about managed memory: cuMemPrefetchAsync (CUDA 8 and 12.2 ABIs,
 * +_ptsz), cuMemAdvise (both ABIs) and the CUDA 13 batches that prefetch. Memory spilled beyond
 * the cap (shim/accounting/spill.h) stays on the host whatever the program asks (docs/design.md,
 * "Beyond the card"): the spilled parts of a prefetch to a device are prefetched to the host
 * instead (nothing moves while they are there; any page the driver moved comes back), and advice
 * that would let a device take them (read-mostly, which copies pages to a reading device; a device
 * as their preferred location; no preferred location) is not given for them. Everything else
 * reaches the driver as the program made it, and the driver's answer is returned; a call that
 * names no spilled memory costs one atomic load. No lock of its own.
 */
#include "shim/entry/prologue.h"
#include "shim/base/log.h"
#include "shim/accounting/spill.h"

#include <stdatomic.h>
#include <stdlib.h>

#define PARTS 8 /* parts of one range kept apart (spill_outside) */

/* The pieces of [p, p + n): kept (outside spilled memory) or spilled, in address order. */
struct pieces {
  uint64_t at[2 * PARTS + 1][2];
  bool spilled[2 * PARTS + 1];
  int n;
};

/* Splits [p, p + n) into pieces; false when none of it is spilled (the call passes as is). */
static bool split(uint64_t p, uint64_t n, struct pieces *out) {
  uint64_t kept[PARTS][2], spilled = 0, at = p, end = p + n;
  int k = spill_outside(p, n, kept, PARTS, &spilled);
  out->n = 0;
  if (spilled == 0) {
    return false;
  }
  for (int i = 0; i <= k; i++) {
    uint64_t lo = i < k ? kept[i][0] : end, len = i < k ? kept[i][1] : 0;
    if (lo > at) {
      out->at[out->n][0] = at;
      out->at[out->n][1] = lo - at;
      out->spilled[out->n++] = true;
    }
    if (len > 0) {
      out->at[out->n][0] = lo;
      out->at[out->n][1] = len;
      out->spilled[out->n++] = false;
    }
    at = lo + len;
  }
  return true;
}

/* A device ordinal the driver knows; anything else passes to the driver for its own error. */
static bool valid_device(int dev) {
  int count = 0;
  return dev >= 0 && real.cuDeviceGetCount && real.cuDeviceGetCount(&count) == CUDA_SUCCESS &&
         dev < count;
}

static void say_kept(const char *what, uint64_t bytes) {
  static atomic_bool said;
  if (!atomic_exchange(&said, true)) {
    log_msg(LOG_INFO,
            "%s of %llu bytes of memory spilled beyond the cap left out: spilled memory "
            "stays on the host (further ones at GPUCAP_VERBOSE=2)",
            what, (unsigned long long)bytes);
  } else {
    log_msg(LOG_DEBUG, "%s of %llu spilled bytes left out", what, (unsigned long long)bytes);
  }
}

/* ---- cuMemPrefetchAsync ---- */

/* The driver's prefetch of one ABI: v2 (a location) or the CUDA 8 one (a device, CU_DEVICE_CPU
 * for the host), per-thread default stream or not. */
static CUresult prefetch_call(int v2, int ptsz, uint64_t p, uint64_t n, CUmemLocation loc,
                              unsigned flags, CUstream s) {
  if (v2) {
    __typeof__(real.cuMemPrefetchAsync_v2) f =
        ptsz ? real.cuMemPrefetchAsync_v2_ptsz : real.cuMemPrefetchAsync_v2;
    return f ? f(p, n, loc, flags, s) : CUDA_ERROR_NOT_SUPPORTED;
  }
  __typeof__(real.cuMemPrefetchAsync) f =
      ptsz ? real.cuMemPrefetchAsync_ptsz : real.cuMemPrefetchAsync;
  CUdevice dev = loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? loc.id : CU_DEVICE_CPU;
  return f ? f(p, n, dev, s) : CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult prefetch(int v2, int ptsz, uint64_t p, uint64_t n, CUmemLocation loc,
                         unsigned flags, CUstream s) {
  struct pieces pc;
  if (loc.type != CU_MEM_LOCATION_TYPE_DEVICE || !split(p, n, &pc) || !valid_device(loc.id)) {
    return prefetch_call(v2, ptsz, p, n, loc, flags, s);
  }
  const CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
  CUresult rc = CUDA_SUCCESS;
  uint64_t kept = 0;
  for (int i = 0; i < pc.n && rc == CUDA_SUCCESS; i++) {
    rc = prefetch_call(v2, ptsz, pc.at[i][0], pc.at[i][1], pc.spilled[i] ? host : loc, flags, s);
    kept += pc.spilled[i] ? pc.at[i][1] : 0;
  }
  say_kept("a prefetch to a device", kept);
  return rc;
}

GPUCAP_EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                          CUstream hStream) {
  HOOK_PROLOGUE(real.cuMemPrefetchAsync);
  CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, dstDevice};
  if (dstDevice == CU_DEVICE_CPU) {
    loc.type = CU_MEM_LOCATION_TYPE_HOST;
  }
  return prefetch(0, 0, devPtr, count, loc, 0, hStream);
}

GPUCAP_EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice,
                                               CUstream hStream) {
  HOOK_PROLOGUE(real.cuMemPrefetchAsync_ptsz);
  CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, dstDevice};
  if (dstDevice == CU_DEVICE_CPU) {
    loc.type = CU_MEM_LOCATION_TYPE_HOST;
  }
  return prefetch(0, 1, devPtr, count, loc, 0, hStream);
}

GPUCAP_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count,
                                             CUmemLocation location, unsigned int flags,
                                             CUstream hStream) {
  HOOK_PROLOGUE(real.cuMemPrefetchAsync_v2);
  return prefetch(1, 0, devPtr, count, location, flags, hStream);
}

GPUCAP_EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count,
                                                  CUmemLocation location, unsigned int flags,
                                                  CUstream hStream) {
  HOOK_PROLOGUE(real.cuMemPrefetchAsync_v2_ptsz);
  return prefetch(1, 1, devPtr, count, location, flags, hStream);
}

/* ---- cuMemAdvise ---- */

static CUresult advise_call(int v2, uint64_t p, uint64_t n, CUmem_advise advice,
                            CUmemLocation loc) {
  if (v2) {
    return real.cuMemAdvise_v2(p, n, advice, loc);
  }
  CUdevice dev = loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? loc.id : CU_DEVICE_CPU;
  return real.cuMemAdvise(p, n, advice, dev);
}

/* Whether the advice would let a device take pages of spilled memory. */
static bool brings(CUmem_advise advice, CUmemLocation loc) {
  return advice == CU_MEM_ADVISE_SET_READ_MOSTLY ||
         advice == CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION ||
         (advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION &&
          loc.type == CU_MEM_LOCATION_TYPE_DEVICE);
}

static CUresult advise(int v2, uint64_t p, uint64_t n, CUmem_advise advice, CUmemLocation loc) {
  struct pieces pc;
  if (!brings(advice, loc) || !split(p, n, &pc) ||
      (loc.type == CU_MEM_LOCATION_TYPE_DEVICE && !valid_device(loc.id))) {
    return advise_call(v2, p, n, advice, loc);
  }
  CUresult rc = CUDA_SUCCESS;
  uint64_t kept = 0;
  bool asked = false;
  for (int i = 0; i < pc.n && rc == CUDA_SUCCESS; i++) {
    if (pc.spilled[i]) {
      kept += pc.at[i][1];
    } else {
      rc = advise_call(v2, pc.at[i][0], pc.at[i][1], advice, loc);
      asked = true;
    }
  }
  if (!asked) {
    /* All of it spilled: the driver still checks the range, through the advice that keeps it
     * where it is. */
    const CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
    rc = advise_call(v2, p, n, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host);
  }
  say_kept("advice", kept);
  return rc;
}

GPUCAP_EXPORT CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                   CUdevice device) {
  HOOK_PROLOGUE(real.cuMemAdvise);
  CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  if (device == CU_DEVICE_CPU) {
    loc.type = CU_MEM_LOCATION_TYPE_HOST;
  }
  return advise(0, devPtr, count, advice, loc);
}

GPUCAP_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice,
                                      CUmemLocation location) {
  HOOK_PROLOGUE(real.cuMemAdvise_v2);
  return advise(1, devPtr, count, advice, location);
}

/* ---- Batches (CUDA 13) ---- */

typedef CUresult (*batch_fn)(CUdeviceptr *, size_t *, size_t, CUmemLocation *, size_t *, size_t,
                             unsigned long long, CUstream);

/* The location of operation i (idxs rising from 0, as cuda.h requires; a malformed batch is the
 * driver's to refuse). */
static CUmemLocation location_of(size_t i, const CUmemLocation *locs, const size_t *idxs,
                                 size_t nlocs) {
  size_t k = 0;
  while (k + 1 < nlocs && idxs[k + 1] <= i) {
    k++;
  }
  return locs[k];
}

/* A batch with spilled memory bound for a device is rewritten: every operation split into its
 * pieces, each with its own location (the host for spilled pieces), and passed as one batch. */
static CUresult batch(batch_fn f, CUdeviceptr *dptrs, size_t *sizes, size_t count,
                      CUmemLocation *locs, size_t *idxs, size_t nlocs, unsigned long long flags,
                      CUstream s) {
  bool wellformed = dptrs && sizes && locs && idxs && nlocs > 0 && nlocs <= count &&
                    count <= SIZE_MAX / (2 * PARTS + 1);
  bool rewrite = false;
  struct pieces pc;
  for (size_t i = 0; wellformed && i < count && !rewrite; i++) {
    CUmemLocation loc = location_of(i, locs, idxs, nlocs);
    rewrite = loc.type == CU_MEM_LOCATION_TYPE_DEVICE && split(dptrs[i], sizes[i], &pc) &&
              valid_device(loc.id);
  }
  if (!rewrite) {
    return f(dptrs, sizes, count, locs, idxs, nlocs, flags, s);
  }
  size_t most = count * (2 * PARTS + 1);
  CUdeviceptr *np = malloc(most * sizeof *np);
  size_t *ns = malloc(most * sizeof *ns), *ni = malloc(most * sizeof *ni);
  CUmemLocation *nl = malloc(most * sizeof *nl);
  CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
  if (np && ns && ni && nl) {
    const CUmemLocation host = {CU_MEM_LOCATION_TYPE_HOST, 0};
    size_t m = 0;
    uint64_t kept = 0;
    for (size_t i = 0; i < count; i++) {
      CUmemLocation loc = location_of(i, locs, idxs, nlocs);
      bool bound = loc.type == CU_MEM_LOCATION_TYPE_DEVICE && split(dptrs[i], sizes[i], &pc);
      for (int k = 0; k < (bound ? pc.n : 1); k++, m++) {
        np[m] = bound ? pc.at[k][0] : dptrs[i];
        ns[m] = bound ? pc.at[k][1] : sizes[i];
        nl[m] = bound && pc.spilled[k] ? host : loc;
        ni[m] = m;
        kept += bound && pc.spilled[k] ? pc.at[k][1] : 0;
      }
    }
    rc = f(np, ns, m, nl, ni, m, flags, s);
    say_kept("a batch prefetch to a device", kept);
  }
  free(np);
  free(ns);
  free(ni);
  free(nl);
  return rc;
}

GPUCAP_EXPORT CUresult cuMemPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                               CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
                                               size_t numPrefetchLocs, unsigned long long flags,
                                               CUstream hStream) {
  HOOK_PROLOGUE(real.cuMemPrefetchBatchAsync);
  return batch(real.cuMemPrefetchBatchAsync, dptrs, sizes, count, prefetchLocs, prefetchLocIdxs,
               numPrefetchLocs, flags, hStream);
}

GPUCAP_EXPORT CUresult cuMemPrefetchBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count,
                                                    CUmemLocation *prefetchLocs,
                                                    size_t *prefetchLocIdxs, size_t numPrefetchLocs,
                                                    unsigned long long flags, CUstream hStream) {
  HOOK_PROLOGUE(real.cuMemPrefetchBatchAsync_ptsz);
  return batch(real.cuMemPrefetchBatchAsync_ptsz, dptrs, sizes, count, prefetchLocs,
               prefetchLocIdxs, numPrefetchLocs, flags, hStream);
}

GPUCAP_EXPORT CUresult cuMemDiscardAndPrefetchBatchAsync(
    CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *prefetchLocs,
    size_t *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags, CUstream hStream) {
  HOOK_PROLOGUE(real.cuMemDiscardAndPrefetchBatchAsync);
  return batch(real.cuMemDiscardAndPrefetchBatchAsync, dptrs, sizes, count, prefetchLocs,
               prefetchLocIdxs, numPrefetchLocs, flags, hStream);
}

GPUCAP_EXPORT CUresult cuMemDiscardAndPrefetchBatchAsync_ptsz(
    CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *prefetchLocs,
    size_t *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags, CUstream hStream) {
  HOOK_PROLOGUE(real.cuMemDiscardAndPrefetchBatchAsync_ptsz);
  return batch(real.cuMemDiscardAndPrefetchBatchAsync_ptsz, dptrs, sizes, count, prefetchLocs,
               prefetchLocIdxs, numPrefetchLocs, flags, hStream);
}
