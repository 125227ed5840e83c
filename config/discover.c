/* The caps the cluster set (contracts in discover.h): one table of sources, each with its
 * parser, built on the value parsers of config/parse.h; the cgroup files through cgroup.h.
 *
 * Vendor sizes: MPS, HAMi and KAI write binary sizes the way NVIDIA's tools do (512M, 4g, and
 * 512MB meaning 512 MiB), so a B after a unit letter is dropped before cfg_parse_size reads the
 * value; GPUCAP_ settings themselves keep refusing "MB" (parse.h).
 */
#include "config/discover.h"

#include "config/cgroup.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (UINT64_C(1) << 20)
#define MARGIN (512 * MiB)
#define HAMI_PREFIX "CUDA_DEVICE_MEMORY_LIMIT_"
#define FILE_MAX 8192 /* a dmem file: a line per region of every device */
#define LIST_MAX 1024 /* a list variable, after its vendor units are normalised */

typedef struct source_type source_type_t;

/* Fills s's lines from text (the source is f->src[f->n], its lines from f->nlines on); returns
 * 0 or a negative errno with a one-line reason in why. */
typedef int parse_fn(cfg_found_t *f, const source_type_t *t, int ordinal, const char *text,
                     char *why, size_t whylen);

struct source_type {
  const char *name;
  cfg_line_kind_t kind;
  const char *enforcer;
  const char *accepted;
  parse_fn *parse;
};

static parse_fn parse_ordinals, parse_pcis, parse_mib, parse_size, parse_dmem;

#define DMEM_FORM                                                                                  \
  "lines 'drm/PCI_BUS_ID/REGION BYTES' or 'drm/PCI_BUS_ID/REGION max', as the kernel writes them"
#define MIB_FORM "a whole number of MiB (16384), as the container toolkit reads it"
#define SIZE_FORM "a size in bytes or with a binary unit (4294967296, 4096m, 4g, 4GiB)"

/* Every source, in the order they are read and shown. HAMi's per-device variables
 * (CUDA_DEVICE_MEMORY_LIMIT_<i>) are read with the row of CUDA_DEVICE_MEMORY_LIMIT. */
static const source_type_t types[] = {
    {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", CFG_LINE_LIMIT, "the MPS server",
     "ORDINAL=SIZE[,ORDINAL=SIZE...] with binary units (0=1G,1=512M)", parse_ordinals},
    {"SLURM_SHARD_MEM_PER_GPU", CFG_LINE_LIMIT, "Slurm, through the job's dmem.max",
     "PCI_BUS_ID=SIZE[,PCI_BUS_ID=SIZE...] (0000:3b:00.0=20480M)", parse_pcis},
    {"NVIDIA_GPU_MEMORY_LIMIT", CFG_LINE_LIMIT, "the driver, through the container toolkit's hook",
     MIB_FORM, parse_mib},
    {"NVIDIA_GPU_MEMORY_REQUEST", CFG_LINE_GUARANTEE,
     "the driver, through the container toolkit's hook", MIB_FORM, parse_mib},
    {"CUDA_DEVICE_MEMORY_LIMIT", CFG_LINE_LIMIT, "HAMi-core", SIZE_FORM, parse_size},
    {"GPU_MEMORY_LIMIT", CFG_LINE_LIMIT, "KAI, through HAMi-core or the driver", SIZE_FORM,
     parse_size},
    {"dmem.max", CFG_LINE_LIMIT, "the driver, through the cgroup's dmem controller", DMEM_FORM,
     parse_dmem},
    {"dmem.min", CFG_LINE_GUARANTEE, "the driver, through the cgroup's dmem controller", DMEM_FORM,
     parse_dmem},
};

#define NTYPES (sizeof types / sizeof types[0])
#define HAMI_TYPE 4 /* types[HAMI_TYPE] also reads CUDA_DEVICE_MEMORY_LIMIT_<i> */

/* ---------------------------------------------------------------- helpers */

static void set_why(char *why, size_t whylen, const char *text) {
  if (why != NULL && whylen > 0) {
    (void)snprintf(why, whylen, "%s", text);
  }
}

