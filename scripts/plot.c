/* plot: the SVG timeline of an allocation trace, and the `gpucap plot` command (contracts in
 * plot.h). Layout: title, a line of figures, a legend, then one panel per device, each with its
 * own byte axis (ticks at power-of-two steps) over a common time axis (ticks at 1-2-5 steps).
 * All text is XML-escaped; names that are not valid UTF-8 are shown with '?' for the bad bytes,
 * so the document always parses.
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

#define REPORT_FILE_MAX ((size_t)64 << 20)

/* Picture geometry, in SVG user units (pixels at 100%): the header, then panels of PANEL_H,
 * each with its plot area from PANEL_TOP to PANEL_H - PANEL_BOTTOM. */
enum {
  W = 960,
  PX0 = 96,
  PX1 = W - 112,
  HEAD_H = 100,
  PANEL_H = 300,
  PANEL_TOP = 34,
  PANEL_BOTTOM = 40,
  FOOT_H = 34
};

#define C_RESERVED "#e08a00"
#define C_RESERVED_FILL "#fbe6c6" /* solid fills: the two areas never blend into a third colour */
#define C_HELD "#1f5fa8"
#define C_HELD_FILL "#c6daf2"
#define C_REQUESTED "#2e8b57"
#define C_CAP "#c0392b"
#define C_POOL "#e08a00"
#define C_FAIL "#8e2ca8"
#define C_TEXT "#222222"
#define C_MUTED "#666666"
#define C_GRID "#e6e6e6"
#define FONT "DejaVu Sans, Helvetica, Arial, sans-serif"
/* A white outline behind a label keeps it legible over lines and marks. */
#define HALO "stroke=\"#ffffff\" stroke-width=\"3\" paint-order=\"stroke\" "

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
  int py0, py1;   /* the panel's plot area, top and bottom */
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
  return s->py1 - f * (s->py1 - s->py0);
}

/* ---- Drawing ---- */

enum series { REQUESTED, HELD, RESERVED };

static uint64_t level(const tl_point_t *p, enum series w) {
  return w == REQUESTED ? p->requested : w == HELD ? p->held : p->reserved;
}

/* The step line of one series, one vertical run per half-pixel column at most. Writes the path
 * data (without the closing of the area) to f. */
static void step_path(FILE *f, const scale_t *s, const tl_device_t *d, enum series w) {
  long col = -1;
  uint64_t lo = 0, hi = 0, last = 0, cur = 0;
  double colx = PX0;
  fprintf(f, "M%.1f %.1f", (double)PX0, (double)s->py1);
  for (size_t i = 0; i <= d->npts; i++) {
    long c = -1;
    double x = 0;
    if (i < d->npts) {
      x = xof(s, d->pts[i].ns);
      c = lround(x * 2);
    }
    if (c != col || i == d->npts) {
      if (col >= 0) {
        fprintf(f, "H%.1f", colx);
        if (lo < hi) {
          fprintf(f, "V%.1fV%.1f", yof(s, hi), yof(s, lo));
        }
        fprintf(f, "V%.1f", yof(s, last));
      }
      if (i == d->npts) {
        break;
      }
      col = c;
      colx = x;
      lo = hi = cur;
    }
    cur = level(&d->pts[i], w);
    lo = cur < lo ? cur : lo;
    hi = cur > hi ? cur : hi;
    last = cur;
  }
  fprintf(f, "H%.1f", (double)PX1);
}

