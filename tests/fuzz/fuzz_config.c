/* fuzz_config: gpucap's settings parsers (config/parse.h) and cfg_load (config/cfg.h) against
 * an independent reference written from the grammar in parse.h.
 *
 * The first input byte picks the target: one of the value parsers (size, fraction, boolean,
 * integer, per-device lists of sizes or fractions, path, destination) fed the rest of the input
 * as a string, or cfg_load fed a whole environment cut from the input. For every parser the
 * reference decides accept/reject and the value; the real parser must agree, write nothing on
 * failure, give a one-line printable reason exactly when it fails, and read back its own
 * canonical text (cfg_format_*) to the same value. For cfg_load: fail closed (an invalid cfg_t
 * caps every device at 0), one printable message line naming the first bad variable, and caps
 * that equal min(limit, fraction x total) of what the variables hold. A first byte of 19 modulo
 * 20 feeds one source of the caps the cluster set (config/discover.h) instead, checked by its
 * invariants. A failed check aborts.
 */
#include "config/cfg.h"
#include "config/discover.h"
#include "config/parse.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

__extension__ typedef unsigned __int128 u128;

#define require(cond, ...)                                                                         \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_config: check failed at line %d: %s: ", __LINE__, #cond);              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

enum { MAXTEXT = 8192 };

/* ---------------------------------------------------------------- the reference grammar */

typedef struct span {
  const char *p;
  size_t n;
} span_t;

static bool space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

static bool digit(char c) {
  return c >= '0' && c <= '9';
}

static char low(char c) {
  return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
}

static span_t strip(span_t s) {
  while (s.n > 0 && space(s.p[0])) {
    s.p++, s.n--;
  }
  while (s.n > 0 && space(s.p[s.n - 1])) {
    s.n--;
  }
  return s;
}

static bool same_word(span_t s, const char *w) {
  size_t n = strlen(w);
  if (s.n != n) {
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    if (low(s.p[i]) != w[i]) {
      return false;
    }
  }
  return true;
}

/* Printable ASCII, tabs allowed inside; not empty. */
static bool clean_text(span_t s) {
  if (s.n == 0) {
    return false;
  }
  for (size_t i = 0; i < s.n; i++) {
    unsigned char c = (unsigned char)s.p[i];
    if (c >= 0x7f || (c < 0x20 && c != '\t')) {
      return false;
    }
  }
  return true;
}

/* digits [. digits] | . digits, no leading zero on a multi-digit integer part. Fills the value
 * as an exact rational whole + frac / 10^nfrac (frac digits beyond 18 must be zeros: parse.h
 * says more than 18 are refused; the implementation refuses only non-zero ones, see
 * docs/reliability.md). Returns the length read, or 0 on a malformed number. */
typedef struct num {
  u128 whole; /* saturates above 2^64 */
  uint64_t frac;
  unsigned nfrac;
  bool point, fine_ok;
} num_t;

static size_t number(span_t s, num_t *v) {
  size_t i = 0, int_digits = 0, frac_digits = 0;
  memset(v, 0, sizeof *v);
  v->fine_ok = true;
  while (i < s.n && digit(s.p[i])) {
    if (v->whole <= ((u128)1 << 65)) {
      v->whole = v->whole * 10 + (unsigned)(s.p[i] - '0');
    }
    i++, int_digits++;
  }
  if (int_digits > 1 && s.p[0] == '0') {
    return 0;
  }
  if (i < s.n && s.p[i] == '.') {
    v->point = true;
    i++;
    while (i < s.n && digit(s.p[i])) {
      if (v->nfrac < 18) {
        v->frac = v->frac * 10 + (unsigned)(s.p[i] - '0');
        v->nfrac++;
      } else if (s.p[i] != '0') {
        v->fine_ok = false;
      }
      i++, frac_digits++;
    }
    if (frac_digits == 0) {
      return 0;
    }
  }
  return int_digits + frac_digits == 0 ? 0 : i;
}

static uint64_t pow10u(unsigned n) {
  uint64_t p = 1;
  while (n-- > 0) {
    p *= 10;
  }
  return p;
}

