/* Tests for scripts/tracecsv (the RMM CSV trace reader) and scripts/plot (the SVG timeline):
 * every field's accepted and refused forms, relative and monotonic times across midnight, and
 * a picture that is well-formed XML with the lines, marks and labels it should have, whose
 * size stays bounded for long traces. Prints TAP.
 */
#include "scripts/plot.h"
#include "scripts/timeline.h"
#include "scripts/tracecsv.h"
#include "tests/tap.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER "Thread,Time,Action,Pointer,Size,Stream\n"

static tracecsv_info_t info;

static int parse(const char *text, tracecsv_event_t **ev, size_t *n, char *err, size_t errlen) {
  return tracecsv_parse(text, strlen(text), ev, n, &info, err, errlen);
}

static void test_parse(void) {
  const char *text = HEADER "7,10:00:00.000001,allocate,0x7f0000000000,1048576,0x0\r\n"
                            "\n"
                            "7,10:00:00.5,allocate failure,0,4096,0x0\n"
                            "8,10:00:01.250000000,free,0X7F0000000000,1048576,0x1\n"
                            "8,10:00:01,allocate,7f0000100000,18446744073709551615,0x0\n";
  tracecsv_event_t *ev = NULL;
  size_t n = 0;
  char err[256] = "";
  TAP_EQ(parse(text, &ev, &n, err, sizeof err), 0, "a trace parses (%s)", err);
  TAP_EQ(n, 4, "four events; blank lines and CRLF are fine");
  TAP_EQ(info.cut, 0, "nothing was cut");
  tap_ok(!info.gpucap && info.max_dev == -1, "RMM's own columns: no device");
  if (n == 4) {
    TAP_EQ(ev[0].ns, 0, "times start at the first event");
    TAP_EQ(ev[1].ns, 499999000, "fractions of any length count (0.5 s - 1 us)");
    TAP_EQ(ev[2].ns, 1249999000, "nine fractional digits are nanoseconds");
    TAP_EQ(ev[3].ns, ev[2].ns, "an event stamped earlier than the previous one is moved up");
    TAP_EQ(ev[0].action, TRACECSV_ALLOC, "allocate");
    TAP_EQ(ev[1].action, TRACECSV_FAILURE, "allocate failure");
    TAP_EQ(ev[2].action, TRACECSV_FREE, "free");
    tap_ok(ev[0].ptr == 0x7f0000000000ull && ev[2].ptr == ev[0].ptr, "pointers, any 0x case");
    tap_ok(ev[3].ptr == 0x7f0000100000ull, "a pointer without 0x is hexadecimal too");
    tap_ok(ev[3].size == UINT64_MAX, "sizes up to 2^64-1");
    TAP_EQ(ev[1].ptr, 0, "a failure has no pointer");
  }
  free(ev);

  /* Midnight: 23:59:59.9 then 00:00:00.1 is 0.2 s later, not a day earlier. */
  const char *night = HEADER "1,23:59:59.900000,allocate,0x100,256,0x0\n"
                             "1,00:00:00.100000,free,0x100,256,0x0\n";
  TAP_EQ(parse(night, &ev, &n, err, sizeof err), 0, "a trace across midnight parses");
  TAP_EQ(n == 2 ? ev[1].ns : -1, 200000000, "and its second event is 0.2 s after the first");
  free(ev);

  /* A day's wrap the other way: stamped 2 ms before the previous event, across midnight. */
  const char *back = HEADER "1,00:00:00.001000,allocate,0x100,256,0x0\n"
                            "2,23:59:59.999000,free,0x100,256,0x0\n"
                            "1,08:00:00.000000,allocate,0x100,256,0x0\n"
                            "1,21:00:00.000000,free,0x100,256,0x0\n";
  TAP_EQ(parse(back, &ev, &n, err, sizeof err), 0, "times 23 h 59 min apart parse");
  tap_ok(n == 4 && ev[1].ns == 0, "a later stamp by nearly a day is an earlier one: moved up");
  tap_ok(n == 4 && ev[3].ns - ev[2].ns == 13 * 3600 * INT64_C(1000000000),
         "a later stamp by 13 hours is 13 hours later");
  free(ev);

  TAP_EQ(parse("Thread,Time,Action,Pointer,Size,Stream", &ev, &n, err, sizeof err), 0,
         "a header alone is a trace with no events");
  TAP_EQ(n, 0, "none");
  tap_ok(ev == NULL, "and no array");
}

