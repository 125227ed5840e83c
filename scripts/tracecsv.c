/* tracecsv: the trace reader (contracts in tracecsv.h). The header names the columns; then one
 * pass over the lines, each field checked whole, as the settings parsers check values, so a
 * damaged trace is reported with its line number rather than plotted or replayed wrong.
 */
#include "scripts/tracecsv.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER "Thread,Time,Action,Pointer,Size,Stream"
#define MAX_FIELDS 32 /* columns read; a header with more is refused */
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

/* The columns beyond RMM's six that the reader knows. */
enum { COL_DEVICE, COL_EVENT, COL_HELD, COL_VERDICT, COL_LIBRARY, COL_SPILLED, NCOLS };
static const char *const col_names[NCOLS] = {"Device",  "Event",   "Held",
                                             "Verdict", "Library", "Spilled"};

/* Splits a line into at most MAX_FIELDS comma-separated fields; returns their number, or
 * MAX_FIELDS + 1 when there are more. */
static size_t split(const char *line, size_t ln, field_t *f) {
  size_t nf = 0;
  size_t start = 0;
  for (size_t i = 0; i <= ln; i++) {
    if (i == ln || line[i] == ',') {
      if (nf == MAX_FIELDS) {
        return MAX_FIELDS + 1;
      }
      f[nf++] = (field_t){line + start, i - start};
      start = i + 1;
    }
  }
  return nf;
}

/* Reads the header: RMM's six columns first, then any others; *nf gets the number of columns
 * and col[] where gpucap's are (-1: absent). */
static int header(const char *line, size_t ln, size_t *nf, int col[NCOLS], char *err,
                  size_t errlen) {
  field_t f[MAX_FIELDS];
  size_t six = strlen(HEADER);
  for (int c = 0; c < NCOLS; c++) {
    col[c] = -1;
  }
  if (ln < six || memcmp(line, HEADER, six) != 0 || (ln > six && line[six] != ',')) {
    return bad(err, errlen, 1,
               "not an RMM trace: the first line must be '" HEADER "' (GPUCAP_TRACE writes it)");
  }
  *nf = split(line, ln, f);
  if (*nf > MAX_FIELDS) {
    return bad(err, errlen, 1, "more than %d columns", MAX_FIELDS);
  }
  for (size_t i = 6; i < *nf; i++) {
    for (int c = 0; c < NCOLS; c++) {
      if (equals(f[i], col_names[c])) {
        if (col[c] >= 0) {
          return bad(err, errlen, 1, "the column %s is named twice", col_names[c]);
        }
        col[c] = (int)i;
      }
    }
  }
  return 0;
}

/* A pointer: hexadecimal with or without 0x, or RMM's "(nil)" for a null pointer. */
static bool parse_ptr(field_t f, uint64_t *out) {
  if (equals(f, "(nil)")) {
    *out = 0;
    return true;
  }
  if (f.n > 2 && f.p[0] == '0' && (f.p[1] == 'x' || f.p[1] == 'X')) {
    f.p += 2;
    f.n -= 2;
  }
  return parse_u64(f, 16, out);
}

static const char *const rmm_actions[] = {"allocate", "allocate failure", "free"};
static const char *const gpucap_events[] = {"alloc",   "refused", "free",
                                            "reserve", "release", "cap"};
enum { NEVENTS = sizeof gpucap_events / sizeof gpucap_events[0] };

/* The index of library name v in inf (added on first sight; -1 when empty, when inf is NULL or
 * beyond TRACECSV_LIBS). */
static int16_t library(field_t v, tracecsv_info_t *inf) {
  if (v.n == 0 || inf == NULL) {
    return -1;
  }
  for (int i = 0; i < inf->nlibs; i++) {
    if (equals(v, inf->libs[i])) {
      return (int16_t)i;
    }
  }
  if (inf->nlibs == TRACECSV_LIBS) {
    return -1;
  }
  memcpy(inf->libs[inf->nlibs], v.p, v.n);
  inf->libs[inf->nlibs][v.n] = '\0';
  return (int16_t)inf->nlibs++;
}

