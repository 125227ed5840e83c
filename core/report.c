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
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#ifndef GPUCAP_VERSION
#define GPUCAP_VERSION "unknown"
#endif

__extension__ typedef unsigned __int128 u128;

enum { MICRO = 1000000 };

size_t report_format_size(uint64_t bytes, char *buf, size_t cap) {
  strbuf_t o;
  strbuf_init(&o, buf, cap);
  strbuf_size(&o, bytes);
  return strbuf_finish(&o);
}

/* A row as reported: pool-only fields cleared for pass-through rows, derived figures added. */
typedef struct view {
  const report_row_t *row;
  bfc_stats_t s;
  uint64_t lost;      /* bytes_in_use - bytes_requested_in_use, never below 0 */
  uint64_t available; /* free bytes plus the room to grow under bytes_limit (saturated) */
  uint64_t largest;   /* largest_request, at most available; REPORT_UNKNOWN when not known */
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
  enum { POOL_ONLY_ANY = 0, POOL_ONLY_POOL = 1 };
  v->row = r;
  v->s = r->stats;
  if (!r->pooled) {
#define STAT(type, name, scope, tf, tf_label)                                                      \
  if (POOL_ONLY_##scope) {                                                                         \
    v->s.name = 0;                                                                                 \
  }
#include "core/stats.def"
#undef STAT
  }
  v->lost = v->s.bytes_in_use > v->s.bytes_requested_in_use
                ? v->s.bytes_in_use - v->s.bytes_requested_in_use
                : 0;
  uint64_t room = v->s.bytes_limit > v->s.pool_bytes ? v->s.bytes_limit - v->s.pool_bytes : 0;
  v->available =
      r->pooled ? (v->s.free_bytes > UINT64_MAX - room ? UINT64_MAX : v->s.free_bytes + room) : 0;
  v->largest = !r->pooled                             ? 0
               : r->largest_request == REPORT_UNKNOWN ? REPORT_UNKNOWN
               : r->largest_request < v->available    ? r->largest_request
                                                      : v->available;
}

/* Share of the available memory that no single request could get, in 1/scale. */
static uint64_t available_frag_scaled(const view_t *v, uint64_t scale) {
  return ratio_scaled(v->available - v->largest, v->available, scale);
}

const char *report_verdict_name(int v) {
  static const char *const names[REPORT_VERDICTS] = {"cap_full",    "fragmentation", "device_full",
                                                     "other_pools", "capture",       "spill_full"};
  return v >= 0 && v < REPORT_VERDICTS ? names[v] : "unknown";
}

const char *report_cause_name(int c) {
  static const char *const names[REPORT_CAUSES] = {"context", "modules", "limits", "other"};
  return c >= 0 && c < REPORT_CAUSES ? names[c] : "unknown";
}

/* How the driver's memory was measured ("nvml", "deltas"), or NULL: not measured. */
static const char *measured_name(int m) {
  return m == 1 ? "nvml" : m == 2 ? "deltas" : NULL;
}