static bool ref_size(span_t s, uint64_t *out) {
  static const struct {
    const char *name;
    unsigned shift;
  } units[] = {{"k", 10}, {"ki", 10}, {"kib", 10}, {"m", 20}, {"mi", 20}, {"mib", 20},
               {"g", 30}, {"gi", 30}, {"gib", 30}, {"t", 40}, {"ti", 40}, {"tib", 40}};
  enum { NUNITS = sizeof units / sizeof units[0] };
  num_t v;
  s = strip(s);
  if (!clean_text(s)) {
    return false;
  }
  size_t k = number(s, &v);
  if (k == 0 || !v.fine_ok) {
    return false;
  }
  span_t u = {s.p + k, s.n - k};
  while (u.n > 0 && (u.p[0] == ' ' || u.p[0] == '\t')) {
    u.p++, u.n--;
  }
  unsigned shift = 0;
  if (u.n > 0) {
    size_t i = 0;
    while (i < NUNITS && !same_word(u, units[i].name)) {
      i++;
    }
    if (i == NUNITS) {
      return false;
    }
    shift = units[i].shift;
  } else if (v.point) {
    return false;
  }
  if (v.whole > UINT64_MAX) {
    return false;
  }
  u128 bytes = (v.whole << shift) + (((u128)v.frac << shift) / pow10u(v.nfrac));
  if (bytes == 0 || bytes > UINT64_MAX || (u.n == 0 && bytes < CFG_BARE_MIN)) {
    return false;
  }
  *out = (uint64_t)bytes;
  return true;
}

static bool ref_fraction(span_t s, uint64_t *out) {
  num_t v;
  s = strip(s);
  if (!clean_text(s)) {
    return false;
  }
  size_t k = number(s, &v);
  /* A percentage: the number, blanks, '%' (the whole text is already stripped). */
  size_t pct = k;
  while (pct < s.n && (s.p[pct] == ' ' || s.p[pct] == '\t')) {
    pct++;
  }
  bool percent = k > 0 && pct + 1 == s.n && s.p[pct] == '%';
  if (k == 0 || (k != s.n && !percent) || !v.fine_ok || v.whole > 1000) {
    return false;
  }
  u128 e18 = v.whole * CFG_FRACTION_ONE + (u128)v.frac * pow10u(18 - v.nfrac);
  if (percent && e18 % 100 != 0) {
    return false; /* more than 16 digits after the point */
  }
  e18 /= percent ? 100 : 1;
  if (e18 == 0 || e18 > CFG_FRACTION_ONE) {
    return false;
  }
  *out = (uint64_t)e18;
  return true;
}

static bool ref_bool(span_t s, bool *out) {
  static const char *const yes[] = {"true", "1", "yes", "on"};
  static const char *const no[] = {"false", "0", "no", "off"};
  s = strip(s);
  if (!clean_text(s)) {
    return false;
  }
  for (int i = 0; i < 4; i++) {
    if (same_word(s, yes[i]) || same_word(s, no[i])) {
      *out = same_word(s, yes[i]);
      return true;
    }
  }
  return false;
}

static bool ref_uint(span_t s, uint64_t min, uint64_t max, uint64_t *out) {
  num_t v;
  s = strip(s);
  if (!clean_text(s)) {
    return false;
  }
  size_t k = number(s, &v);
  if (k == 0 || k != s.n || v.point || v.whole < min || v.whole > max) {
    return false;
  }
  *out = (uint64_t)v.whole;
  return true;
}

/* The first ':' or '=' (either separates an ordinal from its value), or NULL. */
static const char *sep(span_t s) {
  for (size_t i = 0; i < s.n; i++) {
    if (s.p[i] == ':' || s.p[i] == '=') {
      return s.p + i;
    }
  }
  return NULL;
}

static bool ref_devvals(span_t s, cfg_devkind_t kind, cfg_devvals_t *out) {
  memset(out, 0, sizeof *out);
  s = strip(s);
  if (!clean_text(s)) {
    return false;
  }
  if (sep(s) == NULL && memchr(s.p, ',', s.n) == NULL) {
    out->every = true;
    return kind == CFG_DEV_SIZE ? ref_size(s, &out->every_value)
                                : ref_fraction(s, &out->every_value);
  }
  const char *p = s.p, *end = s.p + s.n;
  for (;;) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    span_t item = strip((span_t){p, (size_t)((comma ? comma : end) - p)});
    const char *colon = sep(item);
    if (colon == NULL) {
      return false;
    }
    span_t ord = strip((span_t){item.p, (size_t)(colon - item.p)});
    if (ord.n == 0 || ord.n > 2 || (ord.n == 2 && ord.p[0] == '0')) {
      for (size_t i = 0; i < ord.n; i++) {
        if (!digit(ord.p[i])) {
          return false;
        }
      }
      return false; /* empty, leading zero, or >= 100 */
    }
    int o = 0;
    for (size_t i = 0; i < ord.n; i++) {
      if (!digit(ord.p[i])) {
        return false;
      }
      o = o * 10 + (ord.p[i] - '0');
    }
    if (o >= GPUCAP_MAX_DEVICES || (out->mask >> o) & 1) {
      return false;
    }
    span_t val = {colon + 1, (size_t)(item.p + item.n - colon - 1)};
    bool ok =
        kind == CFG_DEV_SIZE ? ref_size(val, &out->value[o]) : ref_fraction(val, &out->value[o]);
    if (!ok) {
      return false;
    }
    out->mask |= UINT64_C(1) << o;
    if (comma == NULL) {
      return true;
    }
    p = comma + 1;
  }
}

