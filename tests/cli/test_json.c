/* Tests for scripts/json (the strict JSON reader) and scripts/rjson (a JSON exit report back
 * into rows). The round trip is checked from outside: reports written by core/report from real
 * pools (and from worst-case rows) are read back, and both formatters must reproduce their
 * output byte for byte, so `gpucap report` prints exactly the table the shim printed.
 * Prints TAP.
 */
#include "core/report.h"
#include "scripts/json.h"
#include "scripts/rjson.h"
#include "tests/tap.h"
#include "tests/unit/test_bfc_prim.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)

/* text with control bytes as \xNN, for one-line test descriptions (two rotating buffers). */
static const char *show(const char *text) {
  static char bufs[2][256];
  static int k;
  char *out = bufs[k ^= 1];
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)text; *p != '\0' && o + 5 < 256; p++) {
    if (*p < 0x20) {
      o += (size_t)snprintf(out + o, 256 - o, "\\x%02x", *p);
    } else {
      out[o++] = (char)*p;
    }
  }
  out[o] = '\0';
  return out;
}

static int parses(const char *text) {
  json_t *v = NULL;
  char err[256];
  int rc = json_parse(text, strlen(text), &v, err, sizeof err);
  json_free(v);
  return rc;
}

static void test_syntax(void) {
  static const char *const good[] = {
      "{}",
      "[]",
      "0",
      "-0",
      "1.5e3",
      "-12.25E-2",
      "\"\"",
      "true",
      "false",
      "null",
      " \n\t\r{ \"a\" : [ 1 , 2 , { \"b\" : null } ] }\n",
      "[[[[]]]]",
      "\"\\u00e9\\ud83d\\ude00\"",
      "\"caf\xc3\xa9 \xf0\x9f\x98\x80\"",
      "18446744073709551616",
      "[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"]",
  };
  static const char *const bad[] = {
      "",
      " ",
      "{",
      "[1,]",
      "{\"a\":1,}",
      "01",
      "1.",
      ".5",
      "1e",
      "+1",
      "NaN",
      "Infinity",
      "tru",
      "nul",
      "'a'",
      "\"a",
      "\"\\x\"",
      "\"\\u12\"",
      "\"\\ud800\"",
      "\"\\udc00\"",
      "\"\\u0000\"",
      "\"a\tb\"",
      "\"\xc3\"",
      "\"\xc0\xaf\"",
      "\"\xed\xa0\x80\"",
      "{\"a\":1,\"a\":2}",
      "{a:1}",
      "[1 2]",
      "{} {}",
      "// c\n{}",
      "[1]x",
      "{\"a\" 1}",
      "\"\xf4\x90\x80\x80\"",
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    TAP_EQ(parses(good[i]), 0, "accepts %s", show(good[i]));
  }
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    TAP_EQ(parses(bad[i]), -EINVAL, "refuses '%s'", show(bad[i]));
  }

  /* Nesting: JSON_MAX_DEPTH levels are fine, one more is refused without deep recursion. */
  char deep[2 * (JSON_MAX_DEPTH + 2) + 1];
  for (int extra = 0; extra <= 1; extra++) {
    int d = JSON_MAX_DEPTH + extra;
    memset(deep, '[', (size_t)d);
    memset(deep + (size_t)d, ']', (size_t)d);
    deep[2 * d] = '\0';
    TAP_EQ(parses(deep), extra ? -EINVAL : 0, "%d nested arrays are %s", d,
           extra ? "refused" : "accepted");
  }
  /* A NUL inside the text is not JSON whitespace. */
  json_t *v = NULL;
  TAP_EQ(json_parse("{}\0", 3, &v, NULL, 0), -EINVAL, "a NUL after the value is refused");
  TAP_EQ(v == NULL, 1, "and nothing is returned");
  TAP_EQ(json_parse(NULL, 0, &v, NULL, 0), -EINVAL, "NULL text is refused");
}

static void test_messages(void) {
  json_t *v = NULL;
  char err[256];
  json_parse("{\n  \"a\": 1,\n  \"b\": [1, 2,]\n}", 27, &v, err, sizeof err);
  tap_ok(strcmp(err, "line 3, column 14: a trailing comma before ']'") == 0,
         "the message names line and column: %s", err);
  json_parse("{\"k\": 1, \"k\": 2}", 16, &v, err, sizeof err);
  tap_ok(strstr(err, "\"k\" appears twice") != NULL, "duplicate keys are named: %s", err);
  char small[8];
  json_parse("[", 1, &v, small, sizeof small);
  TAP_EQ(strlen(small), sizeof small - 1, "messages are truncated to the buffer");
}

