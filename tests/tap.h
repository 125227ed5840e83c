/* Minimal TAP producer for gpucap's C test programs.
 *
 * Each test program prints `ok N - what` / `not ok N - what` lines and a trailing plan
 * `1..N`, so `prove` (and CI) can count results. tap_done() returns the exit status:
 * 0 when every check passed, 1 otherwise. Not thread-safe: call from one thread.
 */
#ifndef GPUCAP_TESTS_TAP_H
#define GPUCAP_TESTS_TAP_H

#include <stdarg.h>
#include <stdio.h>

static int tap_count;
static int tap_failed;

/* Records one check; prints the formatted description. Returns cond (as 0/1). */
__attribute__((format(printf, 2, 3), unused)) static int tap_ok(int cond, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tap_count++;
  printf("%sok %d - ", cond ? "" : "not ", tap_count);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  if (!cond) {
    tap_failed++;
  }
  fflush(stdout);
  return cond != 0;
}

/* Prints a diagnostic line (TAP comment). */
__attribute__((format(printf, 1, 2), unused)) static void tap_diag(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("# ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
}

/* Records a skipped check with its reason. */
__attribute__((unused)) static void tap_skip(const char *what, const char *why) {
  tap_count++;
  printf("ok %d - %s # SKIP %s\n", tap_count, what, why);
  fflush(stdout);
}

/* Compares two integers, printing both on mismatch. */
#define TAP_EQ(got, want, ...)                                                                     \
  do {                                                                                             \
    long long tap_g_ = (long long)(got), tap_w_ = (long long)(want);                               \
    if (!tap_ok(tap_g_ == tap_w_, __VA_ARGS__)) {                                                  \
      tap_diag("  got %lld, want %lld (%s:%d)", tap_g_, tap_w_, __FILE__, __LINE__);               \
    }                                                                                              \
  } while (0)

/* Prints the plan and returns the exit status for main(). */
__attribute__((unused)) static int tap_done(void) {
  printf("1..%d\n", tap_count);
  fflush(stdout);
  return tap_failed ? 1 : 0;
}

#endif
