/* plot: the SVG timeline of an allocation trace, and the `gpucap plot` command (contracts in
 * plot.h). Layout: title, a line of figures, a legend, then the plot area with byte ticks at
 * power-of-two steps and time ticks at 1-2-5 steps. All text is XML-escaped; names that are
 * not valid UTF-8 are shown with '?' for the bad bytes, so the document always parses.
 */
#include "scripts/plot.h"

#include "config/parse.h"
#include "scripts/cli.h"
#include "scripts/rjson.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_FILE_MAX ((size_t)4 << 30) /* tens of millions of events */
#define REPORT_FILE_MAX ((size_t)64 << 20)

/* Picture geometry, in SVG user units (pixels at 100%). */
enum { W = 960, H = 540, PX0 = 96, PX1 = W - 112, PY0 = 108, PY1 = H - 60 };

#define C_USE "#1f5fa8"
#define C_CAP "#c0392b"
#define C_POOL "#e08a00"
#define C_FAIL "#8e2ca8"
#define C_TEXT "#222222"
#define C_MUTED "#666666"
#define C_GRID "#e6e6e6"
#define FONT "DejaVu Sans, Helvetica, Arial, sans-serif"
/* A white outline behind a label keeps it legible over lines and marks. */
#define HALO "stroke=\"#ffffff\" stroke-width=\"3\" paint-order=\"stroke\" "

typedef struct figures {
  size_t allocs, frees, failures;
  uint64_t peak;    /* bytes in use at the peak */
  int64_t peak_ns;  /* when it was first reached */
  uint64_t fail_hi; /* highest in use + request among refused allocations */
  int64_t end_ns;   /* time of the last event */
} figures_t;

/* ---- Text ---- */

static void put_escaped(FILE *f, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p != '\0') {
    unsigned char c = *p;
    size_t n = c < 0x80             ? 1
               : (c & 0xe0) == 0xc0 ? 2
               : (c & 0xf0) == 0xe0 ? 3
               : (c & 0xf8) == 0xf0 ? 4
                                    : 0;
    bool valid = n > 0;
    for (size_t i = 1; valid && i < n; i++) {
      valid = (p[i] & 0xc0) == 0x80;
    }
    if (!valid || (n == 1 && (c < 0x20 || c == 0x7f))) {
      fputc('?', f);
      p++;
      continue;
    }
    if (c == '&') {
      fputs("&amp;", f);
    } else if (c == '<') {
      fputs("&lt;", f);
    } else if (c == '>') {
      fputs("&gt;", f);
    } else if (c == '"') {
      fputs("&quot;", f);
    } else {
      fwrite(p, 1, n, f);
    }
    p += n;
  }
}

static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};

/* bytes as the exit report writes them ("1.5 GiB", "2.0 GiB"), for values. */
static void human(uint64_t bytes, char *buf, size_t len) {
  report_format_size(bytes, buf, len);
}

/* ---- Scales ---- */

typedef struct scale {
  uint64_t ymax;  /* top of the byte axis */
  uint64_t ystep; /* power of two */
  unsigned yunit; /* index in units[] for tick labels */
  double span;    /* seconds covered by the time axis */
  double tdiv;    /* seconds per displayed time unit */
  const char *tunit;
  double tstep; /* in displayed units */
} scale_t;

static void byte_scale(uint64_t top, scale_t *s) {
  if (top == 0) {
    top = 1 << 20;
  }
  uint64_t step = 1;
  while (step <= UINT64_MAX / 2 && top / step > 7) {
    step *= 2;
  }
  // Room above the highest line for its label.
  uint64_t want = top + top / 20;
  uint64_t ticks = want / step + (want % step != 0);
  s->ystep = step;
  s->ymax = ticks <= UINT64_MAX / step ? ticks * step : UINT64_MAX;
  // Largest unit in which every tick has at most one decimal.
  unsigned u = 6;
  while (u > 0 && (((uint64_t)1 << (10 * u)) > s->ymax ||
                   (step < ((uint64_t)1 << (10 * u)) && ((uint64_t)1 << (10 * u)) / step > 2))) {
    u--;
  }
  s->yunit = u;
}