/* One line's fields into e (all but the time); library names into inf (may be NULL). */
static int parse_fields(const field_t *f, const int col[NCOLS], size_t lineno, tracecsv_event_t *e,
                        tracecsv_info_t *inf, char *err, size_t errlen) {
  int rmm = -1;
  for (int a = 0; a < 3; a++) {
    if (equals(f[2], rmm_actions[a])) {
      rmm = a;
    }
  }
  if (rmm < 0) {
    return bad(err, errlen, lineno, "Action '%.*s' is not 'allocate', 'allocate failure' or 'free'",
               (int)(f[2].n > 40 ? 40 : f[2].n), f[2].p);
  }
  e->action = (tracecsv_action_t)rmm; /* the first three agree */
  if (f[0].n == 0) {
    return bad(err, errlen, lineno, "Thread is empty");
  }
  if (!digits(f[0], 1, 20) || !parse_u64(f[0], 10, &e->thread)) {
    e->thread = 0; /* RMM's readers take it as a number; a name is still a thread */
  }
  if (!parse_ptr(f[3], &e->ptr)) {
    return bad(err, errlen, lineno, "Pointer '%.*s' is not a hexadecimal address or (nil)",
               (int)(f[3].n > 40 ? 40 : f[3].n), f[3].p);
  }
  if (!digits(f[4], 1, 20) || !parse_u64(f[4], 10, &e->size)) {
    return bad(err, errlen, lineno, "Size '%.*s' is not a byte count",
               (int)(f[4].n > 40 ? 40 : f[4].n), f[4].p);
  }
  if (!parse_ptr(f[5], &e->stream)) {
    return bad(err, errlen, lineno, "Stream '%.*s' is not a hexadecimal handle",
               (int)(f[5].n > 40 ? 40 : f[5].n), f[5].p);
  }
  e->dev = -1;
  e->held = e->size;
  if (col[COL_DEVICE] >= 0) {
    field_t d = f[col[COL_DEVICE]];
    uint64_t v = 0;
    if (equals(d, "-1")) {
      e->dev = -1;
    } else if (digits(d, 1, 5) && parse_u64(d, 10, &v) && v <= 65535) {
      e->dev = (int)v;
    } else {
      return bad(err, errlen, lineno, "Device '%.*s' is not a device ordinal or -1",
                 (int)(d.n > 40 ? 40 : d.n), d.p);
    }
  }
  if (col[COL_HELD] >= 0) {
    field_t h = f[col[COL_HELD]];
    if (!digits(h, 1, 20) || !parse_u64(h, 10, &e->held)) {
      return bad(err, errlen, lineno, "Held '%.*s' is not a byte count", (int)(h.n > 40 ? 40 : h.n),
                 h.p);
    }
  }
  if (col[COL_EVENT] >= 0) {
    field_t v = f[col[COL_EVENT]];
    int ev = -1;
    for (int a = 0; a < NEVENTS; a++) {
      if (equals(v, gpucap_events[a])) {
        ev = a;
      }
    }
    /* Region and cap rows are 'allocate failure' to RMM's readers, which skip failures. */
    int want = ev >= TRACECSV_RESERVE ? TRACECSV_FAILURE : ev;
    if (ev < 0) {
      return bad(err, errlen, lineno,
                 "Event '%.*s' is not alloc, refused, free, reserve, release or cap",
                 (int)(v.n > 40 ? 40 : v.n), v.p);
    }
    if (want != rmm) {
      return bad(err, errlen, lineno, "Event '%s' does not go with Action '%s'", gpucap_events[ev],
                 rmm_actions[rmm]);
    }
    if (ev == TRACECSV_CAP && e->dev < 0) {
      return bad(err, errlen, lineno, "a cap row names no device");
    }
    e->action = (tracecsv_action_t)ev;
  }
  e->verdict[0] = '\0';
  if (col[COL_VERDICT] >= 0) {
    field_t v = f[col[COL_VERDICT]];
    bool word = v.n < sizeof e->verdict;
    for (size_t i = 0; i < v.n && word; i++) {
      word = (v.p[i] >= 'a' && v.p[i] <= 'z') || v.p[i] == '_';
    }
    if (!word) {
      return bad(err, errlen, lineno, "Verdict '%.*s' is not a verdict (such as fragmentation)",
                 (int)(v.n > 40 ? 40 : v.n), v.p);
    }
    if (e->action == TRACECSV_FAILURE) {
      memcpy(e->verdict, v.p, v.n);
      e->verdict[v.n] = '\0';
    }
  }
  e->spilled = 0;
  if (col[COL_SPILLED] >= 0) {
    field_t v = f[col[COL_SPILLED]];
    if (!digits(v, 1, 20) || !parse_u64(v, 10, &e->spilled) || e->spilled > e->held) {
      return bad(err, errlen, lineno, "Spilled '%.*s' is not a byte count up to Held",
                 (int)(v.n > 40 ? 40 : v.n), v.p);
    }
  }
  e->lib = -1;
  if (col[COL_LIBRARY] >= 0) {
    field_t v = f[col[COL_LIBRARY]];
    bool name = v.n < TRACECSV_LIB_MAX;
    for (size_t i = 0; i < v.n && name; i++) {
      unsigned char ch = (unsigned char)v.p[i];
      name = ch >= 0x20 && ch != 0x7f && ch != '"';
    }
    if (!name) {
      return bad(err, errlen, lineno,
                 "Library '%.*s' is not a library name (at most %d bytes, no control byte or '\"')",
                 (int)(v.n > 40 ? 40 : v.n), v.p, TRACECSV_LIB_MAX - 1);
    }
    e->lib = library(v, inf);
  }
  if (e->action == TRACECSV_FAILURE) {
    e->ptr = 0;
    e->held = 0;
  }
  return 0;
}

