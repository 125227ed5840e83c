/* tracecsv: the RMM CSV trace reader (contracts in tracecsv.h). One pass over the lines; each
 * field is checked whole, as the settings parsers check values, so a damaged trace is reported
 * with its line number rather than plotted wrong.
 */
#include "scripts/tracecsv.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER "Thread,Time,Action,Pointer,Size,Stream"
#define NS_PER_S INT64_C(1000000000)
#define DAY_NS (86400 * NS_PER_S)
#define MAX_DAYS 100000 /* nanoseconds of 100 000 days fit in an int64_t (106 751) */

typedef struct field {
  const char *p;
  size_t n;
} field_t;

__attribute__((format(printf, 4, 5))) static int bad(char *err, size_t errlen, size_t line,
                                                     const char *fmt, ...) {
  if (err != NULL && errlen > 0) {
    int k = snprintf(err, errlen, "line %zu: ", line);
    if (k >= 0 && (size_t)k < errlen) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
      va_end(ap);
    }
  }
  return -EINVAL;
}

static bool digits(field_t f, size_t min, size_t max) {
  if (f.n < min || f.n > max) {
    return false;
  }
  for (size_t i = 0; i < f.n; i++) {
    if (f.p[i] < '0' || f.p[i] > '9') {
      return false;
    }
  }
  return true;
}

static unsigned small_num(const char *p, size_t n) {
  unsigned v = 0;
  for (size_t i = 0; i < n; i++) {
    v = v * 10 + (unsigned)(p[i] - '0');
  }
  return v;
}

/* HH:MM:SS[.f{1,9}] as nanoseconds since midnight, or -1. */
static int64_t parse_time(field_t f) {
  if (f.n < 8 || f.p[2] != ':' || f.p[5] != ':') {
    return -1;
  }
  field_t hh = {f.p, 2}, mm = {f.p + 3, 2}, ss = {f.p + 6, 2};
  if (!digits(hh, 2, 2) || !digits(mm, 2, 2) || !digits(ss, 2, 2)) {
    return -1;
  }
  unsigned h = small_num(hh.p, 2), m = small_num(mm.p, 2), s = small_num(ss.p, 2);
  if (h > 23 || m > 59 || s > 60) {
    return -1;
  }
  int64_t frac = 0;
  if (f.n > 8) {
    field_t fr = {f.p + 9, f.n - 9};
    if (f.p[8] != '.' || !digits(fr, 1, 9)) {
      return -1;
    }
    frac = (int64_t)small_num(fr.p, fr.n);
    for (size_t i = fr.n; i < 9; i++) {
      frac *= 10;
    }
  }
  return ((int64_t)h * 3600 + (int64_t)m * 60 + s) * NS_PER_S + frac;
}

static bool parse_u64(field_t f, unsigned base, uint64_t *out) {
  uint64_t v = 0;
  if (f.n == 0) {
    return false;
  }
  for (size_t i = 0; i < f.n; i++) {
    char c = f.p[i];
    unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                 : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                 : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                        : 99;
    if (d >= base || v > (UINT64_MAX - d) / base) {
      return false;
    }
    v = v * base + d;
  }
  *out = v;
  return true;
}

static bool equals(field_t f, const char *s) {
  return f.n == strlen(s) && memcmp(f.p, s, f.n) == 0;
}