/* Any text without control bytes, but not a word that a switch or stream would be. */
static bool ref_path(span_t s, char *out, size_t outlen) {
  static const char *const words[] = {"-",     "stdout", "stderr", "off", "none", "null", "true",
                                      "false", "yes",    "no",     "on",  "0",    "1"};
  s = strip(s);
  if (s.n == 0 || s.n >= outlen) {
    return false;
  }
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
    if (same_word(s, words[i])) {
      return false;
    }
  }
  for (size_t i = 0; i < s.n; i++) {
    if ((unsigned char)s.p[i] < 0x20 || s.p[i] == 0x7f) {
      return false;
    }
  }
  memcpy(out, s.p, s.n);
  out[s.n] = '\0';
  return true;
}

/* ---------------------------------------------------------------- checks */

static char why[CFG_WHY_MAX];

/* A reason is "" on success, one printable line on failure. */
static void check_why(int rc, const char *what) {
  size_t n = strnlen(why, sizeof why);
  require(n < sizeof why, "%s: reason not terminated", what);
  if (rc == 0) {
    require(n == 0, "%s: a reason on success: %s", what, why);
    return;
  }
  require(rc == -EINVAL || rc == -ERANGE || rc == -ENAMETOOLONG, "%s: error %d", what, rc);
  require(n > 0, "%s: failed with no reason", what);
  /* Fragments of the value are quoted back as they are, and a value may hold tabs. */
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)why[i];
    require((c >= 0x20 && c < 0x7f) || c == '\t', "%s: unprintable byte 0x%02x in the reason", what,
            c);
  }
}

static bool devvals_equal(const cfg_devvals_t *a, const cfg_devvals_t *b) {
  if (a->every != b->every || a->mask != b->mask) {
    return false;
  }
  if (a->every && a->every_value != b->every_value) {
    return false;
  }
  for (int i = 0; i < GPUCAP_MAX_DEVICES; i++) {
    if (((a->mask >> i) & 1) && a->value[i] != b->value[i]) {
      return false;
    }
  }
  return true;
}

static void fuzz_size(const char *s, size_t n) {
  uint64_t got = 0x5a5a5a5a, want = 0;
  bool ok = ref_size((span_t){s, n}, &want);
  int rc = cfg_parse_size(s, &got, why, sizeof why);
  check_why(rc, "size");
  require((rc == 0) == ok, "size '%s': parser %d, reference %d", s, rc, ok);
  if (rc != 0) {
    require(got == 0x5a5a5a5a, "output written on failure");
    return;
  }
  require(got == want, "size '%s': %llu, reference %llu", s, (unsigned long long)got,
          (unsigned long long)want);
  char text[64];
  uint64_t back = 0;
  size_t len = cfg_format_size(got, text, sizeof text);
  require(len < sizeof text && cfg_parse_size(text, &back, NULL, 0) == 0 && back == got,
          "size %llu formats as '%s', which reads back as %llu", (unsigned long long)got, text,
          (unsigned long long)back);
}

