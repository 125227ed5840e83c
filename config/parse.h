/* Value parsers and formatters for gpucap settings: sizes, fractions, booleans, small
 * integers and per-device lists. The CLI and fuzzers call these directly, so a value is
 * judged by exactly the same code everywhere.
 *
 * Invariant: a parser accepts the whole string or rejects it, never half-parses, clamps or
 * defaults; on failure its outputs are untouched. No environment, I/O, allocation or locale:
 * every function is reentrant, thread-safe on distinct outputs, and leaves errno unchanged.
 */
#ifndef GPUCAP_CONFIG_PARSE_H
#define GPUCAP_CONFIG_PARSE_H

#include "core/limits.h"

#include <limits.h>
#ifndef PATH_MAX // strict -std=c11 without _GNU_SOURCE hides it
#include <linux/limits.h>
#endif
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Fractions are fixed-point: CFG_FRACTION_ONE (10^18) stands for 1, so 0.5 is 5 * 10^17. */
#define CFG_FRACTION_ONE UINT64_C(1000000000000000000)

/* A buffer of this many bytes holds any reason a parser writes, untruncated. */
#define CFG_WHY_MAX 256

/* A budget name's buffer: at most CFG_NAME_MAX - 1 bytes and a NUL. */
#define CFG_NAME_MAX 64

/* What the items of a per-device list hold. */
typedef enum cfg_devkind {
  CFG_DEV_SIZE,     /* bytes, as cfg_parse_size */
  CFG_DEV_FRACTION, /* fixed-point fractions, as cfg_parse_fraction */
} cfg_devkind_t;

/* A value for every device, a value per listed device, or (all zero) nothing.
 * `every` and a non-zero `mask` never occur together. */
typedef struct cfg_devvals {
  bool every; /* one value for every device: every_value */
  uint64_t every_value;
  uint64_t mask; /* bit i set: value[i] holds device i's value */
  uint64_t value[GPUCAP_MAX_DEVICES];
} cfg_devvals_t;

typedef enum cfg_dest_kind {
  CFG_DEST_STDERR,
  CFG_DEST_OFF,
  CFG_DEST_FILE,
} cfg_dest_kind_t;

/* An output destination: stderr, nowhere, or the file at `path`. */
typedef struct cfg_dest {
  cfg_dest_kind_t kind;
  char path[PATH_MAX]; /* "" unless kind is CFG_DEST_FILE */
} cfg_dest_t;

/* Every parser below:
 *  - takes a NUL-terminated `s`; ASCII whitespace around the value is ignored;
 *  - writes its result only on success;
 *  - writes a one-line reason without a trailing newline (or "" on success) to `why` when
 *    `why` is not NULL and `whylen` > 0, truncated to fit; CFG_WHY_MAX bytes always suffice;
 *  - returns 0, or -EINVAL when `s` is NULL or malformed, or -ERANGE when `s` is well formed
 *    but its value is out of range (overflow, zero, a fraction above 1, an ordinal beyond
 *    GPUCAP_MAX_DEVICES - 1);
 *  - runs in O(strlen(s)) time and O(1) stack, and is reentrant. */

/* A size written without a unit is bytes, and must be at least this many (1 MiB): `8` for
 * 8 GiB would otherwise be a cap of 8 bytes. */
#define CFG_BARE_MIN (UINT64_C(1) << 20)

/* Parses a size in bytes into *bytes: plain digits of at least CFG_BARE_MIN bytes
 * (`1073741824`) or a decimal number and a binary unit, K/Ki/KiB, M/Mi/MiB, G/Gi/GiB or
 * T/Ti/TiB in any case, with optional blanks between (`4GiB`, `1.5 gib`, `64K`, `8Gi`). Every
 * unit is a power of 1024, the one-letter ones included (as GNU tools read them; Kubernetes
 * reads `8G` as 8 * 10^9). A fractional byte count is rounded down.
 * Fails iff the text is anything else, including a sign, hex, a leading zero (`010`), an
 * exponent, NaN/inf, SI-looking units (`1GB`; the reason suggests `1GiB`), a decimal without a
 * unit, plain digits under CFG_BARE_MIN (`8`; the reason asks for a unit), more than 18
 * digits after the point, non-ASCII or control bytes (-EINVAL); or the value exceeds 2^64-1 or
 * comes to zero bytes (-ERANGE). */
int cfg_parse_size(const char *s, uint64_t *bytes, char *why, size_t whylen);

/* Parses a fraction in (0, 1] (`0.5`, `.25`, `1`) or a percentage in (0, 100] (`50%`,
 * `12.5 %`) into *e18, in units of 1/CFG_FRACTION_ONE, exactly.
 * Fails iff the text is not a plain decimal with at most 18 digits after the point, optionally
 * followed by `%` (then at most 16 digits after the point) (signs, exponents, NaN, junk:
 * -EINVAL), or its value is 0 or above 1 / 100% (-ERANGE). */
int cfg_parse_fraction(const char *s, uint64_t *e18, char *why, size_t whylen);

/* Parses a boolean into *out: true/false, 1/0, yes/no, on/off, in any case.
 * Fails iff the text is anything else (-EINVAL). */
int cfg_parse_bool(const char *s, bool *out, char *why, size_t whylen);