static bool blank_char(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

/* s[0..*n) with the white space around it removed. */
static const char *trim(const char *s, size_t *n) {
  while (*n > 0 && blank_char(s[0])) {
    s++;
    (*n)--;
  }
  while (*n > 0 && blank_char(s[*n - 1])) {
    (*n)--;
  }
  return s;
}

static bool unit_letter(char c) {
  c = (char)toupper((unsigned char)c);
  return c == 'K' || c == 'M' || c == 'G' || c == 'T';
}

/* Copies s[0..n) into out[outlen] dropping each B (any case) that follows a unit letter and
 * ends a value (before the end, a comma or white space): "512MB" -> "512M". False iff it does
 * not fit. */
static bool vendor_units(const char *s, size_t n, char *out, size_t outlen) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    bool ends = i + 1 == n || s[i + 1] == ',' || blank_char(s[i + 1]);
    if ((s[i] == 'B' || s[i] == 'b') && i > 0 && unit_letter(s[i - 1]) && ends) {
      continue;
    }
    if (o + 1 >= outlen) {
      return false;
    }
    out[o++] = s[i];
  }
  out[o] = '\0';
  return true;
}

/* A vendor size s[0..n) in bytes. */
static int vendor_size(const char *s, size_t n, uint64_t *bytes, char *why, size_t whylen) {
  char buf[64];
  if (!vendor_units(s, n, buf, sizeof buf)) {
    set_why(why, whylen, "too long for a size");
    return -EINVAL;
  }
  return cfg_parse_size(buf, bytes, why, whylen);
}

/* Appends a line to f for the source being read. */
static int add_line(cfg_found_t *f, int device, const cfg_pci_t *pci, uint64_t bytes, char *why,
                    size_t whylen) {
  if (f->nlines >= CFG_FOUND_LINES) {
    set_why(why, whylen, "more device lines than gpucap keeps (512)");
    return -ENOSPC;
  }
  cfg_line_t *l = &f->line[f->nlines++];
  l->device = device;
  l->pci = pci != NULL ? *pci : (cfg_pci_t){0, 0, 0, 0};
  l->bytes = bytes;
  return 0;
}

static bool same_pci(const cfg_pci_t *a, const cfg_pci_t *b) {
  return a->domain == b->domain && a->bus == b->bus && a->device == b->device &&
         a->function == b->function;
}

/* The line of the source being read (lines from `first` on) for pci, or NULL. */
static cfg_line_t *line_for(cfg_found_t *f, int first, const cfg_pci_t *pci) {
  for (int i = first; i < f->nlines; i++) {
    if (f->line[i].device == CFG_BY_PCI && same_pci(&f->line[i].pci, pci)) {
      return &f->line[i];
    }
  }
  return NULL;
}

/* ---------------------------------------------------------------- PCI addresses */

/* Hex digits s[0..n) into *v; false on none, too many (> max_digits) or a non-hex byte. */
static bool hex(const char *s, size_t n, size_t max_digits, uint32_t *v) {
  if (n == 0 || n > max_digits) {
    return false;
  }
  uint32_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (!isxdigit((unsigned char)s[i])) {
      return false;
    }
    int c = tolower((unsigned char)s[i]);
    x = (x << 4) | (uint32_t)(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  *v = x;
  return true;
}

int cfg_parse_pci(const char *s, size_t len, cfg_pci_t *out) {
  const char *colon2 = NULL, *colon1 = NULL, *dot = NULL;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == ':') {
      colon1 = colon2;
      colon2 = s + i;
    } else if (s[i] == '.') {
      dot = s + i;
    }
  }
  if (colon2 == NULL || dot == NULL || dot < colon2) {
    return -EINVAL;
  }
  const char *bus = colon1 != NULL ? colon1 + 1 : s;
  cfg_pci_t p = {0, 0, 0, 0};
  // At most two colons: a third would make colon1 a later one and leave junk before it.
  for (const char *c = s; c < bus - 1 && colon1 != NULL; c++) {
    if (*c == ':' || *c == '.') {
      return -EINVAL;
    }
  }
  if ((colon1 != NULL && !hex(s, (size_t)(colon1 - s), 8, &p.domain)) ||
      !hex(bus, (size_t)(colon2 - bus), 2, &p.bus) ||
      !hex(colon2 + 1, (size_t)(dot - colon2 - 1), 2, &p.device) ||
      !hex(dot + 1, (size_t)(s + len - dot - 1), 1, &p.function) || p.device > 0x1f ||
      p.function > 7) {
    return -EINVAL;
  }
  *out = p;
  return 0;
}