static void time_scale(int64_t end_ns, scale_t *s) {
  double span = (double)end_ns / 1e9;
  if (span <= 0.0) {
    span = 1e-6;
  }
  if (span < 1e-3) {
    s->tdiv = 1e-6, s->tunit = "\xc2\xb5s"; /* µs */
  } else if (span < 1.0) {
    s->tdiv = 1e-3, s->tunit = "ms";
  } else if (span < 120.0) {
    s->tdiv = 1.0, s->tunit = "s";
  } else if (span < 7200.0) {
    s->tdiv = 60.0, s->tunit = "min";
  } else {
    s->tdiv = 3600.0, s->tunit = "h";
  }
  double raw = span / s->tdiv / 8.0; /* at most 8 intervals, at least 3 */
  double mag = pow(10.0, floor(log10(raw)));
  double step = mag;
  if (raw > 5 * mag) {
    step = 10 * mag;
  } else if (raw > 2 * mag) {
    step = 5 * mag;
  } else if (raw > mag) {
    step = 2 * mag;
  }
  s->tstep = step;
  s->span = span;
}

static double xof(const scale_t *s, int64_t ns) {
  return PX0 + (double)ns / 1e9 / s->span * (PX1 - PX0);
}

static double yof(const scale_t *s, uint64_t bytes) {
  double f = (double)bytes / (double)s->ymax;
  if (f > 1.0) {
    f = 1.0;
  }
  return PY1 - f * (PY1 - PY0);
}

/* ---- Drawing ---- */

static void figures_of(const tracecsv_event_t *ev, size_t n, figures_t *fg) {
  uint64_t level = 0;
  memset(fg, 0, sizeof *fg);
  for (size_t i = 0; i < n; i++) {
    const tracecsv_event_t *e = &ev[i];
    if (e->action == TRACECSV_ALLOC) {
      fg->allocs++;
      level = e->size > UINT64_MAX - level ? UINT64_MAX : level + e->size;
      if (level > fg->peak) {
        fg->peak = level;
        fg->peak_ns = e->ns;
      }
    } else if (e->action == TRACECSV_FREE) {
      fg->frees++;
      level -= e->size < level ? e->size : level;
    } else {
      fg->failures++;
      uint64_t hi = e->size > UINT64_MAX - level ? UINT64_MAX : level + e->size;
      if (hi > fg->fail_hi) {
        fg->fail_hi = hi;
      }
    }
    fg->end_ns = e->ns;
  }
}

/* The step line of bytes in use, one vertical run per half-pixel column at most. Writes the
 * path data (without the closing of the area) to f. */
static void step_path(FILE *f, const scale_t *s, const tracecsv_event_t *ev, size_t n) {
  uint64_t level = 0;
  long col = -1;
  uint64_t lo = 0, hi = 0, last = 0;
  double colx = PX0;
  fprintf(f, "M%.1f %.1f", (double)PX0, (double)PY1);
  for (size_t i = 0; i <= n; i++) {
    long c = -1;
    double x = 0;
    if (i < n) {
      if (ev[i].action == TRACECSV_FAILURE) {
        continue;
      }
      x = xof(s, ev[i].ns);
      c = lround(x * 2);
    }
    if (c != col || i == n) {
      if (col >= 0) {
        fprintf(f, "H%.1f", colx);
        if (lo < hi) {
          fprintf(f, "V%.1fV%.1f", yof(s, hi), yof(s, lo));
        }
        fprintf(f, "V%.1f", yof(s, last));
      }
      if (i == n) {
        break;
      }
      col = c;
      colx = x;
      lo = hi = level;
    }
    if (ev[i].action == TRACECSV_ALLOC) {
      level = ev[i].size > UINT64_MAX - level ? UINT64_MAX : level + ev[i].size;
    } else {
      level -= ev[i].size < level ? ev[i].size : level;
    }
    lo = level < lo ? level : lo;
    hi = level > hi ? level : hi;
    last = level;
  }
  fprintf(f, "H%.1f", (double)PX1);
}

/* A horizontal line across the plot, labelled in the right margin. */
static void hline(FILE *f, const scale_t *s, uint64_t bytes, const char *color, const char *dash,
                  const char *label, bool below) {
  char size[32];
  double y = yof(s, bytes);
  human(bytes, size, sizeof size);
  fprintf(f,
          "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.8\" "
          "stroke-dasharray=\"%s\"/>\n",
          PX0, y, PX1, y, color, dash);
  fprintf(f,
          "<text x=\"%d\" y=\"%.1f\" font-size=\"12\" fill=\"%s\" font-weight=\"bold\">"
          "<tspan x=\"%d\">%s</tspan><tspan x=\"%d\" dy=\"14\">%s</tspan></text>\n",
          PX1 + 8, below ? y + 14 : y - 16, color, PX1 + 8, label, PX1 + 8, size);
}