/* A trace cut while it was written (a full disk, a killed process): its last line, which has
 * no newline, is left out and reported, even when what is left of it would parse. */
static void test_cut(void) {
  tracecsv_event_t *ev = NULL;
  size_t n = 0;
  char err[256] = "";
  const char *mid = HEADER "1,10:00:00.000000,allocate,0x100,256,0x0\n1,10:00:0";
  TAP_EQ(parse(mid, &ev, &n, err, sizeof err), 0, "a trace cut mid-line parses (%s)", err);
  tap_ok(n == 1 && info.cut == 3, "the whole lines are kept, line 3 is reported cut");
  free(ev);
  const char *size = HEADER "1,10:00:00.000000,allocate,0x100,256,0x0\n"
                            "1,10:00:00.000001,allocate,0x200,10";
  TAP_EQ(parse(size, &ev, &n, err, sizeof err), 0, "a line cut in its size parses");
  tap_ok(n == 1 && info.cut == 3, "and is left out, though '10' would read as a size");
  free(ev);
  TAP_EQ(tracecsv_parse(size, strlen(size), &ev, &n, NULL, err, sizeof err), 0, "info may be NULL");
  free(ev);
}

/* Times that go around the clock every other line: refused once the days would no longer fit,
 * never a signed overflow (the UBSan pass of make test runs this). */
static void test_wrap(void) {
  size_t lines = 250000, cap = lines * 48 + 64, pos;
  char *t = malloc(cap);
  tracecsv_event_t *ev = NULL;
  size_t n = 0;
  char err[256] = "";
  pos = (size_t)snprintf(t, cap, HEADER);
  for (size_t i = 0; i < lines; i++) {
    size_t min = i * (11 * 60 + 59) % (24 * 60); /* 11 h 59 min later each line */
    pos += (size_t)snprintf(t + pos, cap - pos, "1,%02zu:%02zu:00,allocate,0x100,256,0x0\n",
                            min / 60, min % 60);
  }
  TAP_EQ(tracecsv_parse(t, pos, &ev, &n, NULL, err, sizeof err), -EINVAL,
         "times that pass midnight 125 000 times are refused");
  tap_ok(strstr(err, "past midnight more than 100000 times") != NULL, "saying why: %s", err);
  free(t);
}

static void test_refusals(void) {
  static const struct {
    const char *line, *msg;
  } cases[] = {
      {"1,10:00:00.0,allocate,0x10,256", "line 2: expected 6"},
      {"1,10:00:00.0,allocate,0x10,256,0x0,extra", "line 2: expected 6"},
      {"1,10:00:00.0,alloc,0x10,256,0x0", "Action 'alloc'"},
      {"1,10:00:00.0,Allocate,0x10,256,0x0", "Action 'Allocate'"},
      {"1,24:00:00.0,allocate,0x10,256,0x0", "Time '24:00:00.0'"},
      {"1,10:60:00,allocate,0x10,256,0x0", "Time"},
      {"1,10:00:00.,allocate,0x10,256,0x0", "Time"},
      {"1,10:00:00.1234567890,allocate,0x10,256,0x0", "Time"},
      {"1,1:00:00.0,allocate,0x10,256,0x0", "Time"},
      {"1,10:00:00.0,allocate,0xg0,256,0x0", "Pointer '0xg0'"},
      {"1,10:00:00.0,allocate,,256,0x0", "Pointer"},
      {"1,10:00:00.0,allocate,0x10000000000000000,256,0x0", "Pointer"},
      {"1,10:00:00.0,allocate,0x10,-1,0x0", "Size '-1'"},
      {"1,10:00:00.0,allocate,0x10,1.5,0x0", "Size"},
      {"1,10:00:00.0,allocate,0x10,18446744073709551616,0x0", "Size"},
      {"1,10:00:00.0,allocate,0x10,,0x0", "Size"},
      {",10:00:00.0,allocate,0x10,256,0x0", "Thread is empty"},
  };
  char text[512];
  char err[256];
  tracecsv_event_t *ev = NULL;
  size_t n = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(text, sizeof text, HEADER "%s\n", cases[i].line);
    int rc = parse(text, &ev, &n, err, sizeof err);
    tap_ok(rc == -EINVAL && strstr(err, cases[i].msg) != NULL && ev == NULL && n == 0,
           "refused: %s (%s)", cases[i].line, err);
  }
  TAP_EQ(parse("Thread,Time,Action,Pointer,Size\n", &ev, &n, err, sizeof err), -EINVAL,
         "another header is refused");
  tap_ok(strstr(err, "line 1: not an RMM trace") != NULL, "as not a trace: %s", err);
  TAP_EQ(parse("", &ev, &n, err, sizeof err), -EINVAL, "an empty file is refused");
  tap_ok(strstr(err, "empty") != NULL, "as empty: %s", err);
  static const char nul[] = HEADER "1,10:00:00.0,allocate,0x10,2\0"
                                   "56,0x0\n";
  TAP_EQ(tracecsv_parse(nul, sizeof nul - 1, &ev, &n, NULL, err, sizeof err), -EINVAL,
         "a NUL byte is refused");
}