int tracecsv_parse(const char *text, size_t len, tracecsv_event_t **events, size_t *n,
                   tracecsv_info_t *info, char *err, size_t errlen) {
  tracecsv_event_t *ev = NULL;
  tracecsv_info_t local;
  tracecsv_info_t *inf = info != NULL ? info : &local; /* names are kept only for a caller */
  *inf = (tracecsv_info_t){.max_dev = -1};
  size_t count = 0;
  size_t cap = 0;
  size_t lineno = 0;
  size_t nf = 6;
  int col[NCOLS] = {-1, -1, -1, -1, -1, -1};
  int64_t first = -1;
  int64_t prev = 0;
  int64_t day = 0;
  int rc = 0;

  *events = NULL;
  *n = 0;
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
      inf->cut = lineno; /* cut while it was written: never trusted, even if it parses */
      break;
    }
    if (ln > 0 && line[ln - 1] == '\r') {
      ln--;
    }
    if (lineno == 1) {
      rc = header(line, ln, &nf, col, err, errlen);
      inf->gpucap = col[COL_DEVICE] >= 0 && col[COL_EVENT] >= 0 && col[COL_HELD] >= 0;
      continue;
    }
    if (ln == 0) {
      continue;
    }
    field_t f[MAX_FIELDS];
    if (split(line, ln, f) != nf) {
      rc = bad(err, errlen, lineno, "expected %zu comma-separated fields, as the header names", nf);
      break;
    }
    if (memchr(line, '\0', ln) != NULL) {
      rc = bad(err, errlen, lineno, "a NUL byte; is this a text file?");
      break;
    }
    tracecsv_event_t e = {0};
    int64_t tod = parse_time(f[1]);
    if (tod < 0) {
      rc = bad(err, errlen, lineno, "Time '%.*s' is not HH:MM:SS.ffffff",
               (int)(f[1].n > 40 ? 40 : f[1].n), f[1].p);
      break;
    }
    rc = parse_fields(f, col, lineno, &e, info, err, errlen);
    if (rc != 0) {
      break;
    }
    if (e.action == TRACECSV_CAP) { /* what the device's cap is, not an event */
      if (e.dev < TRACECSV_CAP_DEVICES) {
        inf->caps_known |= UINT64_C(1) << e.dev;
        inf->cap[e.dev] = e.size;
      }
      continue;
    }
    e.line = lineno > UINT32_MAX ? UINT32_MAX : (uint32_t)lineno;
    inf->max_dev = e.dev > inf->max_dev ? e.dev : inf->max_dev;
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