static void cross(FILE *f, double x, double y) {
  fprintf(f,
          "<path d=\"M%.1f %.1fl8 8m0 -8l-8 8\" stroke=\"" C_FAIL "\" stroke-width=\"2.2\" "
          "stroke-linecap=\"round\"/>\n",
          x - 4, y - 4);
}

typedef struct refusal {
  double x;
  uint64_t level; /* in use when it was refused */
  uint64_t size;  /* asked for */
} refusal_t;

static void refusal(FILE *f, const scale_t *s, const refusal_t *r, bool label) {
  uint64_t want = r->size > UINT64_MAX - r->level ? UINT64_MAX : r->level + r->size;
  double x = r->x;
  double y = yof(s, want);
  bool left = x > PX1 - 80;
  char size[32];
  human(r->size, size, sizeof size);
  fprintf(f,
          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"" C_FAIL "\" "
          "stroke-width=\"1.2\" stroke-dasharray=\"2 3\"/>\n",
          x, yof(s, r->level), x, y);
  if (want > s->ymax) {
    /* Beyond the axis: an arrow at the top. */
    fprintf(f, "<path d=\"M%.1f %.1fl-5 9h10z\" fill=\"" C_FAIL "\"/>\n", x, (double)PY0);
    y = PY0 + 5;
  } else {
    cross(f, x, y);
  }
  if (label) {
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"" C_FAIL "\" "
            "text-anchor=\"%s\">+%s</text>\n",
            left ? x - 8 : x + 8, y + 4, left ? "end" : "start", size);
  }
}

/* Each refusal: a dotted stem from the bytes in use up to where the request would have taken
 * them, and a cross there (an arrow at the top when that is off the axis). Of the refusals
 * within a few pixels of each other only the highest is drawn; when there are a few in all,
 * each is labelled with the size asked for. */
static void failures(FILE *f, const scale_t *s, const tracecsv_event_t *ev, size_t n,
                     size_t count) {
  enum { BUCKET_PX = 6 };
  uint64_t level = 0;
  bool have = false;
  long bucket = -1;
  refusal_t best = {0};
  for (size_t i = 0; i < n; i++) {
    const tracecsv_event_t *e = &ev[i];
    if (e->action == TRACECSV_ALLOC) {
      level = e->size > UINT64_MAX - level ? UINT64_MAX : level + e->size;
      continue;
    }
    if (e->action == TRACECSV_FREE) {
      level -= e->size < level ? e->size : level;
      continue;
    }
    refusal_t r = {xof(s, e->ns), level, e->size};
    long b = lround(floor(r.x / BUCKET_PX));
    if (have && b != bucket) {
      refusal(f, s, &best, count <= 6);
      have = false;
    }
    uint64_t want = r.size > UINT64_MAX - r.level ? UINT64_MAX : r.level + r.size;
    uint64_t best_want = best.size > UINT64_MAX - best.level ? UINT64_MAX : best.level + best.size;
    if (!have || want > best_want) {
      best = r;
    }
    have = true;
    bucket = b;
  }
  if (have) {
    refusal(f, s, &best, count <= 6);
  }
}

static void axes(FILE *f, const scale_t *s) {
  char label[32];
  /* Byte ticks and grid. */
  for (uint64_t v = 0; v <= s->ymax; v += s->ystep) {
    double y = yof(s, v);
    double u = (double)v / (double)((uint64_t)1 << (10 * s->yunit));
    if (v == 0) {
      snprintf(label, sizeof label, "0");
    } else if (fabs(u - round(u)) < 1e-9) {
      snprintf(label, sizeof label, "%.0f %s", u, units[s->yunit]);
    } else {
      snprintf(label, sizeof label, "%.1f %s", u, units[s->yunit]);
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"" C_GRID "\"/>\n", PX0,
            y, PX1, y);
    fprintf(f,
            "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"12\" fill=\"" C_MUTED
            "\">%s</text>\n",
            PX0 - 8, y + 4, label);
    if (v > UINT64_MAX - s->ystep) {
      break;
    }
  }
  /* Time ticks and grid. */
  double limit = s->span / s->tdiv;
  for (int i = 0; i < 1000; i++) {
    double t = i * s->tstep;
    if (t > limit * (1 + 1e-9)) {
      break;
    }
    double x = PX0 + t / limit * (PX1 - PX0);
    snprintf(label, sizeof label, "%g", t);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"" C_GRID "\"/>\n", x,
            PY0, x, PY1);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\" fill=\"" C_MUTED
            "\">%s</text>\n",
            x, PY1 + 18, label);
  }
  fprintf(f, "<path d=\"M%d %dV%dH%d\" fill=\"none\" stroke=\"#444\" stroke-width=\"1.2\"/>\n", PX0,
          PY0, PY1, PX1);
  fprintf(f,
          "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"13\" fill=\"" C_TEXT
          "\">time since the first event (%s)</text>\n",
          (PX0 + PX1) / 2, H - 18, s->tunit);
  fprintf(f,
          "<text transform=\"translate(20 %d) rotate(-90)\" text-anchor=\"middle\" "
          "font-size=\"13\" fill=\"" C_TEXT "\">device memory</text>\n",
          (PY0 + PY1) / 2);
}

