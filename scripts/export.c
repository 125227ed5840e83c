/* export: a trace as a PyTorch memory snapshot or as Chrome/Perfetto trace events, and the
 * `gpucap export` command (contracts in export.h). The snapshot replays each device's events
 * once, writing its trace entries and keeping its regions and live blocks, whose state at the
 * end becomes the snapshot's segments; the viewer replays the entries backwards from those
 * segments, so the two must agree exactly (a block outside every segment stops it).
 */
#include "scripts/export.h"

#include "core/addrmap.h"
#include "scripts/cli.h"
#include "scripts/pickle.h"
#include "scripts/timeline.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMALL_SEGMENT (1u << 20) /* PyTorch's small pool: segments under 1 MiB */

/* ---- The torch snapshot ---- */

/* The devices of a trace, ascending; a trace without a Device column is device 0. */
static int devices_of(const tracecsv_event_t *ev, size_t n, int *devs) {
  bool seen[TIMELINE_MAX_DEVICES] = {false};
  int nd = 0;
  for (size_t i = 0; i < n; i++) {
    int d = ev[i].dev < 0 ? 0 : ev[i].dev;
    if (d >= TIMELINE_MAX_DEVICES) {
      return -E2BIG;
    }
    seen[d] = true;
  }
  for (int d = 0; d < TIMELINE_MAX_DEVICES; d++) {
    if (seen[d]) {
      devs[nd++] = d;
    }
  }
  return nd;
}

static int dev_of(const tracecsv_event_t *e) {
  return e->dev < 0 ? 0 : e->dev;
}

/* The blocks alive at a moment: indices of their alloc events, and address -> position + 1. */
typedef struct live {
  size_t *at;
  size_t n, cap;
  addrmap_t map;
} live_t;

static int live_add(live_t *l, uint64_t ptr, size_t event) {
  if (l->n == l->cap) {
    size_t ncap = l->cap ? 2 * l->cap : 1024;
    size_t *grown = realloc(l->at, ncap * sizeof *grown);
    if (grown == NULL) {
      return -ENOMEM;
    }
    l->at = grown;
    l->cap = ncap;
  }
  if (addrmap_reserve(&l->map, 1) != 0) {
    return -ENOMEM;
  }
  l->at[l->n++] = event;
  addrmap_put(&l->map, ptr, (void *)(uintptr_t)l->n);
  return 0;
}

/* Removes the block at ptr; returns its alloc event index + 1, or 0 when it is not alive. */
static size_t live_take(live_t *l, const tracecsv_event_t *ev, uint64_t ptr) {
  void *v = ptr == ADDRMAP_EMPTY ? NULL : addrmap_take(&l->map, ptr);
  if (v == NULL) {
    return 0;
  }
  size_t pos = (uintptr_t)v - 1;
  size_t event = l->at[pos];
  l->at[pos] = l->at[--l->n];
  if (pos < l->n) {
    uint64_t moved = ev[l->at[pos]].ptr;
    addrmap_take(&l->map, moved);
    addrmap_put(&l->map, moved, (void *)(uintptr_t)(pos + 1));
  }
  return event + 1;
}

/* Text as valid UTF-8 (each bad byte becomes '?'), at most cap - 1 bytes. */
static void utf8_copy(const char *s, char *out, size_t cap) {
  size_t o = 0;
  const unsigned char *p = (const unsigned char *)s;
  while (*p != '\0' && o + 5 < cap) {
    unsigned char c = *p;
    size_t k = c < 0x80             ? 1
               : (c & 0xe0) == 0xc0 ? 2
               : (c & 0xf0) == 0xe0 ? 3
               : (c & 0xf8) == 0xf0 ? 4
                                    : 0;
    bool ok = k > 0;
    for (size_t i = 1; ok && i < k; i++) {
      ok = (p[i] & 0xc0) == 0x80;
    }
    if (!ok) {
      out[o++] = '?';
      p++;
      continue;
    }
    memcpy(out + o, p, k);
    o += k;
    p += k;
  }
  out[o] = '\0';
}

/* The library names of the trace being exported (its Library column; NULL: none). */
static const tracecsv_info_t *lib_names;

/* [{"filename": source, "line": line, "name": "LIBRARY (thread T)"}]: where the event is in the
 * trace, and the library that asked for the block ("thread T" alone when the trace names none:
 * a region's, or a trace without gpucap's Library column). */