size_t cfg_format_pci(const cfg_pci_t *p, char *buf, size_t len) {
  return cfg_snprintf(buf, len, "%04x:%02x:%02x.%x", (unsigned)p->domain, (unsigned)p->bus,
                      (unsigned)p->device, (unsigned)p->function);
}

/* ---------------------------------------------------------------- the parsers */

/* MPS: ORDINAL=SIZE,... through the per-device list parser of GPUCAP_MEMORY_LIMIT. */
static int parse_ordinals(cfg_found_t *f, const source_type_t *t, int ordinal, const char *text,
                          char *why, size_t whylen) {
  char buf[LIST_MAX];
  cfg_devvals_t v;
  (void)t;
  (void)ordinal;
  if (!vendor_units(text, strlen(text), buf, sizeof buf)) {
    set_why(why, whylen, "too long");
    return -EINVAL;
  }
  int rc = cfg_parse_devvals(buf, CFG_DEV_SIZE, &v, why, whylen);
  if (rc != 0) {
    return rc;
  }
  if (v.every) {
    set_why(why, whylen, "names no device");
    return -EINVAL;
  }
  for (int d = 0; d < GPUCAP_MAX_DEVICES; d++) {
    if ((v.mask & (UINT64_C(1) << d)) && (rc = add_line(f, d, NULL, v.value[d], why, whylen))) {
      return rc;
    }
  }
  return 0;
}

/* Slurm: PCI_BUS_ID=SIZE,... */
static int parse_pcis(cfg_found_t *f, const source_type_t *t, int ordinal, const char *text,
                      char *why, size_t whylen) {
  int first = f->nlines;
  (void)t;
  (void)ordinal;
  for (const char *item = text;; item++) {
    const char *end = strchr(item, ',');
    size_t n = end != NULL ? (size_t)(end - item) : strlen(item);
    const char *eq = memchr(item, '=', n);
    if (eq == NULL) {
      set_why(why, whylen, "an item is not PCI_BUS_ID=SIZE");
      return -EINVAL;
    }
    size_t pn = (size_t)(eq - item), vn = n - pn - 1;
    const char *p = trim(item, &pn), *v = trim(eq + 1, &vn);
    cfg_pci_t pci;
    uint64_t bytes = 0;
    if (cfg_parse_pci(p, pn, &pci) != 0) {
      set_why(why, whylen, "an item's PCI bus id is not DOMAIN:BUS:DEVICE.FUNCTION");
      return -EINVAL;
    }
    int rc = vendor_size(v, vn, &bytes, why, whylen);
    if (rc != 0) {
      return rc;
    }
    if (line_for(f, first, &pci) != NULL) {
      set_why(why, whylen, "a PCI bus id is given twice");
      return -EINVAL;
    }
    if ((rc = add_line(f, CFG_BY_PCI, &pci, bytes, why, whylen)) != 0) {
      return rc;
    }
    if (end == NULL) {
      return 0;
    }
    item = end;
  }
}

/* The container toolkit: a whole number of MiB (strconv.ParseUint, base 10), for every device. A
 * request of 0 is no guarantee; a limit of 0 would leave nothing and is refused. */
static int parse_mib(cfg_found_t *f, const source_type_t *t, int ordinal, const char *text,
                     char *why, size_t whylen) {
  uint64_t mib = 0;
  (void)ordinal;
  uint64_t least = t->kind == CFG_LINE_GUARANTEE ? 0 : 1;
  int rc = cfg_parse_uint(text, least, UINT64_MAX / MiB, &mib, why, whylen);
  return rc != 0 ? rc : add_line(f, CFG_EVERY_DEVICE, NULL, mib * MiB, why, whylen);
}

