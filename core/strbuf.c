/* strbuf: appending text to a fixed buffer with snprintf's rules (contracts in strbuf.h).
 *
 * Every append advances len by the full length of its piece and copies only what fits below
 * cap - 1, so a truncated output is a prefix of the full one and strbuf_finish always has room
 * for the NUL. No state, no locks.
 */
#include "core/strbuf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Bytes that can still be stored before the one kept for the NUL. */
static size_t room(const strbuf_t *sb) {
  return sb->cap > 0 && sb->len < sb->cap - 1 ? sb->cap - 1 - sb->len : 0;
}

void strbuf_init(strbuf_t *sb, char *buf, size_t cap) {
  sb->buf = buf;
  sb->cap = cap;
  sb->len = 0;
}

void strbuf_char(strbuf_t *sb, char ch) {
  if (room(sb) > 0) {
    sb->buf[sb->len] = ch;
  }
  sb->len++;
}

void strbuf_str(strbuf_t *sb, const char *s) {
  size_t n = strlen(s);
  size_t fit = room(sb);
  if (fit > 0) { /* buf may be NULL */
    memcpy(sb->buf + sb->len, s, n < fit ? n : fit);
  }
  sb->len += n;
}

void strbuf_u64(strbuf_t *sb, uint64_t v, unsigned width) {
  char digits[20]; /* 2^64 - 1 has 20 */
  unsigned n = 0;
  do {
    digits[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (unsigned i = n; i < width; i++) {
    strbuf_char(sb, ' ');
  }
  while (n > 0) {
    strbuf_char(sb, digits[--n]);
  }
}

void strbuf_size(strbuf_t *sb, uint64_t bytes) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  enum { MAX_UNIT = 6 };
  unsigned u = 0;
  while (u < MAX_UNIT && (bytes >> (10 * (u + 1))) != 0) {
    u++;
  }
  if (u == 0) {
    strbuf_u64(sb, bytes, 0);
    strbuf_str(sb, " B");
    return;
  }
  unsigned shift = 10 * u;
  uint64_t whole = bytes >> shift;
  uint64_t rest = bytes & ((UINT64_C(1) << shift) - 1); /* rest * 10 < 2^64: shift <= 60 */
  uint64_t tenths = (rest * 10 + (UINT64_C(1) << (shift - 1))) >> shift;
  if (tenths == 10) {
    whole++;
    tenths = 0;
  }
  if (whole == 1024 && u < MAX_UNIT) {
    whole = 1;
    u++;
  }
  strbuf_u64(sb, whole, 0);
  strbuf_char(sb, '.');
  strbuf_u64(sb, tenths, 0);
  strbuf_char(sb, ' ');
  strbuf_str(sb, units[u]);
}

void strbuf_printf(strbuf_t *sb, const char *fmt, ...) {
  int saved = errno;
  int fits = sb->len < sb->cap;
  va_list ap;
  va_start(ap, fmt);
  // vsnprintf keeps its last byte for a NUL itself, so it may be given the byte room() keeps.
  int n = vsnprintf(fits ? sb->buf + sb->len : NULL, fits ? sb->cap - sb->len : 0, fmt, ap);
  va_end(ap);
  if (n > 0) {
    sb->len += (size_t)n;
  }
  errno = saved;
}

size_t strbuf_finish(strbuf_t *sb) {
  if (sb->cap > 0) {
    sb->buf[sb->len < sb->cap ? sb->len : sb->cap - 1] = '\0';
  }
  return sb->len;
}
