/* Tests for core/report: human sizes, the text table and the JSON report, over rows taken from
 * real pools (bfc_create over the fake primitive of test_bfc_prim.h). The JSON is checked by a
 * strict validator below that also records every scalar by its path, so each key is compared
 * with the pool's own counters; python3's json module checks it again when installed.
 * Also: snprintf truncation at every buffer size, errno, worst-case bounds, pass-through rows.
 * Prints TAP.
 */
#include "core/report.h"
#include "tests/tap.h"
#include "tests/unit/test_bfc_prim.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

enum { NROWS = 4, PID = 4242, BIG = 1 << 19 };

static char text[BIG];
static char json[BIG];
static report_run_t run = {.pid = PID};

/* ---- A strict JSON validator that records scalars as "devices.0.num_allocs" -> "3". ---- */

enum { MAX_VALS = 512, PATH_LEN = 96, VAL_LEN = 128, MAX_KEYS = 64 };

typedef struct jv {
  char path[PATH_LEN];
  char val[VAL_LEN];
} jv_t;

typedef struct jp {
  const char *s;
  size_t i;
  int bad;
  int nvals;
  jv_t vals[MAX_VALS];
} jp_t;

static jp_t jp;

static void ws(jp_t *p) {
  while (p->s[p->i] == ' ' || p->s[p->i] == '\n' || p->s[p->i] == '\t' || p->s[p->i] == '\r') {
    p->i++;
  }
}

static int is_digit(char ch) {
  return ch >= '0' && ch <= '9';
}

/* A string; its content (escapes kept raw) goes to out when out != NULL. */
static void jstring(jp_t *p, char *out, size_t cap) {
  size_t n = 0;
  if (p->s[p->i] != '"') {
    p->bad = 1;
    return;
  }
  p->i++;
  while (!p->bad && p->s[p->i] != '"') {
    unsigned char ch = (unsigned char)p->s[p->i];
    if (ch < 0x20) {
      p->bad = 1;
      return;
    }
    if (ch == '\\') {
      char e = p->s[++p->i];
      if (e == 'u') {
        for (int k = 1; k <= 4; k++) {
          if (p->s[p->i + (size_t)k] == '\0' ||
              strchr("0123456789abcdefABCDEF", p->s[p->i + (size_t)k]) == NULL) {
            p->bad = 1;
            return;
          }
        }
        p->i += 4;
      } else if (e == '\0' || strchr("\"\\/bfnrt", e) == NULL) {
        p->bad = 1;
        return;
      }
    }
    if (out != NULL && n + 1 < cap) {
      out[n++] = (char)ch;
    }
    p->i++;
  }
  p->i++;
  if (out != NULL && cap > 0) {
    out[n] = '\0';
  }
}

static void record(jp_t *p, const char *path, size_t start) {
  if (p->nvals < MAX_VALS) {
    jv_t *v = &p->vals[p->nvals++];
    snprintf(v->path, sizeof v->path, "%s", path);
    size_t len = p->i - start < VAL_LEN - 1 ? p->i - start : VAL_LEN - 1;
    memcpy(v->val, p->s + start, len);
    v->val[len] = '\0';
  }
}

static void jnumber(jp_t *p) {
  const char *s = p->s;
  if (s[p->i] == '-') {
    p->i++;
  }
  if (s[p->i] == '0') {
    p->i++;
  } else if (is_digit(s[p->i])) {
    while (is_digit(s[p->i])) {
      p->i++;
    }
  } else {
    p->bad = 1;
    return;
  }
  if (s[p->i] == '.') {
    p->i++;
    if (!is_digit(s[p->i])) {
      p->bad = 1;
    }
    while (is_digit(s[p->i])) {
      p->i++;
    }
  }
  if (s[p->i] == 'e' || s[p->i] == 'E') {
    p->i++;
    if (s[p->i] == '+' || s[p->i] == '-') {
      p->i++;
    }
    if (!is_digit(s[p->i])) {
      p->bad = 1;
    }
    while (is_digit(s[p->i])) {
      p->i++;
    }
  }
}

static void jvalue(jp_t *p, const char *path, int depth);

/* Steps into the '{' or '[' at p->i: returns 0 when `close` follows at once (consumed), else 1. */
static int opens(jp_t *p, char close) {
  p->i++;
  ws(p);
  if (p->s[p->i] == close) {
    p->i++;
    return 0;
  }
  return 1;
}

/* After a member or an element: consumes ',' and returns 1 (another one follows), or consumes
 * `close` and returns 0; anything else marks the input bad and returns 0. */
static int more(jp_t *p, char close) {
  ws(p);
  if (p->s[p->i] == ',') {
    p->i++;
    return 1;
  }
  if (p->s[p->i] == close) {
    p->i++;
  } else {
    p->bad = 1;
  }
  return 0;
}

static void jobject(jp_t *p, const char *path, int depth) {
  char keys[MAX_KEYS][PATH_LEN];
  int nkeys = 0;
  if (!opens(p, '}')) {
    return;
  }
  while (!p->bad) {
    char key[PATH_LEN], sub[2 * PATH_LEN];
    ws(p);
    jstring(p, key, sizeof key);
    for (int k = 0; k < nkeys; k++) {
      if (strcmp(keys[k], key) == 0) {
        p->bad = 1; /* duplicate key */
      }
    }
    if (nkeys < MAX_KEYS) {
      snprintf(keys[nkeys++], PATH_LEN, "%s", key);
    }
    snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", key);
    ws(p);
    if (p->s[p->i] != ':') {
      p->bad = 1;
      return;
    }
    p->i++;
    jvalue(p, sub, depth + 1);
    if (!more(p, '}')) {
      return;
    }
  }
}

static void jarray(jp_t *p, const char *path, int depth) {
  if (!opens(p, ']')) {
    return;
  }
  for (int k = 0; !p->bad; k++) {
    char sub[2 * PATH_LEN];
    snprintf(sub, sizeof sub, "%s.%d", path, k);
    jvalue(p, sub, depth + 1);
    if (!more(p, ']')) {
      return;
    }
  }
}

static void jvalue(jp_t *p, const char *path, int depth) {
  ws(p);
  size_t start = p->i;
  char ch = p->s[p->i];
  if (depth > 16) {
    p->bad = 1;
  } else if (ch == '{') {
    jobject(p, path, depth);
  } else if (ch == '[') {
    jarray(p, path, depth);
  } else if (ch == '"') {
    jstring(p, NULL, 0);
    record(p, path, start);
  } else if (strncmp(p->s + p->i, "true", 4) == 0 || strncmp(p->s + p->i, "null", 4) == 0) {
    p->i += 4;
    record(p, path, start);
  } else if (strncmp(p->s + p->i, "false", 5) == 0) {
    p->i += 5;
    record(p, path, start);
  } else {
    jnumber(p);
    record(p, path, start);
  }
}

