/* report: the exit report (contracts in report.h; layout and fields in docs/report.md).
 *
 * Everything goes through one appending core/strbuf writer, which keeps snprintf's truncation
 * and return rules. Fractions are fixed-point integers, never %f: the host program
 * may have set a locale whose decimal separator is a comma, which would break the JSON.
 * No state, no locks; errno is restored because vsnprintf may set it.
 */
#include "core/report.h"
#include "core/strbuf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

#ifndef GPUCAP_VERSION
#define GPUCAP_VERSION "unknown"
#endif

__extension__ typedef unsigned __int128 u128;

enum { MICRO = 1000000, MAX_UNIT = 6 };

size_t report_format_size(uint64_t bytes, char *buf, size_t cap) {
  static const char *const units[MAX_UNIT + 1] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int saved = errno;
  strbuf_t o;
  strbuf_init(&o, buf, cap);
  unsigned u = 0;
  while (u < MAX_UNIT && (bytes >> (10 * (u + 1))) != 0) {
    u++;
  }
  if (u == 0) {
    strbuf_printf(&o, "%" PRIu64 " B", bytes);
  } else {
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
    strbuf_printf(&o, "%" PRIu64 ".%" PRIu64 " %s", whole, tenths, units[u]);
  }
  strbuf_finish(&o);
  errno = saved;
  return o.len;
}

/* A row as reported: pool-only fields cleared for pass-through rows, derived figures added. */
typedef struct view {
  bfc_stats_t s;
  uint64_t lost; /* bytes_in_use - bytes_requested_in_use, never below 0 */
} view_t;

/* Fractions are printed as integers of 1/scale (scale MICRO for JSON, 1000 for a percentage
 * with one decimal), rounded half up once from the exact value: rounding millionths again to
 * tenths of a percent would round twice. */
static uint64_t fraction_scaled(double f, uint64_t scale) {
  if (!(f > 0.0)) { /* also NaN */
    return 0;
  }
  return f >= 1.0 ? scale : (uint64_t)(f * (double)scale + 0.5);
}

/* num / den, 0 when den == 0. */
static uint64_t ratio_scaled(uint64_t num, uint64_t den, uint64_t scale) {
  if (den == 0) {
    return 0;
  }
  u128 r = ((u128)num * scale + den / 2) / den;
  return r > UINT64_MAX ? UINT64_MAX : (uint64_t)r;
}

static void view_of(const report_row_t *r, view_t *v) {
  v->s = r->stats;
  if (!r->pooled) {
    v->s.pool_bytes = 0;
    v->s.peak_pool_bytes = 0;
    v->s.largest_free_block_bytes = 0;
    v->s.free_bytes = 0;
    v->s.fragmentation = 0.0;
    v->s.deferred_bytes = 0;
    v->s.num_deferred = 0;
    v->s.num_free_chunks = 0;
    v->s.num_regions = 0;
    v->s.num_eagain = 0;
    v->s.num_retired = 0;
  }
  v->lost = v->s.bytes_in_use > v->s.bytes_requested_in_use
                ? v->s.bytes_in_use - v->s.bytes_requested_in_use
                : 0;
}

/* ---- Text ---- */

typedef struct cell {
  char text[REPORT_SIZE_MAX + 8];
} cell_t;

static cell_t size_cell(uint64_t bytes) {
  cell_t c = {""};
  report_format_size(bytes, c.text, sizeof c.text);
  return c;
}

/* Pool-only columns of a pass-through row read "-". */
static cell_t pool_cell(const report_row_t *r, uint64_t bytes) {
  cell_t c = {"-"};
  return r->pooled ? size_cell(bytes) : c;
}

/* Tenths of a percent as "12.5%", or "-" without a pool. */
static cell_t pct_cell(const report_row_t *r, uint64_t tenths) {
  cell_t c = {"-"};
  if (r->pooled) {
    snprintf(c.text, sizeof c.text, "%" PRIu64 ".%" PRIu64 "%%", tenths / 10, tenths % 10);
  }
  return c;
}

