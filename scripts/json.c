/* json: a strict recursive-descent JSON reader (contracts in json.h).
 *
 * The parser walks the text once, keeping line and column for messages. Every node owns its
 * children and text; a failure frees what was built so far. Recursion depth is bounded by
 * JSON_MAX_DEPTH, so hostile input cannot exhaust the stack. Numbers are validated against the
 * RFC grammar and kept as text. Duplicate keys are found by sorting an object's keys once it
 * is complete: O(m log m) for m members, whatever the keys (a hash could be flooded). No
 * global state.
 */
#include "scripts/json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct json {
  json_type_t type;
  bool boolean;
  char *text;   /* string (decoded) or number (as written); NUL-terminated */
  size_t count; /* items or members */
  size_t cap;
  json_t **items;
  char **keys; /* objects only */
};

typedef struct parser {
  const char *s;
  size_t len;
  size_t pos;
  char *err;
  size_t errlen;
  int rc; /* 0, -EINVAL or -ENOMEM once something failed */
} parser_t;

__attribute__((format(printf, 2, 3))) static void fail(parser_t *p, const char *fmt, ...) {
  if (p->rc != 0) {
    return;
  }
  p->rc = -EINVAL;
  if (p->err == NULL || p->errlen == 0) {
    return;
  }
  size_t line = 1;
  size_t col = 1;
  for (size_t i = 0; i < p->pos && i < p->len; i++) {
    if (p->s[i] == '\n') {
      line++;
      col = 1;
    } else {
      col++;
    }
  }
  int n = snprintf(p->err, p->errlen, "line %zu, column %zu: ", line, col);
  if (n >= 0 && (size_t)n < p->errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
    va_end(ap);
  }
}

static void out_of_memory(parser_t *p) {
  if (p->rc == 0) {
    p->rc = -ENOMEM;
    if (p->err != NULL && p->errlen > 0) {
      snprintf(p->err, p->errlen, "out of memory");
    }
  }
}

static int peek(const parser_t *p) {
  return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static void skip_ws(parser_t *p) {
  while (p->pos < p->len) {
    char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      break;
    }
    p->pos++;
  }
}

static json_t *node(parser_t *p, json_type_t type) {
  json_t *v = calloc(1, sizeof *v);
  if (v == NULL) {
    out_of_memory(p);
    return NULL;
  }
  v->type = type;
  return v;
}

void json_free(json_t *v) {
  if (v == NULL) {
    return;
  }
  for (size_t i = 0; i < v->count; i++) {
    json_free(v->items[i]);
    if (v->keys != NULL) {
      free(v->keys[i]);
    }
  }
  free(v->items);
  free(v->keys);
  free(v->text);
  free(v);
}

/* Appends child (and its key, for objects); takes ownership of both, even on failure. */
static bool append(parser_t *p, json_t *v, char *key, json_t *child) {
  if (v->count == v->cap) {
    size_t cap = v->cap == 0 ? 8 : v->cap * 2;
    json_t **items = realloc(v->items, cap * sizeof(json_t *));
    if (items != NULL) {
      v->items = items;
    }
    char **keys =
        v->type == JSON_OBJECT && items != NULL ? realloc(v->keys, cap * sizeof(char *)) : NULL;
    if (keys != NULL) {
      v->keys = keys;
    }
    if (items == NULL || (v->type == JSON_OBJECT && keys == NULL)) {
      free(key);
      json_free(child);
      out_of_memory(p);
      return false;
    }
    v->cap = cap;
  }
  v->items[v->count] = child;
  if (v->type == JSON_OBJECT) {
    v->keys[v->count] = key;
  }
  v->count++;
  return true;
}

static bool literal(parser_t *p, const char *word) {
  size_t n = strlen(word);
  if (p->len - p->pos >= n && memcmp(p->s + p->pos, word, n) == 0) {
    p->pos += n;
    return true;
  }
  return false;
}

static bool is_digit(int c) {
  return c >= '0' && c <= '9';
}

