/* Tests for scripts/pickle (the pickle writer) and scripts/export (the torch snapshot and the
 * Chrome/Perfetto trace): every encoding byte for byte against what CPython's pickler writes
 * for the same value (pickle.dumps(v, 2) after pickletools.optimize, which only drops the
 * memo), batches of list items as CPython cuts them, and the exports' refusals. Whole exports
 * are loaded by Python and PyTorch's own viewer code in tests/cli/export.bats. Prints TAP.
 */
#include "scripts/export.h"
#include "scripts/pickle.h"
#include "scripts/timeline.h"
#include "scripts/tracecsv.h"
#include "tests/tap.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* pk[0..len) without its PROTO 2 header and STOP equals want[0..n). */
static bool body_is(const pk_t *pk, const char *want, size_t n) {
  return !pk->failed && pk->len == n + 3 && pk->buf[0] == 0x80 && pk->buf[1] == 2 &&
         memcmp(pk->buf + 2, want, n) == 0 && pk->buf[pk->len - 1] == '.';
}

#define BODY(pk, lit) body_is(pk, lit, sizeof lit - 1)

static void test_ints(void) {
  static const struct {
    int64_t v;
    bool as_unsigned;
    uint64_t u;
    const char *want;
    size_t n;
  } cases[] = {
#define I(v, lit) {v, false, 0, lit, sizeof lit - 1}
#define U(u, lit)                                                                                  \
  { 0, true, u, lit, sizeof lit - 1 }
      I(0, "\x4b\x00"),
      I(255, "\x4b\xff"),
      I(256, "\x4d\x00\x01"),
      I(65535, "\x4d\xff\xff"),
      I(65536, "\x4a\x00\x00\x01\x00"),
      I(INT32_MAX, "\x4a\xff\xff\xff\x7f"),
      I(INT64_C(2147483648), "\x8a\x05\x00\x00\x00\x80\x00"),
      I(INT64_MAX, "\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f"),
      I(-1, "\x4a\xff\xff\xff\xff"),
      I(-129, "\x4a\x7f\xff\xff\xff"),
      I(INT32_MIN, "\x4a\x00\x00\x00\x80"),
      I(INT64_C(-2147483649), "\x8a\x05\xff\xff\xff\x7f\xff"),
      I(INT64_MIN, "\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80"),
      U(UINT64_C(9223372036854775808), "\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00"),
      U(UINT64_MAX, "\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00"),
      U(0x7ee368a00000, "\x8a\x06\x00\x00\xa0\x68\xe3\x7e"),
#undef I
#undef U
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pk_t pk = {0};
    pk_begin(&pk);
    if (cases[i].as_unsigned) {
      pk_uint(&pk, cases[i].u);
    } else {
      pk_int(&pk, cases[i].v);
    }
    pk_end(&pk);
    tap_ok(body_is(&pk, cases[i].want, cases[i].n), "integer %zu as CPython writes it (%zu bytes)",
           i, pk.len);
    free(pk.buf);
  }
}

static void test_values(void) {
  pk_t pk = {0};
  pk_begin(&pk);
  pk_str(&pk, "h\xc3\xa9");
  pk_end(&pk);
  tap_ok(BODY(&pk, "\x58\x03\x00\x00\x00h\xc3\xa9"), "a str: BINUNICODE, its UTF-8 bytes");
  free(pk.buf);

  pk = (pk_t){0};
  pk_begin(&pk);
  pk_list(&pk);
  pk_mark(&pk);
  pk_uint(&pk, 1);
  pk_uint(&pk, 2);
  pk_appends(&pk);
  pk_end(&pk);
  tap_ok(BODY(&pk, "\x5d\x28\x4b\x01\x4b\x02\x65"), "[1, 2]");
  free(pk.buf);

  pk = (pk_t){0};
  pk_begin(&pk);
  pk_dict(&pk);
  pk_mark(&pk);
  pk_str(&pk, "a");
  pk_uint(&pk, 1);
  pk_str(&pk, "b");
  pk_none(&pk);
  pk_setitems(&pk);
  pk_end(&pk);
  tap_ok(BODY(&pk, "\x7d\x28\x58\x01\x00\x00\x00\x61\x4b\x01\x58\x01\x00\x00\x00\x62\x4e\x75"),
         "{'a': 1, 'b': None}");
  free(pk.buf);

  pk = (pk_t){0};
  pk_begin(&pk);
  pk_uint(&pk, 0);
  pk_uint(&pk, 0);
  pk_tuple2(&pk);
  pk_list(&pk);
  pk_mark(&pk);
  pk_bool(&pk, true);
  pk_bool(&pk, false);
  pk_appends(&pk);
  pk_end(&pk);
  tap_ok(BODY(&pk, "\x4b\x00\x4b\x00\x86\x5d\x28\x88\x89\x65"), "(0, 0) and [True, False]");
  free(pk.buf);
}

/* list(range(1001)): CPython writes APPENDS after each 1000 items (PyTorch's viewer spreads a
 * batch into one call's arguments, so a batch must stay small). */