static int count(const char *hay, const char *needle) {
  int c = 0;
  for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle)) {
    c++;
  }
  return c;
}

/* Element balance: every <x ...> has its </x> or is self-closing; no stray '&' or '<'. */
static int well_formed(const char *svg) {
  int depth = 0;
  for (const char *p = svg; *p != '\0'; p++) {
    if (*p == '&') {
      if (strncmp(p, "&amp;", 5) != 0 && strncmp(p, "&lt;", 4) != 0 && strncmp(p, "&gt;", 4) != 0 &&
          strncmp(p, "&quot;", 6) != 0) {
        return 0;
      }
    }
    if (*p != '<') {
      continue;
    }
    const char *end = strchr(p, '>');
    if (end == NULL) {
      return 0;
    }
    if (p[1] == '?') {
      p = end;
      continue;
    }
    if (p[1] == '/') {
      depth--;
    } else if (end[-1] != '/') {
      depth++;
    }
    if (depth < 0 || memchr(p + 1, '<', (size_t)(end - p - 1)) != NULL) {
      return 0;
    }
    p = end;
  }
  return depth == 0;
}

static void test_plot(void) {
  const char *text = HEADER "1,10:00:00.000000,allocate,0x100,805306368,0x0\n"
                            "1,10:00:00.000100,allocate,0x200,536870912,0x0\n"
                            "1,10:00:00.000200,allocate failure,0,1073741824,0x0\n"
                            "1,10:00:00.000300,free,0x200,536870912,0x0\n"
                            "1,10:00:00.000400,free,0x100,805306368,0x0\n";
  tracecsv_event_t *ev = NULL;
  size_t n = 0;
  parse(text, &ev, &n, NULL, 0);
  plot_opts_t o = {.title = "A <b>&\"title\"",
                   .source = "t\x01race\xff.csv",
                   .cap = 2ull << 30,
                   .peak_pool = 2ull << 30,
                   .pool_name = "peak pool"};
  char *svg = NULL;
  size_t len = 0;
  TAP_EQ(plot_svg(ev, n, &o, &svg, &len), 0, "a trace is drawn");
  if (!tap_ok(svg != NULL && strlen(svg) == len, "as one NUL-terminated document")) {
    return;
  }
  tap_ok(strncmp(svg, "<?xml", 5) == 0 &&
             strstr(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\"") != NULL,
         "an SVG document");
  tap_ok(well_formed(svg), "well-formed, with text escaped");
  tap_ok(strstr(svg, "A &lt;b&gt;&amp;&quot;title&quot;") != NULL, "the title, escaped");
  tap_ok(strstr(svg, "t?race?.csv") != NULL, "control bytes and invalid UTF-8 become '?'");
  tap_ok(strstr(svg, "<script") == NULL && strstr(svg, "href") == NULL &&
             strstr(svg, "@import") == NULL && strstr(svg, "url(") == NULL,
         "self-contained: no scripts, links or external resources");
  tap_ok(strstr(svg, "2 allocations, 2 frees, 1 refused") != NULL, "the figures line counts");
  tap_ok(strstr(svg, "peak requested 1.3 GiB") != NULL, "the peak in use, as the report writes it");
  tap_ok(strstr(svg, ">cap</tspan>") != NULL && strstr(svg, ">2.0 GiB</tspan>") != NULL,
         "the cap line is labelled");
  tap_ok(strstr(svg, ">peak pool</tspan>") != NULL, "the pool line is labelled");
  tap_ok(strstr(svg, ">+1.0 GiB</text>") != NULL, "the refusal is marked with its size");
  tap_ok(strstr(svg, "(\xc2\xb5s)") != NULL, "a 400 us trace has its time axis in us");
  tap_ok(strstr(svg, ">2 GiB</text>") != NULL && strstr(svg, ">1.5 GiB</text>") != NULL,
         "byte ticks in GiB");
  free(svg);

  /* Without cap or pool: no such lines or legend entries. */
  plot_opts_t bare = {0};
  plot_svg(ev, n, &bare, &svg, &len);
  tap_ok(strstr(svg, ">cap<") == NULL && strstr(svg, "peak pool") == NULL,
         "no cap or pool line unless given");
  tap_ok(strstr(svg, "Device memory over time") != NULL, "the default title");
  free(svg);
  free(ev);

  /* A long trace: the drawing stays small (the path is per half-pixel column). */
  size_t big = 200000;
  size_t cap = big * 64 + 64;
  char *t = malloc(cap);
  size_t pos = (size_t)snprintf(t, cap, HEADER);
  for (size_t i = 0; i < big; i++) {
    unsigned long us = (unsigned long)i * 500;
    pos += (size_t)snprintf(t + pos, cap - pos, "1,%02lu:%02lu:%02lu.%06lu,%s,0x%zx,%zu,0x0\n",
                            us / 3600000000ul % 24, us / 60000000ul % 60, us / 1000000ul % 60,
                            us % 1000000ul, i % 3 == 2 ? "free" : "allocate", 0x1000 + i,
                            (size_t)4096 * (i % 7 + 1));
  }
  TAP_EQ(tracecsv_parse(t, pos, &ev, &n, NULL, NULL, 0), 0, "a 200000-event trace parses");
  TAP_EQ(n, big, "every event");
  TAP_EQ(plot_svg(ev, n, &bare, &svg, &len), 0, "and is drawn");
  tap_ok(len < 200000, "in under 200 kB (%zu bytes)", len);
  tap_ok(well_formed(svg), "well-formed");
  tap_ok(strstr(svg, "(s)") != NULL, "a 100 s trace has its time axis in seconds");
  TAP_EQ(count(svg, "<path d=\"M"), 3, "one area, one line and the axes");
  free(svg);
  free(ev);
  free(t);

  /* Many refusals: at most one mark per few pixels, and no labels. */
  pos = (size_t)snprintf(t = malloc(cap), cap, HEADER);
  for (size_t i = 0; i < 5000; i++) {
    pos += (size_t)snprintf(t + pos, cap - pos, "1,10:00:%02zu.%06zu,allocate failure,0,%zu,0x0\n",
                            i / 100, i % 100 * 10000, (size_t)1 << 20);
  }
  tracecsv_parse(t, pos, &ev, &n, NULL, NULL, 0);
  plot_svg(ev, n, &bare, &svg, &len);
  int marks = count(svg, "stroke-dasharray=\"2 3\"");
  tap_ok(marks > 50 && marks < 200, "5000 refusals are drawn as %d marks", marks);
  tap_ok(strstr(svg, ">+1.0 MiB</text>") == NULL, "without labels");
  tap_ok(strstr(svg, "0 allocations, 0 frees, 5000 refused") != NULL, "but all are counted");
  free(svg);
  free(ev);
  free(t);
}