/* Parses a decimal integer in [min, max] into *out (no sign, no leading zero, no point).
 * Fails iff malformed (-EINVAL) or outside [min, max] (-ERANGE). */
int cfg_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out, char *why,
                   size_t whylen);

/* Parses either one value for every device (`4GiB`) or a per-device list
 * `ordinal:value[,ordinal:value...]` (`0:4GiB,1:2GiB`) whose values are of `kind`; `=` may
 * stand for any `:` (`0=4GiB,1:2GiB`). The text is a list iff it contains ':', '=' or ','.
 * Ordinals are CUDA ordinals as the process sees them, decimal, 0..GPUCAP_MAX_DEVICES-1; blanks
 * around items, ordinals and values are ignored.
 * Fails iff the single value fails its parser, or an item is empty, lacks `ordinal:`, has a bad
 * value, or names an ordinal that is malformed (-EINVAL), repeated (-EINVAL) or beyond
 * GPUCAP_MAX_DEVICES - 1 (-ERANGE).
 * The reason names the offending item or device. */
int cfg_parse_devvals(const char *s, cfg_devkind_t kind, cfg_devvals_t *out, char *why,
                      size_t whylen);

/* Copies a file path into out[outlen]: a bare name (`trace.csv`, in the working directory) or
 * any path. Any bytes but control characters are kept (file names may be UTF-8). A word that a
 * switch, keyword or stream typed by mistake would be (`-`, `stdout`, `stderr`, `off`, `none`,
 * `null`, `true`, `false`, `yes`, `no`, `on`, `0`, `1`, in any case) is not a file name: the
 * reason says to write `./WORD` for a file of that name.
 * Fails iff the path is empty, is one of those words or holds a control character (-EINVAL),
 * or does not fit in outlen bytes with its NUL (-ENAMETOOLONG). */
int cfg_parse_path(const char *s, char *out, size_t outlen, char *why, size_t whylen);

/* Parses an output destination into *out: `stderr` or `off` (any case), else a file path as
 * cfg_parse_path reads it. Fails iff the text is neither keyword and cfg_parse_path would. */
int cfg_parse_dest(const char *s, cfg_dest_t *out, char *why, size_t whylen);

/* Parses a budget name (white space around it trimmed) into out: 1 to CFG_NAME_MAX - 1 bytes of
 * ASCII letters, digits, '.', '_' and '-', the first a letter or digit, so that it can name a
 * file and needs no quoting. Fails (-EINVAL, out untouched) otherwise. */
int cfg_parse_name(const char *s, char out[CFG_NAME_MAX], char *why, size_t whylen);

/* Copies the path a file setting names into out[outlen] with every `%p` replaced by `pid` in
 * decimal, as the file is created (so the processes of one job write separate files), and
 * every `%%` by one `%` (scanning left to right: `%%p` is `%p`); every other byte is copied as
 * is. Fails iff the result does not fit with its NUL (-ENAMETOOLONG;
 * out then holds no meaningful text). O(strlen(path)); errno unchanged. */
int cfg_expand_path(const char *path, long pid, char *out, size_t outlen);

/* Looks up device `ordinal` in `v`: stores its value in *out and returns true, or returns
 * false when `v` gives it none. A value for every device applies to any ordinal >= 0,
 * including ordinals past the list range. O(1); never fails. */
bool cfg_devvals_get(const cfg_devvals_t *v, int ordinal, uint64_t *out);

/* Returns floor(total * e18 / CFG_FRACTION_ONE), exactly (128-bit intermediate); `total` when
 * e18 >= CFG_FRACTION_ONE. O(1); never fails. */
uint64_t cfg_fraction_of(uint64_t total, uint64_t e18);

/* Formatters: write the canonical text of a value (which the matching parser reads back to
 * the same value) into buf, NUL-terminated and truncated to fit when len > 0, and return the
 * length the full text needs, as snprintf does. O(length of the text); never fail.
 * cfg_format_size uses the largest unit that divides `bytes` exactly (`1536MiB`, `4GiB`,
 * `1048577`), or KiB with the exact decimals under CFG_BARE_MIN (`0.9765625KiB` for 1000),
 * and `0` for 0 (which no size parses to);
 * cfg_format_fraction prints the shortest exact decimal (`0.25`, `1`); cfg_format_devvals prints
 * one value or `0:4GiB,1:2GiB` in ordinal order, or "" when empty. */
size_t cfg_format_size(uint64_t bytes, char *buf, size_t len);
size_t cfg_format_fraction(uint64_t e18, char *buf, size_t len);
size_t cfg_format_devvals(const cfg_devvals_t *v, cfg_devkind_t kind, char *buf, size_t len);

/* snprintf for the formatters here and in cfg.c: writes fmt's text into buf, NUL-terminated
 * and truncated to fit when len > 0 (buf may be NULL iff len == 0), and returns the length the
 * full text needs, or 0 if vsnprintf fails (an encoding error; the formats used here have
 * none). Follows the program's locale like any printf: print numbers from integers only.
 * O(length of the text); never fails. */
__attribute__((format(printf, 3, 4))) size_t cfg_snprintf(char *buf, size_t len, const char *fmt,
                                                          ...);

#endif