static cell_t device_cell(const report_row_t *r) {
  cell_t c = {""};
  if (r->context == 0 && !r->destroyed) {
    snprintf(c.text, sizeof c.text, "%d", r->device);
  } else {
    snprintf(c.text, sizeof c.text, "%d:%d%s", r->device, r->context, r->destroyed ? "*" : "");
  }
  return c;
}

size_t report_format_text(const report_row_t *rows, int n, long pid, char *buf, size_t cap) {
  int saved = errno;
  strbuf_t o;
  strbuf_init(&o, buf, cap);
  if (pid > 0) {
    strbuf_printf(&o, "gpucap: memory report (pid %ld)\n", pid);
  } else {
    strbuf_str(&o, "gpucap: memory report\n");
  }
  if (n <= 0 || rows == NULL) {
    strbuf_str(&o, "  no device memory was allocated\n");
    strbuf_finish(&o);
    errno = saved;
    return o.len;
  }

  strbuf_printf(&o, "%8s%12s%13s%12s%12s%12s%14s\n", "device", "in use", "peak in use", "pool",
                "peak pool", "cap", "largest free");
  for (int i = 0; i < n; i++) {
    const report_row_t *r = &rows[i];
    view_t v;
    view_of(r, &v);
    cell_t cap_text = {"none"};
    if (r->cap != REPORT_NO_CAP) {
      cap_text = size_cell(r->cap);
    }
    strbuf_printf(&o, "%8s%12s%13s%12s%12s%12s%14s\n", device_cell(r).text,
                  size_cell(v.s.bytes_in_use).text, size_cell(v.s.peak_bytes_in_use).text,
                  pool_cell(r, v.s.pool_bytes).text, pool_cell(r, v.s.peak_pool_bytes).text,
                  cap_text.text, pool_cell(r, v.s.largest_free_block_bytes).text);
  }

  strbuf_printf(&o, "%8s%7s%16s%15s%13s%15s%14s%8s\n", "device", "frag", "lost in chunks",
                "peak use/pool", "allocations", "driver allocs", "driver frees", "OOMs");
  for (int i = 0; i < n; i++) {
    const report_row_t *r = &rows[i];
    view_t v;
    view_of(r, &v);
    cell_t frag = pct_cell(r, fraction_scaled(v.s.fragmentation, 1000));
    cell_t util = pct_cell(r, ratio_scaled(v.s.peak_bytes_in_use, v.s.peak_pool_bytes, 1000));
    strbuf_printf(&o, "%8s%7s%16s%15s%13" PRIu64 "%15" PRIu64 "%14" PRIu64 "%8" PRIu64 "\n",
                  device_cell(r).text, frag.text, size_cell(v.lost).text, util.text, v.s.num_allocs,
                  v.s.driver_alloc_calls, v.s.driver_free_calls, v.s.num_ooms);
  }

  strbuf_str(&o, "  frag = 1 - largest free / free pool bytes; lost in chunks = in use - requested;"
                 " d:c = context c\n");
  strbuf_str(&o, "  peak use/pool = peak in use / peak pool; cap none = no cap; - = pass-through"
                 " (no pool)\n");
  for (int i = 0; i < n; i++) {
    if (rows[i].destroyed) {
      strbuf_str(&o, "  * = context destroyed before exit: its pool as the driver freed it\n");
      break;
    }
  }
  strbuf_finish(&o);
  errno = saved;
  return o.len;
}

/* ---- JSON ---- */

static void put_key_u64(strbuf_t *o, const char *key, uint64_t v) {
  strbuf_printf(o, ",\n      \"%s\": %" PRIu64, key, v);
}

/* Millionths as a JSON number with six decimals ("0.125000"). */
static void put_key_e6(strbuf_t *o, const char *key, uint64_t e6) {
  strbuf_printf(o, ",\n      \"%s\": %" PRIu64 ".%06" PRIu64, key, e6 / MICRO, e6 % MICRO);
}

static void put_json_string(strbuf_t *o, const char *s) {
  strbuf_str(o, "\"");
  for (; *s != '\0'; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') {
      strbuf_printf(o, "\\%c", ch);
    } else if (ch < 0x20) {
      strbuf_printf(o, "\\u%04x", ch);
    } else {
      strbuf_char(o, (char)ch);
    }
  }
  strbuf_str(o, "\"");
}

