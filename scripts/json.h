/* json: a small, strict JSON reader (RFC 8259) for the documents gpucap itself writes, such
 * as the exit report. It builds a tree that the caller queries and frees.
 *
 * Strict: one value with only whitespace around it; no comments, trailing commas, leading
 * zeros, NaN, control characters in strings, invalid UTF-8, lone surrogates or \u0000, and no
 * object with a key twice. Nesting is limited to JSON_MAX_DEPTH. Numbers keep their text, so
 * integers up to 2^64-1 are read exactly. Single-threaded use per tree; no global state.
 */
#ifndef GPUCAP_SCRIPTS_JSON_H
#define GPUCAP_SCRIPTS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSON_MAX_DEPTH 64

typedef enum json_type {
  JSON_NULL,
  JSON_BOOL,
  JSON_NUMBER,
  JSON_STRING,
  JSON_ARRAY,
  JSON_OBJECT,
} json_type_t;

typedef struct json json_t;

/* Parses text[0..len) into a tree stored in *out (free it with json_free).
 * Fails iff the text is not one strict JSON value (-EINVAL; err gets "line L, column C: what
 * was expected", one line, truncated to errlen) or memory runs out (-ENOMEM). On failure *out
 * is NULL. O(len) time, O(len) memory. */
int json_parse(const char *text, size_t len, json_t **out, char *err, size_t errlen);

/* Frees a tree from json_parse; NULL is a no-op. O(nodes). */
void json_free(json_t *v);

/* The value's type; JSON_NULL for a NULL pointer. O(1). */
json_type_t json_type(const json_t *v);

/* Number of items of an array or members of an object; 0 for anything else. O(1). */
size_t json_count(const json_t *v);

/* Item i of an array, or member i of an object (its key in *key when key is not NULL);
 * NULL when v is neither or i is out of range. O(1). */
const json_t *json_at(const json_t *v, size_t i, const char **key);

/* The member `key` of an object, or NULL when v is not an object or has no such key.
 * O(members). */
const json_t *json_get(const json_t *v, const char *key);

/* A string's decoded UTF-8 text (NUL-terminated; JSON strings here never hold NUL), or NULL
 * when v is not a string. O(1). */
const char *json_string(const json_t *v);

/* Stores a boolean in *out. Fails iff v is not true/false (-EINVAL). O(1). */
int json_bool(const json_t *v, bool *out);

/* Stores a number that is a non-negative integer written without fraction or exponent
 * ("42", not "42.0" or "4.2e1") in *out, exactly. Fails iff v is not such a number (-EINVAL)
 * or it exceeds 2^64-1 (-ERANGE). O(digits). */
int json_u64(const json_t *v, uint64_t *out);

/* Stores any number in *out, as the closest double strtod gives in the "C" locale. Fails iff v
 * is not a number (-EINVAL). O(digits). */
int json_double(const json_t *v, double *out);

#endif