/* One legend entry at x; returns the x of the next. */
static double legend_item(FILE *f, double x, const char *kind, const char *color,
                          const char *text) {
  double y = 86;
  if (strcmp(kind, "area") == 0) {
    fprintf(f,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"22\" height=\"10\" fill=\"%s\" "
            "fill-opacity=\"0.18\" stroke=\"%s\" stroke-width=\"2\"/>\n",
            x, y - 9, color, color);
  } else if (strcmp(kind, "cross") == 0) {
    cross(f, x + 11, y - 4);
  } else {
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"1.8\" stroke-dasharray=\"%s\"/>\n",
            x, y - 4, x + 22, y - 4, color, kind);
  }
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"" C_TEXT "\">%s</text>\n", x + 28,
          y, text);
  return x + 28 + 6.7 * (double)strlen(text) + 22;
}

int plot_svg(const tracecsv_event_t *ev, size_t n, const plot_opts_t *opts, char **svg,
             size_t *len) {
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&buf, &size);
  if (f == NULL) {
    return -ENOMEM;
  }
  figures_t fg;
  scale_t s;
  figures_of(ev, n, &fg);
  uint64_t top = fg.peak;
  top = opts->cap > top ? opts->cap : top;
  top = opts->peak_pool > top ? opts->peak_pool : top;
  /* Refused requests count, up to twice the other lines: one huge request must not flatten
   * the picture; those above get an arrow at the top. */
  uint64_t fail_top = top > 0 && fg.fail_hi / 2 > top ? 2 * top : fg.fail_hi;
  top = fail_top > top ? fail_top : top;
  byte_scale(top, &s);
  time_scale(fg.end_ns, &s);

  char peak[32], dur[48];
  human(fg.peak, peak, sizeof peak);
  snprintf(dur, sizeof dur, "%.3g %s", s.span / s.tdiv, s.tunit);

  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" font-family=\"%s\">\n",
          W, H, W, H, FONT);
  fprintf(f, "<title>");
  put_escaped(f, opts->title != NULL ? opts->title : "Device memory over time");
  fprintf(f, "</title>\n<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n");
  fprintf(f, "<text x=\"%d\" y=\"34\" font-size=\"20\" font-weight=\"bold\" fill=\"" C_TEXT "\">",
          PX0);
  put_escaped(f, opts->title != NULL ? opts->title : "Device memory over time");
  fprintf(f, "</text>\n<text x=\"%d\" y=\"58\" font-size=\"13\" fill=\"" C_MUTED "\">", PX0);
  if (opts->source != NULL) {
    put_escaped(f, opts->source);
    fprintf(f, " \xc2\xb7 ");
  }
  fprintf(f,
          "%zu allocation%s, %zu free%s, %zu refused \xc2\xb7 peak in use %s \xc2\xb7 "
          "%s</text>\n",
          fg.allocs, fg.allocs == 1 ? "" : "s", fg.frees, fg.frees == 1 ? "" : "s", fg.failures,
          peak, dur);

  double lx = PX0;
  lx = legend_item(f, lx, "area", C_USE, "in use (bytes requested)");
  if (opts->cap > 0) {
    lx = legend_item(f, lx, "7 4", C_CAP, "cap");
  }
  if (opts->peak_pool > 0) {
    lx = legend_item(f, lx, "2 3", C_POOL, opts->pool_name != NULL ? opts->pool_name : "peak pool");
  }
  if (fg.failures > 0) {
    legend_item(f, lx, "cross", C_FAIL, "refused (in use + request)");
  }

  axes(f, &s);
  /* In use: the filled area, then its outline. */
  fprintf(f, "<path d=\"");
  step_path(f, &s, ev, n);
  fprintf(f, "V%dH%dZ\" fill=\"" C_USE "\" fill-opacity=\"0.16\" stroke=\"none\"/>\n", PY1, PX0);
  fprintf(f, "<path d=\"");
  step_path(f, &s, ev, n);
  fprintf(f, "\" fill=\"none\" stroke=\"" C_USE "\" stroke-width=\"2\" "
             "stroke-linejoin=\"round\"/>\n");
  failures(f, &s, ev, n, fg.failures);
  /* When the cap and the pool coincide, one label goes above and one below. */
  if (opts->peak_pool > 0) {
    hline(f, &s, opts->peak_pool, C_POOL, "2 3",
          opts->pool_name != NULL ? opts->pool_name : "peak pool", opts->cap > 0);
  }
  if (opts->cap > 0) {
    hline(f, &s, opts->cap, C_CAP, "7 4", "cap", false);
  }
  if (fg.allocs > 0) {
    double x = xof(&s, fg.peak_ns);
    double y = yof(&s, fg.peak);
    bool left = x > PX1 - 140;
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"" C_USE "\"/>\n", x, y);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"" C_USE "\" " HALO
            "text-anchor=\"%s\">peak %s</text>\n",
            left ? x - 8 : x + 8, y - 8, left ? "end" : "start", peak);
  }
  fprintf(f, "</svg>\n");
  if (fclose(f) != 0 || buf == NULL) {
    free(buf);
    return -ENOMEM;
  }
  *svg = buf;
  *len = size;
  return 0;
}