int tracecsv_parse(const char *text, size_t len, tracecsv_event_t **events, size_t *n, size_t *cut,
                   char *err, size_t errlen) {
  tracecsv_event_t *ev = NULL;
  size_t count = 0;
  size_t cap = 0;
  size_t lineno = 0;
  int64_t first = -1;
  int64_t prev = 0;
  int64_t day = 0;
  int rc = 0;

  *events = NULL;
  *n = 0;
  if (cut != NULL) {
    *cut = 0;
  }
  if (err != NULL && errlen > 0) {
    err[0] = '\0';
  }
  for (size_t pos = 0; pos < len && rc == 0;) {
    const char *line = text + pos;
    const char *nl = memchr(line, '\n', len - pos);
    size_t ln = nl != NULL ? (size_t)(nl - line) : len - pos;
    pos += ln + 1;
    lineno++;
    if (nl == NULL && lineno > 1) {
      if (cut != NULL) {
        *cut = lineno; /* cut while it was written: never trusted, even if it parses */
      }
      break;
    }
    if (ln > 0 && line[ln - 1] == '\r') {
      ln--;
    }
    if (lineno == 1) {
      if (ln != strlen(HEADER) || memcmp(line, HEADER, ln) != 0) {
        rc = bad(err, errlen, lineno,
                 "not an RMM trace: the first line must be '" HEADER "' (GPUCAP_TRACE writes it)");
      }
      continue;
    }
    if (ln == 0) {
      continue;
    }
    field_t f[6];
    size_t nf = 0;
    size_t start = 0;
    for (size_t i = 0; i <= ln; i++) {
      if (i == ln || line[i] == ',') {
        if (nf == 6) {
          nf++;
          break;
        }
        f[nf++] = (field_t){line + start, i - start};
        start = i + 1;
      }
    }
    if (nf != 6) {
      rc = bad(err, errlen, lineno, "expected 6 comma-separated fields (" HEADER ")");
      break;
    }
    if (memchr(line, '\0', ln) != NULL) {
      rc = bad(err, errlen, lineno, "a NUL byte; is this a text file?");
      break;
    }
    tracecsv_event_t e = {0};
    int64_t tod = parse_time(f[1]);
    field_t ptr = f[3];
    if (ptr.n > 2 && ptr.p[0] == '0' && (ptr.p[1] == 'x' || ptr.p[1] == 'X')) {
      ptr.p += 2;
      ptr.n -= 2;
    }
    if (equals(f[2], "allocate")) {
      e.action = TRACECSV_ALLOC;
    } else if (equals(f[2], "allocate failure")) {
      e.action = TRACECSV_FAILURE;
    } else if (equals(f[2], "free")) {
      e.action = TRACECSV_FREE;
    } else {
      rc = bad(err, errlen, lineno, "Action '%.*s' is not 'allocate', 'allocate failure' or 'free'",
               (int)(f[2].n > 40 ? 40 : f[2].n), f[2].p);
      break;
    }
    if (f[0].n == 0) {
      rc = bad(err, errlen, lineno, "Thread is empty");
    } else if (tod < 0) {
      rc = bad(err, errlen, lineno, "Time '%.*s' is not HH:MM:SS.ffffff",
               (int)(f[1].n > 40 ? 40 : f[1].n), f[1].p);
    } else if (!parse_u64(ptr, 16, &e.ptr)) {
      rc = bad(err, errlen, lineno, "Pointer '%.*s' is not a hexadecimal address",
               (int)(f[3].n > 40 ? 40 : f[3].n), f[3].p);
    } else if (!digits(f[4], 1, 20) || !parse_u64(f[4], 10, &e.size)) {
      rc = bad(err, errlen, lineno, "Size '%.*s' is not a byte count",
               (int)(f[4].n > 40 ? 40 : f[4].n), f[4].p);
    }
    if (rc != 0) {
      break;
    }
    int64_t t = tod + day;
    if (first < 0) {
      first = t;
      prev = t;
    }
    if (t < prev - DAY_NS / 2) {
      if (day / DAY_NS >= MAX_DAYS) {
        rc = bad(err, errlen, lineno,
                 "the times go past midnight more than %d times: not one run's trace", MAX_DAYS);
        break;
      }
      day += DAY_NS; /* past midnight */
      t += DAY_NS;
    }
    if (t < prev || t > prev + DAY_NS - DAY_NS / 24) {
      t = prev; /* stamped before the previous event (perhaps just before midnight) */
    }
    prev = t;
    e.ns = t - first;
    if (count == cap) {
      size_t ncap = cap == 0 ? 1024 : cap * 2;
      tracecsv_event_t *grown = realloc(ev, ncap * sizeof *grown);
      if (grown == NULL) {
        rc = -ENOMEM;
        if (err != NULL && errlen > 0) {
          snprintf(err, errlen, "out of memory at line %zu", lineno);
        }
        break;
      }
      ev = grown;
      cap = ncap;
    }
    ev[count++] = e;
  }
  if (rc == 0 && lineno == 0) {
    rc = bad(err, errlen, 1, "the file is empty; expected the header '" HEADER "'");
  }
  if (rc != 0) {
    free(ev);
    return rc;
  }
  *events = ev;
  *n = count;
  return 0;
}
