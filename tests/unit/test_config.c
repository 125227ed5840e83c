/* Unit tests for config/: every accepted form and every rejection class of each parser, the
 * fail-closed rules of cfg_load and cfg_device_cap, the TF_FORCE_GPU_ALLOW_GROWTH rule, the
 * message format, errno preservation, the option table and its listings, and the docs.
 *
 * Environments are fake (name/value pairs behind cfg_getenv_fn) except in one check of the
 * process environment. Single-threaded; prints TAP.
 */
#include "config/cfg.h"
#include "tests/tap.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define GiB (UINT64_C(1) << 30)
#define MiB (UINT64_C(1) << 20)
#define KiB (UINT64_C(1) << 10)
#define TiB (UINT64_C(1) << 40)
#define E17 (CFG_FRACTION_ONE / 10)

/* ---------------------------------------------------------------- fake environment */

#define MAX_VARS 16
#define MAX_ASKS 64

static struct {
  const char *name[MAX_VARS];
  const char *value[MAX_VARS];
  int n;
  const char *asked[MAX_ASKS];
  bool asked_secure[MAX_ASKS];
  int nasked;
} env;

static const char *env_get(void *ctx, const char *name, bool secure) {
  (void)ctx;
  if (env.nasked < MAX_ASKS) {
    env.asked[env.nasked] = name;
    env.asked_secure[env.nasked] = secure;
    env.nasked++;
  }
  for (int i = 0; i < env.n; i++) {
    if (strcmp(env.name[i], name) == 0) {
      return env.value[i];
    }
  }
  errno = ENOENT; // as a lookup may; cfg_load must hide it from its caller
  return NULL;
}

/* -1: never asked for; 0: asked with getenv; 1: asked with secure_getenv. */
static int asked(const char *name) {
  for (int i = 0; i < env.nasked; i++) {
    if (strcmp(env.asked[i], name) == 0) {
      return env.asked_secure[i] ? 1 : 0;
    }
  }
  return -1;
}

/* Loads cfg from (name, value) pairs ending in NULL; msg gets CFG_MSG_MAX bytes. */
static int load(cfg_t *cfg, char *msg, ...) {
  va_list ap;
  const char *name;

  memset(&env, 0, sizeof env);
  va_start(ap, msg);
  while ((name = va_arg(ap, const char *)) != NULL && env.n < MAX_VARS) {
    env.name[env.n] = name;
    env.value[env.n] = va_arg(ap, const char *);
    env.n++;
  }
  va_end(ap);
  return cfg_load(cfg, env_get, NULL, msg, CFG_MSG_MAX);
}

static bool has(const char *s, const char *part) {
  return s != NULL && part != NULL && strstr(s, part) != NULL;
}

static bool starts(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int count(const char *s, const char *part) {
  int n = 0;
  for (const char *p = strstr(s, part); p != NULL; p = strstr(p + 1, part)) {
    n++;
  }
  return n;
}

/* Returns s with bytes outside printable ASCII as \xNN, for one-line TAP descriptions.
 * Rotates over four static buffers, so up to four may appear in one tap_ok call. */
static const char *show(const char *s) {
  static char bufs[4][256];
  static int turn;
  char *out = bufs[turn++ % 4];
  size_t o = 0;

  for (; s != NULL && *s != '\0' && o + 5 < sizeof bufs[0]; s++) {
    unsigned char c = (unsigned char)*s;
    if (c >= 0x20 && c < 0x7f) {
      out[o++] = (char)c;
    } else {
      o += (size_t)snprintf(out + o, 5, "\\x%02x", c);
    }
  }
  out[o] = '\0';
  return out;
}

/* ---------------------------------------------------------------- sizes */

typedef struct good {
  const char *in;
  uint64_t want;
} good_t;

typedef struct bad {
  const char *in;
  int rc;
  const char *why; /* a part the reason must contain */
} bad_t;

static const good_t good_sizes[] = {
    {"1073741824", GiB},
    {"4GiB", 4 * GiB},
    {"512MiB", 512 * MiB},
    {"64KiB", 64 * KiB},
    {"1TiB", TiB},
    {"4G", 4 * GiB},
    {"512M", 512 * MiB},
    {"64K", 64 * KiB},
    {"1T", TiB},
    {"1.5GiB", 1536 * MiB},
    {"4gib", 4 * GiB},
    {"4GIB", 4 * GiB},
    {"4gIb", 4 * GiB},
    {"4g", 4 * GiB},
    {"512m", 512 * MiB},
    {"64k", 64 * KiB},
    {"1t", TiB},
    {"1tib", TiB},
    {"4 GiB", 4 * GiB},
    {"4\tGiB", 4 * GiB},
    {"4   GiB", 4 * GiB},
    {"  4GiB  ", 4 * GiB},
    {"\t\n4GiB\r\n", 4 * GiB},
    {".5GiB", GiB / 2},
    {"0.5K", 512},
    {"1.3KiB", 1331}, /* 1331.2 bytes, rounded down */
    {"1048576", MiB}, /* the smallest size written without a unit */
    {"1048577", MiB + 1},
    {"1000KiB", 1000 * KiB}, /* small sizes are written with a unit, and formatted so */
    {"1000.5K", 1024512},
    {"1KiB", KiB},
    {"18446744073709551615", UINT64_MAX},
    {"16777215TiB", UINT64_C(16777215) * TiB},
    {"17179869183GiB", UINT64_C(17179869183) * GiB},
    {"18014398509481983K", UINT64_C(18014398509481983) * KiB},
    {"1.999999999999999999K", 2047},
    {"15.999999999999999999TiB", 16 * TiB - 1},
    {"1.0GiB", GiB},
    {"1.000000000000000000000000GiB", GiB},
    {"0.0009765625K", 1},
    /* Kubernetes' binary suffixes, any case like every unit. */
    {"8Gi", 8 * GiB},
    {"512Mi", 512 * MiB},
    {"64Ki", 64 * KiB},
    {"1Ti", TiB},
    {"1.5Gi", 1536 * MiB},
    {"8 gi", 8 * GiB},
};

static const bad_t bad_sizes[] = {
    {"", -EINVAL, "empty"},
    {"   ", -EINVAL, "empty"},
    {"\t\n", -EINVAL, "empty"},
    {"abc", -EINVAL, "not a number"},
    {"GiB", -EINVAL, "not a number"},
    {"-1", -EINVAL, "negative"},
    {"-0", -EINVAL, "negative"},
    {" -4GiB", -EINVAL, "negative"},
    {"+1", -EINVAL, "'+'"},
    {"0x10", -EINVAL, "hexadecimal"},
    {"0X1F", -EINVAL, "hexadecimal"},
    {"010", -EINVAL, "leading zero"},
    {"00", -EINVAL, "leading zero"},
    {"007GiB", -EINVAL, "leading zero"},
    {"00.5GiB", -EINVAL, "leading zero"},
    {"1GB", -EINVAL, "did you mean '1GiB'"},
    {"1gb", -EINVAL, "did you mean '1GiB'"},
    {"2 MB", -EINVAL, "did you mean '2MiB'"},
    {"3KB", -EINVAL, "did you mean '3KiB'"},
    {"3kB", -EINVAL, "did you mean '3KiB'"},
    {"1TB", -EINVAL, "did you mean '1TiB'"},
    {"1.5GB", -EINVAL, "did you mean '1.5GiB'"},
    {"4GB", -EINVAL, "did you mean '4GiB'"},
    {"4Pi", -EINVAL, "not supported"},
    {"4B", -EINVAL, "'B' suffix"},
    {"1PiB", -EINVAL, "not supported"},
    {"1P", -EINVAL, "not supported"},
    {"1EiB", -EINVAL, "not supported"},
    {"4XiB", -EINVAL, "unknown unit"},
    {"4GiBx", -EINVAL, "unknown unit"},
    {"18446744073709551616", -ERANGE, "2^64"},
    {"99999999999999999999999", -ERANGE, "2^64"},
    {"16777216TiB", -ERANGE, "2^64"},
    {"17179869184GiB", -ERANGE, "2^64"},
    {"18014398509481984K", -ERANGE, "2^64"},
    {"1", -EINVAL, "'1' has no unit, and 1 bytes cannot be meant; write a unit ('1GiB'"},
    {"8", -EINVAL, "no unit"},
    {"512", -EINVAL, "'512MiB'"},
    {"1000", -EINVAL, "no unit"},
    {"1048575", -EINVAL, "or bytes from 1048576 (1 MiB) up"},
    {"0", -ERANGE, "zero"},
    {"0GiB", -ERANGE, "zero"},
    {"0.0000001K", -ERANGE, "zero"},
    {"nan", -EINVAL, "NaN"},
    {"NaN", -EINVAL, "NaN"},
    {"inf", -EINVAL, "infinity"},
    {"Infinity", -EINVAL, "infinity"},
    {"1e9", -EINVAL, "exponent"},
    {"1E3", -EINVAL, "exponent"},
    {"1e+3", -EINVAL, "exponent"},
    {"1.5e3GiB", -EINVAL, "exponent"},
    {"4GiB junk", -EINVAL, "unexpected"},
    {"4GiB!", -EINVAL, "unexpected"},
    {"4 G i B", -EINVAL, "unexpected"},
    {"1_000", -EINVAL, "unexpected"},
    {"1,000", -EINVAL, "unexpected"},
    {"4GiB,", -EINVAL, "unexpected"},
    {"1.5", -EINVAL, "needs a unit"},
    {"0.0", -EINVAL, "needs a unit"},
    {"1.", -EINVAL, "decimal point"},
    {".", -EINVAL, "decimal point"},
    {"1.GiB", -EINVAL, "decimal point"},
    {"1..5GiB", -EINVAL, "decimal point"},
    {"1.2.3GiB", -EINVAL, "unexpected"},
    {"4\xc3\xa9GiB", -EINVAL, "non-ASCII"},
    {"\xff", -EINVAL, "non-ASCII"},
    {"\xef\xbc\x94GiB", -EINVAL, "non-ASCII"}, /* a full-width 4 */
    {"4\x01GiB", -EINVAL, "control"},
    {"4\nGiB", -EINVAL, "control"},
    {"4\x7f", -EINVAL, "control"},
    {"1.0000000000000000001GiB", -EINVAL, "18 digits"},
};

static void test_sizes(void) {
  char why[CFG_WHY_MAX];
  char text[64];

  for (size_t i = 0; i < sizeof good_sizes / sizeof good_sizes[0]; i++) {
    const good_t *g = &good_sizes[i];
    uint64_t v = 12345;
    int rc = cfg_parse_size(g->in, &v, why, sizeof why);
    if (!tap_ok(rc == 0 && v == g->want && why[0] == '\0', "size '%s' reads %llu", show(g->in),
                (unsigned long long)g->want)) {
      tap_diag("  rc %d, got %llu, why '%s'", rc, (unsigned long long)v, why);
    }
    uint64_t back = 0;
    cfg_format_size(v, text, sizeof text);
    rc = cfg_parse_size(text, &back, NULL, 0);
    tap_ok(rc == 0 && back == v, "size '%s' formats as '%s', which reads back the same",
           show(g->in), text);
  }
  for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++) {
    const bad_t *b = &bad_sizes[i];
    uint64_t v = 12345;
    int rc = cfg_parse_size(b->in, &v, why, sizeof why);
    if (!tap_ok(rc == b->rc && v == 12345 && has(why, b->why), "size '%s' is rejected (%s)",
                show(b->in), b->why)) {
      tap_diag("  rc %d (want %d), value %llu, why '%s'", rc, b->rc, (unsigned long long)v, why);
    }
  }
  uint64_t v = 7;
  TAP_EQ(cfg_parse_size(NULL, &v, why, sizeof why), -EINVAL, "size NULL is rejected");
  TAP_EQ(v, 7, "size NULL leaves the output alone");
}

