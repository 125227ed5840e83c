/* Value parsers and formatters for gpucap settings; the grammar is in parse.h.
 *
 * Internally every parser works on a span (pointer, length) so that list items are parsed in
 * place, without copies or allocation. Character classes are hand-written ASCII tests and
 * numbers are accumulated by hand, never by strtoul/strtod: those accept signs, hex, octal,
 * exponents and NaN, and strtod follows the program's LC_NUMERIC (a German locale would read
 * `0,5`). No state: everything here is reentrant.
 */
#include "config/parse.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Fractions of a unit need 64x64-bit products; GCC and Clang provide the type on every
 * 64-bit Linux target, and __extension__ keeps -Wpedantic quiet about it. */
__extension__ typedef unsigned __int128 u128;

#define FRAC_DIGITS_MAX 18 /* digits after the point: 10^18 still fits in 63 bits */
#define ECHO_MAX 32        /* longest fragment of the input quoted back in a reason */

typedef struct span {
  const char *p;
  size_t n;
} span_t;

typedef struct number {
  uint64_t whole;  /* integer part (meaningless when overflow) */
  bool overflow;   /* the integer part exceeds 2^64-1 */
  bool point;      /* a decimal point was written */
  uint64_t frac;   /* the first `digits` digits after the point, as an integer */
  unsigned digits; /* 0..FRAC_DIGITS_MAX */
  bool too_fine;   /* a non-zero digit beyond FRAC_DIGITS_MAX */
  span_t text;     /* the number as written */
  span_t rest;     /* what follows it */
} number_t;

static const uint64_t pow10_table[FRAC_DIGITS_MAX + 1] = {
    UINT64_C(1),
    UINT64_C(10),
    UINT64_C(100),
    UINT64_C(1000),
    UINT64_C(10000),
    UINT64_C(100000),
    UINT64_C(1000000),
    UINT64_C(10000000),
    UINT64_C(100000000),
    UINT64_C(1000000000),
    UINT64_C(10000000000),
    UINT64_C(100000000000),
    UINT64_C(1000000000000),
    UINT64_C(10000000000000),
    UINT64_C(100000000000000),
    UINT64_C(1000000000000000),
    UINT64_C(10000000000000000),
    UINT64_C(100000000000000000),
    UINT64_C(1000000000000000000),
};

_Static_assert(GPUCAP_MAX_DEVICES == 64, "cfg_devvals_t.mask holds one bit per device");

/* ---------------------------------------------------------------- characters and spans */

static bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

/* Space, \t, \n, \v, \f, \r: what isspace() means in the C locale. */
static bool is_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

static bool is_blank(char c) {
  return c == ' ' || c == '\t';
}

static bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

static char upper(char c) {
  return (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : c;
}

static int echo_len(span_t s) {
  return (int)(s.n < ECHO_MAX ? s.n : ECHO_MAX);
}

static span_t trim(span_t s) {
  while (s.n > 0 && is_space(s.p[0])) {
    s.p++;
    s.n--;
  }
  while (s.n > 0 && is_space(s.p[s.n - 1])) {
    s.n--;
  }
  return s;
}

static span_t skip_blanks(span_t s) {
  while (s.n > 0 && is_blank(s.p[0])) {
    s.p++;
    s.n--;
  }
  return s;
}

/* Case-insensitive comparison of a span with a lower-case word. */
static bool span_is(span_t s, const char *word) {
  size_t n = strlen(word);
  if (s.n != n) {
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    if (lower(s.p[i]) != word[i]) {
      return false;
    }
  }
  return true;
}

static bool span_starts(span_t s, const char *word) {
  size_t n = strlen(word);
  return s.n >= n && span_is((span_t){s.p, n}, word);
}

static bool all_alpha(span_t s) {
  for (size_t i = 0; i < s.n; i++) {
    if (!is_alpha(s.p[i])) {
      return false;
    }
  }
  return true;
}

/* ---------------------------------------------------------------- reasons */

__attribute__((format(printf, 4, 5))) static int reject(int err, char *why, size_t whylen,
                                                        const char *fmt, ...) {
  if (why != NULL && whylen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
  }
  return err;
}

static void clear_why(char *why, size_t whylen) {
  if (why != NULL && whylen > 0) {
    why[0] = '\0';
  }
}

/* Rejects empty values and bytes that are not printable ASCII (tabs inside are blanks).
 * After this, fragments of the value can be quoted back in reasons as they are. */
static int check_text(span_t s, char *why, size_t whylen) {
  if (s.n == 0) {
    return reject(-EINVAL, why, whylen, "empty value");
  }
  for (size_t i = 0; i < s.n; i++) {
    unsigned char c = (unsigned char)s.p[i];
    if (c >= 0x80) {
      return reject(-EINVAL, why, whylen, "non-ASCII byte 0x%02x at offset %zu", c, i);
    }
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      return reject(-EINVAL, why, whylen, "control character 0x%02x at offset %zu", c, i);
    }
  }
  return 0;
}