static void test_access(void) {
  const char *text = "{\"n\": 18446744073709551615, \"big\": 18446744073709551616, \"neg\": -1,"
                     " \"f\": 0.867582, \"e\": 1e2, \"frac\": 1.0, \"s\": \"a\\u00e9\\n\","
                     " \"t\": true, \"z\": null, \"arr\": [3, 4]}";
  json_t *v = NULL;
  uint64_t u = 0;
  double d = 0;
  bool b = false;
  TAP_EQ(json_parse(text, strlen(text), &v, NULL, 0), 0, "a document with every type parses");
  TAP_EQ(json_type(v), JSON_OBJECT, "the root is an object");
  TAP_EQ(json_count(v), 10, "with 10 members");
  TAP_EQ(json_u64(json_get(v, "n"), &u), 0, "2^64-1 reads as an integer");
  tap_ok(u == UINT64_MAX, "exactly");
  TAP_EQ(json_u64(json_get(v, "big"), &u), -ERANGE, "2^64 is out of range");
  TAP_EQ(json_u64(json_get(v, "neg"), &u), -EINVAL, "-1 is not a count");
  TAP_EQ(json_u64(json_get(v, "e"), &u), -EINVAL, "1e2 is not written as an integer");
  TAP_EQ(json_u64(json_get(v, "frac"), &u), -EINVAL, "1.0 is not written as an integer");
  TAP_EQ(json_u64(json_get(v, "s"), &u), -EINVAL, "a string is not a number");
  TAP_EQ(json_double(json_get(v, "f"), &d), 0, "a decimal reads as a double");
  tap_ok(fabs(d - 0.867582) < 1e-12, "0.867582 reads back (%.9f)", d);
  TAP_EQ(json_double(json_get(v, "t"), &d), -EINVAL, "true is not a number");
  tap_ok(strcmp(json_string(json_get(v, "s")), "a\xc3\xa9\n") == 0, "escapes are decoded");
  tap_ok(json_string(json_get(v, "n")) == NULL, "a number is not a string");
  TAP_EQ(json_bool(json_get(v, "t"), &b), 0, "true is a boolean");
  TAP_EQ(b, 1, "and reads true");
  TAP_EQ(json_bool(json_get(v, "z"), &b), -EINVAL, "null is not a boolean");
  TAP_EQ(json_type(json_get(v, "z")), JSON_NULL, "null has its type");
  tap_ok(json_get(v, "missing") == NULL, "a missing key is NULL");
  const json_t *arr = json_get(v, "arr");
  const char *key = "x";
  TAP_EQ(json_count(arr), 2, "the array has two items");
  TAP_EQ(json_u64(json_at(arr, 1, &key), &u), 0, "json_at reads an item");
  TAP_EQ(u, 4, "the second");
  tap_ok(key == NULL, "items of an array have no key");
  tap_ok(json_at(arr, 2, NULL) == NULL, "past the end is NULL");
  json_at(v, 0, &key);
  tap_ok(key != NULL && strcmp(key, "n") == 0, "members keep their keys in order");
  tap_ok(json_get(arr, "n") == NULL, "json_get on an array is NULL");
  json_free(v);
  json_free(NULL);
}

/* ---- Round trips through real reports ---- */

enum { NROWS = 5 };
static fake_prim_t fakes[3];
static bfc_pool_t *pools[3];
static report_row_t rows[NROWS];

static uint64_t must(bfc_pool_t *p, uint64_t bytes) {
  uint64_t a = 0;
  if (bfc_alloc(p, bytes, &a) != 0) {
    tap_ok(0, "setup: alloc %" PRIu64, bytes);
  }
  return a;
}

static bfc_pool_t *mk(int k, uint64_t limit, int growth) {
  bfc_prim_t prim = fake_init(&fakes[k], MiB);
  bfc_options_t opts = {.limit = limit, .allow_growth = growth};
  bfc_pool_t *p = NULL;
  if (bfc_create(&opts, &prim, &p) != 0) {
    tap_ok(0, "setup: bfc_create %d", k);
    exit(1);
  }
  return p;
}

