/* rjson: a saved JSON exit report back into report rows, and the `gpucap report` command.
 *
 * The key table below lists every key report_format_json writes for a device (the counters from
 * core/stats.def), with where the value goes in report_row_t; keys added since the first
 * reports are optional, so older reports still read. tests/cli/test_json.c writes reports from real
 * pools, reads them back and checks that both formatters reproduce their output byte for byte.
 */
#include "scripts/rjson.h"

#include "scripts/cli.h"
#include "scripts/json.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPORT_FILE_MAX (64u << 20) /* a report of thousands of pools is still under 16 MiB */

typedef enum kind {
  K_COUNT,    /* a uint64_t field of bfc_stats_t */
  K_FRACTION, /* a double field of bfc_stats_t (fragmentation) */
  K_DERIVED,  /* written by report_format_json from other fields: checked, not stored */
  K_DERIVED_FRACTION,
  K_ORDINAL, /* device or context: int >= 0 */
  K_POOLED,
  K_DESTROYED,
  K_CAP,
  K_ZERO,            /* always 0 (JAX's reservation keys): checked, not stored */
  K_LARGEST_REQUEST, /* report_row_t.largest_request: an integer, or null when unknown */
  K_ROW_COUNT,       /* a uint64_t field of report_row_t */
  K_BACKING,         /* report_row_t.vmm: "vmm", "regions", or null (pass-through) */
} kind_t;

/* A counter's kind: a count, or a fraction. */
#define STAT_KIND(x) _Generic((x), double : K_FRACTION, default : K_COUNT)

