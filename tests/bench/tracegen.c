/* gpucap-tracegen: writes synthetic GPU allocation traces in RMM's CSV log format.
 *
 * Five deterministic workloads (same seed, same bytes on every machine): transformer training
 * with a sequence length that changes every step, CNN training, an LLM server with variable
 * batches and growing KV caches, an adversarial mix of growing large buffers and long-lived
 * small pins, and random sizes. Rows follow rmm::mr::logging_resource_adaptor:
 * `Thread,Time,Action,Pointer,Size,Stream`. Every allocation is freed by the end of a trace.
 * Usage: gpucap-tracegen KIND [--seed N] [--scale X] [-o FILE]; KIND=list prints the kinds.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)

enum { MAX_IDS = 1 << 20 };

typedef struct gen {
  FILE *out;
  uint64_t rng;
  uint64_t t_us;      /* simulated wall clock */
  uint64_t *free_ids; /* recycled pointer ids, so pointers are reused like a real allocator's */
  uint32_t nfree;
  uint32_t next_id;
  uint64_t live, peak, allocs;
  double scale;
} gen_t;

typedef struct buf {
  uint64_t ptr, size;
} buf_t;

static uint64_t rnd(gen_t *g) {
  uint64_t x = g->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  g->rng = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [lo, hi]. */
static uint64_t uni(gen_t *g, uint64_t lo, uint64_t hi) {
  return lo + rnd(g) % (hi - lo + 1);
}

/* Roughly log-uniform in [lo, hi]. */
static uint64_t logu(gen_t *g, uint64_t lo, uint64_t hi) {
  unsigned lb = 63u - (unsigned)__builtin_clzll(lo), hb = 63u - (unsigned)__builtin_clzll(hi);
  unsigned b = lb + (unsigned)(rnd(g) % (hb - lb + 1));
  uint64_t v = ((uint64_t)1 << b) + rnd(g) % ((uint64_t)1 << b);
  return v < lo ? lo : (v > hi ? hi : v);
}

static void row(gen_t *g, const char *action, uint64_t ptr, uint64_t size) {
  g->t_us += 1 + rnd(g) % 40;
  uint64_t s = g->t_us / 1000000, us = g->t_us % 1000000;
  fprintf(g->out,
          "140230991394624,%02" PRIu64 ":%02" PRIu64 ":%02" PRIu64 ".%06" PRIu64 ",%s,0x%" PRIx64
          ",%" PRIu64 ",0\n",
          (s / 3600) % 24, (s / 60) % 60, s % 60, us, action, ptr, size);
}

static buf_t alloc(gen_t *g, uint64_t size) {
  uint64_t id;
  if (g->nfree > 0) {
    id = g->free_ids[--g->nfree];
  } else {
    id = g->next_id++;
  }
  buf_t b = {0x7f3a00000000ull + id * 0x100000ull, size};
  row(g, "allocate", b.ptr, size);
  g->live += size;
  g->allocs++;
  if (g->live > g->peak) {
    g->peak = g->live;
  }
  return b;
}

static void release(gen_t *g, buf_t *b) {
  if (b->size == 0) {
    return;
  }
  row(g, "free", b->ptr, b->size);
  g->live -= b->size;
  if (g->nfree < MAX_IDS) {
    g->free_ids[g->nfree++] = (b->ptr - 0x7f3a00000000ull) / 0x100000ull;
  }
  b->size = 0;
}

static long steps(gen_t *g, long n) {
  long s = (long)((double)n * g->scale);
  return s < 1 ? 1 : s;
}

/* ---- transformer training, sequence length changes every step ------------------------- */

static void gen_transformer(gen_t *g) {
  enum { L = 12, H = 768, FF = 3072, HEADS = 12, B = 8, V = 32000, NP = 4 + L * 12 };
  buf_t params[NP][4]; /* fp16 weight, fp32 master, Adam m, Adam v */
  uint64_t psize[NP];
  int np = 0;
  psize[np++] = (uint64_t)V * H;
  psize[np++] = (uint64_t)1024 * H;
  psize[np++] = H;
  psize[np++] = H;
  for (int l = 0; l < L; l++) {
    uint64_t shapes[12] = {3 * H * H, 3 * H, H * H, H, (uint64_t)FF * H, FF, (uint64_t)H * FF, H,
                           H,         H,     H,     H};
    for (int k = 0; k < 12; k++) {
      psize[np++] = shapes[k];
    }
  }
  for (int i = 0; i < np; i++) {
    params[i][0] = alloc(g, psize[i] * 2);
    for (int k = 1; k < 4; k++) {
      params[i][k] = alloc(g, psize[i] * 4);
    }
  }
  long n = steps(g, 140);
  for (long step = 0; step < n; step++) {
    uint64_t S = 64 * uni(g, 2, 16); /* 128..1024 tokens, new every step */
    uint64_t T = B * S;
    buf_t saved[L][12];
    buf_t tok = alloc(g, T * 8);
    buf_t x = alloc(g, T * H * 2);
    for (int l = 0; l < L; l++) {
      buf_t *s = saved[l];
      s[0] = alloc(g, T * H * 2);     /* ln1 out */
      s[1] = alloc(g, T * 8);         /* ln1 mean/rstd */
      s[2] = alloc(g, T * 3 * H * 2); /* qkv */
      buf_t scores = alloc(g, (uint64_t)B * HEADS * S * S * 2);
      s[3] = alloc(g, (uint64_t)B * HEADS * S * S * 2); /* softmax probs */
      release(g, &scores);
      s[4] = alloc(g, T * H * 2);   /* context */
      buf_t ws = alloc(g, 4 * MiB); /* cuBLAS workspace */
      buf_t proj = alloc(g, T * H * 2);
      release(g, &ws);
      s[5] = alloc(g, T * H);     /* dropout mask */
      s[6] = alloc(g, T * H * 2); /* residual */
      release(g, &proj);
      s[7] = alloc(g, T * H * 2);  /* ln2 out */
      s[8] = alloc(g, T * FF * 2); /* ff1 */
      s[9] = alloc(g, T * FF * 2); /* gelu */
      buf_t ff2 = alloc(g, T * H * 2);
      s[10] = alloc(g, T * H);     /* dropout mask */
      s[11] = alloc(g, T * H * 2); /* residual */
      release(g, &ff2);
    }
    buf_t logits = alloc(g, T * V * 2);
    buf_t lsm = alloc(g, T * V * 4);
    buf_t loss = alloc(g, 4);
    release(g, &lsm);
    buf_t dlogits = alloc(g, T * V * 2);
    release(g, &logits);
    buf_t grads[NP];
    memset(grads, 0, sizeof(grads));
    grads[0] = alloc(g, psize[0] * 2);
    buf_t dx = alloc(g, T * H * 2);
    release(g, &dlogits);
    for (int l = L - 1; l >= 0; l--) {
      buf_t *s = saved[l];
      buf_t dff = alloc(g, T * FF * 2);
      for (int k = 6; k < 12; k++) {
        int pi = 4 + l * 12 + k;
        grads[pi] = alloc(g, psize[pi] * 2);
      }
      buf_t dff2 = alloc(g, T * FF * 2);
      release(g, &s[11]);
      release(g, &s[10]);
      release(g, &s[9]);
      release(g, &s[8]);
      release(g, &dff);
      buf_t dln2 = alloc(g, T * H * 2);
      release(g, &dff2);
      release(g, &s[7]);
      buf_t dprobs = alloc(g, (uint64_t)B * HEADS * S * S * 2);
      buf_t dscores = alloc(g, (uint64_t)B * HEADS * S * S * 2);
      release(g, &dprobs);
      for (int k = 0; k < 6; k++) {
        int pi = 4 + l * 12 + k;
        grads[pi] = alloc(g, psize[pi] * 2);
      }
      buf_t dqkv = alloc(g, T * 3 * H * 2);
      release(g, &dscores);
      for (int k = 6; k >= 0; k--) {
        release(g, &s[k]);
      }
      buf_t dx2 = alloc(g, T * H * 2);
      release(g, &dqkv);
      release(g, &dln2);
      release(g, &dx);
      dx = dx2;
    }
    for (int i = 1; i < 4; i++) {
      grads[i] = alloc(g, psize[i] * 2);
    }
    release(g, &dx);
    release(g, &x);
    release(g, &tok);
    release(g, &loss);
    /* Fused Adam: a norm buffer, then per-parameter fp32 temporaries. */
    buf_t norm = alloc(g, 4 * 1024);
    for (int i = 0; i < np; i++) {
      buf_t tmp = alloc(g, psize[i] * 4);
      release(g, &tmp);
      release(g, &grads[i]);
    }
    release(g, &norm);
  }
  for (int i = 0; i < np; i++) {
    for (int k = 0; k < 4; k++) {
      release(g, &params[i][k]);
    }
  }
}

/* ---- CNN training (ResNet-50-like, fp16) ----------------------------------------------- */

static void gen_cnn(gen_t *g) {
  static const int blocks[4] = {3, 4, 6, 3};
  static const uint64_t width[4] = {64, 128, 256, 512}, hw[4] = {56, 28, 14, 7};
  enum { NB = 16, MAXW = 64 };
  buf_t wts[NB * 3 + 2][2]; /* weight, momentum */
  uint64_t wsz[NB * 3 + 2];
  int nw = 0;
  wsz[nw++] = 64 * 3 * 7 * 7 * 4;
  for (int s = 0; s < 4; s++) {
    for (int b = 0; b < blocks[s]; b++) {
      uint64_t c = width[s];
      wsz[nw++] = c * 4 * c * 4;
      wsz[nw++] = c * c * 9 * 4;
      wsz[nw++] = c * c * 4 * 4;
    }
  }
  wsz[nw++] = 2048 * 1000 * 4;
  for (int i = 0; i < nw; i++) {
    wts[i][0] = alloc(g, wsz[i]);
    wts[i][1] = alloc(g, wsz[i]);
  }
  static const uint64_t workspace[4] = {0, MiB, 8 * MiB, 32 * MiB};
  long n = steps(g, 260);
  for (long step = 0; step < n; step++) {
    uint64_t N = (step % 100 == 99) ? 40 : (step % 50 == 49 ? 32 : 64); /* last batch, eval */
    buf_t saved[NB][8];
    buf_t in = alloc(g, N * 3 * 224 * 224 * 2);
    buf_t stem = alloc(g, N * 64 * 112 * 112 * 2);
    buf_t pool = alloc(g, N * 64 * 56 * 56 * 2);
    int k = 0;
    for (int s = 0; s < 4; s++) {
      for (int b = 0; b < blocks[s]; b++, k++) {
        uint64_t c = width[s], a = N * c * hw[s] * hw[s] * 2;
        for (int j = 0; j < 3; j++) {
          uint64_t wsize = workspace[(k * 3 + j + (int)N) % 4];
          buf_t ws = wsize ? alloc(g, wsize) : (buf_t){0, 0};
          saved[k][2 * j] = alloc(g, j == 2 ? 4 * a : a); /* conv out */
          release(g, &ws);
          saved[k][2 * j + 1] = alloc(g, j == 2 ? 4 * a : a); /* bn out */
        }
        saved[k][6] = alloc(g, c * 4 * 4 * 2); /* bn save mean/var */
        saved[k][7] = alloc(g, 4 * a);         /* residual sum */
      }
    }
    buf_t fc = alloc(g, N * 1000 * 4);
    buf_t dfc = alloc(g, N * 1000 * 4);
    buf_t dx = alloc(g, N * 2048 * 7 * 7 * 2);
    buf_t grads[NB * 3 + 2];
    memset(grads, 0, sizeof(grads));
    grads[nw - 1] = alloc(g, wsz[nw - 1]);
    release(g, &fc);
    for (k = NB - 1; k >= 0; k--) {
      int s = k < 3 ? 0 : k < 7 ? 1 : k < 13 ? 2 : 3;
      uint64_t c = width[s], a = N * c * hw[s] * hw[s] * 2;
      for (int j = 2; j >= 0; j--) {
        uint64_t wsize = workspace[(k * 3 + j + 1 + (int)N) % 4];
        buf_t ws = wsize ? alloc(g, wsize) : (buf_t){0, 0};
        buf_t d = alloc(g, j == 2 ? a : (j == 1 ? a : 4 * a));
        grads[1 + k * 3 + j] = alloc(g, wsz[1 + k * 3 + j]);
        release(g, &ws);
        release(g, &saved[k][2 * j + 1]);
        release(g, &saved[k][2 * j]);
        release(g, &dx);
        dx = d;
      }
      release(g, &saved[k][6]);
      release(g, &saved[k][7]);
    }
    grads[0] = alloc(g, wsz[0]);
    release(g, &dx);
    release(g, &dfc);
    release(g, &pool);
    release(g, &stem);
    release(g, &in);
    for (int i = 0; i < nw; i++) {
      release(g, &grads[i]);
    }
  }
  for (int i = 0; i < nw; i++) {
    release(g, &wts[i][0]);
    release(g, &wts[i][1]);
  }
}

/* ---- LLM server: variable batches, growing KV caches ---------------------------------- */

typedef struct request {
  buf_t kv;
  uint64_t tokens, cap, remaining;
  int cat; /* grows by small steps (torch.cat style) instead of x1.5 */
} request_t;

static void gen_llm(gen_t *g) {
  enum { L = 24, H = 2048, FF = 5632, V = 32000, MAXB = 24 };
  const uint64_t per_token = 2ull * L * H * 2 / 8; /* GQA: 8x fewer KV heads */
  buf_t weights[L * 7 + 3];
  int nw = 0;
  weights[nw++] = alloc(g, (uint64_t)V * H * 2);
  for (int l = 0; l < L; l++) {
    uint64_t shapes[7] = {
        H * H, H * H / 8, H * H / 8, H * H, (uint64_t)H * FF, (uint64_t)H * FF, (uint64_t)FF * H};
    for (int k = 0; k < 7; k++) {
      weights[nw++] = alloc(g, shapes[k] * 2);
    }
  }
  weights[nw++] = alloc(g, (uint64_t)V * H * 2);
  weights[nw++] = alloc(g, 4 * H);
  request_t req[MAXB];
  memset(req, 0, sizeof(req));
  long n = steps(g, 9000);
  for (long it = 0; it < n; it++) {
    /* Admit new requests (prefill), batched. */
    int admitted = 0;
    for (int i = 0; i < MAXB && it + 64 < n; i++) {
      if (req[i].remaining == 0 && rnd(g) % 8 == 0) {
        request_t *r = &req[i];
        uint64_t prompt = logu(g, 16, 2048);
        r->tokens = prompt;
        r->remaining = logu(g, 8, 512);
        r->cat = (int)(rnd(g) % 2);
        r->cap = r->cat ? prompt + 16 : (prompt + 64 + 63) / 64 * 64;
        r->kv = alloc(g, r->cap * per_token);
        uint64_t T = prompt;
        buf_t hs = alloc(g, T * H * 2);
        buf_t qkv = alloc(g, T * H * 2 * 5 / 4);
        buf_t sc = alloc(g, T * T * 2 * 16);
        buf_t mlp = alloc(g, T * FF * 2 * 2);
        release(g, &sc);
        release(g, &mlp);
        release(g, &qkv);
        release(g, &hs);
        admitted++;
      }
    }
    (void)admitted;
    /* One decode step for the whole batch. */
    uint64_t bs = 0;
    for (int i = 0; i < MAXB; i++) {
      bs += req[i].remaining > 0;
    }
    if (bs == 0) {
      continue;
    }
    buf_t hs = alloc(g, bs * H * 2);
    buf_t meta = alloc(g, bs * 64);
    for (int l = 0; l < L; l += 6) {
      buf_t t1 = alloc(g, bs * H * 2 * 5 / 4);
      buf_t t2 = alloc(g, bs * FF * 2 * 2);
      release(g, &t1);
      release(g, &t2);
    }
    buf_t logits = alloc(g, bs * V * 4);
    buf_t probs = alloc(g, bs * V * 4);
    buf_t next = alloc(g, bs * 8);
    release(g, &probs);
    release(g, &logits);
    for (int i = 0; i < MAXB; i++) {
      request_t *r = &req[i];
      if (r->remaining == 0) {
        continue;
      }
      r->tokens++;
      r->remaining--;
      if (r->tokens > r->cap) {
        uint64_t cap = r->cat ? r->cap + 16 : (r->cap * 3 / 2 + 63) / 64 * 64;
        buf_t kv = alloc(g, cap * per_token); /* copy, then drop the old cache */
        release(g, &r->kv);
        r->kv = kv;
        r->cap = cap;
      }
      if (r->remaining == 0) {
        release(g, &r->kv);
      }
    }
    release(g, &next);
    release(g, &meta);
    release(g, &hs);
  }
  for (int i = 0; i < MAXB; i++) {
    release(g, &req[i].kv);
  }
  for (int i = 0; i < nw; i++) {
    release(g, &weights[i]);
  }
}

/* ---- adversarial: growing large buffers, long-lived small pins ------------------------ */

static void gen_adversarial(gen_t *g) {
  enum { NBUF = 3, NPIN = 4096 };
  buf_t big[NBUF];
  buf_t pins[NPIN];
  long pin_until[NPIN];
  memset(pins, 0, sizeof(pins));
  memset(pin_until, 0, sizeof(pin_until));
  for (int i = 0; i < NBUF; i++) {
    big[i] = alloc(g, 16 * MiB + uni(g, 0, MiB));
  }
  long n = steps(g, 50000);
  for (long t = 0; t < n; t++) {
    /* Each tick: one buffer may grow by 25% (alloc bigger, free old) or restart small. */
    if (rnd(g) % 16 == 0) {
      int i = (int)(rnd(g) % NBUF);
      uint64_t sz = big[i].size * 5 / 4 + uni(g, 0, 4096);
      if (sz > 384 * MiB) {
        sz = 16 * MiB + uni(g, 0, MiB);
      }
      buf_t nb = alloc(g, sz);
      release(g, &big[i]);
      big[i] = nb;
    }
    /* Small pins with long, random lifetimes land in the holes the big buffers leave. */
    int slot = (int)(rnd(g) % NPIN);
    if (pins[slot].size != 0 && pin_until[slot] <= t) {
      release(g, &pins[slot]);
    }
    if (pins[slot].size == 0) {
      pins[slot] = alloc(g, logu(g, 512, 256 * KiB));
      pin_until[slot] = t + (long)logu(g, 64, 20000);
    }
    /* Short-lived temporaries. */
    buf_t tmp = alloc(g, logu(g, 4 * KiB, 8 * MiB));
    release(g, &tmp);
  }
  for (int i = 0; i < NPIN; i++) {
    release(g, &pins[i]);
  }
  for (int i = 0; i < NBUF; i++) {
    release(g, &big[i]);
  }
}

/* ---- random sizes ---------------------------------------------------------------------- */

static void gen_random(gen_t *g) {
  enum { TARGET = 2000, MAXL = 4096 };
  buf_t live[MAXL];
  int nl = 0;
  long n = steps(g, 100000);
  for (long i = 0; i < n; i++) {
    while (nl > 0 && (nl >= MAXL || (rnd(g) % (2 * TARGET)) < (uint64_t)nl)) {
      int k = (int)(rnd(g) % (uint64_t)nl);
      release(g, &live[k]);
      live[k] = live[--nl];
    }
    live[nl++] = alloc(g, logu(g, 1, 32 * MiB));
    if (i % 10000 == 5000) {
      row(g, "allocate failure", 0, (uint64_t)1 << 40);
    }
  }
  while (nl > 0) {
    release(g, &live[--nl]);
  }
}

typedef struct kind {
  const char *name;
  void (*fn)(gen_t *);
  const char *doc;
} kind_t;

static const kind_t kinds[] = {
    {"transformer", gen_transformer, "GPT-2-small training, sequence length 128..1024 per step"},
    {"cnn", gen_cnn, "ResNet-50-like training, batch 64 with smaller last/eval batches"},
    {"llm", gen_llm, "LLM server: admission, prefill, batched decode, growing KV caches"},
    {"adversarial", gen_adversarial, "growing 16..384MiB buffers among long-lived small pins"},
    {"random", gen_random, "log-uniform 1B..32MiB sizes, ~2000 live, random free order"},
};

int main(int argc, char **argv) {
  const char *kind = argc > 1 ? argv[1] : NULL;
  const char *path = NULL;
  uint64_t seed = 1;
  double scale = 1.0;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = strtoull(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc) {
      scale = strtod(argv[++i], NULL);
    } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      path = argv[++i];
    } else {
      fprintf(stderr, "gpucap-tracegen: error: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  const kind_t *k = NULL;
  for (size_t i = 0; kind != NULL && i < sizeof(kinds) / sizeof(kinds[0]); i++) {
    if (strcmp(kind, kinds[i].name) == 0) {
      k = &kinds[i];
    }
  }
  if (k == NULL) {
    int list = kind != NULL && strcmp(kind, "list") == 0;
    FILE *f = list ? stdout : stderr;
    if (!list) {
      fprintf(f, "usage: gpucap-tracegen KIND [--seed N] [--scale X] [-o FILE]\nkinds:\n");
    }
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
      fprintf(f, list ? "%s\n" : "  %-12s %s\n", kinds[i].name, kinds[i].doc);
    }
    return list ? 0 : 2;
  }
  gen_t g;
  memset(&g, 0, sizeof(g));
  g.rng = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  g.scale = scale > 0 ? scale : 1.0;
  g.t_us = 8 * 3600 * 1000000ull;
  g.free_ids = malloc(MAX_IDS * sizeof(*g.free_ids));
  g.out = path ? fopen(path, "w") : stdout;
  if (g.free_ids == NULL || g.out == NULL) {
    fprintf(stderr, "gpucap-tracegen: error: %s: %s\n", path ? path : "stdout", strerror(errno));
    return 1;
  }
  static char iobuf[1 << 16];
  setvbuf(g.out, iobuf, _IOFBF, sizeof(iobuf));
  fprintf(g.out, "Thread,Time,Action,Pointer,Size,Stream\n");
  k->fn(&g);
  if (fclose(g.out) != 0) {
    fprintf(stderr, "gpucap-tracegen: error: %s: %s\n", path ? path : "stdout", strerror(errno));
    return 1;
  }
  fprintf(stderr, "gpucap-tracegen: %s: %" PRIu64 " allocations, peak live %" PRIu64 " bytes\n",
          k->name, g.allocs, g.peak);
  free(g.free_ids);
  return 0;
}
