/* Unit tests for shim/spill: the spill budgets' charges, and the spilled ranges the prefetch and
 * advice hooks look up, including a freed allocation's range and a new one at the same address
 * both recorded for a moment (the driver hands a freed address out again before the free's
 * record is gone). shim/accounting/spill.c is linked with config/ and stand-ins for the shim's
 * settings, log and driver table. Prints TAP.
 */
#include "config/cfg.h"
#include "shim/base/check.h"
#include "shim/base/log.h"
#include "shim/base/real.h"
#include "shim/base/settings.h"
#include "shim/accounting/spill.h"
#include "tests/tap.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((uint64_t)1 << 20)

/* ---- Stand-ins for the shim around spill.c. ---- */

struct real_fns real;
static cfg_t cfg;

const cfg_t *settings_get(void) {
  return &cfg;
}

bool settings_valid(void) {
  return cfg.valid;
}

void log_msg(enum log_level level, const char *fmt, ...) {
  (void)level;
  (void)fmt;
}

void check_failed(const char *cond, const char *file, int line) {
  tap_diag("check failed: %s (%s:%d)", cond, file, line);
  abort();
}

bool check_held(pthread_mutex_t *m) {
  (void)m;
  return true;
}

static const char *env_get(void *ctx, const char *name, bool secure) {
  (void)ctx;
  (void)secure;
  if (strcmp(name, "GPUCAP_OVERSUBSCRIBE") == 0) {
    return "0:64MiB,1:16MiB";
  }
  return strcmp(name, "GPUCAP_SPILL") == 0 ? "on" : NULL;
}

/* The parts of [p, p + n) outside spilled memory, as text "start+len ..." (relative to base),
 * and the spilled bytes. */
static const char *outside(uint64_t base, uint64_t p, uint64_t n, int max, uint64_t *spilled) {
  static char text[256];
  uint64_t parts[8][2];
  int k = spill_outside(base + p, n, parts, max, spilled);
  size_t o = 0;
  text[0] = '\0';
  for (int i = 0; i < k && o < sizeof text; i++) {
    o +=
        (size_t)snprintf(text + o, sizeof text - o, "%s%llu+%llu", i ? " " : "",
                         (unsigned long long)(parts[i][0] - base), (unsigned long long)parts[i][1]);
  }
  return text;
}

static void test_budget(void) {
  TAP_EQ(spill_budget(0), 64 * MiB, "device 0's budget");
  TAP_EQ(spill_budget(1), 16 * MiB, "device 1's");
  TAP_EQ(spill_budget(2), 0, "device 2 has none");
  TAP_EQ(spill_budget(-1), 0, "nor does a bad ordinal");
  tap_ok(spill_charge(0, 40 * MiB) && spill_charge(0, 24 * MiB), "64 MiB in two charges");
  tap_ok(!spill_charge(0, 1), "not a byte more");
  tap_ok(!spill_charge(2, 1), "nothing on a device without a budget");
  spill_credit(0, 40 * MiB);
  TAP_EQ(spill_used(0), 24 * MiB, "a credit returns its bytes");
  spill_credit(0, 24 * MiB);
  spill_counts_t c;
  spill_counts(0, &c);
  tap_ok(c.budget == 64 * MiB && c.now == 0 && c.peak == 64 * MiB,
         "the figures: now 0, peak 64 MiB");
}

static void test_ranges(void) {
  const uint64_t base = (uint64_t)1 << 40;
  uint64_t spilled = 0;
  TAP_EQ(strcmp(outside(base, 0, 100, 8, &spilled), "0+100"), 0, "nothing spilled: all outside");
  TAP_EQ(spilled, 0, "  none spilled");
  uint64_t a = spill_remember(base, 2 * MiB, 5 * MiB, 0); /* [2, 5) MiB of an allocation */
  uint64_t b = spill_remember(base + 8 * MiB, 0, MiB, 1); /* [8, 9) MiB: another, all spilled */
  tap_ok(a != 0 && b != 0 && a != b, "two ranges, each with an id of its own");
  spill_counts_t c;
  spill_counts(0, &c);
  TAP_EQ(c.allocs, 1, "device 0 counts one spilled allocation");
  const char *t = outside(base, 0, 10 * MiB, 8, &spilled);
  TAP_EQ(strcmp(t, "0+2097152 5242880+3145728 9437184+1048576"), 0, "the parts outside (%s)", t);
  TAP_EQ(spilled, 4 * MiB, "  4 MiB spilled in the query");
  t = outside(base, 3 * MiB, MiB, 8, &spilled);
  tap_ok(t[0] == '\0' && spilled == MiB, "a query inside a spilled range: nothing outside");
  t = outside(base, 0, 10 * MiB, 2, &spilled);
  TAP_EQ(strcmp(t, "0+2097152 5242880+3145728"), 0, "parts beyond max are left out (%s)", t);

  /* The freed allocation at base is still recorded when a new one there is: a longer range. */
  uint64_t y = spill_remember(base, 2 * MiB, 7 * MiB, 0);
  t = outside(base, 6 * MiB, MiB, 8, &spilled);
  tap_ok(t[0] == '\0' && spilled == MiB, "the new range covers [6, 7) MiB beyond the old one");
  spill_forget(a);
  t = outside(base, 2 * MiB, 5 * MiB, 8, &spilled);
  tap_ok(t[0] == '\0' && spilled == 5 * MiB,
         "forgetting the old one by its id leaves the new one whole (%s)", t);
  spill_forget(a);
  spill_forget(0);
  t = outside(base, 2 * MiB, MiB, 8, &spilled);
  tap_ok(t[0] == '\0', "forgetting it again, or id 0, changes nothing");
  spill_forget(y);
  spill_forget(b);
  t = outside(base, 0, 10 * MiB, 8, &spilled);
  tap_ok(strcmp(t, "0+10485760") == 0 && spilled == 0, "all forgotten: all outside");
}

int main(void) {
  cfg_load(&cfg, env_get, NULL, NULL, 0);
  test_budget();
  test_ranges();
  return tap_done();
}