static json_t *parse_number(parser_t *p) {
  size_t start = p->pos;
  if (peek(p) == '-') {
    p->pos++;
  }
  if (peek(p) == '0') {
    p->pos++;
    if (is_digit(peek(p))) {
      fail(p, "a number may not have a leading zero");
      return NULL;
    }
  } else if (is_digit(peek(p))) {
    while (is_digit(peek(p))) {
      p->pos++;
    }
  } else {
    fail(p, "expected a digit");
    return NULL;
  }
  if (peek(p) == '.') {
    p->pos++;
    if (!is_digit(peek(p))) {
      fail(p, "expected a digit after '.'");
      return NULL;
    }
    while (is_digit(peek(p))) {
      p->pos++;
    }
  }
  if (peek(p) == 'e' || peek(p) == 'E') {
    p->pos++;
    if (peek(p) == '+' || peek(p) == '-') {
      p->pos++;
    }
    if (!is_digit(peek(p))) {
      fail(p, "expected a digit in the exponent");
      return NULL;
    }
    while (is_digit(peek(p))) {
      p->pos++;
    }
  }
  json_t *v = node(p, JSON_NUMBER);
  if (v == NULL) {
    return NULL;
  }
  v->text = strndup(p->s + start, p->pos - start);
  if (v->text == NULL) {
    json_free(v);
    out_of_memory(p);
    return NULL;
  }
  return v;
}

static int hex4(parser_t *p) {
  int v = 0;
  for (int i = 0; i < 4; i++) {
    int c = peek(p);
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) {
      fail(p, "expected four hex digits after \\u");
      return -1;
    }
    v = v * 16 + d;
    p->pos++;
  }
  return v;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 when it is not one (overlong forms,
 * surrogates and code points above U+10FFFF are invalid). */
static size_t utf8_len(const unsigned char *s, size_t n) {
  size_t need;
  unsigned min;
  unsigned cp;
  if (s[0] < 0x80) {
    return 1;
  } else if ((s[0] & 0xe0) == 0xc0) {
    need = 2, min = 0x80, cp = s[0] & 0x1fu;
  } else if ((s[0] & 0xf0) == 0xe0) {
    need = 3, min = 0x800, cp = s[0] & 0x0fu;
  } else if ((s[0] & 0xf8) == 0xf0) {
    need = 4, min = 0x10000, cp = s[0] & 0x07u;
  } else {
    return 0;
  }
  if (n < need) {
    return 0;
  }
  for (size_t i = 1; i < need; i++) {
    if ((s[i] & 0xc0) != 0x80) {
      return 0;
    }
    cp = (cp << 6) | (s[i] & 0x3fu);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
    return 0;
  }
  return need;
}

static size_t put_utf8(char *out, unsigned cp) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xe0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
  }
  out[0] = (char)(0xf0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
  out[3] = (char)(0x80 | (cp & 0x3f));
  return 4;
}

/* Parses a string at p->pos (which holds '"') into a malloc'ed decoded copy, or NULL. Decoding
 * never lengthens the text (an escape of 2 to 12 bytes becomes at most 4), so the raw length
 * bounds the buffer. */
static char *parse_string(parser_t *p) {
  p->pos++; /* the opening quote */
  size_t start = p->pos;
  size_t end = start;
  while (end < p->len && p->s[end] != '"') {
    end += p->s[end] == '\\' ? 2 : 1;
  }
  char *out = malloc((end > p->len ? p->len : end) - start + 1);
  if (out == NULL) {
    out_of_memory(p);
    return NULL;
  }
  size_t o = 0;
  for (;;) {
    int c = peek(p);
    if (c < 0) {
      fail(p, "unterminated string");
      break;
    }
    if (c == '"') {
      p->pos++;
      out[o] = '\0';
      return out;
    }
    if (c < 0x20) {
      fail(p, "control character 0x%02x in a string (write it as \\u%04x)", c, c);
      break;
    }
    if (c != '\\') {
      size_t n = utf8_len((const unsigned char *)p->s + p->pos, p->len - p->pos);
      if (n == 0) {
        fail(p, "invalid UTF-8 in a string");
        break;
      }
      memcpy(out + o, p->s + p->pos, n);
      o += n;
      p->pos += n;
      continue;
    }
    p->pos++;
    c = peek(p);
    const char *simple = strchr("\"\\/bfnrt", c > 0 ? c : 'x');
    if (c > 0 && simple != NULL) {
      static const char decoded[] = "\"\\/\b\f\n\r\t";
      out[o++] = decoded[simple - "\"\\/bfnrt"];
      p->pos++;
      continue;
    }
    if (c != 'u') {
      fail(p, "invalid escape in a string");
      break;
    }
    p->pos++;
    int cp = hex4(p);
    if (cp < 0) {
      break;
    }
    if (cp >= 0xd800 && cp <= 0xdbff) {
      if (!literal(p, "\\u")) {
        fail(p, "a high surrogate must be followed by a low one");
        break;
      }
      int lo = hex4(p);
      if (lo < 0) {
        break;
      }
      if (lo < 0xdc00 || lo > 0xdfff) {
        fail(p, "a high surrogate must be followed by a low one");
        break;
      }
      cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    } else if (cp >= 0xdc00 && cp <= 0xdfff) {
      fail(p, "a low surrogate without a high one");
      break;
    } else if (cp == 0) {
      fail(p, "\\u0000 is not accepted in a string");
      break;
    }
    o += put_utf8(out + o, (unsigned)cp);
  }
  free(out);
  return NULL;
}

