/* fuzz_cap: the cap invariant as a fuzz target. The input is a stream of operations (8 bytes
 * each: tests/reliability/capops.h) on memory of every family gpucap caps, run by one worker
 * through the real shim (linked in front of the fake driver) over two capped devices. Oracle:
 * the fake driver's own per-device peak (fakecudaPeakBytes), checked after every operation:
 * no device ever holds more than its cap plus the fake's rounding of pool regions; and once
 * the worker has freed everything, reset the primary contexts and seen its pending frees
 * complete, get-info shows every cap free again (no charge leaked). Every answer must be
 * success or, for an allocation, CUDA_ERROR_OUT_OF_MEMORY; patterns written into blocks are
 * intact at their free. A failed check aborts with a message (libFuzzer keeps the input).
 * The settings are fixed per process: GPUCAP_POOL from the environment (default on), and a
 * spill budget with GPUCAP_SPILL (GPUCAP_OVERSUBSCRIBE 0:32MiB,1:16MiB and GPUCAP_SPILL=on unless
 * the environment says otherwise; empty turns them off), so that managed and spilled memory,
 * touched, prefetched and advised, take part; no managed page may be left on a device at the
 * end either.
 */
#include "tests/fakecuda/fakecuda.h"
#include "tests/reliability/capops.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define MiB ((uint64_t)1 << 20)
#define ROUNDING ((uint64_t)64 << 10) /* see tests/reliability/invariant.sh */
#define OP_BYTES 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint64_t caps[CAPOPS_DEVICES] = {24 * MiB, 16 * MiB};

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("fuzz_cap: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort();
}

static void setup(void) {
  static int done;
  if (done) {
    return;
  }
  done = 1;
  /* Read by the fake and by gpucap at their first call, which comes after this. */
  setenv("FAKECUDA_DEVICES", "2", 1);
  setenv("FAKECUDA_MEMORY", "256MiB", 1);
  setenv("FAKECUDA_DRIVER_MEMORY", "off", 1); /* caps of a few MiB: allocations alone */
  setenv("GPUCAP_MEMORY_LIMIT", "0:24MiB,1:16MiB", 1);
  setenv("GPUCAP_REPORT", "off", 1);
  setenv("GPUCAP_POOL", getenv("GPUCAP_POOL") ? getenv("GPUCAP_POOL") : "on", 1);
  setenv("GPUCAP_OVERSUBSCRIBE", "0:32MiB,1:16MiB", 0);
  setenv("GPUCAP_SPILL", "on", 0);
  if (capops_init(caps, false) != 0) {
    die("cannot set up the fake driver");
  }
}

static void check_peaks(size_t op) {
  for (int d = 0; d < CAPOPS_DEVICES; d++) {
    unsigned long long peak = fakecudaPeakBytes(d, 0);
    if (peak > caps[d] + ROUNDING) {
      die("device %d held %llu bytes, cap %llu (after operation %zu)", d, peak,
          (unsigned long long)caps[d], op);
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  setup();
  capops_worker_t *w = capops_worker(0, true);
  if (!w) {
    die("cannot make a worker");
  }
  for (int d = 0; d < CAPOPS_DEVICES; d++) {
    fakecudaPeakBytes(d, 1);
  }
  size_t op = 0;
  for (size_t i = 0; i < size; i += OP_BYTES, op++) {
    capops_step(w, data + i, size - i < OP_BYTES ? size - i : OP_BYTES);
    check_peaks(op);
  }
  capops_stats_t st;
  capops_finish(w, &st);
  check_peaks(op);
  if (st.n[CAPOPS_ERRORS]) {
    die("unexpected answer: %s", st.first_error);
  }
  if (st.n[CAPOPS_HAZARDS] || st.n[CAPOPS_CORRUPT] || st.n[CAPOPS_OVER]) {
    die("hazards %llu, corrupt %llu, get-info over the cap %llu", st.n[CAPOPS_HAZARDS],
        st.n[CAPOPS_CORRUPT], st.n[CAPOPS_OVER]);
  }
  uint64_t lowest = 0;
  if (!capops_all_free(&lowest)) {
    die("a charge stayed: get-info shows %llu bytes free at the end", (unsigned long long)lowest);
  }
  for (int d = 0; d < CAPOPS_DEVICES; d++) {
    fakecuda_managed_t m;
    if (fakecudaManagedUsage(d, &m) != CUDA_SUCCESS || m.resident != 0) {
      die("device %d holds %llu bytes of managed pages at the end", d, m.resident);
    }
  }
  return 0;
}