static void fuzz_fraction(const char *s, size_t n) {
  uint64_t got = 0x5a5a5a5a, want = 0;
  bool ok = ref_fraction((span_t){s, n}, &want);
  int rc = cfg_parse_fraction(s, &got, why, sizeof why);
  check_why(rc, "fraction");
  require((rc == 0) == ok, "fraction '%s': parser %d, reference %d", s, rc, ok);
  if (rc != 0) {
    require(got == 0x5a5a5a5a, "output written on failure");
    return;
  }
  require(got == want && got > 0 && got <= CFG_FRACTION_ONE, "fraction '%s': %llu vs %llu", s,
          (unsigned long long)got, (unsigned long long)want);
  char text[64];
  uint64_t back = 0;
  cfg_format_fraction(got, text, sizeof text);
  require(cfg_parse_fraction(text, &back, NULL, 0) == 0 && back == got,
          "fraction %llu formats as '%s'", (unsigned long long)got, text);
  uint64_t total = UINT64_MAX - (uint64_t)n;
  uint64_t share = cfg_fraction_of(total, got);
  require(share == (uint64_t)(((u128)total * got) / CFG_FRACTION_ONE), "cfg_fraction_of");
}

static void fuzz_bool(const char *s, size_t n) {
  bool got = true, want = false;
  bool ok = ref_bool((span_t){s, n}, &want);
  int rc = cfg_parse_bool(s, &got, why, sizeof why);
  check_why(rc, "bool");
  require((rc == 0) == ok && (rc != 0 || got == want), "bool '%s'", s);
  require(rc == 0 || got == true, "output written on failure");
}

static void fuzz_uint(const char *s, size_t n, uint64_t min, uint64_t max) {
  uint64_t got = 0x5a5a5a5a, want = 0;
  bool ok = ref_uint((span_t){s, n}, min, max, &want);
  int rc = cfg_parse_uint(s, min, max, &got, why, sizeof why);
  check_why(rc, "uint");
  require((rc == 0) == ok, "uint '%s' in [%llu, %llu]: parser %d, reference %d", s,
          (unsigned long long)min, (unsigned long long)max, rc, ok);
  require(rc == 0 ? got == want : got == 0x5a5a5a5a, "uint value");
}

static void fuzz_devvals(const char *s, size_t n, cfg_devkind_t kind) {
  cfg_devvals_t got, want, keep;
  memset(&got, 0xa5, sizeof got);
  keep = got;
  bool ok = ref_devvals((span_t){s, n}, kind, &want);
  int rc = cfg_parse_devvals(s, kind, &got, why, sizeof why);
  check_why(rc, "devvals");
  require((rc == 0) == ok, "devvals '%s' (kind %d): parser %d, reference %d", s, kind, rc, ok);
  if (rc != 0) {
    require(memcmp(&got, &keep, sizeof got) == 0, "devvals written on failure");
    return;
  }
  require(devvals_equal(&got, &want), "devvals '%s' differ from the reference", s);
  require(!(got.every && got.mask), "every and mask together");
  static char text[64 * 32];
  cfg_devvals_t back;
  size_t len = cfg_format_devvals(&got, kind, text, sizeof text);
  require(len < sizeof text, "devvals text of %zu bytes", len);
  require(cfg_parse_devvals(text, kind, &back, NULL, 0) == 0 && devvals_equal(&back, &got),
          "devvals '%s' format as '%s', which does not read back", s, text);
  for (int o = -1; o <= GPUCAP_MAX_DEVICES; o++) {
    uint64_t v = 0;
    bool has = cfg_devvals_get(&got, o, &v);
    bool want_has = o >= 0 && (got.every || (o < GPUCAP_MAX_DEVICES && ((got.mask >> o) & 1)));
    require(has == want_has, "cfg_devvals_get(%d)", o);
  }
}

static void fuzz_path(const char *s, size_t n, bool dest) {
  static char want[PATH_MAX], got[PATH_MAX];
  bool ok = ref_path((span_t){s, n}, want, sizeof want);
  if (!dest) {
    memset(got, 0x5a, sizeof got);
    int rc = cfg_parse_path(s, got, sizeof got, why, sizeof why);
    check_why(rc, "path");
    require((rc == 0) == ok, "path '%s': parser %d, reference %d", s, rc, ok);
    require(rc == 0 ? strcmp(got, want) == 0 : got[0] == 0x5a, "path value");
    return;
  }
  static cfg_dest_t d;
  span_t t = strip((span_t){s, n});
  bool keyword = same_word(t, "stderr") || same_word(t, "off");
  int rc = cfg_parse_dest(s, &d, why, sizeof why);
  check_why(rc, "dest");
  require((rc == 0) == (keyword || ok), "dest '%s': parser %d", s, rc);
  if (rc == 0 && keyword) {
    require(d.kind == (same_word(t, "off") ? CFG_DEST_OFF : CFG_DEST_STDERR), "dest keyword");
  } else if (rc == 0) {
    require(d.kind == CFG_DEST_FILE && strcmp(d.path, want) == 0, "dest path");
  }
}