/* Returns 1 iff s is exactly one valid JSON value (whitespace around it allowed). */
static int json_parse(const char *s) {
  memset(&jp, 0, sizeof jp);
  jp.s = s;
  jvalue(&jp, "", 0);
  ws(&jp);
  return !jp.bad && jp.s[jp.i] == '\0';
}

static const char *jget(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *jget(const char *fmt, ...) {
  char path[2 * PATH_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(path, sizeof path, fmt, ap);
  va_end(ap);
  for (int k = 0; k < jp.nvals; k++) {
    if (strcmp(jp.vals[k].path, path) == 0) {
      return jp.vals[k].val;
    }
  }
  return NULL;
}

/* Number of recorded scalars whose path starts with prefix. */
static int jcount(const char *prefix) {
  int n = 0;
  for (int k = 0; k < jp.nvals; k++) {
    n += strncmp(jp.vals[k].path, prefix, strlen(prefix)) == 0;
  }
  return n;
}

/* The validator itself: it must refuse what a JSON parser refuses. */
static void test_validator(void) {
  static const char *const bad[] = {
      "",
      "{",
      "{\"a\":1,}",
      "[1 2]",
      "01",
      "1.",
      "-",
      "{\"a\":1,\"a\":2}",
      "nan",
      "\"\x01\"",
      "\"\\x\"",
      "{\"a\" 1}",
      "[1,]",
      "{} {}",
      "tru",
      "1.0e",
      "{\"a\":1.5.}",
      "\"abc",
      "\"\\u12",
      "\"\\",
  };
  int refused = 0;
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    if (json_parse(bad[k])) {
      tap_diag("validator accepted '%s'", bad[k]);
    } else {
      refused++;
    }
  }
  TAP_EQ(refused, (int)(sizeof bad / sizeof bad[0]), "validator refuses malformed JSON");
  tap_ok(json_parse(" {\"a\": [1, -0.5e+3, true, false, null, \"x\\u00e9\"], \"b\": {}} "),
         "validator accepts well-formed JSON");
}

/* ---- Rows from real pools. ---- */

static fake_prim_t fakes[3];
static bfc_pool_t *pools[3];
static report_row_t rows[NROWS];

static bfc_pool_t *mk(int k, uint64_t limit, int growth) {
  bfc_prim_t prim = fake_init(&fakes[k], MiB);
  bfc_options_t opts = {.limit = limit, .allow_growth = growth};
  bfc_pool_t *p = NULL;
  if (bfc_create(&opts, &prim, &p) != 0) {
    tap_ok(0, "bfc_create %d", k);
    exit(1);
  }
  return p;
}

static uint64_t must(bfc_pool_t *p, uint64_t bytes) {
  uint64_t a = 0;
  if (bfc_alloc(p, bytes, &a) != 0) {
    tap_ok(0, "alloc %" PRIu64, bytes);
  }
  return a;
}

static void build_rows(void) {
  /* Device 0: growing pool with holes, waste inside chunks and a deferred block. */
  bfc_pool_t *a = pools[0] = mk(0, GiB, 1);
  uint64_t addr[40];
  for (int i = 0; i < 40; i++) {
    addr[i] = must(a, 1000 + (uint64_t)i * 37 * KiB);
  }
  for (int i = 0; i < 40; i += 3) {
    bfc_free(a, addr[i]);
  }
  bfc_free_deferred(a, addr[1]);
  uint64_t big = must(a, 100 * MiB + 1);
  bfc_free(a, big);
  must(a, 3 * MiB);
  /* Device 1, first context: the whole 1 MiB limit in use, nothing free, one OOM. */
  bfc_pool_t *b = pools[1] = mk(1, MiB, 0);
  uint64_t spare = 0;
  must(b, MiB - 300);
  int rc = bfc_alloc(b, 1, &spare);
  TAP_EQ(rc, -ENOMEM, "setup: the full pool refuses one more byte");
  /* Device 1, second context: everything freed again, so all free bytes form one block. */
  bfc_pool_t *c = pools[2] = mk(2, 64 * MiB, 1);
  uint64_t x = must(c, MiB), y = must(c, 512); /* both in the first, 2 MiB region */
  bfc_free(c, x);
  bfc_free(c, y);
  for (int k = 0; k < 3; k++) {
    TAP_EQ(bfc_check(pools[k]), 0, "setup: pool %d is healthy", k);
  }

  /* Device 0: the largest request is the room to grow (a whole new region); device 1: nothing
   * (the limit is reached and nothing is free); device 1 context 1: not known (as in a report
   * read back from an older version). */
  rows[0] = (report_row_t){.device = 0, .context = 0, .pooled = 1, .cap = GiB};
  bfc_stats(a, &rows[0].stats);
  rows[0].largest_request = GiB - rows[0].stats.pool_bytes;
  rows[1] = (report_row_t){.device = 1, .context = 0, .pooled = 1, .cap = MiB};
  bfc_stats(b, &rows[1].stats);
  rows[1].largest_request = 0;
  rows[1].vmm = 1; /* backed by virtual memory management: its figures */
  rows[1].address_space_bytes = 2 * MiB;
  rows[1].mapped_bytes_total = 3 * MiB;
  rows[1].released_bytes_total = 2 * MiB;
  rows[1].driver_map_calls = 3;
  rows[1].driver_unmap_calls = 2;
  rows[2] = (report_row_t){.device = 1,
                           .context = 1,
                           .pooled = 1,
                           .destroyed = 1,
                           .cap = REPORT_NO_CAP,
                           .largest_request = REPORT_UNKNOWN};
  bfc_stats(c, &rows[2].stats);
  /* Device 2: pass-through, with junk in the pool-only fields that must not show. */
  rows[3] = (report_row_t){.device = 2, .context = 0, .pooled = 0, .cap = 8 * GiB};
  bfc_stats_t *s = &rows[3].stats;
  memset(s, 0x5a, sizeof *s);
  s->fragmentation = NAN;
  s->num_allocs = 7;
  s->bytes_in_use = 3 * GiB / 2;
  s->peak_bytes_in_use = 2 * GiB;
  s->bytes_requested_in_use = 3 * GiB / 2 - 100;
  s->peak_bytes_requested_in_use = 2 * GiB - 100;
  s->largest_alloc_size = GiB;
  s->bytes_limit = 8 * GiB;
  s->num_in_use = 2;
  s->driver_alloc_calls = 7;
  s->driver_alloc_failures = 1;
  s->driver_free_calls = 5;
  s->driver_free_failures = 0;
  s->num_ooms = 1;
  s->host_metadata_bytes = 0;
  rows[3].largest_request = 12345; /* junk too: pass-through rows have no pool */

  tap_ok(rows[0].stats.fragmentation > 0.0 && rows[0].stats.deferred_bytes > 0 &&
             rows[0].stats.bytes_in_use > rows[0].stats.bytes_requested_in_use,
         "setup: device 0 has fragmentation, deferred bytes and waste inside chunks");
  TAP_EQ(rows[1].stats.free_bytes, 0, "setup: device 1 has nothing free");
  tap_ok(rows[2].stats.free_bytes > 0 &&
             rows[2].stats.free_bytes == rows[2].stats.largest_free_block_bytes,
         "setup: device 1 context 1 has one free block");
}

/* ---- report_format_size ---- */

static void test_size(void) {
  static const struct {
    uint64_t bytes;
    const char *want;
  } cases[] = {
      {0, "0 B"},
      {1, "1 B"},
      {1023, "1023 B"},
      {1024, "1.0 KiB"},
      {1126, "1.1 KiB"}, /* 1.0996 */
      {1075, "1.0 KiB"}, /* 1.0498: rounds down */
      {1536, "1.5 KiB"},
      {1048575, "1.0 MiB"}, /* 1023.999 KiB moves up a unit */
      {1048576 - 52, "1023.9 KiB"},
      {MiB, "1.0 MiB"},
      {256 * MiB, "256.0 MiB"},
      {3 * GiB / 2, "1.5 GiB"},
      {GiB - 1, "1.0 GiB"},
      {1023 * MiB + 94 * KiB, "1023.1 MiB"},
      {(uint64_t)1 << 40, "1.0 TiB"},
      {(uint64_t)1 << 50, "1.0 PiB"},
      {(uint64_t)1 << 60, "1.0 EiB"},
      {UINT64_MAX, "16.0 EiB"},
  };
  char out[64];
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    size_t n = report_format_size(cases[k].bytes, out, sizeof out);
    tap_ok(strcmp(out, cases[k].want) == 0 && n == strlen(out), "size %" PRIu64 " -> '%s'",
           cases[k].bytes, cases[k].want);
    if (strcmp(out, cases[k].want) != 0) {
      tap_diag("  got '%s'", out);
    }
  }
  size_t longest = 0;
  for (int shift = 0; shift < 64; shift++) {
    for (uint64_t d = 0; d < 3; d++) {
      uint64_t v = ((uint64_t)1 << shift) * 1023 / 1024 + d;
      size_t n = report_format_size(v, out, sizeof out);
      longest = n > longest ? n : longest;
      v = ((uint64_t)1 << shift) - d;
      n = report_format_size(v, out, sizeof out);
      longest = n > longest ? n : longest;
    }
  }
  tap_ok(longest < REPORT_SIZE_MAX, "size: longest text (%zu) fits REPORT_SIZE_MAX", longest);

  char small[8];
  memset(small, '#', sizeof small);
  size_t n = report_format_size(3 * GiB / 2, small, 4);
  tap_ok(n == 7 && strcmp(small, "1.5") == 0 && small[4] == '#',
         "size: truncates to cap - 1 bytes, returns the full length");
  TAP_EQ(report_format_size(3 * GiB / 2, NULL, 0), 7, "size: NULL buffer with cap 0 measures");
}