static void put_json_row(strbuf_t *o, const report_row_t *r) {
  view_t v;
  view_of(r, &v);
  const bfc_stats_t *s = &v.s;
  strbuf_printf(o,
                "    {\n      \"device\": %d,\n      \"context\": %d,\n      \"pooled\": %s,\n"
                "      \"context_destroyed\": %s",
                r->device, r->context, r->pooled ? "true" : "false",
                r->destroyed ? "true" : "false");
  if (r->cap == REPORT_NO_CAP) {
    strbuf_str(o, ",\n      \"cap_bytes\": null");
  } else {
    put_key_u64(o, "cap_bytes", r->cap);
  }
  /* TensorFlow's AllocatorStats names. */
  put_key_u64(o, "num_allocs", s->num_allocs);
  put_key_u64(o, "bytes_in_use", s->bytes_in_use);
  put_key_u64(o, "peak_bytes_in_use", s->peak_bytes_in_use);
  put_key_u64(o, "largest_alloc_size", s->largest_alloc_size);
  put_key_u64(o, "bytes_limit", s->bytes_limit);
  put_key_u64(o, "pool_bytes", s->pool_bytes);
  put_key_u64(o, "peak_pool_bytes", s->peak_pool_bytes);
  put_key_u64(o, "largest_free_block_bytes", s->largest_free_block_bytes);
  put_key_e6(o, "fragmentation", fraction_scaled(s->fragmentation, MICRO));
  /* gpucap's own. */
  put_key_u64(o, "bytes_requested_in_use", s->bytes_requested_in_use);
  put_key_u64(o, "peak_bytes_requested_in_use", s->peak_bytes_requested_in_use);
  put_key_u64(o, "internal_fragmentation_bytes", v.lost);
  put_key_e6(o, "utilization", ratio_scaled(s->peak_bytes_in_use, s->peak_pool_bytes, MICRO));
  put_key_u64(o, "free_bytes", s->free_bytes);
  put_key_u64(o, "deferred_bytes", s->deferred_bytes);
  put_key_u64(o, "num_in_use", s->num_in_use);
  put_key_u64(o, "num_deferred", s->num_deferred);
  put_key_u64(o, "num_free_chunks", s->num_free_chunks);
  put_key_u64(o, "num_regions", s->num_regions);
  put_key_u64(o, "driver_alloc_calls", s->driver_alloc_calls);
  put_key_u64(o, "driver_alloc_failures", s->driver_alloc_failures);
  put_key_u64(o, "driver_free_calls", s->driver_free_calls);
  put_key_u64(o, "driver_free_failures", s->driver_free_failures);
  put_key_u64(o, "num_ooms", s->num_ooms);
  put_key_u64(o, "num_eagain", s->num_eagain);
  put_key_u64(o, "num_retired", s->num_retired);
  put_key_u64(o, "host_metadata_bytes", s->host_metadata_bytes);
  strbuf_str(o, "\n    }");
}

size_t report_format_json(const report_row_t *rows, int n, long pid, char *buf, size_t cap) {
  int saved = errno;
  strbuf_t o;
  strbuf_init(&o, buf, cap);
  strbuf_str(&o, "{\n  \"gpucap_version\": ");
  put_json_string(&o, GPUCAP_VERSION);
  if (pid > 0) {
    strbuf_printf(&o, ",\n  \"pid\": %ld", pid);
  } else {
    strbuf_str(&o, ",\n  \"pid\": null");
  }
  strbuf_str(&o, ",\n  \"devices\": [");
  if (n > 0 && rows != NULL) {
    for (int i = 0; i < n; i++) {
      strbuf_str(&o, i == 0 ? "\n" : ",\n");
      put_json_row(&o, &rows[i]);
    }
    strbuf_str(&o, "\n  ");
  }
  strbuf_str(&o, "]\n}\n");
  strbuf_finish(&o);
  errno = saved;
  return o.len;
}