/* ---------------------------------------------------------------- numbers */

/* Reads `digits [. digits] | . digits` from the start of s (trimmed, checked, non-empty) and
 * rejects the forms that other parsers would read as something else. */
static int scan_number(span_t s, number_t *num, char *why, size_t whylen) {
  const char *p = s.p;
  const char *end = s.p + s.n;

  memset(num, 0, sizeof *num);
  if (*p == '-') {
    return reject(-EINVAL, why, whylen, "negative values are not accepted");
  }
  if (*p == '+') {
    return reject(-EINVAL, why, whylen, "a '+' sign is not accepted");
  }
  if (s.n >= 2 && p[0] == '0' && lower(p[1]) == 'x') {
    return reject(-EINVAL, why, whylen, "hexadecimal is not accepted");
  }
  if (span_starts(s, "nan") || span_starts(s, "inf")) {
    return reject(-EINVAL, why, whylen, "NaN and infinity are not accepted");
  }
  if (!is_digit(*p) && *p != '.') {
    return reject(-EINVAL, why, whylen, "'%.*s' is not a number", echo_len(s), s.p);
  }

  const char *int_start = p;
  while (p < end && is_digit(*p)) {
    uint64_t d = (uint64_t)(*p - '0');
    if (num->overflow || num->whole > (UINT64_MAX - d) / 10) {
      num->overflow = true;
    } else {
      num->whole = num->whole * 10 + d;
    }
    p++;
  }
  // strtoul(s, NULL, 0), which HAMi-core used, reads "010" as 8.
  if (p - int_start > 1 && *int_start == '0') {
    return reject(-EINVAL, why, whylen, "leading zeros are not accepted ('%.*s' looks octal)",
                  (int)(p - int_start < ECHO_MAX ? p - int_start : ECHO_MAX), int_start);
  }

  if (p < end && *p == '.') {
    num->point = true;
    p++;
    const char *frac_start = p;
    while (p < end && is_digit(*p)) {
      unsigned d = (unsigned)(*p - '0');
      if (num->digits < FRAC_DIGITS_MAX) {
        num->frac = num->frac * 10 + d;
        num->digits++;
      } else if (d != 0) {
        num->too_fine = true;
      }
      p++;
    }
    if (p == frac_start) {
      return reject(-EINVAL, why, whylen, "a decimal point must be followed by digits");
    }
  }

  if (p < end && lower(*p) == 'e' && p + 1 < end &&
      (is_digit(p[1]) || p[1] == '+' || p[1] == '-')) {
    return reject(-EINVAL, why, whylen, "exponents are not accepted");
  }
  num->text = (span_t){s.p, (size_t)(p - s.p)};
  num->rest = (span_t){p, (size_t)(end - p)};
  return 0;
}

static int junk_after(span_t rest, char *why, size_t whylen) {
  return reject(-EINVAL, why, whylen, "unexpected '%.*s' after the number", echo_len(rest), rest.p);
}

/* ---------------------------------------------------------------- sizes */

static const struct {
  const char *name;
  unsigned shift;
} units[] = {
    {"k", 10}, {"ki", 10}, {"kib", 10}, {"m", 20}, {"mi", 20}, {"mib", 20},
    {"g", 30}, {"gi", 30}, {"gib", 30}, {"t", 40}, {"ti", 40}, {"tib", 40},
};