/* ---------------------------------------------------------------- fractions, bools, ints */

static const good_t good_fractions[] = {
    {"0.5", 5 * E17},
    {".25", CFG_FRACTION_ONE / 4},
    {"1", CFG_FRACTION_ONE},
    {"1.0", CFG_FRACTION_ONE},
    {"1.000000", CFG_FRACTION_ONE},
    {"0.000000000000000001", 1},
    {" 0.5 ", 5 * E17},
    {"\t0.5\n", 5 * E17},
    {"0.333333333333333333", UINT64_C(333333333333333333)},
    {"0.5000000000000000000000", 5 * E17},
    {"0.1", E17},
    {"0.75", 75 * (E17 / 10)},
    /* Percentages, as CuPy's CUPY_GPU_MEMORY_LIMIT writes them. */
    {"50%", 5 * E17},
    {"100%", CFG_FRACTION_ONE},
    {"100.0%", CFG_FRACTION_ONE},
    {"12.5%", 125 * (E17 / 100)},
    {" 25 % ", CFG_FRACTION_ONE / 4},
    {"0.0000000000000001%", 1},
    {"33.3333333333333333%", UINT64_C(333333333333333333)},
};

static const bad_t bad_fractions[] = {
    {"", -EINVAL, "empty"},
    {"0", -ERANGE, "more than 0"},
    {"0.0", -ERANGE, "more than 0"},
    {".0", -ERANGE, "more than 0"},
    {"0.0000000000000000000", -ERANGE, "more than 0"},
    {"1.0001", -ERANGE, "more than 1"},
    {"1.000000000000000001", -ERANGE, "more than 1"},
    {"2", -ERANGE, "more than 1"},
    {"1.5", -ERANGE, "more than 1"},
    {"99999999999999999999", -ERANGE, "more than 1"},
    {"nan", -EINVAL, "NaN"},
    {"inf", -EINVAL, "infinity"},
    {"-0.5", -EINVAL, "negative"},
    {"+0.5", -EINVAL, "'+'"},
    {"0%", -ERANGE, "more than 0"},
    {"101%", -ERANGE, "more than 100%"},
    {"100.1%", -ERANGE, "more than 100%"},
    {"0.5%%", -EINVAL, "unexpected"},
    {"%", -EINVAL, "not a number"},
    {"50%x", -EINVAL, "unexpected"},
    {"0.00000000000000001%", -EINVAL, "16 digits"},
    {"0.5x", -EINVAL, "unexpected"},
    {"0.5 GiB", -EINVAL, "unexpected"},
    {"0,5", -EINVAL, "unexpected"},
    {"1e-1", -EINVAL, "exponent"},
    {"00.5", -EINVAL, "leading zero"},
    {"0.1234567890123456789", -EINVAL, "18 digits"},
    {".", -EINVAL, "decimal point"},
    {"0x1", -EINVAL, "hexadecimal"},
    {"\xc2\xbd", -EINVAL, "non-ASCII"}, /* a one-half sign */
};

static const char *const trues[] = {"true", "TRUE", "True", "tRuE", "1",    "yes",     "YES",
                                    "Yes",  "on",   "ON",   "On",   " on ", "\ttrue\n"};
static const char *const falses[] = {"false", "FALSE", "False", "0",  "no",
                                     "NO",    "off",   "OFF",   "Off"};
/* "tr\303\274e" is "tr" u-umlaut "e", in octal so that the 'e' is not read as a hex digit. */
static const char *const bad_bools[] = {
    "",  " ",   "2",  "tru", "truee", "enable",     "y",      "n",           "t",
    "f", "oui", "-1", "00",  "01",    "true false", "on\x01", "tr\303\274e",
};

static void test_fractions_bools_ints(void) {
  char why[CFG_WHY_MAX];

  for (size_t i = 0; i < sizeof good_fractions / sizeof good_fractions[0]; i++) {
    const good_t *g = &good_fractions[i];
    uint64_t v = 12345;
    char text[64];
    int rc = cfg_parse_fraction(g->in, &v, why, sizeof why);
    if (!tap_ok(rc == 0 && v == g->want && why[0] == '\0', "fraction '%s' reads exactly",
                show(g->in))) {
      tap_diag("  rc %d, got %llu, why '%s'", rc, (unsigned long long)v, why);
    }
    uint64_t back = 0;
    cfg_format_fraction(v, text, sizeof text);
    rc = cfg_parse_fraction(text, &back, NULL, 0);
    tap_ok(rc == 0 && back == v, "fraction '%s' formats as '%s', which reads back the same",
           show(g->in), text);
  }
  for (size_t i = 0; i < sizeof bad_fractions / sizeof bad_fractions[0]; i++) {
    const bad_t *b = &bad_fractions[i];
    uint64_t v = 12345;
    int rc = cfg_parse_fraction(b->in, &v, why, sizeof why);
    if (!tap_ok(rc == b->rc && v == 12345 && has(why, b->why), "fraction '%s' is rejected (%s)",
                show(b->in), b->why)) {
      tap_diag("  rc %d (want %d), why '%s'", rc, b->rc, why);
    }
  }

  for (size_t i = 0; i < sizeof trues / sizeof trues[0]; i++) {
    bool v = false;
    int rc = cfg_parse_bool(trues[i], &v, why, sizeof why);
    tap_ok(rc == 0 && v, "boolean '%s' reads true", show(trues[i]));
  }
  for (size_t i = 0; i < sizeof falses / sizeof falses[0]; i++) {
    bool v = true;
    int rc = cfg_parse_bool(falses[i], &v, why, sizeof why);
    tap_ok(rc == 0 && !v, "boolean '%s' reads false", show(falses[i]));
  }
  for (size_t i = 0; i < sizeof bad_bools / sizeof bad_bools[0]; i++) {
    bool v = true;
    int rc = cfg_parse_bool(bad_bools[i], &v, why, sizeof why);
    tap_ok(rc == -EINVAL && v && why[0] != '\0', "boolean '%s' is rejected: %s", show(bad_bools[i]),
           why);
  }

  static const good_t good_ints[] = {{"0", 0}, {"3", 3}, {" 2 ", 2}};
  static const bad_t bad_ints[] = {
      {"4", -ERANGE, "between 0 and 3"},
      {"99999999999999999999999", -ERANGE, "between"},
      {"-1", -EINVAL, "negative"},
      {"01", -EINVAL, "leading zero"},
      {"1.0", -EINVAL, "whole number"},
      {"3x", -EINVAL, "unexpected"},
      {"", -EINVAL, "empty"},
      {"0x1", -EINVAL, "hexadecimal"},
      {"1e0", -EINVAL, "exponent"},
  };
  for (size_t i = 0; i < sizeof good_ints / sizeof good_ints[0]; i++) {
    uint64_t v = 99;
    int rc = cfg_parse_uint(good_ints[i].in, 0, 3, &v, why, sizeof why);
    tap_ok(rc == 0 && v == good_ints[i].want, "integer '%s' reads %llu", show(good_ints[i].in),
           (unsigned long long)good_ints[i].want);
  }
  for (size_t i = 0; i < sizeof bad_ints / sizeof bad_ints[0]; i++) {
    uint64_t v = 99;
    int rc = cfg_parse_uint(bad_ints[i].in, 0, 3, &v, why, sizeof why);
    if (!tap_ok(rc == bad_ints[i].rc && v == 99 && has(why, bad_ints[i].why),
                "integer '%s' is rejected (%s)", show(bad_ints[i].in), bad_ints[i].why)) {
      tap_diag("  rc %d, why '%s'", rc, why);
    }
  }
  uint64_t v = 99;
  TAP_EQ(cfg_parse_uint("1", 2, 3, &v, NULL, 0), -ERANGE, "integer below min is rejected");
}

/* ---------------------------------------------------------------- per-device lists */

typedef struct good_list {
  const char *in;
  cfg_devkind_t kind;
  bool every;
  uint64_t every_value;
  uint64_t mask;
  int dev[2]; /* up to two listed devices to check */
  uint64_t value[2];
  const char *canon; /* cfg_format_devvals output */
} good_list_t;

static const good_list_t good_lists[] = {
    {"0:4GiB,1:2GiB", CFG_DEV_SIZE, false, 0, 3, {0, 1}, {4 * GiB, 2 * GiB}, "0:4GiB,1:2GiB"},
    {" 0 : 4GiB , 1 : 2 GiB ",
     CFG_DEV_SIZE,
     false,
     0,
     3,
     {0, 1},
     {4 * GiB, 2 * GiB},
     "0:4GiB,1:2GiB"},
    {"1:2GiB,0:4GiB", CFG_DEV_SIZE, false, 0, 3, {0, 1}, {4 * GiB, 2 * GiB}, "0:4GiB,1:2GiB"},
    {"63:1K", CFG_DEV_SIZE, false, 0, UINT64_C(1) << 63, {63, 63}, {KiB, KiB}, "63:1KiB"},
    {"5:1.5GiB", CFG_DEV_SIZE, false, 0, 1 << 5, {5, 5}, {1536 * MiB, 1536 * MiB}, "5:1536MiB"},
    {"4GiB", CFG_DEV_SIZE, true, 4 * GiB, 0, {0, 0}, {0, 0}, "4GiB"},
    {"0:0.5,1:0.25",
     CFG_DEV_FRACTION,
     false,
     0,
     3,
     {0, 1},
     {5 * E17, CFG_FRACTION_ONE / 4},
     "0:0.5,1:0.25"},
    {".5", CFG_DEV_FRACTION, true, 5 * E17, 0, {0, 0}, {0, 0}, "0.5"},
    /* '=' separates an ordinal from its value as ':' does, in one list too. */
    {"0=4GiB,1=2GiB", CFG_DEV_SIZE, false, 0, 3, {0, 1}, {4 * GiB, 2 * GiB}, "0:4GiB,1:2GiB"},
    {"0=4GiB, 1:2Gi", CFG_DEV_SIZE, false, 0, 3, {0, 1}, {4 * GiB, 2 * GiB}, "0:4GiB,1:2GiB"},
    {"1 = 8Gi", CFG_DEV_SIZE, false, 0, 2, {1, 1}, {8 * GiB, 8 * GiB}, "1:8GiB"},
    {"0=50%,1:0.25",
     CFG_DEV_FRACTION,
     false,
     0,
     3,
     {0, 1},
     {5 * E17, CFG_FRACTION_ONE / 4},
     "0:0.5,1:0.25"},
    {"50%", CFG_DEV_FRACTION, true, 5 * E17, 0, {0, 0}, {0, 0}, "0.5"},
};