static void build_rows(void) {
  bfc_pool_t *a = pools[0] = mk(0, GiB, 1);
  uint64_t addr[40];
  for (int i = 0; i < 40; i++) {
    addr[i] = must(a, 1000 + (uint64_t)i * 37 * 1024);
  }
  for (int i = 0; i < 40; i += 3) {
    bfc_free(a, addr[i]);
  }
  bfc_free_deferred(a, addr[1]);
  must(a, 3 * MiB);
  bfc_pool_t *b = pools[1] = mk(1, MiB, 0);
  uint64_t spare = 0;
  must(b, MiB - 300);
  bfc_alloc(b, 1, &spare);
  bfc_pool_t *c = pools[2] = mk(2, 64 * MiB, 1);
  bfc_free(c, must(c, 5 * MiB));

  rows[0] = (report_row_t){.device = 0, .context = 0, .pooled = 1, .cap = GiB};
  bfc_stats(a, &rows[0].stats);
  rows[1] = (report_row_t){.device = 1, .context = 0, .pooled = 1, .cap = MiB};
  bfc_stats(b, &rows[1].stats);
  rows[2] = (report_row_t){.device = 1, .context = 1, .pooled = 1, .cap = REPORT_NO_CAP};
  bfc_stats(c, &rows[2].stats);
  rows[0].largest_request = GiB - rows[0].stats.pool_bytes;
  rows[1].largest_request = 0;
  rows[2].largest_request = REPORT_UNKNOWN;
  /* A pass-through row, as the shim fills it. */
  rows[3] = (report_row_t){.device = 2, .context = 0, .pooled = 0, .cap = 4 * GiB};
  rows[3].stats.num_allocs = 7;
  rows[3].stats.bytes_in_use = 3 * MiB;
  rows[3].stats.peak_bytes_in_use = 5 * MiB;
  rows[3].stats.bytes_requested_in_use = 3 * MiB;
  rows[3].stats.driver_alloc_calls = 7;
  rows[3].stats.driver_free_calls = 5;
  rows[3].stats.pool_bytes = 12345; /* pool-only: reported as 0 */
  /* Extremes: every counter at its maximum, ordinals at INT_MAX. */
  memset(&rows[4].stats, 0xff, sizeof rows[4].stats);
  rows[4].stats.fragmentation = 1.0;
  rows[4].device = 2147483647;
  rows[4].context = 2147483647;
  rows[4].pooled = 1;
  rows[4].cap = UINT64_MAX - 1;
  rows[4].largest_request = UINT64_MAX - 1;
}

static char json1[REPORT_JSON_MAX(NROWS)], json2[REPORT_JSON_MAX(NROWS)];
static char text1[REPORT_TEXT_MAX(NROWS)], text2[REPORT_TEXT_MAX(NROWS)];

static report_run_t run_in, run_out;

static void round_trip(const report_row_t *in, int n, const report_run_t *run, const char *what) {
  size_t len = report_format_json(in, n, run, json1, sizeof json1);
  report_row_t *out = NULL;
  int m = -1;
  char err[256] = "";
  int rc = rjson_read(json1, len, &out, &m, &run_out, err, sizeof err);
  if (!tap_ok(rc == 0, "%s: the report reads back", what)) {
    tap_diag("%s", err);
    return;
  }
  TAP_EQ(m, n, "%s: every row", what);
  TAP_EQ(run_out.pid, run->pid > 0 ? run->pid : 0, "%s: the pid", what);
  tap_ok(strcmp(run_out.ended_by, run->ended_by) == 0 && run_out.nnotes == run->nnotes,
         "%s: how it ended, and its notes", what);
  /* What the table shows of the run reads back; the rest is the JSON's alone. */
  run_out.command_len = run->command_len;
  memcpy(run_out.command, run->command, sizeof run->command);
  memcpy(run_out.host, run->host, sizeof run->host);
  run_out.start_ns = run->start_ns;
  run_out.end_ns = run->end_ns;
  run_out.njob = run->njob;
  memcpy(run_out.job, run->job, sizeof run->job);
  run_out.ngpus = run->ngpus;
  memcpy(run_out.gpus, run->gpus, sizeof run->gpus);
  report_format_json(out, m, &run_out, json2, sizeof json2);
  tap_ok(strcmp(json1, json2) == 0, "%s: it writes the same JSON again", what);
  report_format_text(in, n, run, text1, sizeof text1);
  report_format_text(out, m, &run_out, text2, sizeof text2);
  if (!tap_ok(strcmp(text1, text2) == 0, "%s: it prints the same table", what)) {
    tap_diag("want:\n%s", text1);
    tap_diag("got:\n%s", text2);
  }
  free(out);
}

