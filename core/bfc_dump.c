/* bfc_dump: the memory-state / out-of-memory report (bfc_format_report in bfc.h).
 *
 * Built only on the public bfc_stats and bfc_walk, so it cannot disturb the pool. Writes into
 * the caller's buffer through strbuf's byte, string and integer appends: no malloc, no
 * stdio, no locale, so the shim may call it while reporting an OOM or at exit. Layout follows
 * TensorFlow's DumpMemoryLog, DebugString and RenderOccupancy; sizes are written as every gpucap
 * report writes them (strbuf_size). Not thread-safe: caller locks.
 */
#include "core/bfc.h"
#include "core/strbuf.h"

#include <string.h>

enum { TF_BINS = 21, CELLS = 100 };

static void put_bytes(strbuf_t *w, uint64_t bytes) {
  strbuf_size(w, bytes);
}

/* frac (in [0, 1]) as a percentage with one decimal: "62.5%". */
static void put_pct(strbuf_t *w, double frac) {
  uint64_t tenths = (uint64_t)(frac * 1000.0 + 0.5);
  strbuf_u64(w, tenths / 10, 0);
  strbuf_char(w, '.');
  strbuf_u64(w, tenths % 10, 0);
  strbuf_char(w, '%');
}

typedef struct bin_sum {
  uint64_t chunks, in_use, bytes, in_use_bytes, requested;
} bin_sum_t;

typedef struct scan {
  bin_sum_t bins[TF_BINS];
  uint64_t total;    /* pool bytes: the occupancy map's width */
  uint64_t off;      /* offset of the walk in the concatenated regions */
  unsigned cell;     /* current cell */
  uint64_t cell_end; /* offset where the current cell ends */
  uint64_t acc[4];   /* bytes of the current cell by kind: _ * x d */
  int pending_bar;   /* a region starts inside the current cell */
  char map[2 * CELLS + 4];
  unsigned maplen;
} scan_t;

static unsigned tf_bin(uint64_t size) {
  uint64_t u = size >> 8;
  unsigned b = u == 0 ? 0 : 63u - (unsigned)__builtin_clzll(u);
  return b < TF_BINS - 1 ? b : TF_BINS - 1;
}

static uint64_t cell_end(const scan_t *s, unsigned cell) {
  uint64_t k = (uint64_t)cell + 1;
  return s->total / CELLS * k + s->total % CELLS * k / CELLS;
}

static void map_put(scan_t *s, char ch) {
  if (s->maplen < sizeof(s->map) - 1) {
    s->map[s->maplen++] = ch;
  }
}

static void emit_cell(scan_t *s) {
  static const char kinds[4] = {'_', '*', 'x', 'd'};
  unsigned best = 0;
  for (unsigned i = 1; i < 4; i++) {
    if (s->acc[i] > s->acc[best]) {
      best = i;
    }
  }
  map_put(s, kinds[best]);
  if (s->pending_bar) {
    map_put(s, '|');
    s->pending_bar = 0;
  }
  memset(s->acc, 0, sizeof(s->acc));
  s->cell++;
  s->cell_end = cell_end(s, s->cell);
}

static void add_span(scan_t *s, unsigned kind, uint64_t len) {
  while (len > 0 && s->cell < CELLS) {
    uint64_t take = s->cell_end - s->off < len ? s->cell_end - s->off : len;
    s->acc[kind] += take;
    s->off += take;
    len -= take;
    if (s->off == s->cell_end) {
      emit_cell(s);
    }
  }
}

static int scan_chunk(void *ctx, const bfc_chunk_info_t *c) {
  scan_t *s = ctx;
  bin_sum_t *b = &s->bins[tf_bin(c->size)];
  b->chunks++;
  b->bytes += c->size;
  if (c->state == BFC_IN_USE) {
    b->in_use++;
    b->in_use_bytes += c->size;
    b->requested += c->requested;
  }
  if (c->region_start && s->off > 0 && s->cell < CELLS) {
    /* The bar goes before the current cell when the new region covers most of it. */
    uint64_t start = s->cell == 0 ? 0 : cell_end(s, s->cell - 1);
    if (2 * (s->off - start) <= s->cell_end - start) {
      if (s->maplen > 0 && s->map[s->maplen - 1] != '|') {
        map_put(s, '|');
      }
    } else {
      s->pending_bar = 1;
    }
  }
  if (c->state == BFC_IN_USE) {
    add_span(s, 1, c->requested);
    add_span(s, 2, c->size - c->requested);
  } else {
    add_span(s, c->state == BFC_DEFERRED ? 3 : 0, c->size);
  }
  return 0;
}

static void put_label(strbuf_t *w, const char *label, uint64_t v) {
  strbuf_str(w, label);
  for (size_t i = strlen(label); i < 18; i++) {
    strbuf_char(w, ' ');
  }
  strbuf_u64(w, v, 20);
  strbuf_char(w, '\n');
}