#define GHEADER "Thread,Time,Action,Pointer,Size,Stream,Device,Event,Held\n"

/* gpucap's columns: devices, streams, chunk sizes and the pool's region rows. */
static void test_columns(void) {
  const char *text =
      GHEADER "7,10:00:00.000000,allocate failure,0x100000,2097152,0x0,1,reserve,2097152\n"
              "7,10:00:00.000001,allocate,0x100000,1000,0x2,1,alloc,1024\n"
              "8,10:00:00.000002,allocate failure,(nil),4194304,0x7f00aa,1,refused,0\n"
              "8,10:00:00.000003,free,0x100000,1000,0x0,1,free,1024\n"
              "8,10:00:00.000004,allocate failure,0x100000,2097152,0x0,1,release,2097152\n"
              "8,10:00:00.000005,allocate,0x900000,4096,0x0,-1,alloc,4096\n";
  tracecsv_event_t *ev = NULL;
  size_t n = 0;
  char err[256] = "";
  TAP_EQ(parse(text, &ev, &n, err, sizeof err), 0, "a trace with gpucap's columns parses (%s)",
         err);
  tap_ok(info.gpucap && info.max_dev == 1, "it has them; its highest device is 1");
  if (tap_ok(n == 6, "six events")) {
    TAP_EQ(ev[0].action, TRACECSV_RESERVE, "a region reserved (Action 'allocate failure')");
    TAP_EQ(ev[4].action, TRACECSV_RELEASE, "a region released");
    TAP_EQ(ev[2].action, TRACECSV_FAILURE, "a refusal");
    tap_ok(ev[0].ptr == 0x100000 && ev[0].size == 2097152 && ev[0].held == 2097152,
           "a region's address and size");
    tap_ok(ev[1].size == 1000 && ev[1].held == 1024, "a block's request and its chunk");
    tap_ok(ev[1].stream == 2 && ev[2].stream == 0x7f00aa, "the Stream column");
    tap_ok(ev[1].dev == 1 && ev[5].dev == -1, "the Device column; -1 is none");
    tap_ok(ev[2].ptr == 0 && ev[2].held == 0, "(nil) is a null pointer");
    tap_ok(ev[1].thread == 7 && ev[1].line == 3, "thread and line");
  }
  free(ev);

  /* RMM's own failure rows carry "(nil)" (its logging adaptor prints the null pointer so). */
  const char *rmm = HEADER "1,10:00:00.0,allocate failure,(nil),4096,0x0\n";
  TAP_EQ(parse(rmm, &ev, &n, err, sizeof err), 0, "RMM's (nil) is read (%s)", err);
  tap_ok(n == 1 && !info.gpucap && ev[0].dev == -1 && ev[0].held == 0, "as a refusal");
  free(ev);

  /* Columns in another order, and one the reader does not know. */
  const char *order = "Thread,Time,Action,Pointer,Size,Stream,Held,Note,Event,Device\n"
                      "1,10:00:00.0,allocate,0x10,100,0x0,128,hello,alloc,3\n";
  TAP_EQ(parse(order, &ev, &n, err, sizeof err), 0, "columns in any order after RMM's (%s)", err);
  tap_ok(n == 1 && info.gpucap && ev[0].dev == 3 && ev[0].held == 128,
         "each read from its own column");
  free(ev);

  static const struct {
    const char *line, *msg;
  } cases[] = {
      {"1,10:00:00.0,allocate,0x10,256,0x0,0,free,256", "Event 'free' does not go with Action"},
      {"1,10:00:00.0,allocate failure,0x10,256,0x0,0,alloc,256", "does not go with"},
      {"1,10:00:00.0,allocate,0x10,256,0x0,0,grow,256", "Event 'grow'"},
      {"1,10:00:00.0,allocate,0x10,256,0x0,x,alloc,256", "Device 'x'"},
      {"1,10:00:00.0,allocate,0x10,256,0x0,65536,alloc,256", "Device '65536'"},
      {"1,10:00:00.0,allocate,0x10,256,0x0,-2,alloc,256", "Device '-2'"},
      {"1,10:00:00.0,allocate,0x10,256,0x0,0,alloc,-1", "Held '-1'"},
      {"1,10:00:00.0,allocate,0x10,256,zz,0,alloc,256", "Stream 'zz'"},
      {"1,10:00:00.0,allocate,0x10,256,0x0,0,alloc", "line 2: expected 9"},
      {"1,10:00:00.0,allocate,(nil)x,256,0x0,0,alloc,256", "Pointer '(nil)x'"},
  };
  char line[512];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(line, sizeof line, GHEADER "%s\n", cases[i].line);
    int rc = parse(line, &ev, &n, err, sizeof err);
    tap_ok(rc == -EINVAL && strstr(err, cases[i].msg) != NULL && ev == NULL, "refused: %s (%s)",
           cases[i].line, err);
  }
  TAP_EQ(parse("Thread,Time,Action,Pointer,Size,Stream,Device,Device\n", &ev, &n, err, sizeof err),
         -EINVAL, "a column named twice is refused");
  tap_ok(strstr(err, "line 1: the column Device is named twice") != NULL, "saying so: %s", err);
}