/* One series as a filled area and its outline (only the outline when fill is NULL). */
static void area(FILE *f, const scale_t *s, const tl_device_t *d, enum series w, const char *color,
                 const char *fill, double width) {
  if (fill != NULL) {
    fprintf(f, "<path d=\"");
    step_path(f, s, d, w);
    fprintf(f, "V%dH%dZ\" fill=\"%s\" stroke=\"none\"/>\n", s->py1, PX0, fill);
  }
  fprintf(f, "<path d=\"");
  step_path(f, s, d, w);
  fprintf(f, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" stroke-linejoin=\"round\"/>\n",
          color, width);
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
  uint64_t level;      /* held when it was refused */
  uint64_t size;       /* asked for */
  const char *verdict; /* why it was refused ("" when the trace does not say) */
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
    fprintf(f, "<path d=\"M%.1f %.1fl-5 9h10z\" fill=\"" C_FAIL "\"/>\n", x, (double)s->py0);
    y = s->py0 + 5;
  } else {
    cross(f, x, y);
  }
  if (label) {
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"" C_FAIL "\" " HALO
            "text-anchor=\"%s\">+%s%s%s</text>\n",
            left ? x - 8 : x + 8, y + 4, left ? "end" : "start", size, r->verdict[0] ? " " : "",
            r->verdict);
  }
}

/* Each refusal: a dotted stem from the bytes held up to where the request would have taken
 * them, and a cross there (an arrow at the top when that is off the axis). Of the refusals
 * within a few pixels of each other only the highest is drawn; when there are a few in all,
 * each is labelled with the size asked for. */
static void failures(FILE *f, const scale_t *s, const tl_device_t *d) {
  enum { BUCKET_PX = 6 };
  bool have = false;
  long bucket = -1;
  refusal_t best = {0};
  bool label = d->refusals <= 6;
  for (size_t i = 0; i < d->npts; i++) {
    const tl_point_t *p = &d->pts[i];
    if (p->refused == 0) {
      continue;
    }
    refusal_t r = {xof(s, p->ns), p->held, p->refused, p->verdict};
    long b = lround(floor(r.x / BUCKET_PX));
    if (have && b != bucket) {
      refusal(f, s, &best, label);
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
    refusal(f, s, &best, label);
  }
}

/* The byte axis of a panel, and its time ticks and labels. */
static void axes(FILE *f, const scale_t *s) {
  char label[32];
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
  double limit = s->span / s->tdiv;
  for (int i = 0; i < 1000; i++) {
    double t = i * s->tstep;
    if (t > limit * (1 + 1e-9)) {
      break;
    }
    double x = PX0 + t / limit * (PX1 - PX0);
    snprintf(label, sizeof label, "%g", t);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"" C_GRID "\"/>\n", x,
            s->py0, x, s->py1);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\" fill=\"" C_MUTED
            "\">%s</text>\n",
            x, s->py1 + 18, label);
  }
  fprintf(f, "<path d=\"M%d %dV%dH%d\" fill=\"none\" stroke=\"#444\" stroke-width=\"1.2\"/>\n", PX0,
          s->py0, s->py1, PX1);
  fprintf(f,
          "<text transform=\"translate(20 %d) rotate(-90)\" text-anchor=\"middle\" "
          "font-size=\"13\" fill=\"" C_TEXT "\">device memory</text>\n",
          (s->py0 + s->py1) / 2);
}