typedef struct bad_list {
  const char *in;
  cfg_devkind_t kind;
  int rc;
  const char *why;
} bad_list_t;

static const bad_list_t bad_lists[] = {
    {"0:4GiB,,1:2GiB", CFG_DEV_SIZE, -EINVAL, "item 2 of the device list is empty"},
    {"0:4GiB,", CFG_DEV_SIZE, -EINVAL, "item 2 of the device list is empty"},
    {",0:4GiB", CFG_DEV_SIZE, -EINVAL, "item 1 of the device list is empty"},
    {",", CFG_DEV_SIZE, -EINVAL, "empty"},
    {"0:4GiB, ,1:2GiB", CFG_DEV_SIZE, -EINVAL, "empty"},
    {"64:1GiB", CFG_DEV_SIZE, -ERANGE, "out of range 0..63"},
    {"99999999999999999999:1GiB", CFG_DEV_SIZE, -ERANGE, "out of range"},
    {"-1:1GiB", CFG_DEV_SIZE, -EINVAL, "negative"},
    {"01:1GiB", CFG_DEV_SIZE, -EINVAL, "leading zero"},
    {"a:1GiB", CFG_DEV_SIZE, -EINVAL, "not a decimal"},
    {"0x1:1GiB", CFG_DEV_SIZE, -EINVAL, "not a decimal"},
    {"1.0:1GiB", CFG_DEV_SIZE, -EINVAL, "not a decimal"},
    {"0:4GiB,0:2GiB", CFG_DEV_SIZE, -EINVAL, "device 0 is listed twice"},
    {"0:4GiB,1:1GiB, 0 :2GiB", CFG_DEV_SIZE, -EINVAL, "listed twice"},
    {"0:", CFG_DEV_SIZE, -EINVAL, "device 0: empty"},
    {":4GiB", CFG_DEV_SIZE, -EINVAL, "missing device ordinal"},
    {"=4GiB", CFG_DEV_SIZE, -EINVAL, "missing device ordinal"},
    {"0=4GiB,0:2GiB", CFG_DEV_SIZE, -EINVAL, "device 0 is listed twice"},
    {"0=1=2GiB", CFG_DEV_SIZE, -EINVAL, "unexpected"},
    {"0:1GB", CFG_DEV_SIZE, -EINVAL, "device 0: 'GB' is ambiguous"},
    {"4GiB,2GiB", CFG_DEV_SIZE, -EINVAL, "'ordinal:'"},
    {"0:0", CFG_DEV_SIZE, -ERANGE, "device 0: the size comes to zero"},
    {"0:-1", CFG_DEV_SIZE, -EINVAL, "negative"},
    {"1:1GiB:2", CFG_DEV_SIZE, -EINVAL, "unexpected"},
    {"0:4GiB 1:2GiB", CFG_DEV_SIZE, -EINVAL, "unexpected"},
    {"0:4GiB;1:2GiB", CFG_DEV_SIZE, -EINVAL, "unexpected"},
    {"0:\xc3\xa9", CFG_DEV_SIZE, -EINVAL, "non-ASCII"},
    {"", CFG_DEV_SIZE, -EINVAL, "empty"},
    {"1GB", CFG_DEV_SIZE, -EINVAL, "did you mean '1GiB'"},
    {"0:0.5,1:1.5", CFG_DEV_FRACTION, -ERANGE, "device 1: '1.5' is more than 1"},
    {"0:0", CFG_DEV_FRACTION, -ERANGE, "more than 0"},
    {"0:nan", CFG_DEV_FRACTION, -EINVAL, "NaN"},
    {"0:0.5,0:0.25", CFG_DEV_FRACTION, -EINVAL, "listed twice"},
    {"1.0001", CFG_DEV_FRACTION, -ERANGE, "more than 1"},
};

static void test_lists(void) {
  char why[CFG_WHY_MAX];
  char text[256];
  cfg_devvals_t v;
  cfg_devvals_t before;

  for (size_t i = 0; i < sizeof good_lists / sizeof good_lists[0]; i++) {
    const good_list_t *g = &good_lists[i];
    memset(&v, 0xa5, sizeof v);
    int rc = cfg_parse_devvals(g->in, g->kind, &v, why, sizeof why);
    bool ok = rc == 0 && v.every == g->every && v.mask == g->mask;
    ok = ok && (!g->every || v.every_value == g->every_value);
    for (int k = 0; k < 2 && !g->every; k++) {
      ok = ok && v.value[g->dev[k]] == g->value[k];
    }
    if (!tap_ok(ok, "list '%s' reads as expected", show(g->in))) {
      tap_diag("  rc %d, why '%s', mask %llx", rc, why, (unsigned long long)v.mask);
    }
    cfg_format_devvals(&v, g->kind, text, sizeof text);
    if (!tap_ok(strcmp(text, g->canon) == 0, "list '%s' formats as '%s'", show(g->in), g->canon)) {
      tap_diag("  got '%s'", text);
    }
  }
  for (size_t i = 0; i < sizeof bad_lists / sizeof bad_lists[0]; i++) {
    const bad_list_t *b = &bad_lists[i];
    memset(&v, 0xa5, sizeof v);
    before = v;
    int rc = cfg_parse_devvals(b->in, b->kind, &v, why, sizeof why);
    if (!tap_ok(rc == b->rc && memcmp(&v, &before, sizeof v) == 0 && has(why, b->why),
                "list '%s' is rejected (%s)", show(b->in), b->why)) {
      tap_diag("  rc %d (want %d), why '%s'", rc, b->rc, why);
    }
  }

  uint64_t got = 0;
  cfg_parse_devvals("0:4GiB,1:2GiB", CFG_DEV_SIZE, &v, NULL, 0);
  tap_ok(cfg_devvals_get(&v, 1, &got) && got == 2 * GiB, "a listed device has its value");
  tap_ok(!cfg_devvals_get(&v, 2, &got), "an unlisted device has no value from a list");
  tap_ok(!cfg_devvals_get(&v, 64, &got), "an ordinal past the list range has none either");
  tap_ok(!cfg_devvals_get(&v, -1, &got), "a negative ordinal has none");
  cfg_parse_devvals("4GiB", CFG_DEV_SIZE, &v, NULL, 0);
  tap_ok(cfg_devvals_get(&v, 100, &got) && got == 4 * GiB,
         "a value for every device covers ordinals past the list range too");

  memset(&v, 0, sizeof v);
  TAP_EQ(cfg_format_devvals(&v, CFG_DEV_SIZE, text, sizeof text), 0, "empty list formats as ''");
  cfg_parse_devvals("0:4GiB,1:2GiB", CFG_DEV_SIZE, &v, NULL, 0);
  char small[5];
  size_t need = cfg_format_devvals(&v, CFG_DEV_SIZE, small, sizeof small);
  tap_ok(need == strlen("0:4GiB,1:2GiB") && strcmp(small, "0:4G") == 0,
         "a list formatted into a small buffer is truncated and measured like snprintf");
}

/* ---------------------------------------------------------------- paths, numbers, formats */