/* gpucap's cap rows: each device's cap goes into info (none: 2^64-1), never among the events; a
 * trace without them knows no cap. */
static void test_caps(void) {
  const char *text =
      GHEADER "7,10:00:00.000000,allocate failure,0x100000,2097152,0x0,0,reserve,2097152\n"
              "7,10:00:00.000001,allocate failure,0x0,2147483648,0x0,0,cap,0\n"
              "7,10:00:00.000002,allocate,0x100000,1000,0x0,0,alloc,1024\n"
              "7,10:00:00.000003,allocate,0x900000,4096,0x0,2,alloc,4096\n"
              "7,10:00:00.000004,allocate failure,0x0,18446744073709551615,0x0,2,cap,0\n";
  tracecsv_event_t *ev = NULL;
  size_t n = 0;
  char err[256] = "";
  TAP_EQ(parse(text, &ev, &n, err, sizeof err), 0, "a trace with cap rows parses (%s)", err);
  TAP_EQ(n, 3, "the cap rows are not events");
  TAP_EQ(info.caps_known, 5, "caps known for devices 0 and 2");
  tap_ok(info.cap[0] == 2147483648u && info.cap[2] == TRACECSV_NO_CAP,
         "device 0's cap, and device 2's none");
  tap_ok(n == 3 && ev[1].line == 4 && ev[2].ns == 3000, "the events keep their lines and times");
  free(ev);
  TAP_EQ(parse(GHEADER "7,10:00:00.0,allocate failure,0x0,1048576,0x0,-1,cap,0\n", &ev, &n, err,
               sizeof err),
         -EINVAL, "a cap row without a device is refused");
  tap_ok(strstr(err, "a cap row names no device") != NULL, "saying so: %s", err);
  TAP_EQ(parse(GHEADER "7,10:00:00.0,allocate,0x0,1048576,0x0,0,cap,0\n", &ev, &n, err, sizeof err),
         -EINVAL, "a cap row must be an 'allocate failure' (RMM's replay skips those)");
  TAP_EQ(
      parse(GHEADER "7,10:00:00.0,allocate,0x10,256,0x0,0,alloc,256\n", &ev, &n, err, sizeof err),
      0, "a trace without cap rows");
  TAP_EQ(info.caps_known, 0, "knows no cap");
  free(ev);
}

