/* pickle: the protocol 2 writer (contracts in pickle.h). Opcodes and encodings are those of
 * CPython's Lib/pickletools.py: integers little-endian, LONG1 a two's complement of the fewest
 * bytes that hold the value, BINUNICODE a 4-byte length then UTF-8.
 */
#include "scripts/pickle.h"

#include <stdlib.h>
#include <string.h>

enum {
  PROTO = 0x80,
  STOP = '.',
  EMPTY_DICT = '}',
  EMPTY_LIST = ']',
  MARK = '(',
  SETITEMS = 'u',
  APPENDS = 'e',
  TUPLE2 = 0x86,
  NONE = 'N',
  NEWTRUE = 0x88,
  NEWFALSE = 0x89,
  BININT1 = 'K',
  BININT2 = 'M',
  BININT = 'J',
  LONG1 = 0x8a,
  BINUNICODE = 'X',
};

static void put(pk_t *pk, const void *p, size_t n) {
  if (pk->failed) {
    return;
  }
  if (pk->len + n > pk->cap) {
    size_t ncap = pk->cap ? pk->cap : 4096;
    while (ncap < pk->len + n) {
      ncap *= 2;
    }
    unsigned char *grown = realloc(pk->buf, ncap);
    if (grown == NULL) {
      pk->failed = true;
      return;
    }
    pk->buf = grown;
    pk->cap = ncap;
  }
  memcpy(pk->buf + pk->len, p, n);
  pk->len += n;
}

static void op(pk_t *pk, int code) {
  unsigned char c = (unsigned char)code;
  put(pk, &c, 1);
}

void pk_begin(pk_t *pk) {
  unsigned char proto[2] = {PROTO, 2};
  put(pk, proto, 2);
}

void pk_end(pk_t *pk) {
  op(pk, STOP);
}

void pk_dict(pk_t *pk) {
  op(pk, EMPTY_DICT);
}

void pk_list(pk_t *pk) {
  op(pk, EMPTY_LIST);
}

void pk_mark(pk_t *pk) {
  op(pk, MARK);
}

void pk_setitems(pk_t *pk) {
  op(pk, SETITEMS);
}

void pk_appends(pk_t *pk) {
  op(pk, APPENDS);
}

void pk_tuple2(pk_t *pk) {
  op(pk, TUPLE2);
}

void pk_none(pk_t *pk) {
  op(pk, NONE);
}

void pk_bool(pk_t *pk, bool v) {
  op(pk, v ? NEWTRUE : NEWFALSE);
}

/* v as LONG1: little-endian two's complement in the fewest bytes (at most 9). */
static void long1(pk_t *pk, uint64_t bits, bool negative) {
  unsigned char b[11];
  size_t n = 0;
  b[0] = LONG1;
  for (;;) {
    b[2 + n++] = (unsigned char)(bits & 0xff);
    uint64_t rest = negative ? (uint64_t)((int64_t)bits >> 8) : bits >> 8;
    bool sign = (b[2 + n - 1] & 0x80) != 0;
    if ((!negative && rest == 0 && !sign) || (negative && rest == UINT64_MAX && sign)) {
      break;
    }
    if (n == 8) {
      if (!negative && sign) {
        b[2 + n++] = 0; /* a positive value with its top bit set needs one more byte */
      }
      break;
    }
    bits = rest;
  }
  b[1] = (unsigned char)n;
  put(pk, b, n + 2);
}

void pk_int(pk_t *pk, int64_t v) {
  if (v >= 0) {
    pk_uint(pk, (uint64_t)v);
  } else if (v >= INT32_MIN) {
    uint32_t u = (uint32_t)(int32_t)v;
    unsigned char b[5] = {BININT, (unsigned char)u, (unsigned char)(u >> 8),
                          (unsigned char)(u >> 16), (unsigned char)(u >> 24)};
    put(pk, b, 5);
  } else {
    long1(pk, (uint64_t)v, true);
  }
}

void pk_uint(pk_t *pk, uint64_t v) {
  if (v < 0x100) {
    unsigned char b[2] = {BININT1, (unsigned char)v};
    put(pk, b, 2);
  } else if (v < 0x10000) {
    unsigned char b[3] = {BININT2, (unsigned char)v, (unsigned char)(v >> 8)};
    put(pk, b, 3);
  } else if (v <= INT32_MAX) {
    unsigned char b[5] = {BININT, (unsigned char)v, (unsigned char)(v >> 8),
                          (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    put(pk, b, 5);
  } else {
    long1(pk, v, false);
  }
}

void pk_str(pk_t *pk, const char *s) {
  size_t n = strlen(s);
  unsigned char b[5] = {BINUNICODE, (unsigned char)n, (unsigned char)(n >> 8),
                        (unsigned char)(n >> 16), (unsigned char)(n >> 24)};
  put(pk, b, 5);
  put(pk, s, n);
}

void pk_next_item(pk_t *pk, size_t *count) {
  if (*count == PICKLE_BATCH) {
    pk_appends(pk);
    pk_mark(pk);
    *count = 0;
  }
  (*count)++;
}