static void test_paths_and_formats(void) {
  char why[CFG_WHY_MAX];
  char out[PATH_MAX];
  cfg_dest_t d;

  static const struct {
    const char *in;
    const char *want;
  } good_paths[] = {{"/tmp/x", "/tmp/x"},
                    {"./r.txt", "./r.txt"},
                    {"r.txt", "r.txt"},
                    {" run.json ", "run.json"},
                    {"offline", "offline"},
                    {"./1", "./1"},
                    {"./stdout", "./stdout"},
                    {"  /tmp/a b  ", "/tmp/a b"},
                    {"/home/jos\xc3\xa9/r", "/home/jos\xc3\xa9/r"}};
  for (size_t i = 0; i < sizeof good_paths / sizeof good_paths[0]; i++) {
    int rc = cfg_parse_path(good_paths[i].in, out, sizeof out, why, sizeof why);
    tap_ok(rc == 0 && strcmp(out, good_paths[i].want) == 0, "path '%s' is accepted",
           show(good_paths[i].in));
  }
  static const bad_t bad_paths[] = {{"", -EINVAL, "empty"},
                                    {"  ", -EINVAL, "empty"},
                                    {"1", -EINVAL, "write './1' for a file of that name"},
                                    {"0", -EINVAL, "not a file name"},
                                    {"-", -EINVAL, "write './-'"},
                                    {"stdout", -EINVAL, "not a file name"},
                                    {"STDERR", -EINVAL, "write './STDERR'"},
                                    {" off ", -EINVAL, "not a file name"},
                                    {"None", -EINVAL, "not a file name"},
                                    {"null", -EINVAL, "not a file name"},
                                    {"true", -EINVAL, "not a file name"},
                                    {"No", -EINVAL, "not a file name"},
                                    {"/tmp/a\nb", -EINVAL, "control"},
                                    {"/tmp/\x1b[2J", -EINVAL, "control"}};
  for (size_t i = 0; i < sizeof bad_paths / sizeof bad_paths[0]; i++) {
    strcpy(out, "unchanged");
    int rc = cfg_parse_path(bad_paths[i].in, out, sizeof out, why, sizeof why);
    tap_ok(rc == bad_paths[i].rc && strcmp(out, "unchanged") == 0 && has(why, bad_paths[i].why),
           "path '%s' is rejected (%s)", show(bad_paths[i].in), bad_paths[i].why);
  }
  static char longest[PATH_MAX + 1];
  memset(longest, 'a', PATH_MAX);
  longest[0] = '/';
  longest[PATH_MAX - 1] = '\0';
  tap_ok(cfg_parse_path(longest, out, sizeof out, why, sizeof why) == 0 &&
             strlen(out) == PATH_MAX - 1,
         "a path of PATH_MAX-1 bytes fits");
  longest[PATH_MAX - 1] = 'a';
  longest[PATH_MAX] = '\0';
  TAP_EQ(cfg_parse_path(longest, out, sizeof out, why, sizeof why), -ENAMETOOLONG,
         "a path of PATH_MAX bytes is too long");

  TAP_EQ(cfg_expand_path("/tmp/r.%p.json", 4242, out, sizeof out), 0, "%%p expands");
  tap_ok(strcmp(out, "/tmp/r.4242.json") == 0, "%%p becomes the process id: %s", out);
  cfg_expand_path("%p%p-%x-%-100%", 7, out, sizeof out);
  tap_ok(strcmp(out, "77-%x-%-100%") == 0, "every %%p is replaced, other bytes copied: %s", out);
  cfg_expand_path("a%%p-%p%%%p%%", 7, out, sizeof out);
  tap_ok(strcmp(out, "a%p-7%7%") == 0, "%%%% is a literal %%, read left to right: %s", out);
  TAP_EQ(cfg_expand_path("ab%p", 12345, out, 7), -ENAMETOOLONG, "a pid that does not fit");
  TAP_EQ(cfg_expand_path("abcdef", 1, out, 6), -ENAMETOOLONG, "a path that does not fit");
  TAP_EQ(cfg_expand_path("abcde", 1, out, 6), 0, "a path that just fits");
  tap_ok(cfg_parse_dest("stderr", &d, why, sizeof why) == 0 && d.kind == CFG_DEST_STDERR,
         "destination 'stderr'");
  tap_ok(cfg_parse_dest(" STDERR ", &d, why, sizeof why) == 0 && d.kind == CFG_DEST_STDERR,
         "destination ' STDERR ' (any case, trimmed)");
  tap_ok(cfg_parse_dest("Off", &d, why, sizeof why) == 0 && d.kind == CFG_DEST_OFF,
         "destination 'Off'");
  tap_ok(cfg_parse_dest("./off", &d, why, sizeof why) == 0 && d.kind == CFG_DEST_FILE &&
             strcmp(d.path, "./off") == 0,
         "destination './off' is a file");
  tap_ok(cfg_parse_dest("report.txt", &d, why, sizeof why) == 0 && d.kind == CFG_DEST_FILE &&
             strcmp(d.path, "report.txt") == 0,
         "destination 'report.txt' is a file in the working directory");
  d.kind = CFG_DEST_OFF;
  tap_ok(cfg_parse_dest("stdout", &d, why, sizeof why) == -EINVAL && d.kind == CFG_DEST_OFF &&
             has(why, "accepted: stderr, off or a file path") && has(why, "'./stdout'"),
         "destination 'stdout' is rejected: %s", why);
  tap_ok(cfg_parse_dest("", &d, why, sizeof why) == -EINVAL, "destination '' is rejected");

  static const struct {
    uint64_t total, e18, want;
  } shares[] = {
      {10, 3 * E17, 3},
      {10, UINT64_C(333333333333333333), 3},
      {3, 5 * E17, 1},
      {0, 5 * E17, 0},
      {UINT64_MAX, CFG_FRACTION_ONE, UINT64_MAX},
      {UINT64_MAX, 5 * E17, UINT64_MAX / 2}, /* a double would round this up to 2^63 */
      {16 * GiB, E17, UINT64_C(1717986918)},
      {16 * GiB, 1, 0},
  };
  for (size_t i = 0; i < sizeof shares / sizeof shares[0]; i++) {
    TAP_EQ(cfg_fraction_of(shares[i].total, shares[i].e18), shares[i].want,
           "cfg_fraction_of(%llu, %llu) rounds down exactly", (unsigned long long)shares[i].total,
           (unsigned long long)shares[i].e18);
  }

  static const struct {
    uint64_t bytes;
    const char *want;
  } sizes[] = {{1536 * MiB, "1536MiB"},
               {4 * GiB, "4GiB"},
               {1000, "0.9765625KiB"}, /* under 1 MiB: a unit, exactly */
               {1, "0.0009765625KiB"},
               {MiB - 1, "1023.9990234375KiB"},
               {MiB + 1, "1048577"},
               {TiB, "1TiB"},
               {KiB, "1KiB"},
               {UINT64_MAX, "18446744073709551615"},
               {0, "0"}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    char text[32];
    cfg_format_size(sizes[i].bytes, text, sizeof text);
    tap_ok(strcmp(text, sizes[i].want) == 0, "size %llu formats as '%s'",
           (unsigned long long)sizes[i].bytes, sizes[i].want);
  }
  char text[32];
  cfg_format_fraction(1, text, sizeof text);
  tap_ok(strcmp(text, "0.000000000000000001") == 0, "the smallest fraction formats exactly");
}

/* ---------------------------------------------------------------- cfg_load and caps */

static void test_defaults(void) {
  cfg_t cfg;
  char msg[CFG_MSG_MAX];

  memset(msg, 'x', sizeof msg);
  TAP_EQ(load(&cfg, msg, NULL), 0, "an empty environment loads");
  tap_ok(cfg.valid && msg[0] == '\0', "an empty environment is valid and says nothing");
  TAP_EQ(cfg_device_cap(&cfg, 0, 16 * GiB) == UINT64_MAX, 1, "no variable: no cap");
  tap_ok(cfg.pool == CFG_POOL_ON && cfg.release_after == 2000 && cfg.allow_growth &&
             cfg.report.kind == CFG_DEST_STDERR && cfg.report_json[0] == '\0' &&
             cfg.trace[0] == '\0' && cfg.verbose == 0 && cfg.arenas == CFG_ARENAS_AUTO &&
             cfg.cap_covers == CFG_COVERS_PROCESS,
         "defaults: pool on, release after 2000 ms, growth true, report stderr, no JSON, no "
         "trace, verbose 0, one arena, the cap covers the process");
  bool all_default = true;
  for (int i = 0; i < CFG_OPT_COUNT; i++) {
    all_default = all_default && cfg_option_source(&cfg, (cfg_opt_t)i) == CFG_SRC_DEFAULT;
  }
  tap_ok(all_default, "every source is 'default'");

  cfg_t zero;
  memset(&zero, 0, sizeof zero);
  TAP_EQ(cfg_device_cap(&zero, 0, 16 * GiB), 0, "a zero-filled cfg_t allows no memory");
  TAP_EQ(cfg_device_cap(NULL, 0, 16 * GiB), 0, "a NULL cfg_t allows no memory");
  TAP_EQ(cfg_device_cap(&cfg, -1, 16 * GiB), 0, "a negative ordinal gets no memory");
  TAP_EQ(cfg_load(NULL, env_get, NULL, msg, sizeof msg), -EINVAL, "cfg_load(NULL) fails");
}

static void test_caps(void) {
  cfg_t cfg;
  char msg[CFG_MSG_MAX];

  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "4GiB", NULL);
  TAP_EQ(cfg_device_cap(&cfg, 0, 16 * GiB), 4 * GiB, "limit 4GiB caps device 0 at 4GiB");
  TAP_EQ(cfg_device_cap(&cfg, 70, 16 * GiB), 4 * GiB, "and device 70 too (every device)");
  TAP_EQ(cfg_device_cap(&cfg, 0, GiB), 4 * GiB, "a limit above the total is returned as is");
  TAP_EQ(cfg_option_source(&cfg, CFG_OPT_MEMORY_LIMIT), CFG_SRC_ENV, "source: environment");

  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "0:4GiB,1:2GiB", NULL);
  TAP_EQ(cfg_device_cap(&cfg, 0, 16 * GiB), 4 * GiB, "per-device limit: device 0");
  TAP_EQ(cfg_device_cap(&cfg, 1, 16 * GiB), 2 * GiB, "per-device limit: device 1");
  TAP_EQ(cfg_device_cap(&cfg, 2, 16 * GiB) == UINT64_MAX, 1, "per-device limit: 2 unlisted");

  load(&cfg, msg, "GPUCAP_MEMORY_FRACTION", "0.5", NULL);
  TAP_EQ(cfg_device_cap(&cfg, 3, 16 * GiB), 8 * GiB, "fraction 0.5 of 16GiB is 8GiB");
  TAP_EQ(cfg_device_cap(&cfg, 3, 3), 1, "fraction 0.5 of 3 bytes rounds down to 1");

  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "4GiB", "GPUCAP_MEMORY_FRACTION", "0.5", NULL);
  TAP_EQ(cfg_device_cap(&cfg, 0, 16 * GiB), 4 * GiB, "min rule: limit 4GiB < half of 16GiB");
  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "12GiB", "GPUCAP_MEMORY_FRACTION", "0.5", NULL);
  TAP_EQ(cfg_device_cap(&cfg, 0, 16 * GiB), 8 * GiB, "min rule: half of 16GiB < limit 12GiB");
  TAP_EQ(cfg_device_cap(&cfg, 0, 32 * GiB), 12 * GiB, "min rule: limit 12GiB < half of 32GiB");

  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "0:4GiB", "GPUCAP_MEMORY_FRACTION", "1:0.25,0:1", NULL);
  TAP_EQ(cfg_device_cap(&cfg, 0, 16 * GiB), 4 * GiB, "mixed lists: device 0 by its limit");
  TAP_EQ(cfg_device_cap(&cfg, 1, 16 * GiB), 4 * GiB, "mixed lists: device 1 by its fraction");
  TAP_EQ(cfg_device_cap(&cfg, 2, 16 * GiB) == UINT64_MAX, 1, "mixed lists: device 2 uncapped");
  TAP_EQ(cfg_device_cap(&cfg, 0, 2 * GiB), 2 * GiB, "mixed lists: fraction 1 of a small card");
}

/* Empty values are unset (a template that expands an unset value means "no setting"); `off`
 * turns off a file setting; a bare name is a file in the working directory. */