static void test_batches(void) {
  pk_t pk = {0};
  size_t count = 0;
  pk_begin(&pk);
  pk_list(&pk);
  pk_mark(&pk);
  for (uint64_t i = 0; i < 1001; i++) {
    pk_next_item(&pk, &count);
    pk_uint(&pk, i);
  }
  pk_appends(&pk);
  pk_end(&pk);
  TAP_EQ(pk.len, 2755, "1001 items: as long as CPython's pickle");
  tap_ok(pk.len == 2755 && memcmp(pk.buf + pk.len - 8,
                                  "\x03"
                                  "e(M\xe8\x03"
                                  "e.",
                                  8) == 0,
         "the 1001st item in a batch of its own");
  /* PROTO 2, EMPTY_LIST, MARK, then 256 BININT1 and 744 BININT2 items. */
  tap_ok(pk.len == 2755 && pk.buf[2748] == 'e' && pk.buf[2749] == '(',
         "the first batch closes after the 1000th item");
  free(pk.buf);
}

static const char trace[] =
    "Thread,Time,Action,Pointer,Size,Stream,Device,Event,Held\n"
    "7,10:00:00.000000,allocate failure,0x100000,2097152,0x0,0,reserve,2097152\n"
    "7,10:00:00.000001,allocate,0x100000,1000,0x0,0,alloc,1024\n"
    "7,10:00:00.000002,allocate,0x900000,4096,0x5,1,alloc,4096\n"
    "7,10:00:00.000003,allocate failure,0x0,8388608,0x0,0,refused,0\n"
    "7,10:00:00.000004,free,0x100000,1000,0x0,0,free,1024\n";

static void test_exports(void) {
  tracecsv_event_t *ev = NULL;
  size_t n = 0;
  char err[256] = "";
  TAP_EQ(tracecsv_parse(trace, strlen(trace), &ev, &n, NULL, err, sizeof err), 0, "parses (%s)",
         err);
  unsigned char *pickle = NULL;
  size_t len = 0;
  TAP_EQ(export_torch(ev, n, NULL, "t\xffrace.csv", &pickle, &len), 0,
         "a torch snapshot is written");
  tap_ok(len > 3 && pickle[0] == 0x80 && pickle[1] == 2 && pickle[len - 1] == '.',
         "a protocol 2 pickle, ending in STOP");
  tap_ok(memmem(pickle, len, "t?race.csv", 10) != NULL, "a file name that is not UTF-8 gets '?'");
  tap_ok(memmem(pickle, len, "\x0d\x00\x00\x00segment_alloc", 17) != NULL &&
             memmem(pickle, len, "\x03\x00\x00\x00oom", 7) != NULL &&
             memmem(pickle, len,
                    "\x0e\x00\x00\x00"
                    "free_completed",
                    18) != NULL,
         "with the viewer's actions");
  free(pickle);

  char *json = NULL;
  TAP_EQ(export_perfetto(ev, n, "a\"b.csv", &json, &len), 0, "a Perfetto trace is written");
  tap_ok(json != NULL && strlen(json) == len, "one string");
  tap_ok(strstr(json, "\"a\\\"b.csv\"") != NULL, "names escaped");
  tap_ok(strstr(json, "\"name\":\"reserved\",\"ts\":0.000,\"args\":{\"bytes\":2097152}") != NULL,
         "the region counts as reserved from the first event");
  tap_ok(strstr(json,
                "\"pid\":2,\"tid\":0,\"name\":\"held\",\"ts\":2.000,\"args\":{\"bytes\":4096}") !=
             NULL,
         "device 1 is its own process, its own block reserved and held");
  tap_ok(strstr(json, "\"name\":\"refused\",\"ts\":3.000,\"args\":{\"requested_bytes\":8388608,"
                      "\"held_bytes\":1024,\"reserved_bytes\":2097152,\"trace_line\":5}") != NULL,
         "the refusal, with what was held then and its line in the trace");
  free(json);
  free(ev);

  /* 65 devices: more than the exports draw. */
  size_t cap = 80 * 100 + 64;
  char *t = malloc(cap);
  size_t pos =
      (size_t)snprintf(t, cap, "Thread,Time,Action,Pointer,Size,Stream,Device,Event,Held\n");
  for (int d = 0; d <= TIMELINE_MAX_DEVICES; d++) {
    pos += (size_t)snprintf(t + pos, cap - pos, "1,10:00:00,allocate,0x%x,1,0x0,%d,alloc,1\n",
                            0x1000 * (d + 1), d);
  }
  tracecsv_parse(t, pos, &ev, &n, NULL, NULL, 0);
  TAP_EQ(export_torch(ev, n, NULL, "x", &pickle, &len), -E2BIG, "65 devices: refused (torch)");
  TAP_EQ(export_perfetto(ev, n, "x", &json, &len), -E2BIG, "65 devices: refused (perfetto)");
  free(ev);
  free(t);
}

int main(void) {
  test_ints();
  test_values();
  test_batches();
  test_exports();
  return tap_done();
}