/* ---- JSON ---- */

static void expect_key(int d, const char *key, const char *want) {
  const char *got = jget("devices.%d.%s", d, key);
  tap_ok(got != NULL && strcmp(got, want) == 0, "json device %d: %s = %s", d, key, want);
  if (got == NULL || strcmp(got, want) != 0) {
    tap_diag("  got %s", got ? got : "(missing)");
  }
}

static void expect_u64(int d, const char *key, uint64_t want) {
  char w[32];
  snprintf(w, sizeof w, "%" PRIu64, want);
  expect_key(d, key, w);
}

/* A fraction with exactly six decimals, within half a millionth of want. */
static void expect_fraction(int d, const char *key, double want) {
  const char *got = jget("devices.%d.%s", d, key);
  const char *dot = got ? strchr(got, '.') : NULL;
  int ok = dot != NULL && strlen(dot + 1) == 6 && strtod(got, NULL) - want <= 5.01e-7 &&
           want - strtod(got, NULL) <= 5.01e-7;
  tap_ok(ok, "json device %d: %s = %.7f to six decimals", d, key, want);
  if (!ok) {
    tap_diag("  got %s", got ? got : "(missing)");
  }
}

static void check_json_row(int d, const report_row_t *r) {
  const bfc_stats_t *s = &r->stats;
  int pool = r->pooled != 0;
  char w[32];
  snprintf(w, sizeof w, "%d", r->device);
  expect_key(d, "device", w);
  snprintf(w, sizeof w, "%d", r->context);
  expect_key(d, "context", w);
  snprintf(w, sizeof w, "%d", r->arena);
  expect_key(d, "arena", w);
  expect_key(d, "pooled", pool ? "true" : "false");
  expect_key(d, "context_destroyed", r->destroyed ? "true" : "false");
  if (r->cap == REPORT_NO_CAP) {
    expect_key(d, "cap_bytes", "null");
  } else {
    expect_u64(d, "cap_bytes", r->cap);
  }
  expect_u64(d, "num_allocs", s->num_allocs);
  expect_u64(d, "bytes_in_use", s->bytes_in_use);
  expect_u64(d, "peak_bytes_in_use", s->peak_bytes_in_use);
  expect_u64(d, "largest_alloc_size", s->largest_alloc_size);
  expect_u64(d, "bytes_limit", s->bytes_limit);
  expect_u64(d, "pool_bytes", pool ? s->pool_bytes : 0);
  expect_u64(d, "peak_pool_bytes", pool ? s->peak_pool_bytes : 0);
  expect_u64(d, "largest_free_block_bytes", pool ? s->largest_free_block_bytes : 0);
  expect_key(d, "bytes_reserved", "0");
  expect_key(d, "peak_bytes_reserved", "0");
  expect_key(d, "bytes_reservable_limit", "0");
  expect_fraction(d, "fragmentation", pool ? s->fragmentation : 0.0);
  if (pool) {
    double free_b = (double)s->free_bytes;
    double tf = s->free_bytes == 0 ? 0.0 : (free_b - (double)s->largest_free_block_bytes) / free_b;
    expect_fraction(d, "fragmentation", tf);
  }
  if (pool && r->largest_request == REPORT_UNKNOWN) {
    expect_key(d, "largest_request_bytes", "null");
    expect_key(d, "available_fragmentation", "null");
  } else if (pool) {
    double avail = (double)s->free_bytes + (double)(s->bytes_limit - s->pool_bytes);
    expect_u64(d, "largest_request_bytes", r->largest_request);
    expect_fraction(d, "available_fragmentation",
                    avail == 0 ? 0.0 : (avail - (double)r->largest_request) / avail);
  } else {
    expect_key(d, "largest_request_bytes", "0");
    expect_key(d, "available_fragmentation", "0.000000");
  }
  expect_u64(d, "bytes_requested_in_use", s->bytes_requested_in_use);
  expect_u64(d, "peak_bytes_requested_in_use", s->peak_bytes_requested_in_use);
  expect_u64(d, "internal_fragmentation_bytes", s->bytes_in_use - s->bytes_requested_in_use);
  expect_fraction(d, "utilization",
                  pool && s->peak_pool_bytes != 0
                      ? (double)s->peak_bytes_in_use / (double)s->peak_pool_bytes
                      : 0.0);
  expect_u64(d, "free_bytes", pool ? s->free_bytes : 0);
  expect_u64(d, "deferred_bytes", pool ? s->deferred_bytes : 0);
  expect_u64(d, "num_in_use", s->num_in_use);
  expect_u64(d, "num_deferred", pool ? s->num_deferred : 0);
  expect_u64(d, "num_free_chunks", pool ? s->num_free_chunks : 0);
  expect_u64(d, "num_regions", pool ? s->num_regions : 0);
  expect_u64(d, "driver_alloc_calls", s->driver_alloc_calls);
  expect_u64(d, "driver_alloc_failures", s->driver_alloc_failures);
  expect_u64(d, "driver_free_calls", s->driver_free_calls);
  expect_u64(d, "driver_free_failures", s->driver_free_failures);
  expect_u64(d, "num_ooms", s->num_ooms);
  expect_u64(d, "num_eagain", pool ? s->num_eagain : 0);
  expect_u64(d, "num_retired", pool ? s->num_retired : 0);
  expect_u64(d, "host_metadata_bytes", s->host_metadata_bytes);
  expect_u64(d, "address_space_bytes", r->address_space_bytes);
  expect_u64(d, "mapped_bytes_total", r->mapped_bytes_total);
  expect_u64(d, "released_bytes_total", r->released_bytes_total);
  expect_u64(d, "driver_map_calls", r->driver_map_calls);
  expect_u64(d, "driver_unmap_calls", r->driver_unmap_calls);
  const char *backing = !r->pooled ? "null" : r->vmm ? "\"vmm\"" : "\"regions\"";
  const char *got = jget("devices.%d.backing", d);
  tap_ok(got != NULL && strcmp(got, backing) == 0, "json device %d: backing %s", d, backing);
  char prefix[32];
  snprintf(prefix, sizeof prefix, "devices.%d.", d);
  TAP_EQ(jcount(prefix), 44, "json device %d: exactly 44 keys", d);
}