static void test_empty_off_and_names(void) {
  cfg_t cfg;
  char msg[CFG_MSG_MAX];
  static const char *const blanks[] = {"", " ", "\t\n"};

  for (size_t i = 0; i < sizeof blanks / sizeof blanks[0]; i++) {
    for (int id = 0; id < CFG_OPT_COUNT; id++) {
      const char *name = cfg_option((cfg_opt_t)id)->name;
      int rc = load(&cfg, msg, name, blanks[i], NULL);
      if (!tap_ok(rc == 0 && cfg.valid && msg[0] == '\0' &&
                      cfg_option_source(&cfg, (cfg_opt_t)id) == CFG_SRC_DEFAULT,
                  "%s='%s' counts as unset", name, show(blanks[i]))) {
        tap_diag("  rc %d, msg '%s'", rc, msg);
      }
    }
  }
  TAP_EQ(cfg_device_cap(&cfg, 0, 16 * GiB) == UINT64_MAX, 1, "an empty limit caps nothing");
  load(&cfg, msg, "GPUCAP_ALLOW_GROWTH", "", "TF_FORCE_GPU_ALLOW_GROWTH", "false", NULL);
  tap_ok(!cfg.allow_growth && cfg_option_source(&cfg, CFG_OPT_ALLOW_GROWTH) == CFG_SRC_ALIAS,
         "an empty GPUCAP_ALLOW_GROWTH is unset: TF_FORCE_GPU_ALLOW_GROWTH decides");

  TAP_EQ(load(&cfg, msg, "GPUCAP_REPORT_JSON", "OFF", "GPUCAP_TRACE", " off ", NULL), 0,
         "GPUCAP_REPORT_JSON=OFF and GPUCAP_TRACE=' off ' load");
  tap_ok(cfg.report_json[0] == '\0' && cfg.trace[0] == '\0' &&
             cfg_option_source(&cfg, CFG_OPT_TRACE) == CFG_SRC_ENV,
         "off: no JSON file and no trace, from the environment");
  TAP_EQ(load(&cfg, msg, "GPUCAP_REPORT_JSON", "run.json", "GPUCAP_TRACE", "trace.csv",
              "GPUCAP_REPORT", "report.txt", NULL),
         0, "bare file names load");
  tap_ok(strcmp(cfg.report_json, "run.json") == 0 && strcmp(cfg.trace, "trace.csv") == 0 &&
             cfg.report.kind == CFG_DEST_FILE && strcmp(cfg.report.path, "report.txt") == 0,
         "bare file names are kept as written");
  TAP_EQ(load(&cfg, msg, "GPUCAP_TRACE", "stdout", NULL), -EINVAL, "GPUCAP_TRACE=stdout fails");
  tap_ok(has(msg, "write './stdout' for a file of that name") &&
             has(msg, "accepted: a file path)") && !has(msg, "stderr, off"),
         "and says how to name such a file: %s", msg);
}

static void test_fail_closed(void) {
  cfg_t cfg;
  char msg[CFG_MSG_MAX];
  const char *accepted = cfg_option(CFG_OPT_MEMORY_LIMIT)->accepted;
  char want_tail[512];

  TAP_EQ(load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "1GB", NULL), -EINVAL, "limit '1GB' fails");
  tap_ok(!cfg.valid, "limit '1GB' marks the configuration invalid");
  TAP_EQ(cfg_device_cap(&cfg, 0, 16 * GiB), 0, "invalid: device 0 gets no memory");
  TAP_EQ(cfg_device_cap(&cfg, 70, 16 * GiB), 0, "invalid: device 70 gets no memory");
  tap_ok(starts(msg, "gpucap: error: GPUCAP_MEMORY_LIMIT='1GB': "),
         "the message names the variable and quotes the value: %s", msg);
  tap_ok(has(msg, "did you mean '1GiB'"), "the message suggests 1GiB");
  snprintf(want_tail, sizeof want_tail, "; accepted: %s", accepted);
  tap_ok(strlen(msg) > strlen(want_tail) &&
             strcmp(msg + strlen(msg) - strlen(want_tail), want_tail) == 0,
         "the message ends with the accepted forms");
  tap_ok(count(msg, "gpucap:") == 1 && strchr(msg, '\n') == NULL,
         "exactly one message, on one line, without a newline");
  TAP_EQ(cfg_option_source(&cfg, CFG_OPT_MEMORY_LIMIT), CFG_SRC_INVALID, "source: invalid");

  static const struct {
    const char *name;
    const char *value;
  } bads[] = {
      {"GPUCAP_MEMORY_LIMIT", "0"},
      {"GPUCAP_MEMORY_LIMIT", "-1"},
      {"GPUCAP_MEMORY_LIMIT", "0x10"},
      {"GPUCAP_MEMORY_LIMIT", "010"},
      {"GPUCAP_MEMORY_LIMIT", "99999999999999999999"},
      {"GPUCAP_MEMORY_LIMIT", "0:4GiB,0:1GiB"},
      {"GPUCAP_MEMORY_LIMIT", "64:1GiB"},
      {"GPUCAP_MEMORY_FRACTION", "0"},
      {"GPUCAP_MEMORY_FRACTION", "1.0001"},
      {"GPUCAP_MEMORY_FRACTION", "nan"},
      {"GPUCAP_ALLOW_GROWTH", "maybe"},
      {"GPUCAP_POOL", "of"},
      {"GPUCAP_CAP_COVERS", "allocation"},
      {"GPUCAP_CAP_COVERS", "all"},
      {"GPUCAP_REPORT", "stdout"},
      {"GPUCAP_REPORT_JSON", "stderr"},
      {"GPUCAP_TRACE", "1"},
      {"GPUCAP_VERBOSE", "4"},
      {"GPUCAP_VERBOSE", "-1"},
  };
  for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
    char head[128];
    int rc = load(&cfg, msg, bads[i].name, bads[i].value, NULL);
    snprintf(head, sizeof head, "gpucap: error: %s='%s': ", bads[i].name, bads[i].value);
    if (!tap_ok(rc == -EINVAL && !cfg.valid && cfg_device_cap(&cfg, 0, 16 * GiB) == 0 &&
                    starts(msg, head) && has(msg, "; accepted: ") && count(msg, "gpucap:") == 1,
                "%s='%s' fails closed with one message", bads[i].name, bads[i].value)) {
      tap_diag("  rc %d, msg '%s'", rc, msg);
    }
  }

  TAP_EQ(load(&cfg, msg, "GPUCAP_VERBOSE", "9", "GPUCAP_MEMORY_LIMIT", "1GB", NULL), -EINVAL,
         "two bad variables fail");
  tap_ok(starts(msg, "gpucap: error: GPUCAP_MEMORY_LIMIT=") && count(msg, "gpucap:") == 1,
         "two bad variables: one message, for the first in table order");
  tap_ok(cfg_option_source(&cfg, CFG_OPT_VERBOSE) == CFG_SRC_INVALID &&
             cfg_option_source(&cfg, CFG_OPT_MEMORY_LIMIT) == CFG_SRC_INVALID,
         "two bad variables: both are marked invalid");

  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "1GB", "GPUCAP_REPORT", "/tmp/r.txt", NULL);
  tap_ok(cfg.report.kind == CFG_DEST_FILE && strcmp(cfg.report.path, "/tmp/r.txt") == 0,
         "invalid: the good settings are still read (the report can say why)");

  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "4GiB", NULL);
  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "4GB", NULL);
  TAP_EQ(cfg_device_cap(&cfg, 0, 16 * GiB), 0, "a bad reload after a good one allows nothing");
  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "4GiB", NULL);
  TAP_EQ(cfg_device_cap(&cfg, 0, 16 * GiB), 4 * GiB, "and a good reload after it recovers");

  // Quoting: the value is shown escaped and cut, the message still fits CFG_MSG_MAX.
  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "4\xc3\xa9GiB", NULL);
  tap_ok(has(msg, "='4\\xc3\\xa9GiB'"), "non-ASCII bytes are quoted as \\xNN: %s", msg);
  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "4'GiB", NULL);
  tap_ok(has(msg, "='4\\x27GiB'"), "a quote in the value is escaped");
  static char huge[5000];
  memset(huge, '\xff', sizeof huge - 1);
  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", huge, NULL);
  tap_ok(has(msg, "...'") && strlen(msg) < CFG_MSG_MAX - 1 && has(msg, "; accepted: "),
         "a huge non-ASCII value is cut and the message fits untruncated (%zu bytes)", strlen(msg));
  memset(huge, '9', sizeof huge - 1);
  TAP_EQ(load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", huge, NULL), -EINVAL, "a 4999-digit limit fails");
  tap_ok(has(msg, "2^64") && strlen(msg) < CFG_MSG_MAX - 1, "as an overflow, message complete");

  char tiny[16];
  TAP_EQ(cfg_load(&cfg, env_get, NULL, tiny, sizeof tiny), -EINVAL, "a tiny msg buffer works");
  tap_ok(strlen(tiny) == sizeof tiny - 1 && starts(tiny, "gpucap: error"), "and is cut safely");
  TAP_EQ(cfg_load(&cfg, env_get, NULL, NULL, 0), -EINVAL, "no msg buffer at all works");
  tap_ok(!cfg.valid, "and still fails closed");
}

static void test_growth(void) {
  cfg_t cfg;
  char msg[CFG_MSG_MAX];
  const char *tf = "TF_FORCE_GPU_ALLOW_GROWTH";

  load(&cfg, msg, tf, "false", NULL);
  tap_ok(!cfg.allow_growth && cfg_option_source(&cfg, CFG_OPT_ALLOW_GROWTH) == CFG_SRC_ALIAS &&
             msg[0] == '\0',
         "TF 'false' turns growth off silently");
  load(&cfg, msg, tf, "true", NULL);
  tap_ok(cfg.allow_growth && cfg_option_source(&cfg, CFG_OPT_ALLOW_GROWTH) == CFG_SRC_ALIAS,
         "TF 'true' turns growth on");

  static const char *const odd[] = {"True", "FALSE", "1", "0", "yes", " true", "false ", ""};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
    char head[96];
    int rc = load(&cfg, msg, tf, odd[i], NULL);
    snprintf(head, sizeof head, "gpucap: warning: %s='%s'", tf, odd[i]);
    if (!tap_ok(rc == 0 && cfg.valid && cfg.allow_growth &&
                    cfg_option_source(&cfg, CFG_OPT_ALLOW_GROWTH) == CFG_SRC_DEFAULT &&
                    starts(msg, head) && count(msg, "gpucap:") == 1,
                "TF '%s' is ignored with a warning, growth stays true", show(odd[i]))) {
      tap_diag("  rc %d, msg '%s'", rc, msg);
    }
  }

  load(&cfg, msg, "GPUCAP_ALLOW_GROWTH", "no", tf, "true", NULL);
  tap_ok(!cfg.allow_growth && cfg_option_source(&cfg, CFG_OPT_ALLOW_GROWTH) == CFG_SRC_ENV,
         "GPUCAP_ALLOW_GROWTH=no wins over TF 'true'");
  tap_ok(asked(tf) == -1, "TF is not even read when GPUCAP_ALLOW_GROWTH is set");
  load(&cfg, msg, "GPUCAP_ALLOW_GROWTH", "YES", tf, "false", NULL);
  tap_ok(cfg.allow_growth, "GPUCAP_ALLOW_GROWTH=YES wins over TF 'false'");
  load(&cfg, msg, "GPUCAP_ALLOW_GROWTH", "off", tf, "garbage", NULL);
  tap_ok(!cfg.allow_growth && msg[0] == '\0', "a bad TF value is not warned about when unused");

  TAP_EQ(load(&cfg, msg, tf, "True", "GPUCAP_VERBOSE", "7", NULL), -EINVAL,
         "TF warning plus a bad variable fails");
  tap_ok(starts(msg, "gpucap: error: GPUCAP_VERBOSE='7'") && count(msg, "gpucap:") == 1,
         "and the one message is the error");
  TAP_EQ(load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "1GB", tf, "True", NULL), -EINVAL,
         "a bad variable before the TF warning fails");
  tap_ok(starts(msg, "gpucap: error: GPUCAP_MEMORY_LIMIT='1GB'") && count(msg, "gpucap:") == 1,
         "and the warning does not replace the error");
}

