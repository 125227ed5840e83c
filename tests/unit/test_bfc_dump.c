/* Tests for bfc_format_report: OOM headline, summary figures in the reports' one size format,
 * the TensorFlow bins that hold chunks, the Stats block of the pool's own figures, the 100-cell
 * occupancy map with region boundaries, and snprintf-style truncation that never writes past
 * the caller's buffer. Prints TAP.
 */
#include "core/bfc.h"
#include "tests/tap.h"
#include "tests/unit/test_bfc_prim.h"

#include <string.h>

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)

static fake_prim_t fake;
static char buf[16384];

static bfc_pool_t *mk(uint64_t limit, int growth) {
  bfc_prim_t prim = fake_init(&fake, MiB);
  bfc_options_t opts = {.limit = limit, .allow_growth = growth};
  bfc_pool_t *p = NULL;
  bfc_create(&opts, &prim, &p);
  return p;
}

static uint64_t must(bfc_pool_t *p, uint64_t bytes) {
  uint64_t a = 0;
  if (bfc_alloc(p, bytes, &a) != 0) {
    tap_ok(0, "alloc %llu", (unsigned long long)bytes);
  }
  return a;
}

static int count_lines(const char *s, const char *prefix) {
  int n = 0;
  size_t len = strlen(prefix);
  for (const char *l = s; l != NULL && *l != '\0';) {
    if (strncmp(l, prefix, len) == 0) {
      n++;
    }
    l = strchr(l, '\n');
    l = l ? l + 1 : NULL;
  }
  return n;
}

/* Copies the occupancy map (between the last '[' and ']') into out. */
static void occupancy(const char *s, char *out, size_t cap) {
  const char *open = strrchr(s, '[');
  const char *close = open ? strchr(open, ']') : NULL;
  size_t n = (open && close) ? (size_t)(close - open - 1) : 0;
  if (n >= cap) {
    n = cap - 1;
  }
  memcpy(out, open ? open + 1 : "", n);
  out[n] = '\0';
}

static int count_char(const char *s, char ch) {
  int n = 0;
  for (; *s != '\0'; s++) {
    n += *s == ch;
  }
  return n;
}

static void test_oom_report(void) {
  bfc_pool_t *p = mk(64 * MiB, 1);
  must(p, 1000);
  uint64_t b = must(p, MiB);
  must(p, 3 * MiB);
  bfc_free(p, b);
  size_t n = bfc_format_report(p, 100 * MiB, buf, sizeof(buf));
  TAP_EQ(n, strlen(buf), "report: returns its length");
  tap_ok(strstr(buf, "gpucap: out of memory trying to allocate 100.0 MiB (104857600 bytes, "
                     "rounded to 104857600)") == buf,
         "report: OOM headline first, with request and rounded size");
  tap_ok(strstr(buf, "limit:          64.0 MiB (67108864 bytes)") != NULL, "report: limit");
  tap_ok(strstr(buf, "pool:           6.0 MiB in 2 regions") != NULL, "report: pool");
  tap_ok(strstr(buf, "in use:         3.0 MiB in 2 blocks (requested 3.0 MiB, internal waste "
                     "24 B)") != NULL,
         "report: in use, requested, waste");
  tap_ok(strstr(buf, "largest free:   2.0 MiB") != NULL, "report: largest free block");
  tap_ok(strstr(buf, "fragmentation:  33.3% of the free bytes (1 - largest free / free)") != NULL,
         "report: fragmentation");
  int bins = count_lines(buf, "Bin (");
  tap_ok(bins >= 2 && bins < 21, "report: only the bins that hold chunks (%d)", bins);
  tap_ok(strstr(buf, "Total Chunks: 0,") == NULL, "report: no empty bin line");
  const char *bin2 = "Bin (1024): \tTotal Chunks: 1, Chunks in use: 1. 1.0 KiB allocated for "
                     "chunks. 1.0 KiB in use in bin. 1000 B client-requested in use in bin.";
  tap_ok(strstr(buf, bin2) != NULL, "report: TensorFlow bin line, sizes as every report has them");
  tap_ok(strstr(buf, "bin 20 everything from 256 MiB; bins with no chunk left out") != NULL,
         "report: the bins' legend");
  tap_ok(strstr(buf, "Stats:\nLimit:                        67108864\n") != NULL,
         "report: Stats block in DebugString layout");
  tap_ok(strstr(buf, "MaxAllocSize:                  3145728\n") != NULL, "report: MaxAllocSize");
  tap_ok(strstr(buf, "Reserved:") == NULL && strstr(buf, "DriverAllocs:") == NULL &&
             strstr(buf, "NumOOMs:") == NULL && strstr(buf, "NumAllocs:") == NULL,
         "report: no always-zero line, no counter the exit report counts otherwise");
  char map[512];
  occupancy(buf, map, sizeof(map));
  TAP_EQ((long long)strlen(map) - count_char(map, '|'), 100, "occupancy: 100 cells");
  TAP_EQ(count_char(map, '|'), 1, "occupancy: one region boundary");
  tap_ok(strchr(map, '*') && strchr(map, '_'), "occupancy: in use and free cells");
  bfc_destroy(p);
}