/* HAMi and KAI: one size, for every device (or HAMi's ordinal i). */
static int parse_size(cfg_found_t *f, const source_type_t *t, int ordinal, const char *text,
                      char *why, size_t whylen) {
  uint64_t bytes = 0;
  (void)t;
  size_t n = strlen(text);
  const char *s = trim(text, &n);
  int rc = vendor_size(s, n, &bytes, why, whylen);
  return rc != 0 ? rc : add_line(f, ordinal, NULL, bytes, why, whylen);
}

/* A dmem file: "REGION VALUE" per line; regions drm/PCI/vram* count (their sum per device; a
 * device with an unlimited region gets no line), others are not device memory and are skipped. */
static int parse_dmem(cfg_found_t *f, const source_type_t *t, int ordinal, const char *text,
                      char *why, size_t whylen) {
  int first = f->nlines;
  (void)t;
  (void)ordinal;
  for (const char *line = text; *line != '\0';) {
    const char *nl = strchr(line, '\n');
    size_t n = nl != NULL ? (size_t)(nl - line) : strlen(line);
    const char *next = nl != NULL ? nl + 1 : line + n;
    const char *s = trim(line, &n);
    line = next;
    if (n == 0) {
      continue;
    }
    size_t rn = 0;
    while (rn < n && !blank_char(s[rn])) {
      rn++;
    }
    size_t vn = n - rn;
    const char *v = trim(s + rn, &vn);
    char value[32];
    uint64_t bytes = UINT64_MAX;
    if (vn == 0 || vn >= sizeof value) {
      set_why(why, whylen, "a line is not REGION VALUE");
      return -EINVAL;
    }
    memcpy(value, v, vn);
    value[vn] = '\0';
    if (strcmp(value, "max") != 0 && cfg_parse_uint(value, 0, UINT64_MAX, &bytes, why, whylen)) {
      return -EINVAL;
    }
    const char *slash = rn > 4 ? memchr(s + 4, '/', rn - 4) : NULL;
    cfg_pci_t pci;
    if (rn <= 4 || memcmp(s, "drm/", 4) != 0 || slash == NULL ||
        cfg_parse_pci(s + 4, (size_t)(slash - s - 4), &pci) != 0 ||
        (size_t)(s + rn - slash - 1) < 4 || memcmp(slash + 1, "vram", 4) != 0) {
      continue; /* not a PCI device's video memory */
    }
    cfg_line_t *l = line_for(f, first, &pci);
    if (l == NULL) {
      int rc = add_line(f, CFG_BY_PCI, &pci, bytes, why, whylen);
      if (rc != 0) {
        return rc;
      }
    } else {
      l->bytes = l->bytes > UINT64_MAX - bytes ? UINT64_MAX : l->bytes + bytes;
    }
  }
  int kept = first; /* drop the devices without a limit */
  for (int i = first; i < f->nlines; i++) {
    if (f->line[i].bytes != UINT64_MAX) {
      f->line[kept++] = f->line[i];
    }
  }
  f->nlines = kept;
  return 0;
}

/* ---------------------------------------------------------------- reading */

void cfg_found_clear(cfg_found_t *f) {
  f->n = 0;
  f->nlines = 0;
  f->overflowed = false;
}

/* Appends "NAME[ (WHERE)]='value': why; accepted: form\n" to msg. */
static void say(char *msg, size_t msglen, const char *name, const char *where, const char *text,
                const char *why, const char *accepted) {
  if (msg == NULL || msglen == 0) {
    return;
  }
  size_t at = strnlen(msg, msglen - 1);
  char q[CFG_QUOTE_MAX];
  cfg_quote(text, q, sizeof q);
  (void)snprintf(msg + at, msglen - at, "%s%s%s%s='%s': %s; accepted: %s\n", name,
                 where != NULL && where[0] ? " (" : "", where != NULL ? where : "",
                 where != NULL && where[0] ? ")" : "", q, why, accepted);
}