static const struct key {
  const char *name;
  kind_t kind;
  size_t offset; /* in bfc_stats_t for K_COUNT and K_FRACTION; in report_row_t for K_ORDINAL */
  bool optional; /* absent from reports written before it was added */
} keys[] = {
    {"device", K_ORDINAL, offsetof(report_row_t, device), false},
    {"context", K_ORDINAL, offsetof(report_row_t, context), false},
    {"arena", K_ORDINAL, offsetof(report_row_t, arena), true},
    {"pooled", K_POOLED, 0, false},
    {"context_destroyed", K_DESTROYED, 0, false},
    {"cap_bytes", K_CAP, 0, false},
/* Every counter (core/stats.def), present in every report. */
#define STAT(type, name, scope, tf, tf_label)                                                      \
  {#name, STAT_KIND(((bfc_stats_t *)0)->name), offsetof(bfc_stats_t, name), false},
#include "core/stats.def"
#undef STAT
    /* The report's own keys (core/report.c writes each after the counter it follows). */
    {"bytes_reserved", K_ZERO, 0, true},
    {"peak_bytes_reserved", K_ZERO, 0, true},
    {"bytes_reservable_limit", K_ZERO, 0, true},
    {"largest_request_bytes", K_LARGEST_REQUEST, 0, true},
    {"backing", K_BACKING, 0, true},
    {"address_space_bytes", K_ROW_COUNT, offsetof(report_row_t, address_space_bytes), true},
    {"mapped_bytes_total", K_ROW_COUNT, offsetof(report_row_t, mapped_bytes_total), true},
    {"released_bytes_total", K_ROW_COUNT, offsetof(report_row_t, released_bytes_total), true},
    {"driver_map_calls", K_ROW_COUNT, offsetof(report_row_t, driver_map_calls), true},
    {"driver_unmap_calls", K_ROW_COUNT, offsetof(report_row_t, driver_unmap_calls), true},
    {"available_fragmentation", K_DERIVED_FRACTION, 0, true},
    {"internal_fragmentation_bytes", K_DERIVED, 0, false},
    {"utilization", K_DERIVED_FRACTION, 0, false},
};

__attribute__((format(printf, 3, 4))) static int bad(char *err, size_t errlen, const char *fmt,
                                                     ...) {
  if (err != NULL && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -EINVAL;
}

static int fraction(const json_t *v, double *out) {
  double f = 0.0;
  if (json_type(v) != JSON_NUMBER || json_double(v, &f) != 0 || !(f >= 0.0 && f <= 1.0)) {
    return -EINVAL;
  }
  *out = f;
  return 0;
}

static int read_row(const json_t *dev, size_t index, report_row_t *row, char *err, size_t errlen) {
  if (json_type(dev) != JSON_OBJECT) {
    return bad(err, errlen, "devices[%zu] is not an object", index);
  }
  memset(row, 0, sizeof *row);
  row->largest_request = REPORT_UNKNOWN;
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
    const struct key *key = &keys[k];
    const json_t *v = json_get(dev, key->name);
    uint64_t u = 0;
    double f = 0.0;
    bool b = false;
    int rc = 0;
    const char *want = "a non-negative integer";
    if (v == NULL && key->optional) {
      continue;
    }
    if (v == NULL) {
      return bad(err, errlen, "devices[%zu] has no \"%s\"", index, key->name);
    }
    switch (key->kind) {
    case K_COUNT:
      rc = json_u64(v, &u);
      if (rc == 0) {
        memcpy((char *)&row->stats + key->offset, &u, sizeof u);
      }
      break;
    case K_DERIVED:
      rc = json_u64(v, &u);
      break;
    case K_FRACTION:
      want = "a number from 0 to 1";
      rc = fraction(v, &f);
      if (rc == 0) {
        memcpy((char *)&row->stats + key->offset, &f, sizeof f);
      }
      break;
    case K_DERIVED_FRACTION:
      want = "a number from 0 to 1, or null";
      rc = json_type(v) == JSON_NULL ? 0 : fraction(v, &f);
      break;
    case K_ZERO:
      want = "0";
      rc = json_u64(v, &u) == 0 && u == 0 ? 0 : -EINVAL;
      break;
    case K_LARGEST_REQUEST:
      want = "a non-negative integer or null";
      if (json_type(v) != JSON_NULL) {
        rc = json_u64(v, &row->largest_request);
      }
      break;
    case K_ORDINAL:
      want = "an integer from 0 to 2147483647";
      rc = json_u64(v, &u);
      if (rc == 0 && u <= INT_MAX) {
        int i = (int)u;
        memcpy((char *)row + key->offset, &i, sizeof i);
      } else {
        rc = -ERANGE;
      }
      break;
    case K_ROW_COUNT:
      rc = json_u64(v, &u);
      memcpy((char *)row + key->offset, &u, sizeof u);
      break;
    case K_BACKING:
      want = "\"vmm\", \"regions\" or null";
      rc = json_type(v) == JSON_NULL ? 0 : json_string(v) == NULL ? -EINVAL : 0;
      if (rc == 0 && json_type(v) != JSON_NULL) {
        row->vmm = strcmp(json_string(v), "vmm") == 0;
        rc = row->vmm || strcmp(json_string(v), "regions") == 0 ? 0 : -EINVAL;
      }
      break;
    case K_POOLED:
      want = "true or false";
      rc = json_bool(v, &b);
      row->pooled = b;
      break;
    case K_DESTROYED:
      want = "true or false";
      rc = json_bool(v, &b);
      row->destroyed = b;
      break;
    case K_CAP:
      want = "a non-negative integer or null";
      row->cap = REPORT_NO_CAP;
      if (json_type(v) != JSON_NULL) {
        rc = json_u64(v, &row->cap);
      }
      break;
    }
    if (rc != 0) {
      return bad(err, errlen, "devices[%zu].%s is not %s", index, key->name, want);
    }
  }
  return 0;
}

/* Copies the string s (or "" for null) into out[cap]; false iff v is neither, or too long. */
static bool copy_string(const json_t *v, char *out, size_t cap) {
  const char *s = json_string(v);
  if (v == NULL || json_type(v) == JSON_NULL) {
    out[0] = '\0';
    return true;
  }
  if (s == NULL || strlen(s) >= cap) {
    return false;
  }
  memcpy(out, s, strlen(s) + 1);
  return true;
}

/* An integer, or null (REPORT_UNKNOWN); absent is an error. */
static int u64_or_null(const json_t *v, uint64_t *out) {
  if (v != NULL && json_type(v) == JSON_NULL) {
    *out = REPORT_UNKNOWN;
    return 0;
  }
  return v == NULL ? -EINVAL : json_u64(v, out);
}

/* One library line of usage[u]. */
static int read_lib(const json_t *l, int dev, report_lib_t *x) {
  bool program = false;
  if (json_type(l) != JSON_OBJECT || !copy_string(json_get(l, "name"), x->name, sizeof x->name) ||
      json_bool(json_get(l, "program"), &program) != 0 ||
      json_u64(json_get(l, "held_bytes"), &x->current) != 0 ||
      json_u64(json_get(l, "peak_held_bytes"), &x->peak) != 0) {
    return -EINVAL;
  }
  x->device = dev;
  x->program = program;
  return 0;
}

/* An optional integer: absent leaves *out as it is; null is REPORT_UNKNOWN. */
static bool opt_u64(const json_t *v, uint64_t *out) {
  return v == NULL || u64_or_null(v, out) == 0;
}

/* The driver's own memory of usage entry o (keys absent from reports of older versions: not
 * measured, the cap on allocations). */
static bool read_driver(const json_t *o, report_usage_t *d) {
  const json_t *by = json_get(o, "driver_measured_by"),
               *causes = json_get(o, "driver_peak_by_cause");
  const json_t *covers = json_get(o, "cap_covers"), *at = json_get(o, "at_peak");
  const char *m = json_string(by), *c = json_string(covers);
  d->driver_peak = REPORT_UNKNOWN;
  d->measured_by = m && strcmp(m, "nvml") == 0 ? 1 : m && strcmp(m, "deltas") == 0 ? 2 : 0;
  d->covers_process = c && strcmp(c, "process") == 0;
  bool ok = opt_u64(json_get(o, "peak_driver_bytes"), &d->driver_peak) &&
            opt_u64(json_get(o, "peak_whole_bytes"), &d->whole_peak) &&
            (by == NULL || json_type(by) == JSON_NULL || d->measured_by != 0) &&
            (covers == NULL || c != NULL);
  for (int k = 0; ok && causes != NULL && k < REPORT_CAUSES; k++) {
    ok = json_type(causes) == JSON_OBJECT &&
         opt_u64(json_get(causes, report_cause_name(k)), &d->driver_cause_peak[k]);
  }
  return ok &&
         (at == NULL || (json_type(at) == JSON_OBJECT &&
                         opt_u64(json_get(at, "allocations_bytes"), &d->at_peak_allocations) &&
                         opt_u64(json_get(at, "pool_slack_bytes"), &d->at_peak_slack) &&
                         opt_u64(json_get(at, "driver_bytes"), &d->at_peak_driver)));
}

/* "usage": the per-library ledger, the driver's use, the right size and the refusals of each
 * device (absent from older reports). */
static int read_usage(const json_t *doc, report_run_t *run, char *err, size_t errlen) {
  const json_t *usage = json_get(doc, "usage");
  if (usage != NULL && json_type(usage) != JSON_ARRAY) {
    return bad(err, errlen, "\"usage\" is not an array");
  }
  for (size_t u = 0; u < json_count(usage) && run->nusage < GPUCAP_MAX_DEVICES; u++) {
    const json_t *o = json_at(usage, u, NULL);
    report_usage_t *d = &run->usage[run->nusage];
    const json_t *libs = json_get(o, "libraries"), *refusals = json_get(o, "refusals");
    uint64_t dev = 0;
    bool ok = json_type(o) == JSON_OBJECT && json_u64(json_get(o, "device"), &dev) == 0 &&
              dev < GPUCAP_MAX_DEVICES && json_type(libs) == JSON_ARRAY &&
              json_u64(json_get(o, "held_bytes"), &d->current) == 0 &&
              json_u64(json_get(o, "peak_held_bytes"), &d->peak) == 0 &&
              u64_or_null(json_get(o, "driver_bytes"), &d->driver) == 0 &&
              u64_or_null(json_get(o, "right_size_bytes"), &d->right_size) == 0 &&
              read_driver(o, d) && json_type(refusals) == JSON_OBJECT;
    /* The spill figures are newer than "usage": absent from older reports, none spilled. */
    const char *const spill_keys[] = {"spill_budget_bytes", "spilled_bytes", "peak_spilled_bytes",
                                      "spilled_allocations"};
    uint64_t *spill_fields[] = {&d->spill_budget, &d->spilled, &d->peak_spilled,
                                &d->spilled_allocs};
    for (int k = 0; ok && k < 4; k++) {
      const json_t *n = json_get(o, spill_keys[k]);
      *spill_fields[k] = 0;
      ok = n == NULL || json_u64(n, spill_fields[k]) == 0;
    }
    for (int v = 0; ok && v < REPORT_VERDICTS; v++) {
      /* A verdict newer than the report's gpucap is absent from it: none of those. */
      const json_t *n = json_get(refusals, report_verdict_name(v));
      d->refusals[v] = 0;
      ok = n == NULL || json_u64(n, &d->refusals[v]) == 0;
    }
    for (size_t i = 0; ok && i < json_count(libs) && run->nlibs < REPORT_LIBS_MAX; i++) {
      ok = read_lib(json_at(libs, i, NULL), (int)dev, &run->libs[run->nlibs]) == 0;
      run->nlibs += ok;
    }
    if (!ok) {
      return bad(err, errlen, "usage[%zu] is not a device's usage (docs/report.md)", u);
    }
    d->device = (int)dev;
    run->nusage++;
  }
  return 0;
}

/* What the table shows of the run: "ended_by" and "notes" (both absent from older reports). */
static int read_run(const json_t *doc, report_run_t *run, char *err, size_t errlen) {
  const json_t *notes = json_get(doc, "notes");
  if (!copy_string(json_get(doc, "ended_by"), run->ended_by, sizeof run->ended_by)) {
    return bad(err, errlen, "\"ended_by\" is not a short string or null");
  }
  if (notes != NULL && json_type(notes) != JSON_ARRAY) {
    return bad(err, errlen, "\"notes\" is not an array");
  }
  for (size_t i = 0; i < json_count(notes) && run->nnotes < REPORT_NOTES_MAX; i++) {
    const json_t *note = json_at(notes, i, NULL);
    if (json_type(note) != JSON_STRING ||
        !copy_string(note, run->notes[run->nnotes], sizeof run->notes[0])) {
      return bad(err, errlen, "notes[%zu] is not a string of under %d bytes", i, REPORT_NOTE_MAX);
    }
    run->nnotes++;
  }
  return read_usage(doc, run, err, errlen);
}

int rjson_read(const char *text, size_t len, report_row_t **rows, int *n, report_run_t *run,
               char *err, size_t errlen) {
  json_t *doc = NULL;
  report_row_t *out = NULL;
  uint64_t u = 0;
  int rc = 0;

  *rows = NULL;
  *n = 0;
  memset(run, 0, sizeof *run);
  rc = json_parse(text, len, &doc, err, errlen);
  if (rc != 0) {
    return rc;
  }
  const json_t *version = json_get(doc, "gpucap_version");
  const json_t *jpid = json_get(doc, "pid");
  const json_t *devices = json_get(doc, "devices");
  size_t count = json_count(devices);
  if (json_type(doc) != JSON_OBJECT) {
    rc = bad(err, errlen, "the document is not a JSON object; is it a gpucap JSON report?");
  } else if (json_string(version) == NULL) {
    rc = bad(err, errlen, "no \"gpucap_version\" string; is it a gpucap JSON report?");
  } else if (jpid == NULL ||
             (json_type(jpid) != JSON_NULL && (json_u64(jpid, &u) != 0 || u > LONG_MAX))) {
    rc = bad(err, errlen, "\"pid\" is not a process ID or null");
  } else if (json_type(devices) != JSON_ARRAY) {
    rc = bad(err, errlen, "no \"devices\" array");
  } else if (count > INT_MAX / 2) {
    rc = bad(err, errlen, "too many devices (%zu)", count);
  } else if (count > 0 && (out = calloc(count, sizeof *out)) == NULL) {
    rc = -ENOMEM;
    snprintf(err, errlen, "out of memory");
  } else {
    rc = read_run(doc, run, err, errlen);
  }
  for (size_t i = 0; rc == 0 && i < count; i++) {
    rc = read_row(json_at(devices, i, NULL), i, &out[i], err, errlen);
  }
  json_free(doc);
  if (rc != 0) {
    free(out);
    return rc;
  }
  *rows = out;
  *n = (int)count;
  run->pid = (long)u;
  return 0;
}

static const char report_usage[] =
    "Usage: gpucap report FILE.json\n"
    "\n"
    "Prints a saved exit report (written by GPUCAP_REPORT_JSON or `gpucap run --json`) as the\n"
    "same table gpucap prints when the program exits. FILE.json may be - for standard input.\n"
    "The columns are described in docs/report.md.\n"
    "\n"
    "Options:\n"
    "  -h, --help     print this help\n"
    "  --version      print gpucap's version\n"
    "\n"
    "Exit status: 0 printed; 1 the file cannot be read or is not a gpucap JSON report;\n"
    "2 usage error.\n";

int rjson_main(int argc, char **argv) {
  const char *path = NULL;
  bool dashdash = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!dashdash && cli_is_help(a)) {
      fputs(report_usage, stdout);
      return CLI_OK;
    }
    if (!dashdash && strcmp(a, "--version") == 0) {
      cli_print_version();
      return CLI_OK;
    }
    if (!dashdash && strcmp(a, "--") == 0) {
      dashdash = true;
    } else if (!dashdash && a[0] == '-' && a[1] != '\0') {
      cli_error("report: unknown option '%s'; see gpucap report --help", a);
      return CLI_USAGE;
    } else if (path != NULL) {
      cli_error("report: one FILE.json at a time ('%s' and '%s'); see gpucap report --help", path,
                a);
      return CLI_USAGE;
    } else {
      path = a;
    }
  }
  if (path == NULL) {
    cli_error("report: no file given; usage: gpucap report FILE.json");
    return CLI_USAGE;
  }

  char *text = NULL;
  size_t len = 0;
  if (cli_read_file("report", path, REPORT_FILE_MAX, &text, &len) != 0) {
    return CLI_FAIL;
  }
  report_row_t *rows = NULL;
  int n = 0;
  static report_run_t run;
  char err[512];
  int rc = rjson_read(text, len, &rows, &n, &run, err, sizeof err);
  free(text);
  if (rc != 0) {
    cli_error("report: %s: %s", path, err);
    if (rc == -EINVAL) {
      fprintf(stderr, "gpucap: the file must be a JSON exit report as written by "
                      "GPUCAP_REPORT_JSON (docs/report.md)\n");
    }
    return CLI_FAIL;
  }
  size_t cap = REPORT_TEXT_MAX(n > 0 ? n : 1);
  char *table = malloc(cap);
  int status = CLI_FAIL;
  if (table == NULL) {
    cli_error("report: out of memory");
  } else {
    size_t tn = report_format_text(rows, n, &run, table, cap);
    status = cli_write_file("report", "-", table, tn < cap ? tn : cap - 1) == 0 ? CLI_OK : CLI_FAIL;
  }
  free(table);
  free(rows);
  return status;
}
