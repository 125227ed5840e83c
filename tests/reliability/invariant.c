/* invariant: the cap holds whatever a program does. THREADS workers (tests/reliability/capops.h)
 * each run OPS random operations over every allocation family on two devices, in their own
 * created contexts (worker 0 also in the primary contexts, which it resets now and then),
 * freeing at random, with device work pending on blocks they free, destroying their contexts
 * with memory in them, under caps tight enough that allocations are refused all the time. Run
 * with gpucap preloaded over the fake driver with FAKECUDA_STATS (and FAKECUDA_BACKING=1): the
 * script checks from the fake's own per-device peak that no device ever held more than its
 * cap. Prints TAP and `# figure` lines. SPILL 1: allocations beyond the cap are expected to
 * spill (GPUCAP_OVERSUBSCRIBE and GPUCAP_SPILL set); 0 or absent: none may.
 * usage: invariant THREADS OPS SEED CAP0 CAP1 BACKING [SPILL]
 */
#include "tests/reliability/capops.h"
#include "tests/tap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXTHREADS 16

static long ops;
static unsigned seed;
static pthread_barrier_t finish_line;
static capops_stats_t stats[MAXTHREADS];
static int made[MAXTHREADS];

/* xorshift32: each worker's own stream of random bytes. */
static uint32_t next(uint32_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 17;
  *x ^= *x << 5;
  return *x;
}

static void *work(void *arg) {
  int id = (int)(intptr_t)arg;
  uint32_t x = seed * 2654435761u + (uint32_t)id * 40503u + 1u;
  capops_worker_t *w = capops_worker(id, id == 0);
  made[id] = w != NULL;
  for (long i = 0; w && i < ops; i++) {
    uint8_t bytes[8];
    for (int k = 0; k < 8; k += 4) {
      uint32_t v = next(&x);
      memcpy(bytes + k, &v, 4);
    }
    capops_step(w, bytes, sizeof bytes);
  }
  /* The others finish first: worker 0's final resets free what a reset left in their names. */
  if (id != 0 && w) {
    capops_finish(w, &stats[id]);
  }
  pthread_barrier_wait(&finish_line);
  if (id == 0 && w) {
    capops_finish(w, &stats[id]);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 7) {
    fprintf(stderr, "usage: invariant THREADS OPS SEED CAP0 CAP1 BACKING [SPILL]\n");
    return 2;
  }
  int threads = atoi(argv[1]);
  ops = atol(argv[2]);
  seed = (unsigned)strtoul(argv[3], NULL, 0);
  uint64_t caps[CAPOPS_DEVICES] = {strtoull(argv[4], NULL, 0), strtoull(argv[5], NULL, 0)};
  if (threads < 1 || threads > MAXTHREADS) {
    threads = 4;
  }
  tap_ok(capops_init(caps, atoi(argv[6]) != 0) == 0, "the driver and both primary contexts");
  pthread_t t[MAXTHREADS];
  pthread_barrier_init(&finish_line, NULL, (unsigned)threads);
  for (int i = 0; i < threads; i++) {
    pthread_create(&t[i], NULL, work, (void *)(intptr_t)i);
  }
  for (int i = 0; i < threads; i++) {
    pthread_join(t[i], NULL);
  }
  capops_stats_t sum = {0};
  const char *first = NULL;
  int workers = 0;
  for (int i = 0; i < threads; i++) {
    workers += made[i];
    for (int c = 0; c < CAPOPS_COUNTERS; c++) {
      sum.n[c] += stats[i].n[c];
    }
    if (!first && stats[i].n[CAPOPS_ERRORS]) {
      first = stats[i].first_error;
    }
  }
  const unsigned long long *n = sum.n;
  TAP_EQ(workers, threads, "%d workers, each with a context on both devices", threads);
  tap_ok(n[CAPOPS_ERRORS] == 0, "every answer was success or, for an allocation, OUT_OF_MEMORY%s%s",
         first ? ": first exception: " : "", first ? first : "");
  if (capops_fake_hooks()) {
    TAP_EQ(n[CAPOPS_HAZARDS], 0, "no block was handed out with device work still pending on it");
  } else {
    tap_skip("no block was handed out with device work still pending on it",
             "only the fake driver leaves work pending and counts hazards");
  }
  TAP_EQ(n[CAPOPS_CORRUPT], 0, "no pattern changed between its write and its free (%llu checked)",
         n[CAPOPS_CHECKED]);
  TAP_EQ(n[CAPOPS_OVER], 0, "get-info never showed more than the cap");
  tap_ok(n[CAPOPS_REFUSED] > 0, "the caps were tight: %llu allocations refused", n[CAPOPS_REFUSED]);
  bool spill = argc > 7 && atoi(argv[7]) != 0;
  for (int c = CAPOPS_FAMILY; c < CAPOPS_COUNTERS - 1; c++) {
    tap_ok(n[c] > 0, "%s: %llu allocations", capops_names[c], n[c]);
  }
  const int spilled = CAPOPS_COUNTERS - 1; /* the last family: only beyond the cap */
  tap_ok(spill ? n[spilled] > 0 : n[spilled] == 0, "%s: %llu allocations%s", capops_names[spilled],
         n[spilled], spill ? "" : " (none without a spill budget)");
  tap_ok(n[CAPOPS_DESTROYS] > 0 && n[CAPOPS_RESETS] > 0,
         "%llu context destroys, %llu primary resets", n[CAPOPS_DESTROYS], n[CAPOPS_RESETS]);
  uint64_t lowest = 0;
  tap_ok(capops_all_free(&lowest), "at the end get-info shows every cap free again (lowest %llu)",
         (unsigned long long)lowest);
  printf("# figure");
  for (int c = 0; c < CAPOPS_FAMILY; c++) {
    if (c != CAPOPS_ERRORS && c != CAPOPS_CORRUPT && c != CAPOPS_HAZARDS && c != CAPOPS_OVER) {
      printf(" %s=%llu", capops_names[c], n[c]);
    }
  }
  printf("\n");
  return tap_done();
}