static void python_check(const char *doc, const char *what) {
  if (system("command -v python3 >/dev/null 2>&1") != 0) {
    tap_skip(what, "python3 not installed");
    return;
  }
  char path[] = "/tmp/gpucap-test-report-XXXXXX";
  int fd = mkstemp(path);
  size_t len = strlen(doc);
  int wrote = fd >= 0 && write(fd, doc, len) == (ssize_t)len;
  if (fd >= 0) {
    close(fd);
  }
  char cmd[256];
  snprintf(cmd, sizeof cmd,
           "python3 -c 'import json,sys; json.load(open(sys.argv[1]), parse_constant=int)' %s",
           path);
  tap_ok(wrote && system(cmd) == 0, "%s", what);
  unlink(path);
}

static void test_json(void) {
  size_t n = report_format_json(rows, NROWS, &run, json, sizeof json);
  TAP_EQ(n, strlen(json), "json: returns its length");
  tap_ok(n < REPORT_JSON_MAX(NROWS), "json: within REPORT_JSON_MAX");
  tap_ok(json_parse(json), "json: valid (strict validator)");
  tap_ok(json[0] == '{' && json[n - 1] == '\n', "json: one object, newline-terminated");
  tap_ok(jget("gpucap_version") != NULL &&
             strcmp(jget("gpucap_version"), "\"" GPUCAP_VERSION "\"") == 0,
         "json: gpucap_version is the build's (" GPUCAP_VERSION ")");
  tap_ok(jget("pid") != NULL && strcmp(jget("pid"), "4242") == 0, "json: pid");
  TAP_EQ(jcount("devices."), 44 * NROWS, "json: %d devices of 44 keys, in row order", NROWS);
  TAP_EQ(jcount(""), 7 + 44 * NROWS,
         "json: the run's scalars (version, pid, host, times, ended_by, complete) and no more");
  tap_ok(strcmp(jget("hostname"), "null") == 0 && strcmp(jget("start_time"), "null") == 0 &&
             strcmp(jget("end_time"), "null") == 0 && strcmp(jget("ended_by"), "null") == 0 &&
             strcmp(jget("complete"), "true") == 0,
         "json: what the run does not know is null; no notes -> complete");
  tap_ok(strstr(json, "\"command\": []") && strstr(json, "\"job\": {}") &&
             strstr(json, "\"gpus\": []") && strstr(json, "\"notes\": []"),
         "json: empty command, job, gpus and notes");
  for (int d = 0; d < NROWS; d++) {
    check_json_row(d, &rows[d]);
  }
  expect_key(1, "fragmentation", "0.000000"); /* nothing free */
  expect_key(2, "fragmentation", "0.000000"); /* all free bytes in one block */
  expect_key(3, "fragmentation", "0.000000"); /* pass-through with NaN given */
  expect_key(3, "utilization", "0.000000");
  python_check(json, "json: python3's json module reads it");

  report_format_json(rows, 0, NULL, json, sizeof json);
  tap_ok(json_parse(json) && strstr(json, "\"devices\": []") != NULL &&
             strcmp(jget("pid"), "null") == 0,
         "json: no rows -> \"devices\": [], pid 0 -> null");
  report_format_json(NULL, 3, &run, json, sizeof json);
  tap_ok(json_parse(json) && jcount("devices.") == 0, "json: NULL rows -> no devices");
}