/* One legend entry at x; returns the x of the next. */
static double legend_item(FILE *f, double x, const char *kind, const char *color,
                          const char *text) {
  double y = 86;
  if (strncmp(kind, "#", 1) == 0) { /* an area: kind is its fill */
    fprintf(f,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"22\" height=\"10\" fill=\"%s\" "
            "stroke=\"%s\" stroke-width=\"2\"/>\n",
            x, y - 9, kind, color);
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

/* The cap of a panel's device: --cap, else the report's or the trace's for that device (for
 * events of no recorded device, the report's when it has only one); 0 when not known,
 * PLOT_NO_CAP when the device had none. */
static uint64_t cap_of(const plot_opts_t *o, int dev) {
  if (o->cap > 0) {
    return o->cap;
  }
  if (dev < 0) {
    return o->unknown_cap;
  }
  return dev < TIMELINE_MAX_DEVICES ? o->dev_cap[dev] : 0;
}

/* One device's panel, its plot area from top + PANEL_TOP. */
static void panel(FILE *f, const tl_device_t *d, const plot_opts_t *o, scale_t s, int top,
                  bool several) {
  uint64_t known = cap_of(o, d->dev);
  uint64_t cap = known == PLOT_NO_CAP ? 0 : known; /* the line's level; 0: no line */
  uint64_t pool = o->gpucap ? 0 : o->peak_pool;
  uint64_t peak = o->gpucap ? d->peak_reserved : d->peak_requested;
  uint64_t hi = peak > cap ? peak : cap;
  hi = pool > hi ? pool : hi;
  hi = d->peak_held > hi ? d->peak_held : hi;
  /* Refused requests count, up to twice the other lines: one huge request must not flatten
   * the picture; those above get an arrow at the top. */
  uint64_t fail_top = hi > 0 && d->fail_hi / 2 > hi ? 2 * hi : d->fail_hi;
  byte_scale(fail_top > hi ? fail_top : hi, &s);
  s.py0 = top + PANEL_TOP;
  s.py1 = top + PANEL_H - PANEL_BOTTOM;

  char cap_s[32], held_s[32], res_s[32], req_s[32];
  human(cap, cap_s, sizeof cap_s);
  human(d->peak_held, held_s, sizeof held_s);
  human(d->peak_reserved, res_s, sizeof res_s);
  human(d->peak_requested, req_s, sizeof req_s);
  fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"14\" font-weight=\"bold\" fill=\"" C_TEXT "\">",
          PX0, top + 20);
  if (d->dev >= 0) {
    fprintf(f, "device %d", d->dev);
  } else {
    fprintf(f, several ? "device not recorded" : "all devices");
  }
  fprintf(f, "</text>\n<text x=\"%d\" y=\"%d\" font-size=\"12\" fill=\"" C_MUTED "\">", PX0 + 150,
          top + 20);
  if (o->gpucap) {
    fprintf(f, "peak pool %s \xc2\xb7 peak in use %s \xc2\xb7 peak requested %s", res_s, held_s,
            req_s);
  } else {
    fprintf(f, "peak requested %s", req_s);
  }
  fprintf(f, " \xc2\xb7 %zu refused \xc2\xb7 cap %s</text>\n", d->refusals,
          cap > 0                ? cap_s
          : known == PLOT_NO_CAP ? "none"
                                 : "unknown");

  axes(f, &s);
  if (o->gpucap) {
    area(f, &s, d, RESERVED, C_RESERVED, C_RESERVED_FILL, 1.6);
    area(f, &s, d, HELD, C_HELD, C_HELD_FILL, 2.0);
    area(f, &s, d, REQUESTED, C_REQUESTED, NULL, 1.3);
  } else {
    area(f, &s, d, REQUESTED, C_HELD, C_HELD_FILL, 2.0);
  }
  failures(f, &s, d);
  /* When the cap and the pool coincide, one label goes above and one below. */
  if (pool > 0) {
    hline(f, &s, pool, C_POOL, "2 3", o->pool_name != NULL ? o->pool_name : "peak pool", cap > 0);
  }
  if (cap > 0) {
    hline(f, &s, cap, C_CAP, "7 4", "cap", false);
  }
  uint64_t mark = o->gpucap ? d->peak_held : d->peak_requested;
  if (d->allocs > 0) {
    int64_t when = d->peak_held_ns;
    if (!o->gpucap) {
      for (size_t i = 0; i < d->npts; i++) {
        if (d->pts[i].requested == mark) {
          when = d->pts[i].ns;
          break;
        }
      }
    }
    double x = xof(&s, when);
    double y = yof(&s, mark);
    char m[32];
    human(mark, m, sizeof m);
    bool left = x > PX1 - 140;
    fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"" C_HELD "\"/>\n", x, y);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"" C_HELD "\" " HALO
            "text-anchor=\"%s\">peak %s %s</text>\n",
            left ? x - 8 : x + 8, y - 8, left ? "end" : "start", o->gpucap ? "in use" : "requested",
            m);
  }
}