static void test_environment(void) {
  cfg_t cfg;
  char msg[CFG_MSG_MAX];

  load(&cfg, msg, NULL);
  bool right = true;
  for (int i = 0; i < CFG_OPT_COUNT; i++) {
    const cfg_optinfo_t *o = cfg_option((cfg_opt_t)i);
    right = right && asked(o->name) == (o->secure ? 1 : 0);
  }
  tap_ok(right, "every variable is read, with secure_getenv iff it names a file");
  tap_ok(asked("TF_FORCE_GPU_ALLOW_GROWTH") == 0, "TF's variable is read with plain getenv");
  tap_ok(cfg_option(CFG_OPT_REPORT)->secure && cfg_option(CFG_OPT_REPORT_JSON)->secure &&
             cfg_option(CFG_OPT_TRACE)->secure && !cfg_option(CFG_OPT_MEMORY_LIMIT)->secure,
         "the file settings are the secure ones");

  load(&cfg, msg, "GPUCAP_REPORT", " OFF ", "GPUCAP_REPORT_JSON", "/tmp/r.json", "GPUCAP_TRACE",
       "./trace.txt", "GPUCAP_VERBOSE", "3", "GPUCAP_POOL", "off", NULL);
  tap_ok(cfg.valid && cfg.report.kind == CFG_DEST_OFF &&
             strcmp(cfg.report_json, "/tmp/r.json") == 0 && strcmp(cfg.trace, "./trace.txt") == 0 &&
             cfg.verbose == 3 && cfg.pool == CFG_POOL_OFF,
         "report, JSON, trace, verbose and pool settings are read");
  static const struct {
    const char *text;
    int mode;
  } pools[] = {{"on", CFG_POOL_ON},     {"TRUE", CFG_POOL_ON},         {"0", CFG_POOL_OFF},
               {" vmm ", CFG_POOL_VMM}, {"Regions", CFG_POOL_REGIONS}, {"no", CFG_POOL_OFF}};
  bool pools_read = true;
  for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++) {
    char shown[16];
    load(&cfg, msg, "GPUCAP_POOL", pools[i].text, NULL);
    cfg_option_value(&cfg, CFG_OPT_POOL, shown, sizeof shown);
    pools_read = pools_read && cfg.valid && cfg.pool == pools[i].mode &&
                 strcmp(shown, (const char *[]){"off", "on", "vmm", "regions"}[pools[i].mode]) == 0;
  }
  tap_ok(pools_read, "GPUCAP_POOL: on/off and their synonyms, vmm, regions, shown canonically");
  TAP_EQ(load(&cfg, msg, "GPUCAP_POOL", "region", NULL), -EINVAL, "GPUCAP_POOL=region is refused");
  tap_ok(strstr(msg, "vmm or regions") != NULL, "... saying what is accepted: %s", msg);
  load(&cfg, msg, "GPUCAP_RELEASE_AFTER", "0", NULL);
  tap_ok(cfg.valid && cfg.release_after == 0, "GPUCAP_RELEASE_AFTER=0 (never) is read");
  load(&cfg, msg, "GPUCAP_ARENAS", "4", NULL);
  tap_ok(cfg.valid && cfg.arenas == 4, "GPUCAP_ARENAS=4 is read");
  char arenas[32];
  load(&cfg, msg, "GPUCAP_ARENAS", " AUTO ", NULL);
  cfg_option_value(&cfg, CFG_OPT_ARENAS, arenas, sizeof arenas);
  tap_ok(cfg.valid && cfg.arenas == CFG_ARENAS_AUTO && strcmp(arenas, "auto") == 0,
         "GPUCAP_ARENAS=auto is read, any case, and shown canonically");
  char covers[32];
  load(&cfg, msg, "GPUCAP_CAP_COVERS", " Allocations ", NULL);
  cfg_option_value(&cfg, CFG_OPT_CAP_COVERS, covers, sizeof covers);
  tap_ok(cfg.valid && cfg.cap_covers == CFG_COVERS_ALLOCATIONS &&
             strcmp(covers, "allocations") == 0,
         "GPUCAP_CAP_COVERS=allocations is read, any case, and shown canonically");
  load(&cfg, msg, "GPUCAP_CAP_COVERS", "PROCESS", NULL);
  tap_ok(cfg.valid && cfg.cap_covers == CFG_COVERS_PROCESS, "GPUCAP_CAP_COVERS=process is read");
  TAP_EQ(load(&cfg, msg, "GPUCAP_CAP_COVERS", "driver", NULL), -EINVAL,
         "GPUCAP_CAP_COVERS=driver is refused");
  tap_ok(strstr(msg, "process or allocations") != NULL, "... saying what is accepted: %s", msg);
  TAP_EQ(load(&cfg, msg, "GPUCAP_ARENAS", "0", NULL), -EINVAL, "GPUCAP_ARENAS=0 is refused");
  tap_ok(strstr(msg, "auto, or an integer from 1 to 16") != NULL, "... saying what is accepted: %s",
         msg);
  TAP_EQ(load(&cfg, msg, "GPUCAP_ARENAS", "17", NULL), -EINVAL, "GPUCAP_ARENAS=17 is refused");

  // The process environment, through the default lookup.
  for (int i = 0; i < CFG_OPT_COUNT; i++) {
    unsetenv(cfg_option((cfg_opt_t)i)->name);
  }
  unsetenv("TF_FORCE_GPU_ALLOW_GROWTH");
  setenv("GPUCAP_MEMORY_LIMIT", "2GiB", 1);
  setenv("GPUCAP_REPORT", "./gpucap-report.txt", 1);
  int rc = cfg_load(&cfg, NULL, NULL, msg, sizeof msg);
  tap_ok(rc == 0 && cfg_device_cap(&cfg, 0, 16 * GiB) == 2 * GiB &&
             cfg.report.kind == CFG_DEST_FILE &&
             strcmp(cfg.report.path, "./gpucap-report.txt") == 0,
         "the process environment is read when no lookup is given");
  setenv("GPUCAP_MEMORY_LIMIT", "2GB", 1);
  TAP_EQ(cfg_load(&cfg, NULL, NULL, msg, sizeof msg), -EINVAL, "and fails closed there too");
  unsetenv("GPUCAP_MEMORY_LIMIT");
  unsetenv("GPUCAP_REPORT");
}

static void test_unknown(void) {
  char msg[CFG_MSG_MAX];
  const char *clean[] = {"PATH=/bin", "GPUCAP_MEMORY_LIMIT=1GiB", "GPUCAP_LIB=/x/libgpucap.so",
                         "GPUCAP_=1", "XGPUCAP_MEMROY_LIMIT=1",   "TF_FORCE_GPU_ALLOW_GROWTH=true",
                         NULL};
  TAP_EQ(cfg_unknown(clean, msg, sizeof msg), 0, "settings, GPUCAP_LIB and others are known");
  tap_ok(msg[0] == '\0', "... and nothing is said");
  const char *typos[] = {"GPUCAP_MEMROY_LIMIT=1GiB", "GPUCAP_POOL=off", "GPUCAP_FOO=1",
                         "GPUCAP_REPORTJSON", NULL};
  TAP_EQ(cfg_unknown(typos, msg, sizeof msg), 3, "three unknown GPUCAP_ names");
  int same = strcmp(msg, "gpucap: warning: GPUCAP_MEMROY_LIMIT is not a gpucap setting and is "
                         "ignored (did you mean GPUCAP_MEMORY_LIMIT?)\n"
                         "gpucap: warning: GPUCAP_FOO is not a gpucap setting and is ignored\n"
                         "gpucap: warning: GPUCAP_REPORTJSON is not a gpucap setting and is "
                         "ignored (did you mean GPUCAP_REPORT_JSON?)\n") == 0;
  if (!tap_ok(same, "one line each, with the nearest setting when one is close")) {
    tap_diag("got: %s", msg);
  }
  TAP_EQ(cfg_unknown_check(typos, true, msg, sizeof msg), 3, "refused: the same three names");
  same = strcmp(msg, "gpucap: error: GPUCAP_MEMROY_LIMIT is not a gpucap setting (did you mean "
                     "GPUCAP_MEMORY_LIMIT?)\n"
                     "gpucap: error: GPUCAP_FOO is not a gpucap setting\n"
                     "gpucap: error: GPUCAP_REPORTJSON is not a gpucap setting (did you mean "
                     "GPUCAP_REPORT_JSON?)\n") == 0;
  if (!tap_ok(same, "refused: one error line each, naming the setting meant")) {
    tap_diag("got: %s", msg);
  }
  char small[20];
  TAP_EQ(cfg_unknown(typos, small, sizeof small), 3, "a short buffer still counts them all");
  TAP_EQ(strlen(small), sizeof small - 1, "... and holds what fits");
  TAP_EQ(cfg_unknown(typos, NULL, 0), 3, "no buffer at all");
  setenv("GPUCAP_VERBOS", "1", 1);
  TAP_EQ(cfg_unknown(NULL, msg, sizeof msg), 1, "the process environment by default");
  unsetenv("GPUCAP_VERBOS");
}