static json_t *parse_value(parser_t *p, int depth);

/* A member's key and where its text ends, for the duplicate check. */
typedef struct keyed {
  const char *key;
  size_t end;
} keyed_t;

static int by_key(const void *a, const void *b) {
  const keyed_t *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  return c != 0 ? c : (x->end > y->end) - (x->end < y->end);
}

/* Fails (at the second occurrence in the text) iff v has a key twice; ends[i] is where the key
 * of member i ends. O(m log m). */
static bool unique_keys(parser_t *p, const json_t *v, const size_t *ends) {
  if (v->count < 2) {
    return true;
  }
  keyed_t *k = malloc(v->count * sizeof *k);
  if (k == NULL) {
    out_of_memory(p);
    return false;
  }
  for (size_t i = 0; i < v->count; i++) {
    k[i] = (keyed_t){v->keys[i], ends[i]};
  }
  qsort(k, v->count, sizeof *k, by_key);
  size_t dup = 0; /* the earliest second occurrence, or 0 */
  const char *which = NULL;
  for (size_t i = 1; i < v->count; i++) {
    if (strcmp(k[i].key, k[i - 1].key) == 0 && (dup == 0 || k[i].end < dup) &&
        (i < 2 || strcmp(k[i].key, k[i - 2].key) != 0)) {
      dup = k[i].end; /* sorted by position within equal keys: k[i] is the second one */
      which = k[i].key;
    }
  }
  if (which != NULL) {
    p->pos = dup;
    fail(p, "the key \"%.64s\" appears twice in one object", which);
  }
  free(k);
  return which == NULL;
}
static json_t *parse_container(parser_t *p, int depth, bool object) {
  char close = object ? '}' : ']';
  json_t *v = node(p, object ? JSON_OBJECT : JSON_ARRAY);
  if (v == NULL) {
    return NULL;
  }
  p->pos++; /* '{' or '[' */
  skip_ws(p);
  if (peek(p) == close) {
    p->pos++;
    return v;
  }
  size_t *ends = NULL; /* where each key ends, for unique_keys */
  size_t nends = 0;
  for (;;) {
    char *key = NULL;
    skip_ws(p);
    if (object) {
      if (peek(p) != '"') {
        fail(p, "expected a key in double quotes");
        break;
      }
      key = parse_string(p);
      if (key == NULL) {
        break;
      }
      if ((nends & (nends - 1)) == 0) { /* 0, 1, 2, 4, ...: grow to the next power of two */
        size_t *grown = realloc(ends, (nends ? 2 * nends : 1) * sizeof *ends);
        if (grown == NULL) {
          free(key);
          out_of_memory(p);
          break;
        }
        ends = grown;
      }
      ends[nends++] = p->pos;
      skip_ws(p);
      if (peek(p) != ':') {
        fail(p, "expected ':' after a key");
        free(key);
        break;
      }
      p->pos++;
    }
    json_t *child = parse_value(p, depth + 1);
    if (child == NULL) {
      free(key);
      break;
    }
    if (!append(p, v, key, child)) {
      break;
    }
    skip_ws(p);
    if (peek(p) == ',') {
      p->pos++;
      skip_ws(p);
      if (peek(p) == close) {
        fail(p, "a trailing comma before '%c'", close);
        break;
      }
      continue;
    }
    if (peek(p) == close) {
      size_t end = ++p->pos;
      if (!object || unique_keys(p, v, ends)) {
        free(ends);
        p->pos = end;
        return v;
      }
      break;
    }
    fail(p, "expected ',' or '%c'", close);
    break;
  }
  free(ends);
  json_free(v);
  return NULL;
}