/* ---- The command ---- */

static const char plot_usage[] =
    "Usage: gpucap plot TRACE.csv -o OUT.svg [--cap SIZE] [--json REPORT.json] [--title TEXT]\n"
    "\n"
    "Draws a trace written by GPUCAP_TRACE (or `gpucap run --trace`) as a timeline: the bytes\n"
    "the program has in use over time, refused allocations as marks, and, when known, the cap\n"
    "and the pool's peak size. The picture is a self-contained SVG: open it in a browser.\n"
    "A trace holds one process and all of its devices together (the format has no device\n"
    "column); for one device per picture, run one device per process.\n"
    "\n"
    "Options:\n"
    "  -o, --output OUT.svg  where to write the picture (- for standard output); required\n"
    "  --cap SIZE            draw the cap at SIZE (4GiB, 512MiB; as GPUCAP_MEMORY_LIMIT)\n"
    "  --json REPORT.json    take the cap and the peak pool size from the run's JSON report\n"
    "  --title TEXT          the picture's title\n"
    "  -h, --help            print this help\n"
    "  --version             print gpucap's version\n"
    "\n"
    "Exit status: 0 written; 1 an input cannot be read or is malformed, or the picture cannot\n"
    "be written; 2 usage error.\n"
    "\n"
    "Example: gpucap plot ./trace.csv --json ./run.json -o timeline.svg\n";

/* Takes the cap and the pool from a report: only when its pools are all on one device, since
 * the trace mixes every device of the process. */
static int from_report(const char *path, plot_opts_t *o, bool cap_given) {
  char *text = NULL;
  size_t len = 0;
  if (cli_read_file("plot", path, REPORT_FILE_MAX, &text, &len) != 0) {
    return -1;
  }
  report_row_t *rows = NULL;
  int n = 0;
  static report_run_t run;
  char err[512];
  int rc = rjson_read(text, len, &rows, &n, &run, err, sizeof err);
  free(text);
  if (rc != 0) {
    cli_error("plot: %s: %s", path, err);
    return -1;
  }
  bool one_device = n > 0;
  uint64_t pool = 0;
  for (int i = 0; i < n; i++) {
    one_device = one_device && rows[i].device == rows[0].device;
    pool += rows[i].pooled ? rows[i].stats.peak_pool_bytes : 0;
  }
  if (n == 0) {
    cli_warn("plot: %s has no devices; no cap or pool line", path);
  } else if (!one_device) {
    cli_warn("plot: %s reports several devices but the trace mixes them; no cap or pool line "
             "(give --cap to draw one)",
             path);
  } else {
    if (!cap_given && rows[0].cap != REPORT_NO_CAP) {
      o->cap = rows[0].cap;
    }
    o->peak_pool = pool;
    o->pool_name = n > 1 ? "peak pools (sum)" : "peak pool";
  }
  free(rows);
  return 0;
}