static void test_errno(void) {
  cfg_t cfg;
  char msg[CFG_MSG_MAX];
  char buf[4096];
  uint64_t v;
  bool b;

  errno = EDOM;
  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "4GiB", NULL);
  TAP_EQ(errno, EDOM, "errno survives a good cfg_load");
  errno = EDOM;
  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "4GB", "TF_FORCE_GPU_ALLOW_GROWTH", "x", NULL);
  TAP_EQ(errno, EDOM, "errno survives a failed cfg_load");
  errno = EDOM;
  cfg_load(&cfg, NULL, NULL, msg, sizeof msg);
  TAP_EQ(errno, EDOM, "errno survives a cfg_load of the process environment");
  errno = EDOM;
  cfg_parse_size("99999999999999999999999", &v, NULL, 0);
  cfg_parse_fraction("nan", &v, NULL, 0);
  cfg_parse_bool("x", &b, NULL, 0);
  cfg_parse_uint("x", 0, 3, &v, NULL, 0);
  cfg_parse_devvals("0:1GB", CFG_DEV_SIZE, NULL, NULL, 0);
  cfg_parse_path("x", buf, sizeof buf, NULL, 0);
  TAP_EQ(errno, EDOM, "errno survives failing parsers");
  errno = ERANGE;
  cfg_parse_size("4GiB", &v, NULL, 0);
  cfg_describe(&cfg, buf, sizeof buf);
  cfg_describe(NULL, buf, 10);
  cfg_option_value(&cfg, CFG_OPT_MEMORY_LIMIT, buf, sizeof buf);
  TAP_EQ(errno, ERANGE, "errno survives parsers, values and listings that succeed");
}

/* ---------------------------------------------------------------- budget names */

static void test_names(void) {
  static const struct {
    const char *in, *out;
  } good[] = {{"workers", "workers"},
              {" job-42.gpu0 ", "job-42.gpu0"},
              {"A_b", "A_b"},
              {"0", "0"},
              {"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk",
               "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk"}};
  static const struct {
    const char *in, *why;
  } bad[] = {
      {"", "empty name"},
      {"   ", "empty name"},
      {".hidden", "must start with a letter or digit"},
      {"-x", "must start with a letter or digit"},
      {"a/b", "invalid byte 0x2f ('/') at offset 1"},
      {"a b", "invalid byte 0x20"},
      {"caf\xc3\xa9", "invalid byte 0xc3"},
      {"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl", "longer than 63 bytes"}};
  char out[CFG_NAME_MAX], why[CFG_WHY_MAX];
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    int rc = cfg_parse_name(good[i].in, out, why, sizeof why);
    tap_ok(rc == 0 && strcmp(out, good[i].out) == 0, "budget name '%s' is accepted", good[i].in);
  }
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    strcpy(out, "kept");
    int rc = cfg_parse_name(bad[i].in, out, why, sizeof why);
    tap_ok(rc == -EINVAL && strstr(why, bad[i].why) != NULL && strcmp(out, "kept") == 0,
           "budget name '%s' is refused: %s", bad[i].in, why);
  }
  cfg_t cfg;
  char msg[CFG_MSG_MAX];
  setenv("GPUCAP_SHARE", "a/b", 1);
  int rc = cfg_load(&cfg, NULL, NULL, msg, sizeof msg);
  tap_ok(rc == -EINVAL && !cfg.valid && strstr(msg, "gpucap: error: GPUCAP_SHARE='a/b'") == msg,
         "a bad GPUCAP_SHARE fails closed with a clear message: %s", msg);
  setenv("GPUCAP_SHARE", "team", 1);
  rc = cfg_load(&cfg, NULL, NULL, msg, sizeof msg);
  tap_ok(rc == 0 && strcmp(cfg.share, "team") == 0, "GPUCAP_SHARE=team is read");
  unsetenv("GPUCAP_SHARE");
}

/* ---------------------------------------------------------------- the option table */

static void test_table(void) {
  static const char *const names[] = {
      "GPUCAP_MEMORY_LIMIT", "GPUCAP_MEMORY_FRACTION", "GPUCAP_SHARE",         "GPUCAP_SHARE_MIN",
      "GPUCAP_SHARE_MAX",    "GPUCAP_OVERSUBSCRIBE",   "GPUCAP_SPILL",         "GPUCAP_DISCOVER",
      "GPUCAP_CAP_COVERS",   "GPUCAP_ALLOW_GROWTH",    "GPUCAP_POOL",          "GPUCAP_ARENAS",
      "GPUCAP_REPORT",       "GPUCAP_OOM_DUMP",        "GPUCAP_REPORT_JSON",   "GPUCAP_TRACE",
      "GPUCAP_VERBOSE",      "GPUCAP_CGROUP_ROOT",     "GPUCAP_RELEASE_AFTER",
  };
  cfg_t cfg;
  char value[PATH_MAX + 64];

  TAP_EQ(CFG_OPT_COUNT, sizeof names / sizeof names[0], "the table has every setting");
  bool right = true;
  for (size_t i = 0; i < sizeof names / sizeof names[0] && i < CFG_OPT_COUNT; i++) {
    const cfg_optinfo_t *o = cfg_option((cfg_opt_t)i);
    right = right && o != NULL && strcmp(o->name, names[i]) == 0 && o->doc[0] != '\0' &&
            o->accepted[0] != '\0' && strchr(o->doc, '\n') == NULL &&
            strchr(o->accepted, '\n') == NULL && o->type_name[0] != '\0';
  }
  tap_ok(right, "names, in order, each with a doc line, accepted forms and a type name");
  tap_ok(CFG_OPT_MEMORY_LIMIT == 0 && CFG_OPT_ARENAS == 11 && CFG_OPT_VERBOSE == 16,
         "the enum follows the table");
  tap_ok(cfg_option(CFG_OPT_COUNT) == NULL && cfg_option((cfg_opt_t)-1) == NULL,
         "out-of-range ids have no description");
  tap_ok(cfg_option(CFG_OPT_VERBOSE)->min == 0 && cfg_option(CFG_OPT_VERBOSE)->max == 3,
         "GPUCAP_VERBOSE ranges over 0..3");
  tap_ok(cfg_option(CFG_OPT_ALLOW_GROWTH)->alias != NULL &&
             strcmp(cfg_option(CFG_OPT_ALLOW_GROWTH)->alias, "TF_FORCE_GPU_ALLOW_GROWTH") == 0,
         "GPUCAP_ALLOW_GROWTH falls back to TF_FORCE_GPU_ALLOW_GROWTH");

  cfg_defaults(&cfg);
  tap_ok(cfg.valid, "every default in options.def parses");
  right = true;
  for (int i = 0; i < CFG_OPT_COUNT; i++) {
    const cfg_optinfo_t *o = cfg_option((cfg_opt_t)i);
    cfg_option_value(&cfg, (cfg_opt_t)i, value, sizeof value);
    if (strcmp(value, o->def) != 0) {
      tap_diag("  %s: default '%s' shows as '%s'", o->name, o->def, value);
      right = false;
    }
  }
  tap_ok(right, "every default is written in canonical form");

  char msg[CFG_MSG_MAX];
  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "1.5GiB", "GPUCAP_MEMORY_FRACTION", " 1:.25 , 0:1 ", NULL);
  cfg_option_value(&cfg, CFG_OPT_MEMORY_LIMIT, value, sizeof value);
  tap_ok(strcmp(value, "1536MiB") == 0, "a limit shows in canonical form ('%s')", value);
  cfg_option_value(&cfg, CFG_OPT_MEMORY_FRACTION, value, sizeof value);
  tap_ok(strcmp(value, "0:1,1:0.25") == 0, "a fraction list shows in canonical form ('%s')", value);
  TAP_EQ(cfg_option_value(&cfg, CFG_OPT_COUNT, value, sizeof value), 0, "bad id: no value");
  tap_ok(value[0] == '\0', "bad id: empty text");
}

static void test_describe(void) {
  static char buf[16384];
  cfg_t cfg;
  char msg[CFG_MSG_MAX];

  size_t n = cfg_describe(NULL, buf, sizeof buf);
  tap_ok(n == strlen(buf) && n < sizeof buf, "the help listing fits and is measured right");
  bool all = true;
  for (int i = 0; i < CFG_OPT_COUNT; i++) {
    const cfg_optinfo_t *o = cfg_option((cfg_opt_t)i);
    all = all && has(buf, o->name) && has(buf, o->doc) && has(buf, o->accepted);
  }
  tap_ok(all, "help shows every option's name, doc line and accepted forms");
  TAP_EQ(count(buf, "accepted: "), CFG_OPT_COUNT, "help has one accepted line per option");
  tap_ok(has(buf, "GPUCAP_MEMORY_LIMIT  (size or per-device list; default: unset)") &&
             has(buf, "GPUCAP_POOL  (on/off, vmm or regions; default: on)") &&
             has(buf, "TF_FORCE_GPU_ALLOW_GROWTH"),
         "help shows types, defaults and the TF fallback");

  load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "0:4GiB,1:2GiB", "TF_FORCE_GPU_ALLOW_GROWTH", "false",
       "GPUCAP_VERBOSE", "9", NULL);
  n = cfg_describe(&cfg, buf, sizeof buf);
  tap_ok(n == strlen(buf), "the env listing is measured right");
  TAP_EQ(count(buf, "\n"), CFG_OPT_COUNT, "the env listing has one line per option");
  tap_ok(has(buf, "GPUCAP_MEMORY_LIMIT      0:4GiB,1:2GiB    environment\n"),
         "env listing: a value from the environment");
  tap_ok(has(buf, "GPUCAP_MEMORY_FRACTION   (unset)          default\n"),
         "env listing: an unset option");
  tap_ok(has(buf, "GPUCAP_ALLOW_GROWTH      false            TF_FORCE_GPU_ALLOW_GROWTH\n"),
         "env listing: a value from the TF fallback");
  tap_ok(has(buf, "GPUCAP_VERBOSE           (invalid)        environment\n"),
         "env listing: an invalid value");
  tap_ok(has(buf, "GPUCAP_REPORT            stderr           default\n"),
         "env listing: a default value");

  char small[10];
  size_t full = cfg_describe(&cfg, NULL, 0);
  tap_ok(cfg_describe(&cfg, small, sizeof small) == full && full == n &&
             strlen(small) == sizeof small - 1,
         "a listing into a small buffer is cut, NUL-terminated and measured like snprintf");
}

static void test_docs(void) {
  const char *top = getenv("TOP");
  char path[PATH_MAX];
  static char doc[65536];

  snprintf(path, sizeof path, "%s/docs/configuration.md", top != NULL ? top : ".");
  FILE *f = fopen(path, "r");
  size_t n = f != NULL ? fread(doc, 1, sizeof doc - 1, f) : 0;
  if (f != NULL) {
    fclose(f);
  }
  doc[n] = '\0';
  if (!tap_ok(n > 0, "docs/configuration.md is readable")) {
    tap_diag("  tried %s (run from the repository root or set TOP)", path);
  }
  bool all = true;
  for (int i = 0; i < CFG_OPT_COUNT; i++) {
    const cfg_optinfo_t *o = cfg_option((cfg_opt_t)i);
    char heading[64];
    snprintf(heading, sizeof heading, "## `%s`", o->name);
    if (!has(doc, heading)) {
      tap_diag("  no section '%s'", heading);
      all = false;
    }
  }
  tap_ok(all, "docs/configuration.md has a section for every option in options.def");
  tap_ok(has(doc, "TF_FORCE_GPU_ALLOW_GROWTH"), "the docs explain the TF fallback");
}