/* The three figures per device: a block in a region leaves `reserved` alone, one the driver
 * allocated on its own adds to it; a region adds its size until it is released. */
/* gpucap's Library column: each name kept once in info, in order of first sight; an empty field
 * (a region's row) is none; a name with a quote or a control byte, or too long, is refused. */
static void test_library(void) {
  const char *text =
      "Thread,Time,Action,Pointer,Size,Stream,Device,Event,Held,Verdict,Library\n"
      "7,10:00:00.000000,allocate failure,0x100000,2097152,0x0,0,reserve,2097152,,\n"
      "7,10:00:00.000001,allocate,0x100000,1000,0x0,0,alloc,1024,,libcublas\n"
      "7,10:00:00.000002,allocate,0x100400,1000,0x0,0,alloc,1024,,train\n"
      "7,10:00:00.000003,allocate failure,0x0,4194304,0x0,0,refused,0,cap_full,libcublas\n"
      "7,10:00:00.000004,free,0x100000,1000,0x0,0,free,1024,,libcublas\n"
      "7,10:00:00.000005,allocate,0x100800,256,0x0,0,alloc,256,,cupy.cuda memory (1)\n";
  tracecsv_event_t *ev = NULL;
  size_t n = 0;
  char err[256] = "";
  TAP_EQ(parse(text, &ev, &n, err, sizeof err), 0, "a trace with a Library column parses (%s)",
         err);
  TAP_EQ(info.nlibs, 3, "three library names");
  if (tap_ok(n == 6 && info.nlibs == 3, "six events")) {
    tap_ok(strcmp(info.libs[0], "libcublas") == 0 && strcmp(info.libs[1], "train") == 0 &&
               strcmp(info.libs[2], "cupy.cuda memory (1)") == 0,
           "kept in order of first sight, spaces and parentheses included");
    tap_ok(ev[0].lib == -1 && ev[1].lib == 0 && ev[2].lib == 1 && ev[3].lib == 0 &&
               ev[4].lib == 0 && ev[5].lib == 2,
           "each row's library; none for a region's");
  }
  free(ev);
  TAP_EQ(tracecsv_parse(text, strlen(text), &ev, &n, NULL, err, sizeof err), 0,
         "without info the names are dropped");
  tap_ok(n == 6 && ev[1].lib == -1, "  and no row names one");
  free(ev);
  char too_long[TRACECSV_LIB_MAX + 1]; /* one byte more than a name may take */
  memset(too_long, 'n', TRACECSV_LIB_MAX);
  too_long[TRACECSV_LIB_MAX] = '\0';
  const char *const bad[] = {"lib\"x", "lib\tx", too_long};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char t[512];
    snprintf(
        t, sizeof t,
        "Thread,Time,Action,Pointer,Size,Stream,Library\n1,10:00:00.0,allocate,0x10,256,0x0,%s\n",
        bad[i]);
    err[0] = '\0';
    TAP_EQ(parse(t, &ev, &n, err, sizeof err), -EINVAL, "Library '%s' refused", bad[i]);
    tap_ok(strstr(err, "line 2: Library") != NULL, "  with the line (%s)", err);
    free(ev);
  }
}