static void put_bins(strbuf_t *w, const scan_t *s) {
  strbuf_str(w, "Bin summary (TensorFlow's 21 bins: bin b holds chunks of [256 << b, 512 << b), "
                "bin 20 everything from 256 MiB; bins with no chunk left out):\n");
  for (unsigned b = 0; b < TF_BINS; b++) {
    const bin_sum_t *bs = &s->bins[b];
    if (bs->chunks == 0) {
      continue;
    }
    strbuf_str(w, "Bin (");
    strbuf_u64(w, (uint64_t)256 << b, 0);
    strbuf_str(w, "): \tTotal Chunks: ");
    strbuf_u64(w, bs->chunks, 0);
    strbuf_str(w, ", Chunks in use: ");
    strbuf_u64(w, bs->in_use, 0);
    strbuf_str(w, ". ");
    put_bytes(w, bs->bytes);
    strbuf_str(w, " allocated for chunks. ");
    put_bytes(w, bs->in_use_bytes);
    strbuf_str(w, " in use in bin. ");
    put_bytes(w, bs->requested);
    strbuf_str(w, " client-requested in use in bin.\n");
  }
}

/* One summary line up to its count: "<label><bytes> in <count> <things>". */
static void put_amount(strbuf_t *w, const char *label, uint64_t bytes, uint64_t count,
                       const char *things) {
  strbuf_str(w, label);
  put_bytes(w, bytes);
  strbuf_str(w, " in ");
  strbuf_u64(w, count, 0);
  strbuf_char(w, ' ');
  strbuf_str(w, things);
}

static void put_summary(strbuf_t *w, const bfc_stats_t *st, uint64_t request) {
  uint64_t rounded = bfc_round(request);
  if (request > 0) {
    strbuf_str(w, "gpucap: out of memory trying to allocate ");
    put_bytes(w, request);
    strbuf_str(w, " (");
    strbuf_u64(w, request, 0);
    if (rounded == 0) {
      /* Rounding up to the granularity overflows: no chunk or bin can ever hold it. */
      strbuf_str(w, " bytes: larger than any pool can hold)\n");
    } else {
      strbuf_str(w, " bytes, rounded to ");
      strbuf_u64(w, rounded, 0);
      strbuf_str(w, "); bin for the request: ");
      strbuf_u64(w, tf_bin(rounded), 0);
      strbuf_char(w, '\n');
    }
  } else {
    strbuf_str(w, "gpucap: memory pool state\n");
  }
  strbuf_str(w, "  limit:          ");
  put_bytes(w, st->bytes_limit);
  strbuf_str(w, " (");
  strbuf_u64(w, st->bytes_limit, 0);
  strbuf_str(w, " bytes), unreserved ");
  put_bytes(w, st->bytes_limit - st->pool_bytes);
  strbuf_char(w, '\n');
  put_amount(w, "  pool:           ", st->pool_bytes, st->num_regions, "regions");
  strbuf_str(w, " (peak ");
  put_bytes(w, st->peak_pool_bytes);
  strbuf_str(w, ")\n");
  put_amount(w, "  in use:         ", st->bytes_in_use, st->num_in_use, "blocks");
  strbuf_str(w, " (requested ");
  put_bytes(w, st->bytes_requested_in_use);
  strbuf_str(w, ", internal waste ");
  put_bytes(w, st->bytes_in_use - st->bytes_requested_in_use);
  strbuf_str(w, ")\n");
  put_amount(w, "  deferred:       ", st->deferred_bytes, st->num_deferred, "blocks");
  strbuf_str(w, " awaiting device synchronisation\n");
  put_amount(w, "  free:           ", st->free_bytes, st->num_free_chunks, "chunks");
  strbuf_str(w, "\n  largest free:   ");
  put_bytes(w, st->largest_free_block_bytes);
  strbuf_str(w, "\n  fragmentation:  ");
  put_pct(w, st->fragmentation);
  strbuf_str(w, " of the free bytes (1 - largest free / free)\n");
}

/* TensorFlow's AllocatorStats block: the lines whose figures are the pool's own at this moment,
 * in TensorFlow's order (core/stats.def says which counter goes on which line). TensorFlow's
 * Reserved lines (always 0 here) and the activity counters, which the exit report counts over
 * the whole process (its driver calls, the refusals the program saw), are left out. */
static void put_tf_stats(strbuf_t *w, const bfc_stats_t *st) {
  enum { TF_LINES = 7 };
  struct {
    const char *label;
    uint64_t value;
  } line[TF_LINES + 1] = {{NULL, 0}};
#define STAT(type, name, scope, tf, tf_label)                                                      \
  if (tf > 0) {                                                                                    \
    line[tf].label = tf_label;                                                                     \
    line[tf].value = (uint64_t)st->name;                                                           \
  }
#include "core/stats.def"
#undef STAT
  strbuf_str(w, "Stats:\n");
  for (int i = 1; i <= TF_LINES; i++) {
    put_label(w, line[i].label, line[i].value);
  }
}

size_t bfc_format_report(const bfc_pool_t *pool, uint64_t request, char *buf, size_t cap) {
  strbuf_t w;
  strbuf_init(&w, buf, cap);
  bfc_stats_t st;
  bfc_stats(pool, &st);
  scan_t s;
  memset(&s, 0, sizeof(s));
  s.total = st.pool_bytes;
  s.cell_end = cell_end(&s, 0);
  if (s.total > 0) {
    bfc_walk(pool, scan_chunk, &s);
  }

  put_summary(&w, &st, request);
  put_bins(&w, &s);
  put_tf_stats(&w, &st);
  strbuf_str(&w, "Occupancy (100 cells over ");
  put_bytes(&w, st.pool_bytes);
  strbuf_str(&w, "; _ free, * in use, x internal waste, d deferred, | region boundary):\n[");
  for (unsigned i = 0; i < s.maplen; i++) {
    strbuf_char(&w, s.map[i]);
  }
  strbuf_str(&w, "]\n");
  return strbuf_finish(&w);
}