static void test_round_trip(void) {
  build_rows();
  run_in = (report_run_t){.pid = 31337};
  round_trip(rows, 3, &run_in, "three pools");
  run_in.pid = 4242;
  round_trip(rows, NROWS, &run_in, "with a pass-through row and extreme counters");
  run_in = (report_run_t){.pid = 0};
  round_trip(rows, 0, &run_in, "no devices, no pid");
  run_in = (report_run_t){.pid = 77, .ended_by = "SIGTERM", .nnotes = 2, .ngpus = 1, .njob = 1};
  strcpy(run_in.notes[0], "device 0 context 1: left out, its pool was in use");
  strcpy(run_in.notes[1], "GPUCAP_TRACE: \"quoted\" \\ and caf\xc3\xa9");
  strcpy(run_in.host, "node07");
  strcpy(run_in.job[0].key, "slurm_job_id");
  strcpy(run_in.job[0].value, "4711");
  strcpy(run_in.gpus[0].name, "Fake GPU");
  run_in.command_len = 6;
  memcpy(run_in.command, "a\0b c\0", 6);
  run_in.start_ns = 1;
  run_in.end_ns = 2000000000;
  round_trip(rows, 3, &run_in, "ended by a signal, with notes and the whole run");
  run_in = (report_run_t){.pid = 78, .nusage = 1, .nlibs = 1};
  run_in.libs[0] = (report_lib_t){.device = 0, .program = 1, .current = 5 * MiB, .peak = 80 * MiB};
  strcpy(run_in.libs[0].name, "train");
  run_in.usage[0] = (report_usage_t){.device = 0,
                                     .current = 5 * MiB,
                                     .peak = 80 * MiB,
                                     .driver = 3 * MiB,
                                     .right_size = 84 * MiB,
                                     .spill_budget = GiB,
                                     .spilled = MiB,
                                     .peak_spilled = 16 * MiB,
                                     .spilled_allocs = 3};
  run_in.usage[0].refusals[5] = 2; /* spill_full */
  round_trip(rows, 3, &run_in, "with the ledger, a spill budget and its refusals");
  for (int k = 0; k < 3; k++) {
    bfc_destroy(pools[k]);
  }
}

/* Replaces the first occurrence of `from` in json1 by `to` and reads the result. */
static int read_edited(const char *from, const char *to, char *err, size_t errlen) {
  static char edited[REPORT_JSON_MAX(NROWS) + 64];
  const char *at = strstr(json1, from);
  if (at == NULL) {
    snprintf(err, errlen, "setup: '%s' not found", from);
    return 1;
  }
  snprintf(edited, sizeof edited, "%.*s%s%s", (int)(at - json1), json1, to, at + strlen(from));
  report_row_t *out = NULL;
  int m = 0;
  int rc = rjson_read(edited, strlen(edited), &out, &m, &run_out, err, errlen);
  if (rc != 0 && (out != NULL || m != 0)) {
    snprintf(err, errlen, "rows returned on failure");
    rc = 1;
  }
  free(out);
  return rc;
}

static void test_refusals(void) {
  static const struct {
    const char *from, *to, *msg;
  } cases[] = {
      {"\"num_allocs\": ", "\"num_allocz\": ", "devices[0] has no \"num_allocs\""},
      {"\"bytes_in_use\": ", "\"bytes_in_use\": -", "devices[0].bytes_in_use is not"},
      {"\"pooled\": true", "\"pooled\": 1", "devices[0].pooled is not true or false"},
      {"\"fragmentation\": 0.", "\"fragmentation\": 1.", "devices[0].fragmentation is not"},
      {"\"device\": 0", "\"device\": 2147483648", "devices[0].device is not"},
      {"\"cap_bytes\": 1073741824", "\"cap_bytes\": \"1GiB\"", "devices[0].cap_bytes is not"},
      {"\"pid\": 31337", "\"pid\": -1", "\"pid\" is not"},
      {"\"gpucap_version\"", "\"version\"", "no \"gpucap_version\""},
      {"\"devices\": [", "\"devices\": 0, \"x\": [", "no \"devices\" array"},
      {"\"num_ooms\": 0", "\"num_ooms\": 0.5", "devices[0].num_ooms is not"},
      {"{\n      \"device\"", "[],{\n      \"device\"", "devices[0] is not an object"},
      {"\n}", "\n,}", "trailing comma"},
      {"\"notes\": []", "\"notes\": {}", "\"notes\" is not an array"},
      {"\"notes\": []", "\"notes\": [1]", "notes[0] is not a string"},
      {"\"ended_by\": null", "\"ended_by\": 15", "\"ended_by\" is not"},
      {"\"bytes_reserved\": 0", "\"bytes_reserved\": 1", "devices[0].bytes_reserved is not 0"},
      {"\"largest_request_bytes\": ", "\"largest_request_bytes\": -",
       "devices[0].largest_request_bytes is not"},
  };
  char err[256];
  run_in = (report_run_t){.pid = 31337};
  report_format_json(rows, 2, &run_in, json1, sizeof json1);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc = read_edited(cases[i].from, cases[i].to, err, sizeof err);
    tap_ok(rc == -EINVAL && strstr(err, cases[i].msg) != NULL, "refused: %s -> %s (%s)",
           show(cases[i].from), show(cases[i].to), err);
  }
  /* Unknown keys are ignored: a newer report still reads. */
  int rc =
      read_edited("\"num_ooms\"", "\"new_key\": [1, {}],\n      \"num_ooms\"", err, sizeof err);
  TAP_EQ(rc, 0, "an unknown key is ignored");
  report_row_t *out = NULL;
  int m = 0;
  TAP_EQ(rjson_read("[]", 2, &out, &m, &run_out, err, sizeof err), -EINVAL, "an array is refused");
  tap_ok(strstr(err, "not a JSON object") != NULL, "as not a report: %s", err);
}