static json_t *parse_value(parser_t *p, int depth) {
  skip_ws(p);
  if (depth > JSON_MAX_DEPTH) {
    fail(p, "nested deeper than %d levels", JSON_MAX_DEPTH);
    return NULL;
  }
  int c = peek(p);
  json_t *v = NULL;
  switch (c) {
  case '{':
  case '[':
    return parse_container(p, depth, c == '{');
  case '"': {
    char *s = parse_string(p);
    if (s == NULL) {
      return NULL;
    }
    v = node(p, JSON_STRING);
    if (v == NULL) {
      free(s);
      return NULL;
    }
    v->text = s;
    return v;
  }
  case 't':
  case 'f':
  case 'n':
    if (literal(p, "true") || literal(p, "false")) {
      v = node(p, JSON_BOOL);
      if (v != NULL) {
        v->boolean = c == 't';
      }
      return v;
    }
    if (literal(p, "null")) {
      return node(p, JSON_NULL);
    }
    break;
  default:
    if (c == '-' || is_digit(c)) {
      return parse_number(p);
    }
    break;
  }
  fail(p, c < 0 ? "unexpected end of input" : "expected a JSON value");
  return NULL;
}

int json_parse(const char *text, size_t len, json_t **out, char *err, size_t errlen) {
  parser_t p = {text, len, 0, err, errlen, 0};
  if (err != NULL && errlen > 0) {
    err[0] = '\0';
  }
  *out = NULL;
  if (text == NULL) {
    fail(&p, "no input");
    return p.rc;
  }
  json_t *v = parse_value(&p, 1);
  if (v != NULL) {
    skip_ws(&p);
    if (p.pos < p.len) {
      fail(&p, "unexpected text after the JSON value");
      json_free(v);
      return p.rc;
    }
    *out = v;
    return 0;
  }
  return p.rc != 0 ? p.rc : -EINVAL;
}

json_type_t json_type(const json_t *v) {
  return v != NULL ? v->type : JSON_NULL;
}

size_t json_count(const json_t *v) {
  return v != NULL && (v->type == JSON_ARRAY || v->type == JSON_OBJECT) ? v->count : 0;
}

const json_t *json_at(const json_t *v, size_t i, const char **key) {
  if (i >= json_count(v)) {
    return NULL;
  }
  if (key != NULL) {
    *key = v->type == JSON_OBJECT ? v->keys[i] : NULL;
  }
  return v->items[i];
}

const json_t *json_get(const json_t *v, const char *key) {
  if (v == NULL || v->type != JSON_OBJECT) {
    return NULL;
  }
  for (size_t i = 0; i < v->count; i++) {
    if (strcmp(v->keys[i], key) == 0) {
      return v->items[i];
    }
  }
  return NULL;
}

const char *json_string(const json_t *v) {
  return v != NULL && v->type == JSON_STRING ? v->text : NULL;
}

int json_bool(const json_t *v, bool *out) {
  if (v == NULL || v->type != JSON_BOOL) {
    return -EINVAL;
  }
  *out = v->boolean;
  return 0;
}

int json_u64(const json_t *v, uint64_t *out) {
  if (v == NULL || v->type != JSON_NUMBER || v->text[0] == '-' || strpbrk(v->text, ".eE") != NULL) {
    return -EINVAL;
  }
  uint64_t x = 0;
  for (const char *c = v->text; *c != '\0'; c++) {
    unsigned d = (unsigned)(*c - '0');
    if (x > (UINT64_MAX - d) / 10) {
      return -ERANGE;
    }
    x = x * 10 + d;
  }
  *out = x;
  return 0;
}

int json_double(const json_t *v, double *out) {
  if (v == NULL || v->type != JSON_NUMBER) {
    return -EINVAL;
  }
  // The text is a validated JSON number and gpucap never calls setlocale, so strtod reads '.'.
  *out = strtod(v->text, NULL);
  return 0;
}