/* Explains why a unit that is not in `units` is refused. */
static int bad_unit(span_t u, const number_t *num, char *why, size_t whylen) {
  int nlen = echo_len(num->text);
  bool binary_letter = u.n >= 1 && strchr("kmgt", lower(u.p[0])) != NULL;

  if (!all_alpha(u)) {
    return junk_after(u, why, whylen);
  }
  // HAMi-core read "1GB" as a 1-byte cap; SI-looking units are refused with the fix.
  if (u.n == 2 && binary_letter && lower(u.p[1]) == 'b') {
    return reject(-EINVAL, why, whylen,
                  "'%.2s' is ambiguous (10^n or 2^n bytes?); did you mean '%.*s%ciB'?", u.p, nlen,
                  num->text.p, upper(u.p[0]));
  }
  if (span_is(u, "b")) {
    return reject(-EINVAL, why, whylen, "a 'B' suffix is not accepted; write plain bytes ('%.*s')",
                  nlen, num->text.p);
  }
  if (strchr("pe", lower(u.p[0])) != NULL && u.n <= 3) {
    return reject(-EINVAL, why, whylen, "unit '%.*s' is not supported; the largest is TiB",
                  echo_len(u), u.p);
  }
  return reject(-EINVAL, why, whylen, "unknown unit '%.*s'", echo_len(u), u.p);
}

/* What sizes, fractions and integers share: trims *s (which reasons then quote), rejects empty
 * or non-printable text, and scans the number it starts with into *num. */
static int number_span(span_t *s, number_t *num, char *why, size_t whylen) {
  *s = trim(*s);
  int rc = check_text(*s, why, whylen);
  return rc != 0 ? rc : scan_number(*s, num, why, whylen);
}

static int size_span(span_t s, uint64_t *out, char *why, size_t whylen) {
  number_t num;
  unsigned shift = 0;

  int rc = number_span(&s, &num, why, whylen);
  if (rc != 0) {
    return rc;
  }

  span_t u = skip_blanks(num.rest);
  if (u.n > 0) {
    size_t i = 0;
    while (i < sizeof units / sizeof units[0] && !span_is(u, units[i].name)) {
      i++;
    }
    if (i == sizeof units / sizeof units[0]) {
      return bad_unit(u, &num, why, whylen);
    }
    shift = units[i].shift;
  } else if (num.point) {
    return reject(-EINVAL, why, whylen, "a fractional byte count needs a unit (e.g. '%.*sGiB')",
                  echo_len(num.text), num.text.p);
  }
  if (num.too_fine) {
    return reject(-EINVAL, why, whylen, "more than %d digits after the decimal point",
                  FRAC_DIGITS_MAX);
  }

  if (num.overflow || num.whole > (UINT64_MAX >> shift)) {
    return reject(-ERANGE, why, whylen, "'%.*s' is more than 2^64-1 bytes", echo_len(s), s.p);
  }
  uint64_t bytes = num.whole << shift;
  uint64_t part = (uint64_t)(((u128)num.frac << shift) / pow10_table[num.digits]);
  if (bytes > UINT64_MAX - part) {
    return reject(-ERANGE, why, whylen, "'%.*s' is more than 2^64-1 bytes", echo_len(s), s.p);
  }
  bytes += part;
  if (bytes == 0) {
    return reject(-ERANGE, why, whylen, "the size comes to zero bytes, which allows no memory");
  }
  // A bare number is bytes; a small one was surely meant in a unit ("--limit 8" for 8 GiB).
  if (u.n == 0 && bytes < CFG_BARE_MIN) {
    return reject(-EINVAL, why, whylen,
                  "'%.*s' has no unit, and %.*s bytes cannot be meant; write a unit ('%.*sGiB', "
                  "'%.*sMiB'), or bytes from 1048576 (1 MiB) up",
                  echo_len(s), s.p, echo_len(s), s.p, echo_len(s), s.p, echo_len(s), s.p);
  }
  *out = bytes;
  return 0;
}