static void frames(pk_t *pk, const char *source, const tracecsv_event_t *e) {
  char lib[TRACECSV_LIB_MAX + 8], name[sizeof lib + 40];
  if (lib_names != NULL && e->lib >= 0 && e->lib < lib_names->nlibs) {
    utf8_copy(lib_names->libs[e->lib], lib, sizeof lib);
    snprintf(name, sizeof name, "%s (thread %" PRIu64 ")", lib, e->thread);
  } else {
    snprintf(name, sizeof name, "thread %" PRIu64, e->thread);
  }
  pk_list(pk);
  pk_mark(pk);
  pk_dict(pk);
  pk_mark(pk);
  pk_str(pk, "filename");
  pk_str(pk, source);
  pk_str(pk, "line");
  pk_uint(pk, e->line);
  pk_str(pk, "name");
  pk_str(pk, name);
  pk_setitems(pk);
  pk_appends(pk);
}

/* One trace entry: {"action", "addr", "size", "stream", "time_us", "frames"}; an "oom" entry
 * has "device_free" instead of "addr" (gpucap's trace does not record the driver's free
 * memory: 0). */
static void entry(pk_t *pk, size_t *count, const char *action, uint64_t addr, uint64_t size,
                  const tracecsv_event_t *e, const char *source) {
  pk_next_item(pk, count);
  pk_dict(pk);
  pk_mark(pk);
  pk_str(pk, "action");
  pk_str(pk, action);
  if (strcmp(action, "oom") == 0) {
    pk_str(pk, "device_free");
    pk_uint(pk, 0);
  } else {
    pk_str(pk, "addr");
    pk_uint(pk, addr);
  }
  pk_str(pk, "size");
  pk_uint(pk, size);
  pk_str(pk, "stream");
  pk_uint(pk, e->stream);
  pk_str(pk, "time_us");
  pk_uint(pk, (uint64_t)(e->ns / 1000));
  pk_str(pk, "frames");
  frames(pk, source, e);
  pk_setitems(pk);
}

/* The state of one device at the end of its events. */
typedef struct final {
  int dev;
  tl_regions_t regions;
  live_t live;
} final_t;

/* Writes device dev's entries (a list) and leaves its state at the end in fin. */
static int device_trace(pk_t *pk, const tracecsv_event_t *ev, size_t n, const char *source,
                        final_t *fin) {
  size_t count = 0;
  pk_list(pk);
  pk_mark(pk);
  for (size_t i = 0; i < n; i++) {
    const tracecsv_event_t *e = &ev[i];
    if (dev_of(e) != fin->dev) {
      continue;
    }
    switch (e->action) {
    case TRACECSV_RESERVE:
      if (tl_regions_find(&fin->regions, e->ptr) >= 0 ||
          tl_regions_add(&fin->regions, e->ptr, e->size) != 0) {
        break; /* overlapping an existing region: the trace is not whole */
      }
      entry(pk, &count, "segment_alloc", e->ptr, e->size, e, source);
      break;
    case TRACECSV_RELEASE: {
      uint64_t size = 0;
      if (tl_regions_remove(&fin->regions, e->ptr, &size)) {
        entry(pk, &count, "segment_free", e->ptr, size, e, source);
      }
      break;
    }
    case TRACECSV_ALLOC: {
      if (e->ptr == ADDRMAP_EMPTY || addrmap_get(&fin->live.map, e->ptr) != NULL) {
        break;
      }
      bool own = tl_regions_find(&fin->regions, e->ptr) < 0;
      if (live_add(&fin->live, e->ptr, i) != 0) {
        return -ENOMEM;
      }
      if (own) { /* the driver's own allocation: a segment of its own, as PyTorch's would be */
        entry(pk, &count, "segment_alloc", e->ptr, e->held, e, source);
      }
      entry(pk, &count, "alloc", e->ptr, e->held, e, source);
      break;
    }
    case TRACECSV_FREE: {
      size_t at = live_take(&fin->live, ev, e->ptr);
      if (at == 0) {
        break; /* a block the trace never allocated: the viewer could not place it */
      }
      uint64_t held = ev[at - 1].held;
      entry(pk, &count, "free_requested", e->ptr, held, e, source);
      entry(pk, &count, "free_completed", e->ptr, held, e, source);
      if (tl_regions_find(&fin->regions, e->ptr) < 0) {
        entry(pk, &count, "segment_free", e->ptr, held, e, source);
      }
      break;
    }
    case TRACECSV_FAILURE:
      entry(pk, &count, "oom", 0, e->size, e, source);
      break;
    case TRACECSV_CAP: /* tracecsv keeps caps in its info, never as events */
      break;
    }
  }
  pk_appends(pk);
  return 0;
}

static const tracecsv_event_t *sort_events;