/* ---------------------------------------------------------------- cfg_load */

/* The variables in the order of the input's bitmap of those set (bits 0-8 first, as the
 * committed corpus has them; the shared budget's three came later, bits 9-11, then 12 to 14;
 * the top bit of the second byte sets the last six, 15 to 20, together). Bit 13 sets a variable
 * that is no setting (NOT_READ): cfg_load never asks for it, so the corpus keeps its layout. */
static const char *const names[] = {
    "GPUCAP_MEMORY_LIMIT",  "GPUCAP_MEMORY_FRACTION", "GPUCAP_ALLOW_GROWTH",
    "GPUCAP_POOL",          "GPUCAP_REPORT",          "GPUCAP_REPORT_JSON",
    "GPUCAP_TRACE",         "GPUCAP_VERBOSE",         "TF_FORCE_GPU_ALLOW_GROWTH",
    "GPUCAP_SHARE",         "GPUCAP_SHARE_MIN",       "GPUCAP_SHARE_MAX",
    "GPUCAP_RELEASE_AFTER", "GPUCAP_NOT_READ",        "GPUCAP_ARENAS",
    "GPUCAP_OOM_DUMP",      "GPUCAP_OVERSUBSCRIBE",   "GPUCAP_SPILL",
    "GPUCAP_DISCOVER",      "GPUCAP_CGROUP_ROOT",     "GPUCAP_CAP_COVERS"};
enum {
  NVARS = sizeof names / sizeof names[0],
  TF = 8,
  OOM_DUMP = 15,
  OVERSUBSCRIBE = 16,
  SPILL = 17,
  DISCOVER = 18,
  CGROUP_ROOT = 19,
  CAP_COVERS = 20
};

/* names[] index of each option of options.def, in its order (cfg_load's). */
static const int name_of_opt[] = {0, 1,  9, 10, 11, 16, 17, 18, 20, 2,
                                  3, 14, 4, 15, 5,  6,  7,  19, 12};
_Static_assert(sizeof name_of_opt / sizeof name_of_opt[0] == CFG_OPT_COUNT,
               "name_of_opt follows config/options.def");

typedef struct env {
  const char *value[NVARS];
  unsigned lookups;
} env_t;

static const char *fake_getenv(void *ctx, const char *name, bool secure) {
  env_t *e = ctx;
  e->lookups++;
  for (int i = 0; i < NVARS; i++) {
    if (strcmp(name, names[i]) == 0) {
      /* The settings that name files must be looked up with secure_getenv. */
      require(secure == ((i >= 4 && i <= 6) || i == OOM_DUMP || i == CGROUP_ROOT),
              "%s read with secure=%d", name, secure);
      return e->value[i];
    }
  }
  require(0, "unknown variable %s", name);
  return NULL;
}

/* A budget name as cfg_parse_name reads it (white space around it trimmed). */
static bool ref_name(span_t s) {
  s = strip(s);
  if (s.n == 0 || s.n >= CFG_NAME_MAX) {
    return false;
  }
  for (size_t k = 0; k < s.n; k++) {
    char c = s.p[k];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && (k == 0 || (c != '.' && c != '_' && c != '-'))) {
      return false;
    }
  }
  return true;
}

static bool var_ok(int i, const char *v) {
  cfg_devvals_t dv;
  bool b;
  uint64_t u;
  static char path[PATH_MAX];
  span_t s = {v, strlen(v)};
  switch (i) {
  case 0:
    return ref_devvals(s, CFG_DEV_SIZE, &dv);
  case 1:
    return ref_devvals(s, CFG_DEV_FRACTION, &dv);
  case 2:
    return ref_bool(s, &b);
  case 3:
    return ref_bool(s, &b) || same_word(strip(s), "vmm") || same_word(strip(s), "regions");
  case 4:
  case OOM_DUMP:
    return same_word(strip(s), "stderr") || same_word(strip(s), "off") ||
           ref_path(s, path, sizeof path);
  case 5:
  case 6:
  case CGROUP_ROOT:
    return same_word(strip(s), "off") || ref_path(s, path, sizeof path);
  case 9:
    return ref_name(s);
  case 10:
  case 11:
  case OVERSUBSCRIBE:
    return ref_devvals(s, CFG_DEV_SIZE, &dv);
  case 12:
    return ref_uint(s, 0, 86400000, &u);
  case SPILL:
  case DISCOVER:
    return ref_bool(s, &b);
  case 14:
    return same_word(strip(s), "auto") || ref_uint(s, 1, 16, &u);
  case CAP_COVERS:
    return same_word(strip(s), "process") || same_word(strip(s), "allocations");
  default:
    return ref_uint(s, 0, 3, &u);
  }
}