/* Odd values still give valid JSON with finite numbers. */
static void test_json_odd_values(void) {
  report_row_t r[3];
  memset(r, 0, sizeof r);
  r[0].pooled = 1;
  r[0].stats.fragmentation = INFINITY;
  r[1].pooled = 1;
  r[1].stats.fragmentation = -0.5;
  r[1].stats.peak_bytes_in_use = 3;
  r[1].stats.peak_pool_bytes = 4;
  r[2].pooled = 1;
  r[2].stats.fragmentation = 0.1234565;
  r[2].stats.bytes_requested_in_use = 10; /* more than in use: no negative waste */
  report_format_json(r, 3, &run, json, sizeof json);
  tap_ok(json_parse(json), "json odd values: valid");
  expect_key(0, "fragmentation", "1.000000");
  expect_key(1, "fragmentation", "0.000000");
  expect_key(1, "utilization", "0.750000");
  expect_fraction(2, "fragmentation", 0.1234565);
  expect_key(2, "internal_fragmentation_bytes", "0");
  expect_key(0, "cap_bytes", "0");
}

/* ---- Text ---- */

/* Copies line k (0-based) of s into out; returns 0 when there is no such line. */
static int line_at(const char *s, int k, char *out, size_t cap) {
  for (; k > 0 && s != NULL; k--) {
    s = strchr(s, '\n');
    s = s ? s + 1 : NULL;
  }
  if (s == NULL || *s == '\0') {
    return 0;
  }
  const char *e = strchr(s, '\n');
  size_t n = e ? (size_t)(e - s) : strlen(s);
  n = n < cap - 1 ? n : cap - 1;
  memcpy(out, s, n);
  out[n] = '\0';
  return 1;
}

/* 1 iff the whitespace-separated cells of line equal want[0..n) ("1.5 GiB" counts as one). */
static int cells_are(const char *line, const char *const *want, int n) {
  const char *p = line;
  for (int k = 0; k < n; k++) {
    while (*p == ' ') {
      p++;
    }
    size_t len = strlen(want[k]);
    if (strncmp(p, want[k], len) != 0 || (p[len] != ' ' && p[len] != '\0')) {
      return 0;
    }
    p += len;
  }
  while (*p == ' ') {
    p++;
  }
  return *p == '\0';
}

static const char *sz(uint64_t v, char *buf) {
  report_format_size(v, buf, REPORT_SIZE_MAX);
  return buf;
}

static void test_text(void) {
  size_t n = report_format_text(rows, NROWS, &run, text, sizeof text);
  TAP_EQ(n, strlen(text), "text: returns its length");
  tap_ok(n < REPORT_TEXT_MAX(NROWS), "text: within REPORT_TEXT_MAX");
  tap_ok(strncmp(text, "gpucap: memory report (pid 4242)\n", 33) == 0, "text: header with pid");
  char line[256];
  int lines = 0, widest = 0;
  while (line_at(text, lines, line, sizeof line)) {
    int w = (int)strlen(line);
    widest = w > widest ? w : widest;
    lines++;
  }
  TAP_EQ(lines, 1 + 2 * (1 + NROWS) + 4,
         "text: header, two tables of one line per pool, legend (with the destroyed mark)");
  tap_ok(widest < 100, "text: every line under 100 columns (widest %d)", widest);

  /* Right-aligned: every line of a table ends in the same column. */
  char first[256];
  for (int t = 0; t < 2; t++) {
    int base = 1 + t * (1 + NROWS);
    line_at(text, base, first, sizeof first);
    int same = 1;
    for (int k = 1; k <= NROWS; k++) {
      line_at(text, base + k, line, sizeof line);
      same &= strlen(line) == strlen(first);
    }
    tap_ok(same, "text: table %d is right-aligned (%zu columns)", t + 1, strlen(first));
  }
  line_at(text, 1, line, sizeof line);
  tap_ok(strstr(line, "device") && strstr(line, "in use") && strstr(line, "peak in use") &&
             strstr(line, "pool") && strstr(line, "peak pool") && strstr(line, "cap") &&
             strstr(line, "largest free"),
         "text: size table header");
  line_at(text, 2 + NROWS, line, sizeof line);
  tap_ok(strstr(line, "frag") && strstr(line, "lost in chunks") && strstr(line, "peak use/pool") &&
             strstr(line, "allocations") && strstr(line, "driver allocs") &&
             strstr(line, "driver frees") && strstr(line, "OOMs"),
         "text: activity table header");

  static const char *const labels[NROWS] = {"0", "1", "1:1*", "2"};
  for (int d = 0; d < NROWS; d++) {
    const report_row_t *r = &rows[d];
    const bfc_stats_t *s = &r->stats;
    char b[7][REPORT_SIZE_MAX];
    const char *cap = r->cap == REPORT_NO_CAP ? "none" : sz(r->cap, b[4]);
    const char *sizes[7] = {labels[d],
                            sz(s->bytes_in_use, b[0]),
                            sz(s->peak_bytes_in_use, b[1]),
                            r->pooled ? sz(s->pool_bytes, b[2]) : "-",
                            r->pooled ? sz(s->peak_pool_bytes, b[3]) : "-",
                            cap,
                            r->pooled ? sz(s->largest_free_block_bytes, b[5]) : "-"};
    line_at(text, 2 + d, line, sizeof line);
    tap_ok(cells_are(line, sizes, 7), "text: size line of device %s", labels[d]);
    if (!cells_are(line, sizes, 7)) {
      tap_diag("  got '%s'", line);
    }

    char pct[2][32], num[4][24];
    if (r->pooled) {
      /* Rounded half up, once, from the exact value (the casts floor: values are >= 0). */
      double avail = (double)s->free_bytes + (double)(s->bytes_limit - s->pool_bytes);
      uint64_t f =
          avail == 0 ? 0 : (uint64_t)((avail - (double)r->largest_request) * 1000 / avail + 0.5);
      uint64_t u =
          (uint64_t)((double)s->peak_bytes_in_use * 1000 / (double)s->peak_pool_bytes + 0.5);
      snprintf(pct[0], sizeof pct[0], "%" PRIu64 ".%" PRIu64 "%%", f / 10, f % 10);
      if (r->largest_request == REPORT_UNKNOWN) {
        strcpy(pct[0], "?");
      }
      snprintf(pct[1], sizeof pct[1], "%" PRIu64 ".%" PRIu64 "%%", u / 10, u % 10);
    } else {
      strcpy(pct[0], "-");
      strcpy(pct[1], "-");
    }
    snprintf(num[0], sizeof num[0], "%" PRIu64, s->num_allocs);
    snprintf(num[1], sizeof num[1], "%" PRIu64, s->driver_alloc_calls);
    snprintf(num[2], sizeof num[2], "%" PRIu64, s->driver_free_calls);
    snprintf(num[3], sizeof num[3], "%" PRIu64, s->num_ooms);
    const char *acts[8] = {labels[d], pct[0], sz(s->bytes_in_use - s->bytes_requested_in_use, b[6]),
                           pct[1],    num[0], num[1],
                           num[2],    num[3]};
    line_at(text, 3 + NROWS + d, line, sizeof line);
    tap_ok(cells_are(line, acts, 8), "text: activity line of device %s", labels[d]);
    if (!cells_are(line, acts, 8)) {
      tap_diag("  got '%s'", line);
    }
  }
  tap_ok(strstr(text, "   1.0 MiB") != NULL && strstr(text, "   1.5 GiB") != NULL,
         "text: human sizes (1.0 MiB in use on device 1, 1.5 GiB on device 2)");
  tap_ok(strstr(text, "  frag = share of the free and unreserved bytes") != NULL &&
             strstr(text, "cap none = no cap") != NULL && strstr(text, "? = not known") != NULL &&
             strstr(text, "* = context destroyed before exit") != NULL,
         "text: legend");

  report_format_text(rows, 0, NULL, text, sizeof text);
  tap_ok(strcmp(text, "gpucap: memory report\n  no device memory was allocated\n") == 0,
         "text: no rows, no pid");
}

