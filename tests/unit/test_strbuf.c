/* Tests for core/strbuf: every append truncates like snprintf at every buffer size (a NUL-
 * terminated prefix of the full text, nothing written at or past cap, the full length
 * returned), decimal width padding, and errno left alone. Prints TAP.
 */
#include "core/strbuf.h"
#include "tests/tap.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#define GUARD '#'

typedef size_t writer_fn(char *buf, size_t cap);

/* Every kind of append, with a printf piece between byte-wise ones. */
static size_t mixed(char *buf, size_t cap) {
  strbuf_t sb;
  strbuf_init(&sb, buf, cap);
  strbuf_str(&sb, "gpucap");
  strbuf_char(&sb, ':');
  strbuf_u64(&sb, 42, 5);
  strbuf_printf(&sb, " %s=%d%%", "frag", 7);
  strbuf_str(&sb, "");
  strbuf_u64(&sb, UINT64_MAX, 0);
  strbuf_char(&sb, '\n');
  return strbuf_finish(&sb);
}
#define MIXED "gpucap:   42 frag=7%18446744073709551615\n"

/* printf pieces back to back and at both ends, around a finish called twice. */
static size_t printfs(char *buf, size_t cap) {
  strbuf_t sb;
  strbuf_init(&sb, buf, cap);
  strbuf_printf(&sb, "%05d|", 12);
  strbuf_printf(&sb, "%s", "");
  strbuf_printf(&sb, "[%-4s]", "ab");
  strbuf_finish(&sb);
  strbuf_u64(&sb, 0, 3);
  strbuf_printf(&sb, "%c%c", 'x', 'y');
  return strbuf_finish(&sb);
}
#define PRINTFS "00012|[ab  ]  0xy"

/* Runs `fn` into a guarded buffer of every size from 0 (with buf NULL) to the full length + 2
 * and checks snprintf's contract at each. */
static void every_cap(const char *name, writer_fn *fn, const char *want) {
  size_t full = strlen(want);
  char buf[128];

  TAP_EQ(fn(NULL, 0), full, "%s: cap 0 with a NULL buffer returns the full length", name);
  for (size_t cap = 1; cap <= full + 2; cap++) {
    memset(buf, GUARD, sizeof buf);
    size_t got = fn(buf, cap);
    size_t kept = cap - 1 < full ? cap - 1 : full;
    int prefix = memcmp(buf, want, kept) == 0;
    int nul = buf[kept] == '\0';
    int untouched = 1;
    for (size_t i = cap; i < sizeof buf; i++) {
      untouched &= buf[i] == GUARD;
    }
    TAP_EQ(got, full, "%s, cap %zu: returns the full length", name, cap);
    tap_ok(prefix && nul, "%s, cap %zu: a NUL-terminated prefix of %zu bytes", name, cap, kept);
    tap_ok(untouched, "%s, cap %zu: nothing written at or past cap", name, cap);
  }
}

static void check_text(const char *what, writer_fn *fn, const char *want) {
  char buf[128];
  fn(buf, sizeof buf);
  if (!tap_ok(strcmp(buf, want) == 0, "%s", what)) {
    tap_diag("  got '%s', want '%s'", buf, want);
  }
}

static size_t u64_cases(char *buf, size_t cap) {
  static const struct {
    uint64_t v;
    unsigned width;
  } cases[] = {{0, 0}, {0, 1}, {7, 3}, {42, 5}, {12345, 3}, {12345, 5}, {UINT64_MAX, 22}};
  strbuf_t sb;
  strbuf_init(&sb, buf, cap);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    strbuf_u64(&sb, cases[i].v, cases[i].width);
    strbuf_char(&sb, '|');
  }
  return strbuf_finish(&sb);
}

static size_t empty(char *buf, size_t cap) {
  strbuf_t sb;
  strbuf_init(&sb, buf, cap);
  return strbuf_finish(&sb);
}

int main(void) {
  every_cap("mixed", mixed, MIXED);
  every_cap("printfs", printfs, PRINTFS);
  every_cap("empty", empty, "");
  check_text("mixed appends in order", mixed, MIXED);
  check_text("printf pieces in order, appends after a finish", printfs, PRINTFS);
  check_text("u64: right-aligned in width, never cut, 0 and 2^64-1", u64_cases,
             "0|0|  7|   42|12345|12345|  18446744073709551615|");

  char buf[8];
  strbuf_t sb;
  strbuf_init(&sb, buf, sizeof buf);
  errno = EDOM;
  strbuf_printf(&sb, "%d", 1);
  strbuf_str(&sb, "2");
  strbuf_char(&sb, '3');
  strbuf_u64(&sb, 4, 2);
  TAP_EQ(errno, EDOM, "appends leave errno as they found it");
  TAP_EQ(strbuf_finish(&sb), 5, "the errno case wrote all five bytes");
  return tap_done();
}