static int by_address(const void *a, const void *b) {
  uint64_t x = sort_events[*(const size_t *)a].ptr, y = sort_events[*(const size_t *)b].ptr;
  return x < y ? -1 : x > y;
}

static void block(pk_t *pk, size_t *count, uint64_t addr, uint64_t size, uint64_t requested,
                  const char *state, const tracecsv_event_t *e, const char *source) {
  pk_next_item(pk, count);
  pk_dict(pk);
  pk_mark(pk);
  pk_str(pk, "address");
  pk_uint(pk, addr);
  pk_str(pk, "size");
  pk_uint(pk, size);
  pk_str(pk, "requested_size");
  pk_uint(pk, requested);
  pk_str(pk, "state");
  pk_str(pk, state);
  pk_str(pk, "frames");
  if (e != NULL) {
    frames(pk, source, e);
  } else {
    pk_list(pk);
  }
  pk_setitems(pk);
}

/* One segment [base, base + size) with the live blocks blk[0..nb) (sorted, all inside it). */
static void segment(pk_t *pk, size_t *count, int dev, uint64_t base, uint64_t size, uint64_t stream,
                    const size_t *blk, size_t nb, const tracecsv_event_t *ev, const char *source) {
  uint64_t held = 0, requested = 0;
  for (size_t i = 0; i < nb; i++) {
    held += ev[blk[i]].held;
    requested += ev[blk[i]].size;
  }
  pk_next_item(pk, count);
  pk_dict(pk);
  pk_mark(pk);
  pk_str(pk, "device");
  pk_uint(pk, (uint64_t)dev);
  pk_str(pk, "address");
  pk_uint(pk, base);
  pk_str(pk, "total_size");
  pk_uint(pk, size);
  pk_str(pk, "allocated_size");
  pk_uint(pk, held);
  pk_str(pk, "active_size");
  pk_uint(pk, held);
  pk_str(pk, "requested_size");
  pk_uint(pk, requested);
  pk_str(pk, "stream");
  pk_uint(pk, stream);
  pk_str(pk, "segment_type");
  pk_str(pk, size < SMALL_SEGMENT ? "small" : "large");
  pk_str(pk, "segment_pool_id");
  pk_uint(pk, 0);
  pk_uint(pk, 0);
  pk_tuple2(pk);
  pk_str(pk, "is_expandable");
  pk_bool(pk, false);
  pk_str(pk, "frames");
  pk_list(pk);
  pk_str(pk, "blocks");
  pk_list(pk);
  pk_mark(pk);
  size_t nblocks = 0;
  uint64_t at = base;
  for (size_t i = 0; i < nb; i++) {
    const tracecsv_event_t *e = &ev[blk[i]];
    if (e->ptr > at) {
      block(pk, &nblocks, at, e->ptr - at, 0, "inactive", NULL, source);
    }
    block(pk, &nblocks, e->ptr, e->held, e->size, "active_allocated", e, source);
    at = e->ptr + e->held;
  }
  if (at < base + size) {
    block(pk, &nblocks, at, base + size - at, 0, "inactive", NULL, source);
  }
  pk_appends(pk);
  pk_setitems(pk);
}

/* The segments of one device at its end: its regions with their blocks, then each block the
 * driver allocated on its own as a segment. */
static void segments(pk_t *pk, size_t *count, final_t *fin, const tracecsv_event_t *ev,
                     const char *source) {
  sort_events = ev;
  qsort(fin->live.at, fin->live.n, sizeof *fin->live.at, by_address);
  size_t b = 0;
  for (size_t r = 0; r < fin->regions.n; r++) {
    const tl_region_t *reg = &fin->regions.r[r];
    while (b < fin->live.n && ev[fin->live.at[b]].ptr < reg->base) {
      const tracecsv_event_t *e = &ev[fin->live.at[b++]];
      segment(pk, count, fin->dev, e->ptr, e->held, e->stream, &fin->live.at[b - 1], 1, ev, source);
    }
    size_t first = b;
    while (b < fin->live.n && ev[fin->live.at[b]].ptr - reg->base < reg->size) {
      b++;
    }
    segment(pk, count, fin->dev, reg->base, reg->size, 0, &fin->live.at[first], b - first, ev,
            source);
  }
  for (; b < fin->live.n; b++) {
    const tracecsv_event_t *e = &ev[fin->live.at[b]];
    segment(pk, count, fin->dev, e->ptr, e->held, e->stream, &fin->live.at[b], 1, ev, source);
  }
}