/* ---------------------------------------------------------------- fractions, booleans, integers
 */

/* A fraction is a decimal in (0, 1], or a percentage in (0, 100] followed by '%' (CuPy's
 * CUPY_GPU_MEMORY_LIMIT form). Both are read exactly, in units of 1/CFG_FRACTION_ONE. */
static int fraction_span(span_t s, uint64_t *out, char *why, size_t whylen) {
  number_t num;

  int rc = number_span(&s, &num, why, whylen);
  if (rc != 0) {
    return rc;
  }
  span_t rest = skip_blanks(num.rest);
  bool percent = rest.n > 0 && rest.p[0] == '%';
  if (percent) {
    rest = skip_blanks((span_t){rest.p + 1, rest.n - 1});
  }
  if (rest.n > 0) {
    return junk_after(rest, why, whylen);
  }
  if (num.too_fine) {
    return reject(-EINVAL, why, whylen, "more than %d digits after the decimal point",
                  FRAC_DIGITS_MAX);
  }
  uint64_t most = percent ? 100 : 1;
  if (num.overflow || num.whole > most || (num.whole == most && num.frac != 0)) {
    return reject(-ERANGE, why, whylen, "'%.*s' is more than %s", echo_len(s), s.p,
                  percent ? "100%" : "1");
  }
  // whole <= 100 and frac < 10^18: the scaled value fits easily in 128 bits.
  u128 e18 = (u128)num.whole * CFG_FRACTION_ONE +
             (u128)num.frac * pow10_table[FRAC_DIGITS_MAX - num.digits];
  if (percent && e18 % 100 != 0) {
    return reject(-EINVAL, why, whylen,
                  "more than %d digits after the decimal point in a "
                  "percentage",
                  FRAC_DIGITS_MAX - 2);
  }
  e18 /= percent ? 100 : 1;
  if (e18 == 0) {
    return reject(-ERANGE, why, whylen, "a fraction must be more than 0");
  }
  *out = (uint64_t)e18;
  return 0;
}

static int bool_span(span_t s, bool *out, char *why, size_t whylen) {
  static const char *const yes[] = {"true", "1", "yes", "on"};
  static const char *const no[] = {"false", "0", "no", "off"};

  s = trim(s);
  int rc = check_text(s, why, whylen);
  if (rc != 0) {
    return rc;
  }
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    if (span_is(s, yes[i]) || span_is(s, no[i])) {
      *out = span_is(s, yes[i]);
      return 0;
    }
  }
  return reject(-EINVAL, why, whylen, "'%.*s' is not a boolean", echo_len(s), s.p);
}

static int uint_span(span_t s, uint64_t min, uint64_t max, uint64_t *out, char *why,
                     size_t whylen) {
  number_t num;

  int rc = number_span(&s, &num, why, whylen);
  if (rc != 0) {
    return rc;
  }
  if (num.point) {
    return reject(-EINVAL, why, whylen, "'%.*s' is not a whole number", echo_len(s), s.p);
  }
  if (num.rest.n > 0) {
    return junk_after(num.rest, why, whylen);
  }
  if (num.overflow || num.whole < min || num.whole > max) {
    return reject(-ERANGE, why, whylen, "'%.*s' is not between %" PRIu64 " and %" PRIu64,
                  echo_len(s), s.p, min, max);
  }
  *out = num.whole;
  return 0;
}

/* ---------------------------------------------------------------- per-device lists */