int plot_svg(const tracecsv_event_t *ev, size_t n, const plot_opts_t *opts, char **svg,
             size_t *len) {
  static timeline_t tl;
  int rc = timeline_build(ev, n, &tl);
  if (rc != 0) {
    return rc;
  }
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&buf, &size);
  if (f == NULL) {
    timeline_free(&tl);
    return -ENOMEM;
  }
  scale_t s = {0};
  time_scale(tl.end_ns, &s);
  size_t allocs = 0, frees = 0, refusals = 0;
  for (int i = 0; i < tl.ndev; i++) {
    allocs += tl.dev[i].allocs;
    frees += tl.dev[i].frees;
    refusals += tl.dev[i].refusals;
  }
  int panels = tl.ndev > 0 ? tl.ndev : 1;
  int h = HEAD_H + panels * PANEL_H + FOOT_H;
  char dur[48];
  snprintf(dur, sizeof dur, "%.3g %s", s.span / s.tdiv, s.tunit);
  const char *title = opts->title != NULL ? opts->title : "Device memory over time";

  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" font-family=\"%s\">\n",
          W, h, W, h, FONT);
  fprintf(f, "<title>");
  put_escaped(f, title);
  fprintf(f, "</title>\n<rect width=\"100%%\" height=\"100%%\" fill=\"#ffffff\"/>\n");
  fprintf(f, "<text x=\"%d\" y=\"34\" font-size=\"20\" font-weight=\"bold\" fill=\"" C_TEXT "\">",
          PX0);
  put_escaped(f, title);
  fprintf(f, "</text>\n<text x=\"%d\" y=\"58\" font-size=\"13\" fill=\"" C_MUTED "\">", PX0);
  if (opts->source != NULL) {
    put_escaped(f, opts->source);
    fprintf(f, " \xc2\xb7 ");
  }
  fprintf(f, "%zu allocation%s, %zu free%s, %zu refused \xc2\xb7 %d device%s \xc2\xb7 %s</text>\n",
          allocs, allocs == 1 ? "" : "s", frees, frees == 1 ? "" : "s", refusals, tl.ndev,
          tl.ndev == 1 ? "" : "s", dur);

  double lx = PX0;
  if (opts->gpucap) {
    lx = legend_item(f, lx, C_RESERVED_FILL, C_RESERVED, "pool (from the driver)");
    lx = legend_item(f, lx, C_HELD_FILL, C_HELD, "in use by blocks");
    lx = legend_item(f, lx, "none", C_REQUESTED, "requested");
  } else {
    lx = legend_item(f, lx, C_HELD_FILL, C_HELD, "requested");
  }
  bool any_cap = false;
  for (int i = 0; i < tl.ndev; i++) {
    uint64_t c = cap_of(opts, tl.dev[i].dev);
    any_cap = any_cap || (c > 0 && c != PLOT_NO_CAP);
  }
  if (any_cap) {
    lx = legend_item(f, lx, "7 4", C_CAP, "cap");
  }
  if (!opts->gpucap && opts->peak_pool > 0) {
    lx = legend_item(f, lx, "2 3", C_POOL, opts->pool_name != NULL ? opts->pool_name : "peak pool");
  }
  if (refusals > 0) {
    legend_item(f, lx, "cross", C_FAIL, "refused (in use + request)");
  }
  for (int i = 0; i < tl.ndev; i++) {
    panel(f, &tl.dev[i], opts, s, HEAD_H + i * PANEL_H, tl.ndev > 1);
  }
  fprintf(f,
          "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"13\" fill=\"" C_TEXT
          "\">time since the first event (%s)</text>\n",
          (PX0 + PX1) / 2, h - 14, s.tunit);
  fprintf(f, "</svg>\n");
  timeline_free(&tl);
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
    "Draws a trace written by GPUCAP_TRACE (or `gpucap run --trace`) as a timeline, one panel\n"
    "per device: the pool (the bytes gpucap holds from the driver), the bytes in use by the\n"
    "program's blocks and the bytes it requested, over time; refused allocations as marks;\n"
    "and the device's cap (from the trace, --json or --cap). The picture is a self-contained SVG: "
    "open it in a browser. A trace in\n"
    "RMM's own format (no Device, Event and Held columns) is drawn as one panel of the bytes\n"
    "requested, with the pool's peak size when a report gives it.\n"
    "\n"
    "Options:\n"
    "  -o, --output OUT.svg  where to write the picture (- for standard output); required\n"
    "  --cap SIZE            draw a cap at SIZE on every panel (4GiB, 512MiB)\n"
    "  --json REPORT.json    take each device's cap from the run's JSON report\n"
    "  --title TEXT          the picture's title\n"
    "  -h, --help            print this help\n"
    "  --version             print gpucap's version\n"
    "\n"
    "Exit status: 0 written; 1 an input cannot be read or is malformed, or the picture cannot\n"
    "be written; 2 usage error.\n"
    "\n"
    "Example: gpucap plot ./trace.csv --json ./run.json -o timeline.svg\n";