int export_torch(const tracecsv_event_t *ev, size_t n, const tracecsv_info_t *info,
                 const char *source, unsigned char **out, size_t *len) {
  int devs[TIMELINE_MAX_DEVICES];
  int nd = devices_of(ev, n, devs);
  if (nd < 0) {
    return nd;
  }
  char src[256];
  utf8_copy(source, src, sizeof src);
  static final_t fin[TIMELINE_MAX_DEVICES];
  memset(fin, 0, sizeof fin);
  lib_names = info;
  pk_t pk = {0};
  int rc = 0;
  pk_begin(&pk);
  pk_dict(&pk);
  pk_mark(&pk);
  pk_str(&pk, "device_traces");
  pk_list(&pk);
  pk_mark(&pk);
  int top = nd > 0 ? devs[nd - 1] : 0;
  for (int d = 0, k = 0; d <= top && rc == 0; d++) { /* one list per ordinal, empty if unused */
    if (k < nd && devs[k] == d) {
      fin[k].dev = d;
      rc = addrmap_init(&fin[k].live.map, 1024);
      rc = rc == 0 ? device_trace(&pk, ev, n, src, &fin[k]) : rc;
      k++;
    } else {
      pk_list(&pk);
    }
  }
  pk_appends(&pk);
  pk_str(&pk, "segments");
  pk_list(&pk);
  pk_mark(&pk);
  size_t count = 0;
  for (int k = 0; k < nd && rc == 0; k++) {
    segments(&pk, &count, &fin[k], ev, src);
  }
  pk_appends(&pk);
  pk_setitems(&pk);
  pk_end(&pk);
  for (int k = 0; k < nd; k++) {
    tl_regions_free(&fin[k].regions);
    free(fin[k].live.at);
    if (fin[k].live.map.slots != NULL) {
      addrmap_fini(&fin[k].live.map);
    }
  }
  if (rc == 0 && pk.failed) {
    rc = -ENOMEM;
  }
  if (rc != 0) {
    free(pk.buf);
    return rc;
  }
  *out = pk.buf;
  *len = pk.len;
  return 0;
}

/* ---- Chrome / Perfetto trace events ---- */

/* A JSON string of valid UTF-8 text. */
static void json_str(FILE *f, const char *s) {
  char clean[512];
  utf8_copy(s, clean, sizeof clean);
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)clean; *p != '\0'; p++) {
    if (*p == '"' || *p == '\\') {
      fprintf(f, "\\%c", *p);
    } else if (*p < 0x20) {
      fprintf(f, "\\u%04x", *p);
    } else {
      fputc(*p, f);
    }
  }
  fputc('"', f);
}

/* Microseconds with three decimals, as the format's "ts" wants. */
static void ts(FILE *f, int64_t ns) {
  fprintf(f, "\"ts\":%" PRId64 ".%03" PRId64, ns / 1000, ns % 1000);
}

static void counter(FILE *f, int pid, const char *name, int64_t ns, uint64_t bytes) {
  fprintf(f, ",\n{\"ph\":\"C\",\"pid\":%d,\"tid\":0,\"name\":\"%s\",", pid, name);
  ts(f, ns);
  fprintf(f, ",\"args\":{\"bytes\":%" PRIu64 "}}", bytes);
}

int export_perfetto(const tracecsv_event_t *ev, size_t n, const char *source, char **out,
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
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"source\":");
  json_str(f, source);
  fprintf(f, ",\"writer\":\"gpucap export\"},\n\"traceEvents\":[\n");
  fprintf(f, "{\"ph\":\"M\",\"pid\":0,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":");
  json_str(f, source);
  fprintf(f, "}}");
  for (int i = 0; i < tl.ndev; i++) {
    const tl_device_t *d = &tl.dev[i];
    int pid = d->dev >= 0 ? d->dev + 1 : TIMELINE_MAX_DEVICES + 1;
    fprintf(
        f,
        ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":", pid);
    if (d->dev >= 0) {
      fprintf(f, "\"device %d\"}}", d->dev);
    } else {
      fprintf(f, "\"device not recorded\"}}");
    }
    fprintf(f,
            ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_sort_index\","
            "\"args\":{\"sort_index\":%d}}",
            pid, i);
    tl_point_t last = {0};
    for (size_t k = 0; k < d->npts; k++) {
      const tl_point_t *p = &d->pts[k];
      if (k == 0 || p->reserved != last.reserved) {
        counter(f, pid, "reserved", p->ns, p->reserved);
      }
      if (k == 0 || p->held != last.held) {
        counter(f, pid, "held", p->ns, p->held);
      }
      if (k == 0 || p->requested != last.requested) {
        counter(f, pid, "requested", p->ns, p->requested);
      }
      if (p->refused > 0) {
        fprintf(f,
                ",\n{\"ph\":\"i\",\"s\":\"p\",\"pid\":%d,\"tid\":%" PRIu64 ",\"name\":\"refused\",",
                pid, ev[p->event].thread);
        ts(f, p->ns);
        fprintf(f,
                ",\"args\":{\"requested_bytes\":%" PRIu64 ",\"held_bytes\":%" PRIu64
                ",\"reserved_bytes\":%" PRIu64 ",\"trace_line\":%" PRIu32 "}}",
                ev[p->event].size, p->held, p->reserved, ev[p->event].line);
      }
      last = *p;
    }
  }
  fprintf(f, "\n]}\n");
  timeline_free(&tl);
  if (fclose(f) != 0 || buf == NULL) {
    free(buf);
    return -ENOMEM;
  }
  *out = buf;
  *len = size;
  return 0;
}