static int ordinal_span(span_t s, int *out, char *why, size_t whylen) {
  s = trim(s);
  if (s.n == 0) {
    return reject(-EINVAL, why, whylen, "missing device ordinal before the value");
  }
  if (s.p[0] == '-') {
    return reject(-EINVAL, why, whylen, "negative device ordinal '%.*s'", echo_len(s), s.p);
  }
  for (size_t i = 0; i < s.n; i++) {
    if (!is_digit(s.p[i])) {
      return reject(-EINVAL, why, whylen, "device ordinal '%.*s' is not a decimal number",
                    echo_len(s), s.p);
    }
  }
  if (s.n > 1 && s.p[0] == '0') {
    return reject(-EINVAL, why, whylen, "leading zeros are not accepted in ordinal '%.*s'",
                  echo_len(s), s.p);
  }
  int ordinal = 0;
  for (size_t i = 0; i < s.n && ordinal < GPUCAP_MAX_DEVICES; i++) {
    ordinal = ordinal * 10 + (s.p[i] - '0');
  }
  if (ordinal >= GPUCAP_MAX_DEVICES) {
    return reject(-ERANGE, why, whylen, "device ordinal %.*s is out of range 0..%d", echo_len(s),
                  s.p, GPUCAP_MAX_DEVICES - 1);
  }
  *out = ordinal;
  return 0;
}

static int element_span(span_t s, cfg_devkind_t kind, uint64_t *out, char *why, size_t whylen) {
  if (kind == CFG_DEV_FRACTION) {
    return fraction_span(s, out, why, whylen);
  }
  return size_span(s, out, why, whylen);
}

/* The first ':' or '=' of a list item, which separates the ordinal from the value (both are
 * accepted: `0:4GiB` as in CUDA_VISIBLE_DEVICES-style lists, `0=4GiB` as in key=value lists);
 * NULL when there is none. */
static const char *find_sep(span_t item) {
  for (size_t i = 0; i < item.n; i++) {
    if (item.p[i] == ':' || item.p[i] == '=') {
      return item.p + i;
    }
  }
  return NULL;
}

static int list_span(span_t s, cfg_devkind_t kind, cfg_devvals_t *out, char *why, size_t whylen) {
  const char *end = s.p + s.n;
  const char *p = s.p;
  char sub[CFG_WHY_MAX];
  unsigned index = 0;

  memset(out, 0, sizeof *out);
  for (;;) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    const char *item_end = comma != NULL ? comma : end;
    span_t item = trim((span_t){p, (size_t)(item_end - p)});
    index++;
    if (item.n == 0) {
      return reject(-EINVAL, why, whylen, "item %u of the device list is empty", index);
    }
    const char *colon = find_sep(item);
    if (colon == NULL) {
      return reject(-EINVAL, why, whylen, "item '%.*s' lacks an 'ordinal:' prefix (as in 0:%.*s)",
                    echo_len(item), item.p, echo_len(item), item.p);
    }
    int ordinal = 0;
    int rc = ordinal_span((span_t){item.p, (size_t)(colon - item.p)}, &ordinal, sub, sizeof sub);
    if (rc != 0) {
      return reject(rc, why, whylen, "item '%.*s': %s", echo_len(item), item.p, sub);
    }
    if (out->mask & (UINT64_C(1) << ordinal)) {
      return reject(-EINVAL, why, whylen, "device %d is listed twice", ordinal);
    }
    span_t value = {colon + 1, (size_t)(item.p + item.n - (colon + 1))};
    rc = element_span(value, kind, &out->value[ordinal], sub, sizeof sub);
    if (rc != 0) {
      return reject(rc, why, whylen, "device %d: %s", ordinal, sub);
    }
    out->mask |= UINT64_C(1) << ordinal;
    if (comma == NULL) {
      return 0;
    }
    p = comma + 1;
  }
}

static int devvals_span(span_t s, cfg_devkind_t kind, cfg_devvals_t *out, char *why,
                        size_t whylen) {
  cfg_devvals_t v;

  s = trim(s);
  int rc = check_text(s, why, whylen);
  if (rc != 0) {
    return rc;
  }
  memset(&v, 0, sizeof v);
  if (find_sep(s) != NULL || memchr(s.p, ',', s.n) != NULL) {
    rc = list_span(s, kind, &v, why, whylen);
  } else {
    rc = element_span(s, kind, &v.every_value, why, whylen);
    v.every = true;
  }
  if (rc == 0) {
    *out = v;
  }
  return rc;
}

/* ---------------------------------------------------------------- paths */