/* gpucap's Spilled column: a block's bytes in host memory beyond the cap, which it holds but
 * the device does not (reserved leaves them out); traces without the column read as before. */
static void test_spilled(void) {
  const char *text =
      "Thread,Time,Action,Pointer,Size,Stream,Device,Event,Held,Verdict,Library,Spilled\n"
      "7,10:00:00.000000,allocate,0x100000,4096,0x0,0,alloc,4096,,train,0\n"
      "7,10:00:00.000001,allocate,0x7f0000000000,8192,0x0,0,alloc,8192,,train,6144\n"
      "7,10:00:00.000002,free,0x7f0000000000,8192,0x0,0,free,8192,,train,6144\n";
  tracecsv_event_t *ev = NULL;
  size_t n = 0;
  char err[256] = "";
  TAP_EQ(parse(text, &ev, &n, err, sizeof err), 0, "a trace with a Spilled column parses (%s)",
         err);
  if (tap_ok(n == 3 && ev[0].spilled == 0 && ev[1].spilled == 6144 && ev[2].spilled == 6144,
             "each row's spilled bytes")) {
    static timeline_t tl;
    TAP_EQ(timeline_build(ev, n, &tl), 0, "its timeline is built");
    const tl_point_t *p = &tl.dev[0].pts[1];
    tap_ok(p->held == 12288 && p->requested == 12288 && p->reserved == 4096 + 2048,
           "the spilled block is held, and only its part on the device is reserved");
    TAP_EQ(tl.dev[0].pts[2].reserved, 4096, "its free gives back that part");
    timeline_free(&tl);
  }
  free(ev);
  const char *bad =
      "Thread,Time,Action,Pointer,Size,Stream,Device,Event,Held,Verdict,Library,Spilled\n"
      "7,10:00:00.000000,allocate,0x100000,4096,0x0,0,alloc,4096,,train,8192\n";
  TAP_EQ(parse(bad, &ev, &n, err, sizeof err), -EINVAL, "more spilled than held is refused");
  tap_ok(strstr(err, "line 2: Spilled") != NULL, "  with the line (%s)", err);
  free(ev);
}