uint64_t report_right_size(uint64_t peak, uint64_t driver) {
  const uint64_t step = UINT64_C(2) << 20;
  uint64_t need = peak + (driver == REPORT_UNKNOWN ? 0 : driver);
  if (need < peak || need > UINT64_MAX - step) {
    return UINT64_MAX;
  }
  return (need + step - 1) / step * step;
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

/* Tenths of a percent as "12.5%", or "-" without a pool, "?" when not known. */
static cell_t pct_cell(const report_row_t *r, uint64_t tenths, bool known) {
  cell_t c = {"-"};
  if (r->pooled && !known) {
    c.text[0] = '?';
  } else if (r->pooled) {
    snprintf(c.text, sizeof c.text, "%" PRIu64 ".%" PRIu64 "%%", tenths / 10, tenths % 10);
  }
  return c;
}

static cell_t device_cell(const report_row_t *r) {
  cell_t c = {""};
  if (r->arena > 0) {
    snprintf(c.text, sizeof c.text, "%d:%d.%d%s", r->device, r->context, r->arena,
             r->destroyed ? "*" : "");
  } else if (r->context == 0 && !r->destroyed) {
    snprintf(c.text, sizeof c.text, "%d", r->device);
  } else {
    snprintf(c.text, sizeof c.text, "%d:%d%s", r->device, r->context, r->destroyed ? "*" : "");
  }
  return c;
}

/* True iff the run ended by a signal (ended_by names one). */
static bool by_signal(const report_run_t *run) {
  return run != NULL && strncmp(run->ended_by, "SIG", 3) == 0;
}

static void put_notes(strbuf_t *o, const report_run_t *run) {
  for (int i = 0; run != NULL && i < run->nnotes && i < REPORT_NOTES_MAX; i++) {
    strbuf_str(o, "  note: ");
    strbuf_printf(o, "%.*s\n", REPORT_NOTE_MAX - 1, run->notes[i]);
  }
}

/* True iff library line i belongs under usage entry u: its device's first entry (so a run
 * that lists a device twice still prints each line once). */
static bool lib_under(const report_run_t *run, int i, int u) {
  if (run->libs[i].device != run->usage[u].device) {
    return false;
  }
  for (int k = 0; k < u; k++) {
    if (run->usage[k].device == run->usage[u].device) {
      return false;
    }
  }
  return true;
}

/* The per-library ledger, the driver's line, the right size and the refusals of each device. */
static void put_usage_text(strbuf_t *o, const report_run_t *run) {
  for (int u = 0; run != NULL && u < run->nusage && u < GPUCAP_MAX_DEVICES; u++) {
    const report_usage_t *d = &run->usage[u];
    strbuf_printf(o, "  device %d by library%*s%12s%14s\n", d->device, 21, "", "in use",
                  "peak in use");
    for (int i = 0; i < run->nlibs && i < REPORT_LIBS_MAX; i++) {
      const report_lib_t *l = &run->libs[i];
      if (lib_under(run, i, u)) {
        char name[REPORT_LIB_NAME_MAX + 16];
        snprintf(name, sizeof name, "%.*s%s", REPORT_LIB_NAME_MAX - 1, l->name,
                 l->program ? " (program)" : "");
        strbuf_printf(o, "    %-38.38s%12s%14s\n", name, size_cell(l->current).text,
                      size_cell(l->peak).text);
      }
    }
    strbuf_printf(o, "    %-38s%12s%14s\n", "total", size_cell(d->current).text,
                  size_cell(d->peak).text);
    const char *by = measured_name(d->measured_by);
    char label[64];
    snprintf(label, sizeof label, "driver's own memory (%s)", by ? by : "not measured");
    strbuf_printf(o, "    %-38s%12s%14s\n", label,
                  d->driver == REPORT_UNKNOWN ? "?" : size_cell(d->driver).text,
                  d->driver_peak == REPORT_UNKNOWN ? "?" : size_cell(d->driver_peak).text);
    static const char *const causes[REPORT_CAUSES] = {
        "  grown at context creation", "  grown at module loads", "  grown at cuCtxSetLimit",
        "  grown elsewhere (pages, launches)"};
    for (int c = 0; c < REPORT_CAUSES; c++) {
      if (d->driver_cause_peak[c] > 0) {
        strbuf_printf(o, "    %-38s%12s%14s\n", causes[c], "-",
                      size_cell(d->driver_cause_peak[c]).text);
      }
    }
    if (d->whole_peak > 0) {
      strbuf_printf(o, "  device %d at peak: %s = %s allocated + %s pool slack + %s driver\n",
                    d->device, size_cell(d->whole_peak).text,
                    size_cell(d->at_peak_allocations).text, size_cell(d->at_peak_slack).text,
                    size_cell(d->at_peak_driver).text);
    }
    if (d->spill_budget > 0 || d->spilled_allocs > 0) {
      strbuf_printf(
          o,
          "  device %d spilled to host: %s now, %s at peak, %" PRIu64 " allocation%s (budget %s)\n",
          d->device, size_cell(d->spilled).text, size_cell(d->peak_spilled).text, d->spilled_allocs,
          d->spilled_allocs == 1 ? "" : "s", size_cell(d->spill_budget).text);
    }
    if (d->right_size == REPORT_UNKNOWN) {
      strbuf_printf(o, "  device %d right-size: not known (the run was refused memory)\n",
                    d->device);
    } else {
      strbuf_printf(o, "  device %d right-size: %s (%s%s, rounded up%s)\n", d->device,
                    size_cell(d->right_size).text,
                    d->covers_process ? "the peak of the whole" : "peak pool",
                    d->peak_spilled > 0 ? " + spilled" : "",
                    d->peak_spilled > 0 ? ": a cap that would not spill" : "");
    }
    uint64_t total = 0;
    for (int v = 0; v < REPORT_VERDICTS; v++) {
      total += d->refusals[v];
    }
    if (total > 0) {
      strbuf_printf(o, "  device %d refusals: %" PRIu64, d->device, total);
      const char *sep = " (";
      for (int v = 0; v < REPORT_VERDICTS; v++) {
        if (d->refusals[v] > 0) {
          strbuf_printf(o, "%s%s %" PRIu64, sep, report_verdict_name(v), d->refusals[v]);
          sep = ", ";
        }
      }
      strbuf_str(o, ")\n");
    }
  }
}

size_t report_format_text(const report_row_t *rows, int n, const report_run_t *run, char *buf,
                          size_t cap) {
  int saved = errno;
  strbuf_t o;
  strbuf_init(&o, buf, cap);
  long pid = run != NULL ? run->pid : 0;
  strbuf_str(&o, "gpucap: memory report");
  if (pid > 0 || by_signal(run)) {
    strbuf_str(&o, " (");
    if (pid > 0) {
      strbuf_printf(&o, "pid %ld%s", pid, by_signal(run) ? ", " : "");
    }
    if (by_signal(run)) {
      strbuf_printf(&o, "ended by %.*s", REPORT_ENDED_MAX - 1, run->ended_by);
    }
    strbuf_str(&o, ")");
  }
  strbuf_str(&o, "\n");
  if (n <= 0 || rows == NULL) {
    strbuf_str(&o, "  no device memory was allocated\n");
    put_notes(&o, run);
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
    cell_t frag = pct_cell(r, available_frag_scaled(&v, 1000), v.largest != REPORT_UNKNOWN);
    cell_t util = pct_cell(r, ratio_scaled(v.s.peak_bytes_in_use, v.s.peak_pool_bytes, 1000), true);
    strbuf_printf(&o, "%8s%7s%16s%15s%13" PRIu64 "%15" PRIu64 "%14" PRIu64 "%8" PRIu64 "\n",
                  device_cell(r).text, frag.text, size_cell(v.lost).text, util.text, v.s.num_allocs,
                  v.s.driver_alloc_calls, v.s.driver_free_calls, v.s.num_ooms);
  }

  strbuf_str(&o, "  frag = share of the free and unreserved bytes that no single request could"
                 " get\n");
  strbuf_str(&o,
             "  lost in chunks = in use - requested; peak use/pool = peak in use / peak pool\n");
  strbuf_str(&o,
             "  d:c = context c; cap none = no cap; - = pass-through (no pool); ? = not known\n");
  for (int i = 0; i < n; i++) {
    if (rows[i].arena > 0) {
      strbuf_str(&o, "  d:c.a = arena a of context c (GPUCAP_ARENAS): a pool of its own\n");
      break;
    }
  }
  for (int i = 0; i < n; i++) {
    if (rows[i].destroyed) {
      strbuf_str(&o, "  * = context destroyed before exit: its figures are those of that moment\n");
      break;
    }
  }
  put_usage_text(&o, run);
  put_notes(&o, run);
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

/* Length of the valid UTF-8 sequence at s[0..n) (RFC 3629: no overlong forms, surrogates or
 * code points above U+10FFFF), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : 2;
  if (s[0] < 0xc2 || s[0] > 0xf4 || n < len) {
    return 0;
  }
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) {
      return 0;
    }
  }
  bool bad = (s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) ||
             (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90);
  return bad ? 0 : len;
}

/* s[0..n) as a JSON string: quotes, backslashes and control bytes escaped, each byte that
 * starts no valid UTF-8 sequence replaced by U+FFFD. */
static void put_json_text(strbuf_t *o, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  strbuf_char(o, '"');
  for (size_t i = 0; i < n; i++) {
    size_t len = u[i] >= 0x80 ? utf8_len(u + i, n - i) : 1;
    if (u[i] == '"' || u[i] == '\\') {
      strbuf_char(o, '\\');
      strbuf_char(o, (char)u[i]);
    } else if (u[i] < 0x20) {
      strbuf_str(o, "\\u00");
      strbuf_char(o, "0123456789abcdef"[u[i] >> 4]);
      strbuf_char(o, "0123456789abcdef"[u[i] & 15]);
    } else if (len == 0) {
      strbuf_str(o, "\\ufffd");
    } else {
      for (size_t k = 0; k < len; k++) {
        strbuf_char(o, (char)u[i + k]);
      }
      i += len - 1;
    }
  }
  strbuf_char(o, '"');
}

static void put_json_string(strbuf_t *o, const char *s, size_t max) {
  put_json_text(o, s, strnlen(s, max));
}

static void put_key_fraction_or_null(strbuf_t *o, const char *key, bool known, uint64_t e6) {
  if (known) {
    put_key_e6(o, key, e6);
  } else {
    strbuf_printf(o, ",\n      \"%s\": null", key);
  }
}

/* A counter: an exact integer, or a fraction with six decimals. */
static void put_key_fraction(strbuf_t *o, const char *key, double f) {
  put_key_e6(o, key, fraction_scaled(f, MICRO));
}
#define put_key_stat(o, key, x)                                                                    \
  _Generic((x), double : put_key_fraction, default : put_key_u64)(o, key, x)

enum stat_id {
#define STAT(type, name, scope, tf, tf_label) STAT_ID_##name,
#include "core/stats.def"
#undef STAT
};

/* The report's own keys of a device object, each group after the counter it follows. */
static void put_keys_after(strbuf_t *o, enum stat_id after, const view_t *v) {
  switch (after) {
  case STAT_ID_bytes_limit:
    /* JAX's reservation keys: gpucap reserves nothing outside its pool, so they are 0. */
    put_key_u64(o, "bytes_reserved", 0);
    put_key_u64(o, "peak_bytes_reserved", 0);
    put_key_u64(o, "bytes_reservable_limit", 0);
    break;
  case STAT_ID_fragmentation: /* TensorFlow's BFCAllocator::GetFragmentation(); then gpucap's */
    if (v->largest == REPORT_UNKNOWN) {
      strbuf_str(o, ",\n      \"largest_request_bytes\": null");
    } else {
      put_key_u64(o, "largest_request_bytes", v->largest);
    }
    put_key_fraction_or_null(o, "available_fragmentation", v->largest != REPORT_UNKNOWN,
                             available_frag_scaled(v, MICRO));
    break;
  case STAT_ID_num_regions: /* what backs the pool (docs/design.md, "The VMM-backed pool") */
    strbuf_printf(o, ",\n      \"backing\": %s",
                  !v->row->pooled ? "null"
                  : v->row->vmm   ? "\"vmm\""
                                  : "\"regions\"");
    put_key_u64(o, "address_space_bytes", v->row->address_space_bytes);
    put_key_u64(o, "mapped_bytes_total", v->row->mapped_bytes_total);
    put_key_u64(o, "released_bytes_total", v->row->released_bytes_total);
    put_key_u64(o, "driver_map_calls", v->row->driver_map_calls);
    put_key_u64(o, "driver_unmap_calls", v->row->driver_unmap_calls);
    break;
  case STAT_ID_peak_bytes_requested_in_use:
    put_key_u64(o, "internal_fragmentation_bytes", v->lost);
    put_key_e6(o, "utilization", ratio_scaled(v->s.peak_bytes_in_use, v->s.peak_pool_bytes, MICRO));
    break;
  default:
    break;
  }
}

static void put_json_row(strbuf_t *o, const report_row_t *r) {
  view_t v;
  view_of(r, &v);
  const bfc_stats_t *s = &v.s;
  strbuf_printf(o,
                "    {\n      \"device\": %d,\n      \"context\": %d,\n      \"arena\": %d,\n"
                "      \"pooled\": %s,\n      \"context_destroyed\": %s",
                r->device, r->context, r->arena, r->pooled ? "true" : "false",
                r->destroyed ? "true" : "false");
  if (r->cap == REPORT_NO_CAP) {
    strbuf_str(o, ",\n      \"cap_bytes\": null");
  } else {
    put_key_u64(o, "cap_bytes", r->cap);
  }
  /* The counters (core/stats.def: TensorFlow's AllocatorStats names, which JAX's
   * memory_stats() also uses, then gpucap's own), each followed by the report's keys that
   * come after it. */
#define STAT(type, name, scope, tf, tf_label)                                                      \
  put_key_stat(o, #name, s->name);                                                                 \
  put_keys_after(o, STAT_ID_##name, &v);
#include "core/stats.def"
#undef STAT
  strbuf_str(o, "\n    }");
}

/* ---- Time ---- */

/* Civil date of a day count since 1970-01-01 (Howard Hinnant's civil_from_days). */
static void civil(int64_t days, int64_t *y, unsigned *m, unsigned *d) {
  days += 719468;
  int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  unsigned doe = (unsigned)(days - era * 146097);
  unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

size_t report_format_time(int64_t t, char *buf, size_t cap) {
  int saved = errno;
  strbuf_t o;
  strbuf_init(&o, buf, cap);
  t = t < 0 ? 0 : t;
  int64_t secs = t / 1000000000;
  int64_t y;
  unsigned mo, d;
  civil(secs / 86400, &y, &mo, &d);
  unsigned sod = (unsigned)(secs % 86400);
  strbuf_printf(&o, "%04" PRId64 "-%02u-%02uT%02u:%02u:%02u.%03uZ", y, mo, d, sod / 3600,
                sod / 60 % 60, sod % 60, (unsigned)(t / 1000000 % 1000));
  strbuf_finish(&o);
  errno = saved;
  return o.len;
}

/* ---- The run ---- */

static void put_time(strbuf_t *o, const char *key, int64_t t) {
  char text[40];
  strbuf_printf(o, ",\n  \"%s\": ", key);
  if (t > 0) {
    report_format_time(t, text, sizeof text);
    strbuf_printf(o, "\"%s\"", text);
  } else {
    strbuf_str(o, "null");
  }
}

static void put_string_or_null(strbuf_t *o, const char *key, const char *s, size_t max) {
  strbuf_printf(o, ",\n  \"%s\": ", key);
  if (s != NULL && s[0] != '\0') {
    put_json_string(o, s, max);
  } else {
    strbuf_str(o, "null");
  }
}

static void put_u64_or_null(strbuf_t *o, const char *key, uint64_t v) {
  if (v == REPORT_UNKNOWN) {
    strbuf_printf(o, ",\n      \"%s\": null", key);
  } else {
    put_key_u64(o, key, v);
  }
}

/* "usage": per device, the per-library ledger, the driver's use, the right size, refusals. */
static void put_usage_json(strbuf_t *o, const report_run_t *r) {
  strbuf_str(o, ",\n  \"usage\": [");
  for (int u = 0; u < r->nusage && u < GPUCAP_MAX_DEVICES; u++) {
    const report_usage_t *d = &r->usage[u];
    strbuf_printf(o, "%s\n    {\"device\": %d,\n      \"libraries\": [", u == 0 ? "" : ",",
                  d->device);
    int k = 0;
    for (int i = 0; i < r->nlibs && i < REPORT_LIBS_MAX; i++) {
      const report_lib_t *l = &r->libs[i];
      if (!lib_under(r, i, u)) {
        continue;
      }
      strbuf_str(o, k++ == 0 ? "\n        {\"name\": " : ",\n        {\"name\": ");
      put_json_string(o, l->name, sizeof l->name);
      strbuf_printf(
          o, ", \"program\": %s, \"held_bytes\": %" PRIu64 ", \"peak_held_bytes\": %" PRIu64 "}",
          l->program ? "true" : "false", l->current, l->peak);
    }
    strbuf_str(o, k > 0 ? "\n      ]" : "]");
    put_key_u64(o, "held_bytes", d->current);
    put_key_u64(o, "peak_held_bytes", d->peak);
    put_u64_or_null(o, "driver_bytes", d->driver);
    put_u64_or_null(o, "peak_driver_bytes", d->driver_peak);
    const char *by = measured_name(d->measured_by);
    strbuf_printf(o, ",\n      \"driver_measured_by\": %s%s%s", by ? "\"" : "", by ? by : "null",
                  by ? "\"" : "");
    strbuf_str(o, ",\n      \"driver_peak_by_cause\": {");
    for (int c = 0; c < REPORT_CAUSES; c++) {
      strbuf_printf(o, "%s\"%s\": %" PRIu64, c ? ", " : "", report_cause_name(c),
                    d->driver_cause_peak[c]);
    }
    strbuf_printf(o, "}");
    strbuf_printf(o, ",\n      \"cap_covers\": \"%s\"",
                  d->covers_process ? "process" : "allocations");
    put_key_u64(o, "peak_whole_bytes", d->whole_peak);
    strbuf_printf(o,
                  ",\n      \"at_peak\": {\"allocations_bytes\": %" PRIu64
                  ", \"pool_slack_bytes\": %" PRIu64 ", \"driver_bytes\": %" PRIu64 "}",
                  d->at_peak_allocations, d->at_peak_slack, d->at_peak_driver);
    put_u64_or_null(o, "right_size_bytes", d->right_size);
    put_key_u64(o, "spill_budget_bytes", d->spill_budget);
    put_key_u64(o, "spilled_bytes", d->spilled);
    put_key_u64(o, "peak_spilled_bytes", d->peak_spilled);
    put_key_u64(o, "spilled_allocations", d->spilled_allocs);
    strbuf_str(o, ",\n      \"refusals\": {");
    for (int v = 0; v < REPORT_VERDICTS; v++) {
      strbuf_printf(o, "%s\"%s\": %" PRIu64, v == 0 ? "" : ", ", report_verdict_name(v),
                    d->refusals[v]);
    }
    strbuf_str(o, "}\n    }");
  }
  strbuf_str(o, r->nusage > 0 ? "\n  ]" : "]");
}

/* What a NULL run stands for: nothing known. Never written (zero-filled in .bss, not stored in
 * the object file as a const would be). */
static report_run_t unknown_run;

static void put_run(strbuf_t *o, const report_run_t *run) {
  const report_run_t *r = run != NULL ? run : &unknown_run;
  if (r->pid > 0) {
    strbuf_printf(o, ",\n  \"pid\": %ld", r->pid);
  } else {
    strbuf_str(o, ",\n  \"pid\": null");
  }
  put_string_or_null(o, "hostname", r->host, sizeof r->host);
  strbuf_str(o, ",\n  \"command\": [");
  size_t len = r->command_len < sizeof r->command ? r->command_len : sizeof r->command;
  for (size_t i = 0; i < len;) {
    size_t arg = strnlen(r->command + i, len - i);
    strbuf_str(o, i == 0 ? "" : ", ");
    put_json_text(o, r->command + i, arg);
    i += arg + 1;
  }
  strbuf_str(o, "]");
  put_time(o, "start_time", r->start_ns);
  put_time(o, "end_time", r->end_ns);
  put_string_or_null(o, "ended_by", r->ended_by, sizeof r->ended_by);
  strbuf_str(o, ",\n  \"job\": {");
  for (int i = 0; i < r->njob && i < REPORT_JOB_MAX; i++) {
    strbuf_str(o, i == 0 ? "\n    " : ",\n    ");
    put_json_string(o, r->job[i].key, sizeof r->job[i].key);
    strbuf_str(o, ": ");
    put_json_string(o, r->job[i].value, sizeof r->job[i].value);
  }
  strbuf_str(o, r->njob > 0 ? "\n  }" : "}");
  strbuf_str(o, ",\n  \"gpus\": [");
  for (int i = 0; i < r->ngpus && i < GPUCAP_MAX_DEVICES; i++) {
    const report_gpu_t *g = &r->gpus[i];
    strbuf_printf(o, "%s\n    {\"device\": %d, \"name\": ", i == 0 ? "" : ",", g->device);
    if (g->name[0] != '\0') {
      put_json_string(o, g->name, sizeof g->name);
    } else {
      strbuf_str(o, "null");
    }
    strbuf_str(o, ", \"uuid\": ");
    if (g->uuid[0] != '\0') {
      put_json_string(o, g->uuid, sizeof g->uuid);
    } else {
      strbuf_str(o, "null");
    }
    strbuf_str(o, "}");
  }
  strbuf_str(o, r->ngpus > 0 ? "\n  ]" : "]");
  strbuf_printf(o, ",\n  \"complete\": %s,\n  \"notes\": [", r->nnotes > 0 ? "false" : "true");
  for (int i = 0; i < r->nnotes && i < REPORT_NOTES_MAX; i++) {
    strbuf_str(o, i == 0 ? "\n    " : ",\n    ");
    put_json_string(o, r->notes[i], sizeof r->notes[i]);
  }
  strbuf_str(o, r->nnotes > 0 ? "\n  ]" : "]");
  put_usage_json(o, r);
}

size_t report_format_json(const report_row_t *rows, int n, const report_run_t *run, char *buf,
                          size_t cap) {
  int saved = errno;
  strbuf_t o;
  strbuf_init(&o, buf, cap);
  strbuf_str(&o, "{\n  \"gpucap_version\": ");
  put_json_string(&o, GPUCAP_VERSION, 100);
  put_run(&o, run);
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