/* Words that are never taken as a file name, so that a switch, a keyword or a stream typed by
 * mistake (GPUCAP_TRACE=1, --json -, GPUCAP_REPORT=stdout) is refused instead of silently
 * creating a file of that name in the working directory. Compared case-insensitively. */
static const char *const not_file_names[] = {
    "-", "stdout", "stderr", "off", "none", "null", "true", "false", "yes", "no", "on", "0", "1",
};

/* Checks and copies a trimmed path; `what` names the accepted forms in the reason. */
static int path_span(span_t s, char *out, size_t outlen, const char *what, char *why,
                     size_t whylen) {
  if (s.n == 0) {
    return reject(-EINVAL, why, whylen, "empty value");
  }
  for (size_t i = 0; i < s.n; i++) {
    unsigned char c = (unsigned char)s.p[i];
    if (c < 0x20 || c == 0x7f) {
      return reject(-EINVAL, why, whylen, "control character 0x%02x at offset %zu", c, i);
    }
  }
  for (size_t i = 0; i < sizeof not_file_names / sizeof not_file_names[0]; i++) {
    if (span_is(s, not_file_names[i])) {
      // Only printable ASCII reaches here: every word of the list is.
      return reject(-EINVAL, why, whylen,
                    "'%.*s' is taken as a word, not a file name (accepted: %s); write './%.*s' "
                    "for a file of that name",
                    echo_len(s), s.p, what, echo_len(s), s.p);
    }
  }
  if (s.n >= outlen) {
    return reject(-ENAMETOOLONG, why, whylen, "the path is %zu bytes; the most is %zu", s.n,
                  outlen > 0 ? outlen - 1 : 0);
  }
  memcpy(out, s.p, s.n);
  out[s.n] = '\0';
  return 0;
}

/* ---------------------------------------------------------------- public parsers */

/* What a public parser passes on besides the span: the inputs some span parsers need. */
typedef struct extra {
  cfg_devkind_t kind; /* cfg_parse_size, cfg_parse_fraction, cfg_parse_devvals */
  uint64_t min, max;  /* cfg_parse_uint */
  size_t outlen;      /* cfg_parse_path */
} extra_t;

/* Parses s, already checked not NULL, into *out; every span parser writes only on success. */
typedef int target_fn(span_t s, const extra_t *x, void *out, char *why, size_t whylen);

/* The shared part of every public parser: clears the reason, rejects a NULL string or output,
 * and leaves errno as it found it (reject's vsnprintf may set it). */
static int parse_public(const char *s, target_fn *target, const extra_t *x, void *out, char *why,
                        size_t whylen) {
  int saved = errno;
  int rc;

  clear_why(why, whylen);
  if (s == NULL || out == NULL) {
    rc = reject(-EINVAL, why, whylen, "no value");
  } else {
    rc = target((span_t){s, strlen(s)}, x, out, why, whylen);
  }
  errno = saved;
  return rc;
}

static int element_target(span_t s, const extra_t *x, void *out, char *why, size_t whylen) {
  return element_span(s, x->kind, out, why, whylen);
}

static int bool_target(span_t s, const extra_t *x, void *out, char *why, size_t whylen) {
  (void)x;
  return bool_span(s, out, why, whylen);
}

static int uint_target(span_t s, const extra_t *x, void *out, char *why, size_t whylen) {
  return uint_span(s, x->min, x->max, out, why, whylen);
}

static int devvals_target(span_t s, const extra_t *x, void *out, char *why, size_t whylen) {
  return devvals_span(s, x->kind, out, why, whylen);
}

static int path_target(span_t s, const extra_t *x, void *out, char *why, size_t whylen) {
  return path_span(trim(s), out, x->outlen, "a file path", why, whylen);
}

/* A budget's name: 1 to CFG_NAME_MAX - 1 bytes of letters, digits, '.', '_' and '-', starting
 * with a letter or digit, so it can name a file (no '/', no leading '.') and a shell needs no
 * quoting for it. */