static void test_occupancy_kinds(void) {
  bfc_pool_t *p = mk(100 * 256, 0);
  uint64_t big[25];
  for (int i = 0; i < 50; i++) {
    must(p, 1);
  }
  for (int i = 0; i < 25; i++) {
    big[i] = must(p, 256);
  }
  for (int i = 20; i < 25; i++) {
    bfc_free_deferred(p, big[i]);
  }
  bfc_format_report(p, 0, buf, sizeof(buf));
  tap_ok(strncmp(buf, "gpucap: memory pool state\n", 26) == 0, "state report headline");
  char map[512], want[128];
  occupancy(buf, map, sizeof(map));
  memset(want, 'x', 50);
  memset(want + 50, '*', 20);
  memset(want + 70, 'd', 5);
  memset(want + 75, '_', 25);
  want[100] = '\0';
  tap_ok(strcmp(map, want) == 0, "occupancy: x waste, * in use, d deferred, _ free");
  if (strcmp(map, want) != 0) {
    tap_diag("got  %s", map);
    tap_diag("want %s", want);
  }
  bfc_destroy(p);
}

static void test_truncation(void) {
  bfc_pool_t *p = mk(MiB, 1);
  must(p, 1000);
  char small[32];
  memset(small, '#', sizeof(small));
  size_t n = bfc_format_report(p, 5, small, 10);
  size_t full = bfc_format_report(p, 5, buf, sizeof(buf));
  TAP_EQ(n, full, "truncation: returns the full length");
  TAP_EQ(small[9], '\0', "truncation: NUL at cap - 1");
  TAP_EQ(strncmp(small, buf, 9), 0, "truncation: prefix written");
  int untouched = 1;
  for (size_t i = 10; i < sizeof(small); i++) {
    untouched = untouched && small[i] == '#';
  }
  tap_ok(untouched, "truncation: nothing written past cap");
  TAP_EQ(bfc_format_report(p, 5, NULL, 0), full, "cap 0: length only");
  bfc_destroy(p);

  p = mk(MiB, 1);
  n = bfc_format_report(p, 1, buf, sizeof(buf));
  tap_ok(n > 0 && strstr(buf, "[]") != NULL, "empty pool: empty occupancy map");
  tap_ok(strstr(buf, "(1 bytes, rounded to 256)") != NULL, "report: rounding of a tiny request");
  bfc_destroy(p);
}

static void test_fragmentation_text(void) {
  bfc_pool_t *p = mk(5 * KiB, 0);
  uint64_t x = must(p, KiB);
  must(p, KiB);
  uint64_t z = must(p, 3 * KiB);
  bfc_free(p, x);
  bfc_free(p, z);
  bfc_format_report(p, 0, buf, sizeof(buf));
  tap_ok(strstr(buf, "fragmentation:  25.0%") != NULL, "fragmentation printed as 25.0%%");
  bfc_destroy(p);
}

int main(void) {
  test_oom_report();
  test_occupancy_kinds();
  test_truncation();
  test_fragmentation_text();
  return tap_done();
}