/* ---- The run ---- */

static void test_time(void) {
  static const struct {
    int64_t ns;
    const char *want;
  } cases[] = {
      {0, "1970-01-01T00:00:00.000Z"},
      {951782400LL * 1000000000 + 999999999, "2000-02-29T00:00:00.999Z"},
      {1798761599LL * 1000000000 + 1000000, "2026-12-31T23:59:59.001Z"},
      {4107542400LL * 1000000000, "2100-03-01T00:00:00.000Z"},
      {INT64_MAX, "2262-04-11T23:47:16.854Z"},
  };
  char buf[40];
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    size_t n = report_format_time(cases[k].ns, buf, sizeof buf);
    tap_ok(n == 24 && strcmp(buf, cases[k].want) == 0, "time: %s", cases[k].want);
    if (strcmp(buf, cases[k].want) != 0) {
      tap_diag("  got %s", buf);
    }
  }
  TAP_EQ(report_format_time(0, buf, 5), 24, "time: truncated, full length returned");
  tap_ok(strcmp(buf, "1970") == 0, "time: truncated to cap - 1");
}

/* A run with every field filled, hostile bytes included. */
static void fill_run(report_run_t *r) {
  static const char cmd[] = "python3\0-c\0print(\"a\\b\")\0caf\xc3\xa9\0bad\xff\xc3\0\x01tab\t\0";
  memset(r, 0, sizeof *r);
  r->pid = PID;
  strcpy(r->host, "node\"07");
  memcpy(r->command, cmd, sizeof cmd - 1);
  r->command_len = sizeof cmd - 1;
  r->start_ns = 1798761599LL * 1000000000;
  r->end_ns = r->start_ns + 1500000000;
  strcpy(r->ended_by, "SIGTERM");
  r->njob = 2;
  strcpy(r->job[0].key, "slurm_job_id");
  strcpy(r->job[0].value, "4711");
  strcpy(r->job[1].key, "k8s_pod_name");
  strcpy(r->job[1].value, "train-0");
  r->ngpus = 2;
  r->gpus[0] = (report_gpu_t){.device = 0, .name = "NVIDIA H100 80GB HBM3"};
  strcpy(r->gpus[0].uuid, "GPU-01234567-89ab-cdef-0123-456789abcdef");
  r->gpus[1] = (report_gpu_t){.device = 3};
  r->nnotes = 2;
  strcpy(r->notes[0], "device 0 context 1: left out, its pool was in use");
  strcpy(r->notes[1], "GPUCAP_TRACE: its last 3 events were not written");
}

static void test_run(void) {
  report_run_t full;
  fill_run(&full);
  size_t n = report_format_json(rows, NROWS, &full, json, sizeof json);
  tap_ok(n < REPORT_JSON_MAX(NROWS) && json_parse(json), "run: JSON valid, within bounds");
  tap_ok(strcmp(jget("hostname"), "\"node\\\"07\"") == 0, "run: hostname escaped");
  tap_ok(strstr(json, "\"command\": [\"python3\", \"-c\", \"print(\\\"a\\\\b\\\")\", "
                      "\"caf\xc3\xa9\", \"bad\\ufffd\\ufffd\", \"\\u0001tab\\u0009\"]") != NULL,
         "run: command: one string per argument, escaped, valid UTF-8 kept, invalid bytes "
         "U+FFFD");
  tap_ok(strcmp(jget("start_time"), "\"2026-12-31T23:59:59.000Z\"") == 0 &&
             strcmp(jget("end_time"), "\"2027-01-01T00:00:00.500Z\"") == 0,
         "run: start and end times, RFC 3339 UTC");
  tap_ok(strcmp(jget("ended_by"), "\"SIGTERM\"") == 0, "run: ended_by");
  tap_ok(strcmp(jget("job.slurm_job_id"), "\"4711\"") == 0 &&
             strcmp(jget("job.k8s_pod_name"), "\"train-0\"") == 0,
         "run: job identifiers");
  tap_ok(strcmp(jget("gpus.0.device"), "0") == 0 &&
             strcmp(jget("gpus.0.name"), "\"NVIDIA H100 80GB HBM3\"") == 0 &&
             strcmp(jget("gpus.0.uuid"), "\"GPU-01234567-89ab-cdef-0123-456789abcdef\"") == 0 &&
             strcmp(jget("gpus.1.device"), "3") == 0 && strcmp(jget("gpus.1.name"), "null") == 0 &&
             strcmp(jget("gpus.1.uuid"), "null") == 0,
         "run: gpus, unknown name and UUID null");
  tap_ok(strcmp(jget("complete"), "false") == 0 &&
             strcmp(jget("notes.1"), "\"GPUCAP_TRACE: its last 3 events were not written\"") == 0,
         "run: notes, and complete false");
  python_check(json, "run: python3's json module reads it");

  n = report_format_text(rows, NROWS, &full, text, sizeof text);
  tap_ok(n < REPORT_TEXT_MAX(NROWS) &&
             strncmp(text, "gpucap: memory report (pid 4242, ended by SIGTERM)\n", 51) == 0,
         "run: text header names the signal");
  tap_ok(strstr(text, "\n  note: device 0 context 1: left out, its pool was in use\n"
                      "  note: GPUCAP_TRACE: its last 3 events were not written\n") != NULL &&
             text[n - 1] == '\n',
         "run: text ends with the notes");
  strcpy(full.ended_by, "exit");
  full.pid = 0;
  report_format_text(NULL, 0, &full, text, sizeof text);
  tap_ok(strncmp(text, "gpucap: memory report\n  no device memory was allocated\n  note: ", 63) ==
             0,
         "run: no rows, no pid, ended by exit: plain header, then the notes");
}