/* The host's memory as cfg_load reads it, and whether budgets fit in it, each and in all. */
static bool fits_host(const cfg_devvals_t *v) {
  struct sysinfo si;
  uint64_t host = UINT64_MAX, sum = 0;
  if (sysinfo(&si) == 0 && si.totalram > 0) {
    __extension__ unsigned __int128 b =
        (unsigned __int128)si.totalram * (si.mem_unit ? si.mem_unit : 1);
    host = b > UINT64_MAX ? UINT64_MAX : (uint64_t)b;
  }
  for (int d = 0; d < GPUCAP_MAX_DEVICES; d++) {
    uint64_t b = 0;
    if (v->every && d == 0) {
      b = v->every_value;
    } else if (v->mask >> d & 1) {
      b = v->value[d];
    }
    if (b > host || b > host - sum) {
      return false;
    }
    sum += b;
  }
  return true;
}

static void fuzz_load(const uint8_t *data, size_t size) {
  static char buf[MAXTEXT + NVARS];
  env_t env = {{0}, 0};
  unsigned set = size > 0 ? data[0] | (size > 1 ? (unsigned)(data[1] & 0x7f) << 8 : 0) : 0;
  set |= size > 1 && (data[1] & 0x80) ? 0x3fu << 15 : 0;
  size_t skip = size > 1 ? 2 : size;
  memcpy(buf, data + skip, size - skip);
  buf[size - skip] = '\0';
  /* Values are NUL-separated; an unset bit leaves the variable unset. */
  char *p = buf, *end = buf + (size - skip);
  for (int i = 0; i < NVARS; i++) {
    if ((set >> i) & 1) {
      env.value[i] = p <= end ? p : "";
    }
    if (p <= end) {
      p += strlen(p) + 1;
    }
  }
  static cfg_t cfg;
  char msg[CFG_MSG_MAX];
  int rc = cfg_load(&cfg, fake_getenv, &env, msg, sizeof msg);
  /* A variable that is empty or only white space counts as unset. */
  for (int i = 0; i < NVARS; i++) {
    if (i != TF && env.value[i] != NULL &&
        strip((span_t){env.value[i], strlen(env.value[i])}).n == 0) {
      env.value[i] = NULL;
    }
  }
  int first_bad = -1, first_bad_opt = -1;
  for (int k = 0; k < CFG_OPT_COUNT && first_bad < 0; k++) {
    int i = name_of_opt[k];
    if (env.value[i] != NULL && !var_ok(i, env.value[i])) {
      first_bad = i;
      first_bad_opt = k;
    }
  }
  /* Well-formed spill budgets must also fit in the host's memory, each and in all. */
  cfg_devvals_t budget = {0};
  if (first_bad < 0 && env.value[OVERSUBSCRIBE] != NULL &&
      ref_devvals((span_t){env.value[OVERSUBSCRIBE], strlen(env.value[OVERSUBSCRIBE])},
                  CFG_DEV_SIZE, &budget) &&
      !fits_host(&budget)) {
    first_bad = OVERSUBSCRIBE;
    first_bad_opt = CFG_OPT_OVERSUBSCRIBE;
  }
  require((rc == 0) == (first_bad < 0) && cfg.valid == (rc == 0),
          "cfg_load %d, valid %d, first bad variable %d", rc, cfg.valid, first_bad);
  size_t n = strnlen(msg, sizeof msg);
  require(n < sizeof msg, "message not terminated");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)msg[i];
    require((c >= 0x20 && c < 0x7f) || c == '\t', "unprintable byte 0x%02x in the message", c);
  }
  if (rc != 0) {
    char head[128];
    snprintf(head, sizeof head, "gpucap: error: %s='", names[first_bad]);
    require(strncmp(msg, head, strlen(head)) == 0 && strstr(msg, "; accepted: ") != NULL,
            "message '%s' does not name %s", msg, names[first_bad]);
    for (int o = -2; o < 70; o++) {
      require(cfg_device_cap(&cfg, o, (uint64_t)1 << 34) == 0, "invalid settings cap %d", o);
    }
    require(cfg_option_source(&cfg, (cfg_opt_t)first_bad_opt) == CFG_SRC_INVALID, "source");
  } else {
    require(n == 0 || strncmp(msg, "gpucap: warning: ", 17) == 0, "message on success: %s", msg);
    const char *tf = env.value[2] == NULL ? env.value[TF] : NULL;
    bool tf_exact = tf != NULL && (strcmp(tf, "true") == 0 || strcmp(tf, "false") == 0);
    bool spill = false, spends = budget.every ? budget.every_value > 0 : budget.mask != 0;
    if (env.value[SPILL] != NULL) {
      ref_bool((span_t){env.value[SPILL], strlen(env.value[SPILL])}, &spill);
    }
    bool capped = env.value[0] != NULL || env.value[1] != NULL || env.value[9] != NULL;
    bool warn = (tf != NULL && !tf_exact) || (spill && !spends) || (spends && !capped);
    require((n > 0) == warn, "warning '%s' (TF_FORCE_GPU_ALLOW_GROWTH, GPUCAP_SPILL)", msg);
    bool growth = true;
    if (env.value[2] != NULL) {
      ref_bool((span_t){env.value[2], strlen(env.value[2])}, &growth);
    } else if (tf_exact) {
      growth = strcmp(tf, "true") == 0;
    }
    require(cfg.allow_growth == growth, "allow_growth %d, want %d", cfg.allow_growth, growth);
    cfg_devvals_t lim = {0}, frac = {0};
    if (env.value[0]) {
      ref_devvals((span_t){env.value[0], strlen(env.value[0])}, CFG_DEV_SIZE, &lim);
    }
    if (env.value[1]) {
      ref_devvals((span_t){env.value[1], strlen(env.value[1])}, CFG_DEV_FRACTION, &frac);
    }
    uint64_t total = ((uint64_t)1 << 34) + (uint64_t)size;
    for (int o = -1; o < 70; o++) {
      uint64_t want = o < 0 ? 0 : UINT64_MAX, v;
      if (o >= 0 && cfg_devvals_get(&lim, o, &v) && v < want) {
        want = v;
      }
      if (o >= 0 && cfg_devvals_get(&frac, o, &v) && cfg_fraction_of(total, v) < want) {
        want = cfg_fraction_of(total, v);
      }
      require(cfg_device_cap(&cfg, o, total) == want, "cap of device %d", o);
    }
  }
  /* Every option's canonical text reads back to the same text through its own parser. */
  for (int i = 0; i < CFG_OPT_COUNT; i++) {
    static char text[PATH_MAX + 64], again[PATH_MAX + 64];
    cfg_option_value(&cfg, (cfg_opt_t)i, text, sizeof text);
    const cfg_optinfo_t *info = cfg_option((cfg_opt_t)i);
    require(info != NULL, "option %d", i);
    if (text[0] == '\0' || cfg_option_source(&cfg, (cfg_opt_t)i) == CFG_SRC_INVALID) {
      continue;
    }
    env_t one = {{0}, 0};
    one.value[name_of_opt[i]] = text;
    static cfg_t back;
    require(cfg_load(&back, fake_getenv, &one, NULL, 0) == 0, "%s='%s' does not read back",
            info->name, text);
    cfg_option_value(&back, (cfg_opt_t)i, again, sizeof again);
    require(strcmp(text, again) == 0, "%s: '%s' reads back as '%s'", info->name, text, again);
  }
  static char listing[65536];
  size_t len = cfg_describe(&cfg, listing, sizeof listing);
  require(len < sizeof listing && strlen(listing) == len, "cfg_describe length");
}