/* ---------------------------------------------------------------- random inputs */

static uint64_t rng = 0x9e3779b97f4a7c15u;

static unsigned next(unsigned bound) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (unsigned)(rng % bound);
}

/* Feeds strings built from the characters the grammar cares about to every parser: each must
 * answer 0, -EINVAL or -ERANGE, leave outputs alone on failure, explain every failure, and
 * produce values whose canonical text reads back the same. ASan builds check the bounds. */
static void test_random(void) {
  static const char alphabet[] = "0123456789.:,-+xXeEkKmMgGtTiIbBp %\t/\x80\xff";
  char s[32];
  char why[CFG_WHY_MAX];
  char text[2048];
  int bad_rc = 0, bad_keep = 0, bad_why = 0, bad_trip = 0, accepted = 0;

  for (int round = 0; round < 30000; round++) {
    unsigned len = next(16);
    for (unsigned i = 0; i < len; i++) {
      s[i] = alphabet[next(sizeof alphabet - 1)];
    }
    s[len] = '\0';

    uint64_t v = 777;
    int rc = cfg_parse_size(s, &v, why, sizeof why);
    bad_rc += rc != 0 && rc != -EINVAL && rc != -ERANGE;
    bad_keep += rc != 0 && v != 777;
    bad_why += (rc != 0) != (why[0] != '\0');
    if (rc == 0) {
      uint64_t back = 0;
      accepted++;
      cfg_format_size(v, text, sizeof text);
      bad_trip += cfg_parse_size(text, &back, NULL, 0) != 0 || back != v || v == 0;
    }

    v = 777;
    rc = cfg_parse_fraction(s, &v, why, sizeof why);
    bad_rc += rc != 0 && rc != -EINVAL && rc != -ERANGE;
    bad_keep += rc != 0 && v != 777;
    bad_why += (rc != 0) != (why[0] != '\0');
    bad_trip += rc == 0 && (v == 0 || v > CFG_FRACTION_ONE);

    for (int kind = 0; kind < 2; kind++) {
      cfg_devvals_t dv, before, back;
      memset(&dv, 0x5a, sizeof dv);
      before = dv;
      rc = cfg_parse_devvals(s, (cfg_devkind_t)kind, &dv, why, sizeof why);
      bad_rc += rc != 0 && rc != -EINVAL && rc != -ERANGE;
      bad_keep += rc != 0 && memcmp(&dv, &before, sizeof dv) != 0;
      bad_why += (rc != 0) != (why[0] != '\0');
      if (rc == 0) {
        cfg_format_devvals(&dv, (cfg_devkind_t)kind, text, sizeof text);
        memset(&back, 0, sizeof back);
        bool same = cfg_parse_devvals(text, (cfg_devkind_t)kind, &back, NULL, 0) == 0 &&
                    back.every == dv.every && back.mask == dv.mask &&
                    (!dv.every || back.every_value == dv.every_value);
        for (int d = 0; d < GPUCAP_MAX_DEVICES && same; d++) {
          same = !((dv.mask >> d) & 1) || back.value[d] == dv.value[d];
        }
        bad_trip += !same;
      }
    }
  }
  TAP_EQ(bad_rc, 0, "random inputs: every parser answers 0, -EINVAL or -ERANGE");
  TAP_EQ(bad_keep, 0, "random inputs: failures leave outputs alone");
  TAP_EQ(bad_why, 0, "random inputs: a reason iff a failure");
  TAP_EQ(bad_trip, 0, "random inputs: accepted values read back from their canonical text");
  tap_ok(accepted > 100, "random inputs: some sizes were accepted (%d)", accepted);
}

/* GPUCAP_OVERSUBSCRIBE and GPUCAP_SPILL: the budget per device, checked against the host's
 * memory (fail closed, as a malformed value), and the warnings when spilling cannot happen. */
static void test_spill(void) {
  cfg_t cfg;
  char msg[CFG_MSG_MAX];

  TAP_EQ(load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "1GiB", NULL), 0, "no spill budget");
  TAP_EQ(cfg_spill_budget(&cfg, 0), 0, "  is a budget of 0");
  tap_ok(!cfg.spill, "  and GPUCAP_SPILL is off by default");
  TAP_EQ(load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "1GiB", "GPUCAP_OVERSUBSCRIBE", "512MiB",
              "GPUCAP_SPILL", "ON", NULL),
         0, "a spill budget of 512MiB with spilling on");
  tap_ok(msg[0] == '\0', "  no message ('%s')", msg);
  TAP_EQ(cfg_spill_budget(&cfg, 0), 512 * MiB, "  device 0's budget");
  TAP_EQ(cfg_spill_budget(&cfg, 63), 512 * MiB, "  every device's");
  TAP_EQ(cfg_spill_budget(&cfg, -1), 0, "  none for a bad ordinal");
  tap_ok(cfg.spill, "  spilling on");
  TAP_EQ(load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "1GiB", "GPUCAP_OVERSUBSCRIBE", "1:256MiB", NULL),
         0, "a budget for device 1 only");
  TAP_EQ(cfg_spill_budget(&cfg, 0), 0, "  device 0 has none");
  TAP_EQ(cfg_spill_budget(&cfg, 1), 256 * MiB, "  device 1 has 256MiB");
  TAP_EQ(load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "1GiB", "GPUCAP_OVERSUBSCRIBE", "8GB", NULL),
         -EINVAL, "a malformed budget fails closed");
  tap_ok(has(msg, "GPUCAP_OVERSUBSCRIBE='8GB'") && cfg_device_cap(&cfg, 0, 16 * GiB) == 0,
         "  naming it, and every cap is 0 ('%s')", msg);

  /* Against a host of 16 GiB. */
  cfg_t c2;
  load(&c2, msg, "GPUCAP_OVERSUBSCRIBE", "16GiB", NULL);
  TAP_EQ(cfg_check_spill(&c2, 16 * GiB, msg, sizeof msg), 0, "16GiB per device on a 16 GiB host");
  load(&c2, msg, "GPUCAP_OVERSUBSCRIBE", "17GiB", NULL);
  TAP_EQ(cfg_check_spill(&c2, 16 * GiB, msg, sizeof msg), -EINVAL, "17GiB: more than the host");
  tap_ok(has(msg, "gpucap: error: GPUCAP_OVERSUBSCRIBE='17GiB': the spill budget of every "
                  "device (17GiB) is more than this host's memory (16.0 GiB); accepted: "),
         "  the message says whose budget and the host's memory ('%s')", msg);
  load(&c2, msg, "GPUCAP_OVERSUBSCRIBE", "0:8GiB,1:20GiB", NULL);
  TAP_EQ(cfg_check_spill(&c2, 16 * GiB, msg, sizeof msg), -EINVAL, "one device's too large");
  tap_ok(has(msg, "the spill budget of device 1 (20GiB)"), "  names device 1 ('%s')", msg);
  load(&c2, msg, "GPUCAP_OVERSUBSCRIBE", "0:8GiB,1:8GiB,2:1GiB", NULL);
  TAP_EQ(cfg_check_spill(&c2, 16 * GiB, msg, sizeof msg), -EINVAL, "17 GiB in all");
  tap_ok(has(msg, "the spill budgets add up to 17GiB, more than this host's memory (16.0 GiB)"),
         "  says the sum ('%s')", msg);
  TAP_EQ(cfg_check_spill(NULL, 16 * GiB, msg, sizeof msg), 0, "no settings: nothing to check");
  TAP_EQ(load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "1GiB", "GPUCAP_OVERSUBSCRIBE", "1048576TiB", NULL),
         -EINVAL, "cfg_load refuses a budget no host holds (1 EiB)");
  tap_ok(has(msg, "gpucap: error: GPUCAP_OVERSUBSCRIBE='1048576TiB': the spill budget of every "
                  "device") &&
             !cfg.valid && cfg_device_cap(&cfg, 0, 16 * GiB) == 0 &&
             cfg_option_source(&cfg, CFG_OPT_OVERSUBSCRIBE) == CFG_SRC_INVALID,
         "  fail closed, as a malformed value ('%s')", msg);
  TAP_EQ(load(&cfg, msg, "GPUCAP_POOL", "bogus", "GPUCAP_OVERSUBSCRIBE", "1048576TiB", NULL),
         -EINVAL, "a budget no host holds beside a malformed setting");
  tap_ok(has(msg, "gpucap: error: GPUCAP_POOL='bogus'") &&
             cfg_option_source(&cfg, CFG_OPT_OVERSUBSCRIBE) == CFG_SRC_INVALID,
         "  the first error is said, and the budget is invalid too ('%s')", msg);

  TAP_EQ(load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "1GiB", "GPUCAP_SPILL", "on", NULL), 0,
         "spilling without a budget loads");
  tap_ok(has(msg, "gpucap: warning: GPUCAP_SPILL=on has no effect without a spill budget"),
         "  with a warning ('%s')", msg);
  TAP_EQ(load(&cfg, msg, "GPUCAP_OVERSUBSCRIBE", "1GiB", NULL), 0, "a budget without a cap loads");
  tap_ok(has(msg, "gpucap: warning: GPUCAP_OVERSUBSCRIBE has no effect without a cap"),
         "  with a warning ('%s')", msg);
  TAP_EQ(load(&cfg, msg, "GPUCAP_SHARE", "job", "GPUCAP_OVERSUBSCRIBE", "1GiB", NULL), 0,
         "a budget under a shared budget");
  tap_ok(msg[0] == '\0', "  needs no warning ('%s')", msg);
  TAP_EQ(load(&cfg, msg, "GPUCAP_MEMORY_LIMIT", "1GiB", "GPUCAP_OVERSUBSCRIBE", "0", NULL), -EINVAL,
         "a budget of 0 bytes is refused like a cap of 0 (unset is off)");
}

int main(void) {
  test_spill();
  test_sizes();
  test_fractions_bools_ints();
  test_lists();
  test_paths_and_formats();
  test_defaults();
  test_caps();
  test_empty_off_and_names();
  test_fail_closed();
  test_growth();
  test_environment();
  test_unknown();
  test_errno();
  test_table();
  test_names();
  test_describe();
  test_docs();
  test_random();
  return tap_done();
}