/* A report as gpucap 0.1.0 wrote it (docs/report.md of that version): no run keys beyond the
 * pid, none of the keys added since. It still reads, and its table shows "?" where a figure
 * it lacks is needed. */
static void test_old_report(void) {
  static const char old[] =
      "{\n  \"gpucap_version\": \"0.1.0\",\n  \"pid\": 31337,\n  \"devices\": [\n    {\n"
      "      \"device\": 0,\n      \"context\": 0,\n      \"pooled\": true,\n"
      "      \"context_destroyed\": false,\n      \"cap_bytes\": 6442450944,\n"
      "      \"num_allocs\": 343,\n      \"bytes_in_use\": 4066850048,\n"
      "      \"peak_bytes_in_use\": 6437929984,\n      \"largest_alloc_size\": 314573056,\n"
      "      \"bytes_limit\": 6442450944,\n      \"pool_bytes\": 6442450944,\n"
      "      \"peak_pool_bytes\": 6442450944,\n      \"largest_free_block_bytes\": 314573056,\n"
      "      \"fragmentation\": 0.867582,\n      \"bytes_requested_in_use\": 4066821515,\n"
      "      \"peak_bytes_requested_in_use\": 6437886927,\n"
      "      \"internal_fragmentation_bytes\": 28533,\n      \"utilization\": 0.999298,\n"
      "      \"free_bytes\": 2375600896,\n      \"deferred_bytes\": 0,\n      \"num_in_use\": "
      "228,\n"
      "      \"num_deferred\": 0,\n      \"num_free_chunks\": 115,\n      \"num_regions\": 5,\n"
      "      \"driver_alloc_calls\": 5,\n      \"driver_alloc_failures\": 0,\n"
      "      \"driver_free_calls\": 0,\n      \"driver_free_failures\": 0,\n"
      "      \"num_ooms\": 59,\n      \"num_eagain\": 0,\n      \"num_retired\": 0,\n"
      "      \"host_metadata_bytes\": 63376\n    }\n  ]\n}\n";
  report_row_t *out = NULL;
  int m = 0;
  char err[256] = "";
  int rc = rjson_read(old, sizeof old - 1, &out, &m, &run_out, err, sizeof err);
  tap_ok(rc == 0 && m == 1, "a report of gpucap 0.1.0 reads (%s)", err);
  if (rc == 0) {
    TAP_EQ(out[0].largest_request, REPORT_UNKNOWN, "old report: largest request not known");
    TAP_EQ(run_out.pid, 31337, "old report: pid");
    tap_ok(run_out.nnotes == 0 && run_out.ended_by[0] == '\0', "old report: no notes, no end");
    report_format_text(out, m, &run_out, text1, sizeof text1);
    tap_ok(strstr(text1, "       0      ?        27.9 KiB") != NULL,
           "old report: its table shows ? for the fragmentation it cannot compute");
  }
  free(out);
}

int main(void) {
  test_syntax();
  test_messages();
  test_access();
  test_round_trip();
  test_refusals();
  test_old_report();
  return tap_done();
}