/* The usage lines of a device that spilled (GPUCAP_OVERSUBSCRIBE), in the table and the JSON. */
static void test_spill(void) {
  static report_run_t r;
  memset(&r, 0, sizeof r);
  r.nusage = 2;
  r.usage[0] = (report_usage_t){.device = 0,
                                .current = 0,
                                .peak = 80 << 20,
                                .driver = 0,
                                .right_size = 80 << 20,
                                .spill_budget = (uint64_t)1 << 30,
                                .spilled = 1 << 20,
                                .peak_spilled = 16 << 20,
                                .spilled_allocs = 3};
  r.usage[0].refusals[5] = 1;
  r.usage[1] = (report_usage_t){.device = 1, .peak = 4 << 20, .right_size = 4 << 20};
  report_format_text(rows, 1, &r, text, sizeof text);
  tap_ok(strstr(text,
                "  device 0 spilled to host: 1.0 MiB now, 16.0 MiB at peak, 3 allocations "
                "(budget 1.0 GiB)\n  device 0 right-size: 80.0 MiB (peak pool + spilled, rounded "
                "up: a cap that would not spill)\n") != NULL,
         "spill: the table says what spilled, and the right size is a cap that would not spill");
  tap_ok(strstr(text, "device 0 refusals: 1 (spill_full 1)") != NULL,
         "spill: a refusal of the spill budget has its verdict");
  tap_ok(strstr(text, "device 1 spilled") == NULL &&
             strstr(text, "device 1 right-size: 4.0 MiB (peak pool, rounded up)") != NULL,
         "spill: a device without a budget has no spill line");
  size_t n = report_format_json(rows, 1, &r, json, sizeof json);
  tap_ok(n < REPORT_JSON_MAX(1) && json_parse(json), "spill: JSON valid");
  tap_ok(strcmp(jget("usage.0.spill_budget_bytes"), "1073741824") == 0 &&
             strcmp(jget("usage.0.spilled_bytes"), "1048576") == 0 &&
             strcmp(jget("usage.0.peak_spilled_bytes"), "16777216") == 0 &&
             strcmp(jget("usage.0.spilled_allocations"), "3") == 0 &&
             strcmp(jget("usage.0.refusals.spill_full"), "1") == 0 &&
             strcmp(jget("usage.1.spilled_allocations"), "0") == 0,
         "spill: the JSON's usage has the spill figures and the spill_full refusals");
}

/* The device's use split into allocations, pool slack and the driver's own memory. */
static void test_usage(void) {
  static report_run_t u;
  u.nusage = 1;
  u.usage[0] = (report_usage_t){.device = 0,
                                .current = 0,
                                .peak = 900 * MiB,
                                .driver = 467 * MiB,
                                .driver_peak = 467 * MiB,
                                .driver_cause_peak = {401 * MiB, 52 * MiB, 0, 14 * MiB},
                                .measured_by = 1,
                                .covers_process = 1,
                                .whole_peak = 1409 * MiB,
                                .at_peak_allocations = 900 * MiB,
                                .at_peak_slack = 42 * MiB,
                                .at_peak_driver = 467 * MiB,
                                .right_size = 1410 * MiB};
  size_t n = report_format_text(rows, NROWS, &u, text, sizeof text);
  tap_ok(n < REPORT_TEXT_MAX(NROWS) &&
             strstr(text,
                    "    driver's own memory (nvml)               467.0 MiB     467.0 MiB\n"
                    "      grown at context creation                      -     401.0 MiB\n"
                    "      grown at module loads                          -      52.0 MiB\n"
                    "      grown elsewhere (pages, launches)              -      14.0 MiB\n"
                    "  device 0 at peak: 1.4 GiB = 900.0 MiB allocated + 42.0 MiB pool slack"
                    " + 467.0 MiB driver\n"
                    "  device 0 right-size: 1.4 GiB (the peak of the whole, rounded up)\n") != NULL,
         "usage text: the driver's memory, where it grew (nothing at limits: no line), the whole "
         "at its peak and the right size from it");
  n = report_format_json(rows, NROWS, &u, json, sizeof json);
  tap_ok(n < REPORT_JSON_MAX(NROWS) && json_parse(json), "usage: JSON valid, within bounds");
  tap_ok(strcmp(jget("usage.0.driver_measured_by"), "\"nvml\"") == 0 &&
             strcmp(jget("usage.0.cap_covers"), "\"process\"") == 0 &&
             strcmp(jget("usage.0.peak_driver_bytes"), "489684992") == 0 &&
             strcmp(jget("usage.0.driver_peak_by_cause.modules"), "54525952") == 0 &&
             strcmp(jget("usage.0.peak_whole_bytes"), "1477443584") == 0 &&
             strcmp(jget("usage.0.at_peak.pool_slack_bytes"), "44040192") == 0,
         "usage JSON: how it was measured, what the cap covers, the peaks and the split");
  u.usage[0].measured_by = 0;
  u.usage[0].covers_process = 0;
  u.usage[0].driver = u.usage[0].driver_peak = REPORT_UNKNOWN;
  report_format_json(rows, NROWS, &u, json, sizeof json);
  tap_ok(json_parse(json) && strcmp(jget("usage.0.driver_measured_by"), "null") == 0 &&
             strcmp(jget("usage.0.driver_bytes"), "null") == 0 &&
             strcmp(jget("usage.0.cap_covers"), "\"allocations\"") == 0,
         "usage JSON: never measured is null; the cap on allocations");
  report_format_text(rows, NROWS, &u, text, sizeof text);
  tap_ok(strstr(text, "driver's own memory (not measured)               ?             ?\n") !=
                 NULL &&
             strstr(text, "(peak pool, rounded up)") != NULL,
         "usage text: never measured, and the right size of a cap on allocations");
}

/* ---- Buffers, errno, bounds ---- */