/* ---------------------------------------------------------------- discovered caps */

/* One source of the caps the cluster set, from the input's text: what cfg_discover_add keeps
 * must be coherent, a refusal must say why in one line naming the source, and the per-device
 * answer must never pass a line. No reference grammar: the invariants. */
static void fuzz_discover(const char *s, size_t n, unsigned which) {
  static const char *const sources[] = {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                                        "SLURM_SHARD_MEM_PER_GPU",
                                        "NVIDIA_GPU_MEMORY_LIMIT",
                                        "NVIDIA_GPU_MEMORY_REQUEST",
                                        "CUDA_DEVICE_MEMORY_LIMIT",
                                        "CUDA_DEVICE_MEMORY_LIMIT_7",
                                        "GPU_MEMORY_LIMIT",
                                        "dmem.max",
                                        "dmem.min"};
  static cfg_found_t f;
  static char msg[4096];
  const char *name = sources[which % (sizeof sources / sizeof sources[0])];
  cfg_found_clear(&f);
  msg[0] = '\0';
  int rc = cfg_discover_add(&f, name, name[0] == 'd' ? "/cg/x" : NULL, s, msg, sizeof msg);
  require(rc == 0 || rc == -EINVAL, "%s: rc %d", name, rc);
  require(f.n == 1 && f.src[0].valid == (rc == 0), "%s: one source, valid iff accepted", name);
  const cfg_found_src_t *src = &f.src[0];
  require(rc == 0 || (src->count == 0 && f.nlines == 0), "an invalid source keeps lines");
  size_t m = strlen(msg);
  require((rc == 0) == (m == 0), "%s: a message iff refused: '%s'", name, msg);
  if (rc != 0) {
    require(strncmp(msg, name, strlen(name)) == 0 && strstr(msg, "; accepted: ") != NULL &&
                strchr(msg, '\n') == msg + m - 1,
            "message '%s' does not name %s in one line", msg, name);
  }
  for (const char *c = src->value; *c != '\0'; c++) {
    require(*c >= 0x20 && *c < 0x7f, "unprintable byte in the shown value");
  }
  for (int i = src->first; i < src->first + src->count; i++) {
    const cfg_line_t *l = &f.line[i];
    require(l->device == CFG_EVERY_DEVICE || l->device == CFG_BY_PCI ||
                (l->device >= 0 && l->device < GPUCAP_MAX_DEVICES),
            "line device %d", l->device);
    require(l->bytes > 0 || name[0] == 'd' || strcmp(name, "NVIDIA_GPU_MEMORY_REQUEST") == 0,
            "%s: a zero line", name);
    cfg_devcap_t d;
    cfg_devcap_t whole;
    cfg_discover_device(&f, l->device >= 0 ? l->device : 0, &l->pci, true, &d);
    cfg_discover_device(&f, l->device >= 0 ? l->device : 0, &l->pci, false, &whole);
    if (src->kind == CFG_LINE_LIMIT) {
      require(d.limit_src == 0 && d.cap <= l->bytes - cfg_discover_margin(l->bytes),
              "cap %llu above line %llu less the margin", (unsigned long long)d.cap,
              (unsigned long long)l->bytes);
      require(whole.limit_src == 0 && whole.cap <= l->bytes, "cap %llu above line %llu",
              (unsigned long long)whole.cap, (unsigned long long)l->bytes);
    } else {
      require(d.cap == UINT64_MAX && (d.soft <= l->bytes || l->bytes == 0), "guarantee");
    }
  }
  cfg_pci_t pci, back;
  char text[64];
  if (cfg_parse_pci(s, n, &pci) == 0) {
    cfg_format_pci(&pci, text, sizeof text);
    require(cfg_parse_pci(text, strlen(text), &back) == 0 && memcmp(&pci, &back, sizeof pci) == 0,
            "PCI bus id '%s' formats as '%s', which does not read back", s, text);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char s[MAXTEXT + 1];
  if (size < 1 || size > MAXTEXT) {
    return 0;
  }
  unsigned sel = data[0];
  size_t n = size - 1;
  memcpy(s, data + 1, n);
  s[n] = '\0';
  n = strlen(s); /* the C string the parser sees */
  switch (sel % 10) {
  case 0:
    fuzz_size(s, n);
    break;
  case 1:
    fuzz_fraction(s, n);
    break;
  case 2:
    fuzz_bool(s, n);
    break;
  case 3:
    fuzz_uint(s, n, sel / 10 % 3, sel / 30 % 2 ? UINT64_MAX : 3);
    break;
  case 4:
    fuzz_devvals(s, n, CFG_DEV_SIZE);
    break;
  case 5:
    fuzz_devvals(s, n, CFG_DEV_FRACTION);
    break;
  case 6:
    fuzz_path(s, n, false);
    break;
  case 7:
    fuzz_path(s, n, true);
    break;
  default:
    if (sel % 20 == 19) {
      fuzz_discover(s, n, sel / 20);
    } else {
      fuzz_load(data + 1, size - 1);
    }
    break;
  }
  return 0;
}