/* Writes text for display: its lines joined by "; ", quoted. */
static void shown(const char *text, char *out, size_t outlen) {
  char joined[CFG_QUOTE_IN + 8];
  size_t o = 0;
  bool gap = false;
  for (const char *s = text; *s != '\0' && o + 3 < sizeof joined; s++) {
    if (*s == '\n') {
      gap = o > 0;
      continue;
    }
    if (gap) {
      joined[o++] = ';';
      joined[o++] = ' ';
      gap = false;
    }
    joined[o++] = *s;
  }
  joined[o < sizeof joined ? o : sizeof joined - 1] = '\0';
  cfg_quote(joined, out, outlen);
}

/* Copies path into where[], "..." and its tail when it is too long. */
static void set_where(char *where, const char *path) {
  size_t n = path != NULL ? strlen(path) : 0;
  if (n < CFG_SOURCE_WHERE_MAX) {
    (void)snprintf(where, CFG_SOURCE_WHERE_MAX, "%s", n > 0 ? path : "");
  } else {
    (void)snprintf(where, CFG_SOURCE_WHERE_MAX, "...%s", path + n - (CFG_SOURCE_WHERE_MAX - 4));
  }
}

int cfg_discover_add(cfg_found_t *f, const char *name, const char *where, const char *text,
                     char *msg, size_t msglen) {
  int saved = errno;
  const source_type_t *t = NULL;
  int ordinal = CFG_EVERY_DEVICE;
  uint64_t i = 0;
  size_t hp = sizeof HAMI_PREFIX - 1;
  for (size_t k = 0; k < NTYPES && t == NULL; k++) {
    t = strcmp(name, types[k].name) == 0 ? &types[k] : NULL;
  }
  if (t == NULL && strncmp(name, HAMI_PREFIX, hp) == 0 &&
      cfg_parse_uint(name + hp, 0, GPUCAP_MAX_DEVICES - 1, &i, NULL, 0) == 0) {
    t = &types[HAMI_TYPE];
    ordinal = (int)i;
  }
  if (t == NULL) {
    errno = saved;
    return -ENOENT;
  }
  char why[CFG_WHY_MAX];
  if (f->n >= CFG_FOUND_SOURCES) {
    f->overflowed = true;
    say(msg, msglen, name, where, text, "more sources than gpucap keeps (112)", t->accepted);
    errno = saved;
    return -ENOSPC;
  }
  cfg_found_src_t *s = &f->src[f->n];
  (void)snprintf(s->name, sizeof s->name, "%s", name);
  set_where(s->where, where);
  shown(text, s->value, sizeof s->value);
  s->kind = t->kind;
  s->enforcer = t->enforcer;
  s->first = f->nlines;
  why[0] = '\0';
  int rc = t->parse(f, t, ordinal, text, why, sizeof why);
  s->valid = rc == 0;
  if (rc != 0) {
    f->nlines = s->first; /* an invalid source applies nothing */
    f->overflowed |= rc == -ENOSPC;
    say(msg, msglen, name, where, text, why, t->accepted);
  }
  s->count = f->nlines - s->first;
  f->n++;
  errno = saved;
  return rc == 0 ? 0 : -EINVAL;
}

/* Whether v is unset, empty or only white space (as cfg_load counts a variable unset). */
static bool unset(const char *v) {
  size_t n = v != NULL ? strlen(v) : 0;
  trim(v != NULL ? v : "", &n);
  return n == 0;
}

static const char *process_getenv(void *ctx, const char *name, bool secure) {
  (void)ctx;
  (void)secure;
  return getenv(name);
}