/* Takes each device's cap from a report, and, for a trace without gpucap's columns (which
 * mixes the devices), the pool's peak size when the report's pools are all on one device.
 * Returns the number of devices the report names, or -1 after an error. */
static int from_report(const char *path, plot_opts_t *o) {
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
    int d = rows[i].device;
    if (d >= 0 && d < TIMELINE_MAX_DEVICES) {
      o->dev_cap[d] = rows[i].cap != REPORT_NO_CAP ? rows[i].cap : PLOT_NO_CAP;
    }
  }
  if (n == 0) {
    cli_warn("plot: %s has no devices; no cap line", path);
  } else if (one_device) {
    o->unknown_cap = rows[0].cap != REPORT_NO_CAP ? rows[0].cap : PLOT_NO_CAP;
    o->peak_pool = pool;
    o->pool_name = n > 1 ? "peak pools (sum)" : "peak pool";
  }
  free(rows);
  return one_device ? 1 : n;
}

int plot_main(int argc, char **argv) {
  const char *trace = NULL, *out = NULL, *cap = NULL, *json = NULL;
  plot_opts_t o = {0};
  const cli_opt_t opts[] = {{"--output", "-o", &out},
                            {"--cap", NULL, &cap},
                            {"--json", NULL, &json},
                            {"--title", NULL, &o.title}};
  int st = cli_parse("plot", argc, argv, plot_usage, opts, 4, "TRACE.csv", &trace);
  if (st >= 0) {
    return st;
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
  tracecsv_event_t *ev = NULL;
  size_t n = 0;
  static tracecsv_info_t info;
  if (timeline_load("plot", trace, &ev, &n, &info) != 0) {
    return CLI_FAIL;
  }
  for (int d = 0; d < TIMELINE_MAX_DEVICES && d < TRACECSV_CAP_DEVICES; d++) {
    if (info.caps_known >> d & 1) { /* the trace's own word, which a report overrides */
      o.dev_cap[d] = info.cap[d] == TRACECSV_NO_CAP ? PLOT_NO_CAP : info.cap[d];
    }
  }
  int report_devices = json != NULL ? from_report(json, &o) : 0;
  if (report_devices < 0) {
    free(ev);
    return CLI_FAIL;
  }
  if (!info.gpucap && report_devices > 1) {
    cli_warn("plot: %s reports several devices but the trace does not say which event is on "
             "which; no pool line",
             json);
  }
  o.gpucap = info.gpucap;
  if (n == 0) {
    free(ev);
    cli_error("plot: %s has no events: the program made no allocation through gpucap", trace);
    return CLI_FAIL;
  }
  const char *base = strrchr(trace, '/');
  o.source = base != NULL ? base + 1 : trace;
  char *svg = NULL;
  size_t svglen = 0;
  int rc = plot_svg(ev, n, &o, &svg, &svglen);
  free(ev);
  if (rc == -E2BIG) {
    cli_error("plot: %s: more than %d devices", trace, TIMELINE_MAX_DEVICES);
    return CLI_FAIL;
  }
  if (rc != 0) {
    cli_error("plot: out of memory");
    return CLI_FAIL;
  }
  rc = cli_write_file("plot", out, svg, svglen);
  free(svg);
  return rc == 0 ? CLI_OK : CLI_FAIL;
}