static int name_target(span_t s, const extra_t *x, void *out, char *why, size_t whylen) {
  (void)x;
  s = trim(s);
  if (s.n == 0) {
    return reject(-EINVAL, why, whylen, "empty name");
  }
  if (s.n >= CFG_NAME_MAX) {
    return reject(-EINVAL, why, whylen, "name longer than %d bytes", CFG_NAME_MAX - 1);
  }
  for (size_t i = 0; i < s.n; i++) {
    unsigned char c = (unsigned char)s.p[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-'))) {
      return reject(-EINVAL, why, whylen, "%s 0x%02x ('%c') at offset %zu",
                    i == 0 ? "a name must start with a letter or digit, not" : "invalid byte", c,
                    c >= 0x20 && c < 0x7f ? c : '?', i);
    }
  }
  memcpy(out, s.p, s.n);
  ((char *)out)[s.n] = '\0';
  return 0;
}

static int dest_target(span_t s, const extra_t *x, void *out, char *why, size_t whylen) {
  cfg_dest_t *d = out;
  (void)x;
  s = trim(s);
  if (span_is(s, "stderr") || span_is(s, "off")) {
    d->kind = span_is(s, "off") ? CFG_DEST_OFF : CFG_DEST_STDERR;
    d->path[0] = '\0';
    return 0;
  }
  int rc = path_span(s, d->path, sizeof d->path, "stderr, off or a file path", why, whylen);
  if (rc == 0) {
    d->kind = CFG_DEST_FILE;
  }
  return rc;
}

int cfg_parse_size(const char *s, uint64_t *bytes, char *why, size_t whylen) {
  return parse_public(s, element_target, &(extra_t){.kind = CFG_DEV_SIZE}, bytes, why, whylen);
}

int cfg_parse_fraction(const char *s, uint64_t *e18, char *why, size_t whylen) {
  return parse_public(s, element_target, &(extra_t){.kind = CFG_DEV_FRACTION}, e18, why, whylen);
}

int cfg_parse_bool(const char *s, bool *out, char *why, size_t whylen) {
  return parse_public(s, bool_target, &(extra_t){0}, out, why, whylen);
}

int cfg_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out, char *why,
                   size_t whylen) {
  return parse_public(s, uint_target, &(extra_t){.min = min, .max = max}, out, why, whylen);
}

int cfg_parse_devvals(const char *s, cfg_devkind_t kind, cfg_devvals_t *out, char *why,
                      size_t whylen) {
  return parse_public(s, devvals_target, &(extra_t){.kind = kind}, out, why, whylen);
}

int cfg_parse_path(const char *s, char *out, size_t outlen, char *why, size_t whylen) {
  return parse_public(s, path_target, &(extra_t){.outlen = outlen}, out, why, whylen);
}

int cfg_parse_dest(const char *s, cfg_dest_t *out, char *why, size_t whylen) {
  return parse_public(s, dest_target, &(extra_t){0}, out, why, whylen);
}

int cfg_parse_name(const char *s, char out[CFG_NAME_MAX], char *why, size_t whylen) {
  return parse_public(s, name_target, &(extra_t){0}, out, why, whylen);
}

int cfg_expand_path(const char *path, long pid, char *out, size_t outlen) {
  size_t n = 0;
  for (const char *p = path; *p != '\0'; p++) {
    if (p[0] == '%' && p[1] == 'p') {
      size_t m = cfg_snprintf(out + n, outlen - n, "%ld", pid);
      if (m >= outlen - n) {
        return -ENAMETOOLONG;
      }
      n += m;
      p++;
    } else if (p[0] == '%' && p[1] == '%' && n + 1 < outlen) {
      out[n++] = '%'; /* "%%": a literal '%', so a path can hold "%p" itself */
      p++;
    } else if (n + 1 < outlen) {
      out[n++] = *p;
    } else {
      return -ENAMETOOLONG;
    }
  }
  if (outlen == 0) {
    return -ENAMETOOLONG;
  }
  out[n] = '\0';
  return 0;
}

bool cfg_devvals_get(const cfg_devvals_t *v, int ordinal, uint64_t *out) {
  if (v == NULL || ordinal < 0) {
    return false;
  }
  if (ordinal < GPUCAP_MAX_DEVICES && (v->mask & (UINT64_C(1) << ordinal))) {
    *out = v->value[ordinal];
    return true;
  }
  if (v->every) {
    *out = v->every_value;
    return true;
  }
  return false;
}

