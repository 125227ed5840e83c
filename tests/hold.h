/* test_hold(): with TEST_HOLD_MS=N in the environment (tests/gpu/check.sh sets it), waits N
 * milliseconds, so that a watcher outside the process (tests/gpu/gpuwatch) sees what the process
 * holds at that moment; without it, returns at once. For the C and C++ test programs. Header
 * only. */
#ifndef GPUCAP_TESTS_HOLD_H
#define GPUCAP_TESTS_HOLD_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline void test_hold(void) {
  const char *v = getenv("TEST_HOLD_MS");
  if (v == NULL) {
    return;
  }
  long ms = atol(v);
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
  fflush(stdout);
  nanosleep(&t, NULL);
}

#endif
