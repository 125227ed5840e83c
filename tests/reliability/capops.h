/* capops: one operation at a time on device memory of every family gpucap caps, decoded from a
 * few bytes, for the cap-invariant test (tests/reliability/invariant.c: many threads, random
 * bytes) and the fuzz_cap target (tests/fuzz/fuzz_cap.c: one worker, the fuzzer's bytes). Runs
 * over the fake driver, with gpucap in front of it.
 *
 * Families: pooled cuMemAlloc_v2 (pass-through with GPUCAP_POOL=off), cuMemAllocPitch_v2,
 * stream-ordered memory (own stream, another device's pool, another device's stream; device 0's
 * default pool keeps the memory freed into it, device 1's releases it), managed (touched by
 * device work, prefetched to the device and advised read-mostly or preferred there; beyond the
 * cap under a spill budget, GPUCAP_OVERSUBSCRIBE), spilled (a cuMemAlloc_v2 or pitched block
 * the cap refused, served as managed memory with GPUCAP_SPILL: touched, prefetched and advised
 * the same way),
 * VMM (create, map, set access, release at once; sometimes retained again), CUDA arrays, graph
 * memory (a captured stream-ordered allocation and its free, launched: the graph pool keeps
 * it until the executable graph is destroyed or the pool trimmed). Frees
 * of every kind (synchronous, stream-ordered with device work still pending on the block,
 * unmap, destroy), synchronisation, get-info, a created context destroyed with memory in it,
 * and (for the worker that owns them) a primary-context reset. Request sizes are multiples of
 * 512 bytes, the fake's allocation unit, so a device's use is exactly what gpucap charged.
 *
 * Checks, counted per worker (never aborting): every answer is success or, for an allocation,
 * CUDA_ERROR_OUT_OF_MEMORY; no pending device work touches a block handed out; with
 * FAKECUDA_BACKING=1 the pattern written into a block is intact when it is freed; get-info
 * never shows more than the cap. The oracle of the cap itself is the fake's per-device peak.
 * Thread-safe: workers share nothing but the primary contexts (used by the owner only) and
 * the reset epochs (atomics).
 */
#ifndef GPUCAP_TESTS_RELIABILITY_CAPOPS_H
#define GPUCAP_TESTS_RELIABILITY_CAPOPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CAPOPS_DEVICES 2

typedef struct capops_worker capops_worker_t;

/* What a worker did and found: counters, and the first unexpected answer. */
enum capops_counter {
  CAPOPS_OPS,
  CAPOPS_ALLOCS,
  CAPOPS_REFUSED,
  CAPOPS_FREES,
  CAPOPS_PENDING_FREES, /* stream-ordered frees */
  CAPOPS_DESTROYS,
  CAPOPS_RESETS,
  CAPOPS_CHECKED, /* patterns read back at a free */
  CAPOPS_ERRORS,  /* answers other than the expected ones */
  CAPOPS_CORRUPT, /* patterns found changed at a free */
  CAPOPS_HAZARDS, /* blocks handed out with device work still pending on them */
  CAPOPS_OVER,    /* get-info above the cap */
  CAPOPS_FAMILY,  /* + family: allocations of that family (10 of them) */
  CAPOPS_COUNTERS = CAPOPS_FAMILY + 10
};

typedef struct capops_stats {
  unsigned long long n[CAPOPS_COUNTERS];
  char first_error[200];
} capops_stats_t;

/* Each counter's name, as the invariant test prints it ("pooled", "VMM" for the families). */
extern const char *const capops_names[CAPOPS_COUNTERS];

/* Whether the driver is the fake, whose test hooks leave device work pending on a block and
 * count the hazards of blocks handed out under pending work; a real driver has none, and then
 * neither is done. */
bool capops_fake_hooks(void);

/* Initialises the driver (cuInit) and retains every device's primary context. caps[d] is
 * device d's cap in bytes (what get-info may show at most); backing: FAKECUDA_BACKING=1 is
 * set, so patterns can be checked. Returns 0, or -1 when the driver could not be set up.
 * Call once, before any worker exists. */
int capops_init(const uint64_t caps[CAPOPS_DEVICES], bool backing);

/* A worker with its own created context and streams on every device; the owner also uses the
 * primary contexts and may reset them. NULL when the driver refused. Use from one thread. */
capops_worker_t *capops_worker(int id, bool owner);

/* One operation decoded from bytes[0 .. n) (missing bytes read as 0). */
void capops_step(capops_worker_t *w, const uint8_t *bytes, size_t n);

/* Frees everything the worker holds, waits for its streams and destroys its created contexts
 * (the owner also resets the primary contexts); then frees the worker. */
void capops_finish(capops_worker_t *w, capops_stats_t *out);

/* Whether every device's get-info shows the whole cap free (nothing stays charged once every
 * worker finished), waiting for pending frees to be seen; *free_out gets the lowest figure. */
bool capops_all_free(uint64_t *free_out);

#endif