int cfg_discover_cgroup(cfg_found_t *f, const char *dir, size_t rootlen, char *msg, size_t msglen) {
  int saved = errno;
  static const char *const files[] = {"dmem.max", "dmem.min"};
  char text[FILE_MAX];
  char path[PATH_MAX];
  int bad = 0;
  for (size_t n = strlen(dir);;) {
    for (size_t k = 0; k < 2; k++) {
      int w = snprintf(path, sizeof path, "%.*s/%s", (int)n, dir, files[k]);
      int rc = w > 0 && (size_t)w < sizeof path ? cfg_cgroup_read(path, text, sizeof text)
                                                : -ENAMETOOLONG;
      if (rc == -ENOENT) {
        continue;
      }
      if (rc != 0) {
        (void)snprintf(text, sizeof text, "(unreadable: %s)", strerror(-rc));
      }
      bad |= cfg_discover_add(f, files[k], path, text, msg, msglen) != 0;
    }
    if (n <= rootlen) {
      break;
    }
    while (n > rootlen && dir[n - 1] != '/') {
      n--;
    }
    while (n > rootlen && dir[n - 1] == '/') {
      n--;
    }
  }
  errno = saved;
  return bad ? -EINVAL : 0;
}

int cfg_discover(cfg_found_t *f, const cfg_t *cfg, cfg_getenv_fn *get, void *ctx, char *msg,
                 size_t msglen) {
  int saved = errno;
  int bad = 0;
  if (msg != NULL && msglen > 0) {
    msg[0] = '\0';
  }
  cfg_found_clear(f);
  if (cfg == NULL || !cfg->valid || !cfg->discover) {
    return 0;
  }
  if (get == NULL) {
    get = process_getenv;
  }
  for (size_t k = 0; k < NTYPES; k++) {
    if (types[k].parse == parse_dmem) {
      continue;
    }
    const char *v = get(ctx, types[k].name, false);
    if (!unset(v)) {
      bad |= cfg_discover_add(f, types[k].name, NULL, v, msg, msglen) != 0;
    }
    for (int d = 0; k == HAMI_TYPE && d < GPUCAP_MAX_DEVICES; d++) {
      char name[CFG_SOURCE_NAME_MAX];
      (void)snprintf(name, sizeof name, HAMI_PREFIX "%d", d);
      v = get(ctx, name, false);
      if (!unset(v)) {
        bad |= cfg_discover_add(f, name, NULL, v, msg, msglen) != 0;
      }
    }
  }
  char dir[PATH_MAX];
  size_t rootlen = 0;
  if (cfg_cgroup_dir(cfg->cgroup_root, dir, sizeof dir, &rootlen) == 0) {
    bad |= cfg_discover_cgroup(f, dir, rootlen, msg, msglen) != 0;
  }
  errno = saved;
  return bad ? -EINVAL : 0;
}

/* ---------------------------------------------------------------- per device */

uint64_t cfg_discover_margin(uint64_t line) {
  return line / 4 < MARGIN ? line / 4 : MARGIN;
}

void cfg_discover_device(const cfg_found_t *f, int ordinal, const cfg_pci_t *pci, bool margin,
                         cfg_devcap_t *out) {
  *out = (cfg_devcap_t){UINT64_MAX, -1, 0, UINT64_MAX, -1};
  for (int i = 0; i < f->n; i++) {
    const cfg_found_src_t *s = &f->src[i];
    for (int k = s->first; s->valid && k < s->first + s->count; k++) {
      const cfg_line_t *l = &f->line[k];
      bool applies = l->device == CFG_EVERY_DEVICE || (l->device >= 0 && l->device == ordinal) ||
                     (l->device == CFG_BY_PCI && pci != NULL && same_pci(&l->pci, pci));
      if (!applies) {
        continue;
      }
      uint64_t under = margin ? cfg_discover_margin(l->bytes) : 0;
      if (s->kind == CFG_LINE_LIMIT && l->bytes - under < out->cap) {
        out->cap = l->bytes - under;
        out->limit_src = i;
        out->line = l->bytes;
      } else if (s->kind == CFG_LINE_GUARANTEE && l->bytes < out->soft) {
        out->soft = l->bytes;
        out->soft_src = i;
      }
    }
  }
  if (out->soft == 0) { /* a guarantee of nothing somewhere up the chain: none */
    out->soft = UINT64_MAX;
    out->soft_src = -1;
  }
}