/* ---- The command ---- */

static const char export_usage[] =
    "Usage: gpucap export --format FORMAT TRACE.csv -o OUT\n"
    "\n"
    "Writes a trace written by GPUCAP_TRACE (or `gpucap run --trace`) for a viewer:\n"
    "  torch-snapshot  a PyTorch memory snapshot (pickle), as torch.cuda.memory._dump_snapshot\n"
    "                  writes it: open it at pytorch.org/memory_viz or draw it with\n"
    "                  python -m torch.cuda._memory_viz trace_plot OUT -o OUT.html;\n"
    "                  segments are gpucap's pool regions\n"
    "  perfetto        Chrome's trace event JSON: open it at ui.perfetto.dev or\n"
    "                  chrome://tracing; per device, counter tracks of the bytes reserved,\n"
    "                  held and requested, and an instant event for each refusal\n"
    "\n"
    "Options:\n"
    "  --format FORMAT       torch-snapshot or perfetto; required\n"
    "  -o, --output OUT      where to write it (- for standard output); required\n"
    "  -h, --help            print this help\n"
    "  --version             print gpucap's version\n"
    "\n"
    "Exit status: 0 written; 1 the trace cannot be read or is malformed, or the output cannot\n"
    "be written; 2 usage error.\n"
    "\n"
    "Example: gpucap export --format torch-snapshot ./trace.csv -o snapshot.pickle\n";

int export_main(int argc, char **argv) {
  const char *trace = NULL, *out = NULL, *format = NULL;
  const cli_opt_t opts[] = {{"--output", "-o", &out}, {"--format", NULL, &format}};
  int st = cli_parse("export", argc, argv, export_usage, opts, 2, "TRACE.csv", &trace);
  if (st >= 0) {
    return st;
  }
  if (format == NULL) {
    cli_error("export: no format given; add --format torch-snapshot or --format perfetto");
    return CLI_USAGE;
  }
  bool torch = strcmp(format, "torch-snapshot") == 0;
  if (!torch && strcmp(format, "perfetto") != 0) {
    cli_error("export: --format '%s': not a format; accepted: torch-snapshot, perfetto", format);
    return CLI_USAGE;
  }
  if (trace == NULL) {
    cli_error("export: no trace given; usage: gpucap export --format FORMAT TRACE.csv -o OUT");
    return CLI_USAGE;
  }
  if (out == NULL) {
    cli_error("export: no output given; add -o OUT (or -o - for standard output)");
    return CLI_USAGE;
  }
  tracecsv_event_t *ev = NULL;
  size_t n = 0;
  tracecsv_info_t info;
  if (timeline_load("export", trace, &ev, &n, &info) != 0) {
    return CLI_FAIL;
  }
  const char *base = strrchr(trace, '/');
  base = base != NULL ? base + 1 : trace;
  char *data = NULL;
  size_t dlen = 0;
  int rc;
  if (torch) {
    unsigned char *pickle = NULL;
    rc = export_torch(ev, n, &info, base, &pickle, &dlen);
    data = (char *)pickle;
  } else {
    rc = export_perfetto(ev, n, base, &data, &dlen);
  }
  free(ev);
  if (rc == -E2BIG) {
    cli_error("export: %s: more than %d devices", trace, TIMELINE_MAX_DEVICES);
    return CLI_FAIL;
  }
  if (rc != 0) {
    cli_error("export: out of memory");
    return CLI_FAIL;
  }
  rc = cli_write_file("export", out, data, dlen);
  free(data);
  return rc == 0 ? CLI_OK : CLI_FAIL;
}