uint64_t cfg_fraction_of(uint64_t total, uint64_t e18) {
  if (e18 >= CFG_FRACTION_ONE) {
    return total;
  }
  return (uint64_t)((u128)total * e18 / CFG_FRACTION_ONE);
}

/* ---------------------------------------------------------------- formatters */

size_t cfg_snprintf(char *buf, size_t len, const char *fmt, ...) {
  int saved = errno;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, len, fmt, ap);
  va_end(ap);
  errno = saved;
  return n > 0 ? (size_t)n : 0;
}

size_t cfg_format_size(uint64_t bytes, char *buf, size_t len) {
  static const struct {
    const char *name;
    unsigned shift;
  } big[] = {{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}};
  int saved = errno;
  size_t n = 0;
  bool done = false;

  for (size_t i = 0; i < sizeof big / sizeof big[0] && bytes != 0 && !done; i++) {
    if ((bytes & ((UINT64_C(1) << big[i].shift) - 1)) == 0) {
      n = cfg_snprintf(buf, len, "%" PRIu64 "%s", bytes >> big[i].shift, big[i].name);
      done = true;
    }
  }
  if (bytes == 0) {
    n = cfg_snprintf(buf, len, "0"); /* no size parses to it (it allows no memory) */
  } else if (!done && bytes < CFG_BARE_MIN) {
    /* Too small to be written bare: in KiB, exactly (a multiple of 1/1024 has at most ten
     * decimals, 1/1024 = 0.0009765625). */
    uint64_t frac = (bytes & 1023) * UINT64_C(9765625); /* in units of 10^-10 KiB */
    int digits = 10;
    while (frac % 10 == 0) {
      frac /= 10;
      digits--;
    }
    n = cfg_snprintf(buf, len, "%" PRIu64 ".%0*" PRIu64 "KiB", bytes >> 10, digits, frac);
  } else if (!done) {
    n = cfg_snprintf(buf, len, "%" PRIu64, bytes);
  }
  errno = saved;
  return n;
}

size_t cfg_format_fraction(uint64_t e18, char *buf, size_t len) {
  int saved = errno;
  uint64_t whole = e18 / CFG_FRACTION_ONE;
  uint64_t frac = e18 % CFG_FRACTION_ONE;
  int digits = FRAC_DIGITS_MAX;
  size_t n;

  while (frac != 0 && frac % 10 == 0) {
    frac /= 10;
    digits--;
  }
  if (frac == 0) {
    n = cfg_snprintf(buf, len, "%" PRIu64, whole);
  } else {
    n = cfg_snprintf(buf, len, "%" PRIu64 ".%0*" PRIu64, whole, digits, frac);
  }
  errno = saved;
  return n;
}

static size_t format_element(uint64_t v, cfg_devkind_t kind, char *buf, size_t len) {
  return kind == CFG_DEV_FRACTION ? cfg_format_fraction(v, buf, len) : cfg_format_size(v, buf, len);
}

size_t cfg_format_devvals(const cfg_devvals_t *v, cfg_devkind_t kind, char *buf, size_t len) {
  int saved = errno;
  size_t total = 0;

  if (len > 0) {
    buf[0] = '\0';
  }
  if (v != NULL && v->every) {
    total = format_element(v->every_value, kind, buf, len);
  }
  for (int i = 0; v != NULL && !v->every && i < GPUCAP_MAX_DEVICES; i++) {
    if (!(v->mask & (UINT64_C(1) << i))) {
      continue;
    }
    // Past the end of buf the pieces are only measured, as snprintf(NULL, 0) would.
    char *at = total < len ? buf + total : NULL;
    size_t room = total < len ? len - total : 0;
    total += cfg_snprintf(at, room, "%s%d:", total > 0 ? "," : "", i);
    at = total < len ? buf + total : NULL;
    room = total < len ? len - total : 0;
    total += format_element(v->value[i], kind, at, room);
  }
  errno = saved;
  return total;
}