typedef size_t (*format_fn)(const report_row_t *, int, const report_run_t *, char *, size_t);

static void test_truncation(const char *what, format_fn fn) {
  static char full[BIG], trial[BIG + 64];
  size_t len = fn(rows, NROWS, &run, full, sizeof full);
  int all_ok = 1;
  for (size_t cap = 1; cap <= len + 2 && all_ok; cap++) {
    memset(trial, '#', cap + 64);
    size_t got = fn(rows, NROWS, &run, trial, cap);
    size_t kept = len < cap ? len : cap - 1;
    int ok = got == len && memcmp(trial, full, kept) == 0 && trial[kept] == '\0';
    for (size_t k = cap; k < cap + 64; k++) {
      ok &= trial[k] == '#';
    }
    if (!ok) {
      tap_diag("%s: cap %zu: got %zu want %zu", what, cap, got, len);
    }
    all_ok &= ok;
  }
  tap_ok(all_ok,
         "%s: every cap from 1 to full+2: full length returned, prefix kept, "
         "NUL-terminated, nothing written past cap",
         what);
  trial[0] = '#';
  TAP_EQ(fn(rows, NROWS, &run, trial, 0), len, "%s: cap 0 measures and writes nothing", what);
  tap_ok(trial[0] == '#', "%s: cap 0 leaves the buffer alone", what);
  TAP_EQ(fn(rows, NROWS, &run, NULL, 0), len, "%s: NULL buffer with cap 0", what);
  size_t exact = fn(rows, NROWS, &run, trial, len + 1);
  tap_ok(exact == len && strcmp(trial, full) == 0, "%s: exact-length buffer holds it all", what);
  size_t one_short = fn(rows, NROWS, &run, trial, len);
  tap_ok(one_short == len && strlen(trial) == len - 1, "%s: one byte short loses the last", what);
}

static void test_errno(void) {
  char small[8];
  errno = EDOM;
  report_format_text(rows, NROWS, &run, small, sizeof small);
  report_format_json(rows, NROWS, &run, small, sizeof small);
  report_format_size(12345, small, sizeof small);
  TAP_EQ(errno, EDOM, "errno untouched by every formatter");
}

static void test_bounds(void) {
  enum { N = 64 };
  static report_row_t worst[N];
  for (int k = 0; k < N; k++) {
    memset(&worst[k], 0xff, sizeof worst[k]);
    worst[k].device = INT_MIN;
    worst[k].context = INT_MIN;
    worst[k].arena = INT_MIN;
    worst[k].pooled = k % 2;
    worst[k].cap = UINT64_MAX - 1;
    worst[k].stats.fragmentation = 0.5;
    worst[k].stats.peak_pool_bytes = 1; /* utilization at its largest */
    worst[k].stats.bytes_requested_in_use = 0;
  }
  /* The longest escapes everywhere: a control byte is 6 characters in JSON. */
  static report_run_t bad;
  memset(&bad, 0x01, sizeof bad);
  bad.pid = LONG_MAX;
  bad.command_len = sizeof bad.command;
  bad.start_ns = bad.end_ns = INT64_MAX;
  bad.njob = REPORT_JOB_MAX;
  bad.ngpus = GPUCAP_MAX_DEVICES;
  bad.nnotes = REPORT_NOTES_MAX;
  strcpy(bad.ended_by, "SIGTERM");
  for (int k = 0; k < GPUCAP_MAX_DEVICES; k++) {
    bad.gpus[k].device = INT_MIN;
  }
  for (int k = 0; k < REPORT_JOB_MAX; k++) {
    bad.job[k].key[0] = (char)('a' + k); /* keys of one object differ */
  }
  bad.nlibs = REPORT_LIBS_MAX;
  bad.nusage = GPUCAP_MAX_DEVICES;
  for (int k = 0; k < REPORT_LIBS_MAX; k++) {
    bad.libs[k].device = INT_MIN;
    bad.libs[k].current = bad.libs[k].peak = UINT64_MAX;
  }
  for (int k = 0; k < GPUCAP_MAX_DEVICES; k++) {
    memset(&bad.usage[k], 0xff, sizeof bad.usage[k]);
    bad.usage[k].device = INT_MIN + k % 2; /* the first of a device lists every library */
    bad.usage[k].driver = bad.usage[k].right_size = UINT64_MAX - 1;
  }
  static char big[REPORT_JSON_MAX(N) + REPORT_TEXT_MAX(N)];
  size_t t1 = report_format_text(worst, 1, &bad, NULL, 0);
  size_t tn = report_format_text(worst, N, &bad, NULL, 0);
  size_t j1 = report_format_json(worst, 1, &bad, NULL, 0);
  size_t jn = report_format_json(worst, N, &bad, big, sizeof big);
  tap_diag("worst case: text %zu / %zu, json %zu / %zu (1 / %d rows)", t1, tn, j1, jn, N);
  tap_ok(t1 < REPORT_TEXT_MAX(1) && tn < REPORT_TEXT_MAX(N), "REPORT_TEXT_MAX bounds the worst");
  tap_ok(j1 < REPORT_JSON_MAX(1) && jn < REPORT_JSON_MAX(N), "REPORT_JSON_MAX bounds the worst");
  tap_ok(json_parse(big), "worst-case JSON is valid");
}

/* A locale with a decimal comma must not leak into the JSON. */
static void test_locale(void) {
  static const char *const names[] = {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8"};
  const char *got = NULL;
  for (size_t k = 0; k < sizeof names / sizeof names[0] && got == NULL; k++) {
    got = setlocale(LC_NUMERIC, names[k]);
  }
  if (got == NULL) {
    tap_skip("json under a decimal-comma locale", "no such locale installed");
    return;
  }
  report_format_json(rows, NROWS, &run, json, sizeof json);
  tap_ok(json_parse(json), "json under LC_NUMERIC=%s is still valid", got);
  setlocale(LC_NUMERIC, "C");
}

int main(void) {
  test_validator();
  test_size();
  build_rows();
  test_json();
  test_json_odd_values();
  test_text();
  test_time();
  test_run();
  test_spill();
  test_usage();
  test_truncation("text", report_format_text);
  test_truncation("json", report_format_json);
  test_errno();
  test_bounds();
  test_locale();
  char line[256];
  report_format_text(rows, NROWS, &run, text, sizeof text);
  tap_diag("sample text report:");
  for (int k = 0; line_at(text, k, line, sizeof line); k++) {
    tap_diag("%s", line);
  }
  for (int k = 0; k < 3; k++) {
    bfc_destroy(pools[k]);
  }
  return tap_done();
}