static void test_timeline(void) {
  const char *text =
      GHEADER "1,10:00:00.000000,allocate failure,0x100000,2097152,0x0,0,reserve,2097152\n"
              "1,10:00:00.000001,allocate,0x100000,1000,0x0,0,alloc,1024\n"
              "1,10:00:00.000002,allocate,0x900000,4000,0x0,0,alloc,4096\n"
              "1,10:00:00.000003,allocate,0x100400,512,0x0,1,alloc,512\n"
              "1,10:00:00.000004,allocate failure,0x0,8388608,0x0,0,refused,0\n"
              "1,10:00:00.000005,free,0x100000,1000,0x0,0,free,1024\n"
              "1,10:00:00.000006,free,0x900000,4000,0x0,0,free,4096\n"
              "1,10:00:00.000007,free,0xdead00,16,0x0,0,free,16\n"
              "1,10:00:00.000008,allocate failure,0x100000,2097152,0x0,0,release,2097152\n"
              "1,10:00:00.000009,allocate,0x200000,64,0x0,-1,alloc,64\n";
  tracecsv_event_t *ev = NULL;
  size_t n = 0;
  parse(text, &ev, &n, NULL, 0);
  static timeline_t tl;
  TAP_EQ(timeline_build(ev, n, &tl), 0, "a timeline is built");
  TAP_EQ(tl.ndev, 3, "three devices");
  tap_ok(tl.dev[0].dev == 0 && tl.dev[1].dev == 1 && tl.dev[2].dev == -1,
         "in ordinal order, the unrecorded last");
  const tl_device_t *d = &tl.dev[0];
  if (tap_ok(d->npts == 8, "device 0: a point per event (%zu)", d->npts)) {
    tap_ok(d->pts[0].reserved == 2097152 && d->pts[0].held == 0, "a region: reserved, not held");
    tap_ok(d->pts[1].reserved == 2097152 && d->pts[1].held == 1024 && d->pts[1].requested == 1000,
           "a block in it: held and requested");
    tap_ok(d->pts[2].reserved == 2097152 + 4096 && d->pts[2].held == 5120,
           "a block outside every region: reserved as well");
    tap_ok(d->pts[3].refused == 8388608 && d->pts[3].held == 5120, "a refusal, at what was held");
    tap_ok(d->pts[4].reserved == 2097152 + 4096 && d->pts[4].held == 4096,
           "a pooled block freed: reserved stays");
    tap_ok(d->pts[5].reserved == 2097152 && d->pts[5].held == 0, "the own block freed: returned");
    tap_ok(d->pts[7].reserved == 0, "the region released: nothing reserved");
    tap_ok(d->peak_reserved == 2097152 + 4096 && d->peak_held == 5120 && d->peak_requested == 5000,
           "the peaks");
    tap_ok(d->allocs == 2 && d->frees == 2 && d->refusals == 1 && d->reserves == 1 &&
               d->releases == 1,
           "the counts");
  }
  TAP_EQ(tl.unmatched_frees, 1, "a free of a block never allocated is counted, not applied");
  tap_ok(tl.dev[1].npts == 1 && tl.dev[1].pts[0].reserved == 512,
         "device 1's block is not in device 0's region");
  timeline_free(&tl);

  plot_opts_t o = {.gpucap = true, .dev_cap = {[0] = 3u << 20, [1] = 5u << 20}};
  char *svg = NULL;
  size_t len = 0;
  TAP_EQ(plot_svg(ev, n, &o, &svg, &len), 0, "three devices are drawn");
  tap_ok(well_formed(svg), "well-formed");
  tap_ok(strstr(svg, ">device 0</text>") != NULL && strstr(svg, ">device 1</text>") != NULL &&
             strstr(svg, ">device not recorded</text>") != NULL,
         "one panel each");
  tap_ok(strstr(svg, ">3.0 MiB</tspan>") != NULL && strstr(svg, ">5.0 MiB</tspan>") != NULL,
         "each device's own cap");
  TAP_EQ(count(svg, ">cap</tspan>"), 2, "no cap for the device the report does not name");
  tap_ok(strstr(svg, "peak pool 2.0 MiB \xc2\xb7 peak in use 5.0 KiB \xc2\xb7 peak requested "
                     "4.9 KiB") != NULL,
         "each panel's peaks, named as the exit report names them: pool, in use, requested");
  tap_ok(strstr(svg, "cap unknown</text>") != NULL, "a device no one gave a cap for: cap unknown");
  tap_ok(strstr(svg, ">pool (from the driver)</text>") != NULL &&
             strstr(svg, ">in use by blocks</text>") != NULL &&
             strstr(svg, ">requested</text>") != NULL,
         "a legend for the three");
  free(svg);
  free(ev);
}

int main(void) {
  test_parse();
  test_refusals();
  test_caps();
  test_cut();
  test_wrap();
  test_plot();
  test_columns();
  test_library();
  test_spilled();
  test_timeline();
  return tap_done();
}