int plot_main(int argc, char **argv) {
  const char *trace = NULL, *out = NULL, *cap = NULL, *json = NULL;
  plot_opts_t o = {0};
  bool dashdash = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = NULL;
    if (!dashdash && cli_is_help(a)) {
      fputs(plot_usage, stdout);
      return CLI_OK;
    }
    if (!dashdash && strcmp(a, "--version") == 0) {
      cli_print_version();
      return CLI_OK;
    }
    if (dashdash || a[0] != '-' || strcmp(a, "-") == 0) {
      if (trace != NULL) {
        cli_error("plot: one TRACE.csv at a time ('%s' and '%s'); see gpucap plot --help", trace,
                  a);
        return CLI_USAGE;
      }
      trace = a;
      continue;
    }
    if (strcmp(a, "--") == 0) {
      dashdash = true;
      continue;
    }
    const char **slot = NULL;
    if (cli_opt_value(argc, argv, &i, "--output", "-o", &v)) {
      slot = &out;
    } else if (cli_opt_value(argc, argv, &i, "--cap", NULL, &v)) {
      slot = &cap;
    } else if (cli_opt_value(argc, argv, &i, "--json", NULL, &v)) {
      slot = &json;
    } else if (cli_opt_value(argc, argv, &i, "--title", NULL, &v)) {
      slot = &o.title;
    } else {
      cli_error("plot: unknown option '%s'; see gpucap plot --help", a);
      return CLI_USAGE;
    }
    if (v == NULL) {
      return CLI_USAGE;
    }
    if (*slot != NULL) {
      cli_error("plot: %s is given twice; give it once", a);
      return CLI_USAGE;
    }
    *slot = v;
  }
  if (trace == NULL) {
    cli_error("plot: no trace given; usage: gpucap plot TRACE.csv -o OUT.svg");
    return CLI_USAGE;
  }
  if (out == NULL) {
    cli_error("plot: no output given; add -o OUT.svg (or -o - for standard output)");
    return CLI_USAGE;
  }
  if (cap != NULL) {
    char why[CFG_WHY_MAX];
    if (cfg_parse_size(cap, &o.cap, why, sizeof why) != 0) {
      cli_error("plot: --cap '%s': %s; accepted: a size such as 4GiB, 512MiB or 1073741824", cap,
                why);
      return CLI_USAGE;
    }
  }
  if (json != NULL && from_report(json, &o, cap != NULL) != 0) {
    return CLI_FAIL;
  }

  char *text = NULL;
  size_t len = 0;
  if (cli_read_file("plot", trace, TRACE_FILE_MAX, &text, &len) != 0) {
    return CLI_FAIL;
  }
  tracecsv_event_t *ev = NULL;
  size_t n = 0;
  char err[512];
  tracecsv_info_t info;
  int rc = tracecsv_parse(text, len, &ev, &n, &info, err, sizeof err);
  free(text);
  if (rc != 0) {
    cli_error("plot: %s: %s", trace, err);
    return CLI_FAIL;
  }
  if (info.cut > 0) {
    cli_warn("plot: %s: line %zu ends without a newline (the trace was cut while it was "
             "written): left out",
             trace, info.cut);
  }
  /* The pool's region rows are not part of this picture: it draws the program's blocks. */
  size_t kept = 0;
  for (size_t i = 0; i < n; i++) {
    if (ev[i].action != TRACECSV_RESERVE && ev[i].action != TRACECSV_RELEASE) {
      ev[kept++] = ev[i];
    }
  }
  n = kept;
  if (n == 0) {
    free(ev);
    cli_error("plot: %s has no events: the program made no allocation through gpucap", trace);
    return CLI_FAIL;
  }
  const char *base = strrchr(trace, '/');
  o.source = base != NULL ? base + 1 : trace;
  char *svg = NULL;
  size_t svglen = 0;
  rc = plot_svg(ev, n, &o, &svg, &svglen);
  free(ev);
  if (rc != 0) {
    cli_error("plot: out of memory");
    return CLI_FAIL;
  }
  rc = cli_write_file("plot", out, svg, svglen);
  free(svg);
  return rc == 0 ? CLI_OK : CLI_FAIL;
}
