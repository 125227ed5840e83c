/* strbuf: appends text to a caller's fixed buffer with snprintf's rules, for the reports.
 *
 * Invariant: `len` is the length of everything appended so far, even past `cap`; the bytes that
 * fit land at offsets below cap - 1, so the last byte stays free for the NUL that
 * strbuf_finish writes. No allocation and no locale: strbuf_char, strbuf_str and strbuf_u64
 * use no stdio at all (bfc_dump relies on that while reporting an OOM); strbuf_printf is
 * vsnprintf. No state and no locks: a strbuf_t belongs to one caller at a time.
 */
#ifndef GPUCAP_CORE_STRBUF_H
#define GPUCAP_CORE_STRBUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct strbuf {
  char *buf;  /* the caller's buffer; NULL iff cap == 0 */
  size_t cap; /* its size in bytes, NUL included */
  size_t len; /* length of the full output, even past cap */
} strbuf_t;

/* Starts an empty output over buf[cap]; buf may be NULL iff cap == 0 (the output is then only
 * measured). Writes nothing into buf. O(1); never fails. */
void strbuf_init(strbuf_t *sb, char *buf, size_t cap);

/* Appends one byte. O(1); never fails. */
void strbuf_char(strbuf_t *sb, char ch);

/* Appends the NUL-terminated string s. O(strlen(s)); never fails. */
void strbuf_str(strbuf_t *sb, const char *s);

/* Appends v in decimal, right-aligned with spaces in `width` columns (0: no padding; a wider
 * number is never cut). No locale, no stdio. O(max(digits, width)); never fails. */
void strbuf_u64(strbuf_t *sb, uint64_t v, unsigned width);

/* Appends `bytes` for humans, the one size format of every report: binary units with one
 * decimal, "0 B", "1023 B", "1.5 KiB", "256.0 MiB", "16.0 EiB" (rounded half up; a value that
 * rounds to 1024.0 of a unit moves to the next unit: 1048575 -> "1.0 MiB"). No locale, no
 * stdio. O(1); never fails. */
void strbuf_size(strbuf_t *sb, uint64_t bytes);

/* Appends the text vsnprintf makes of fmt and its arguments; appends nothing if vsnprintf
 * fails (an encoding error). Follows the program's locale like any printf, so print fractions
 * from integers, never with %f. Leaves errno as it found it. O(length of the text); never
 * fails. */
__attribute__((format(printf, 2, 3))) void strbuf_printf(strbuf_t *sb, const char *fmt, ...);

/* NUL-terminates the output (at len, or at cap - 1 when it was truncated; nothing when
 * cap == 0) and returns len, the length of the full output: what snprintf would return.
 * Appending after it is allowed; call it again at the end. O(1); never fails. */
size_t strbuf_finish(strbuf_t *sb);

#endif
