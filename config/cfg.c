/* Loading gpucap's settings from the environment, and the option table behind --help and
 * `gpucap env`. The table, the field type checks and the enum in cfg.h are all generated from
 * config/options.def, so adding a setting is one row there plus its cfg_t field.
 *
 * Invariant: cfg_t.valid is true only after every variable read parsed (fail closed). Nothing
 * here allocates, prints or keeps state; the only global is the constant option table.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE // secure_getenv; the Makefile defines it for every object
#endif
#include "config/cfg.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sysinfo.h>

/* ---------------------------------------------------------------- the option table */

#define TYPE_NAME_LIMIT "size or per-device list"
#define TYPE_NAME_FRACTION "fraction or per-device list"
#define TYPE_NAME_BOOL "boolean"
#define TYPE_NAME_SWITCH "on/off"
#define TYPE_NAME_POOL "on/off, vmm or regions"
#define TYPE_NAME_COVERS "process or allocations"
#define TYPE_NAME_LEVEL "integer"
#define TYPE_NAME_ARENAS "auto or integer"
#define TYPE_NAME_REPORT "stderr, off or file"
#define TYPE_NAME_PATH "file"
#define TYPE_NAME_NAME "name"

typedef struct opt {
  cfg_optinfo_t info;
  size_t offset; /* of the option's field in cfg_t */
} opt_t;

static const opt_t options[CFG_OPT_COUNT] = {
#define CFG_OPT(id, field, type, def, min, max, secure, alias, doc, accepted)                      \
  {{"GPUCAP_" #id, CFG_TYPE_##type, TYPE_NAME_##type, def, min, max, secure, alias, doc,           \
    accepted},                                                                                     \
   offsetof(cfg_t, field)},
#include "config/options.def"
};

// Each row's cfg_t field must have the C type (and size) its type's parser writes.
#define CTYPE_LIMIT cfg_devvals_t
#define CTYPE_FRACTION cfg_devvals_t
#define CTYPE_BOOL bool
#define CTYPE_SWITCH bool
#define CTYPE_POOL int
#define CTYPE_COVERS int
#define CTYPE_LEVEL int
#define CTYPE_ARENAS int
#define CTYPE_REPORT cfg_dest_t
#define CTYPE_PATH char *
#define CTYPE_NAME char *
#define CSIZE_LIMIT cfg_devvals_t
#define CSIZE_FRACTION cfg_devvals_t
#define CSIZE_BOOL bool
#define CSIZE_SWITCH bool
#define CSIZE_POOL int
#define CSIZE_COVERS int
#define CSIZE_LEVEL int
#define CSIZE_ARENAS int
#define CSIZE_REPORT cfg_dest_t
#define CSIZE_PATH char[PATH_MAX]
#define CSIZE_NAME char[CFG_NAME_MAX]
#define CFG_OPT(id, field, type, def, min, max, ...)                                               \
  _Static_assert(_Generic(((cfg_t *)0)->field, CTYPE_##type : 1, default : 0) &&                   \
                     sizeof(((cfg_t *)0)->field) == sizeof(CSIZE_##type),                          \
                 "cfg_t." #field " does not have the C type of a " #type " option");               \
  _Static_assert((max) <= INT_MAX && (min) <= (max), "GPUCAP_" #id ": bad range");
#include "config/options.def"

/* ---------------------------------------------------------------- per-type parse and format */

typedef int parse_fn(const cfg_optinfo_t *o, const char *s, void *field, char *why, size_t whylen);
typedef size_t format_fn(const cfg_optinfo_t *o, const void *field, char *buf, size_t len);

static int parse_limit(const cfg_optinfo_t *o, const char *s, void *field, char *why,
                       size_t whylen) {
  (void)o;
  return cfg_parse_devvals(s, CFG_DEV_SIZE, field, why, whylen);
}

static int parse_fraction(const cfg_optinfo_t *o, const char *s, void *field, char *why,
                          size_t whylen) {
  (void)o;
  return cfg_parse_devvals(s, CFG_DEV_FRACTION, field, why, whylen);
}

static int parse_bool(const cfg_optinfo_t *o, const char *s, void *field, char *why,
                      size_t whylen) {
  (void)o;
  return cfg_parse_bool(s, field, why, whylen);
}

/* Whether v, white space around it aside, is the word w in any case. */
static bool is_word(const char *v, const char *w);

static int parse_pool(const cfg_optinfo_t *o, const char *s, void *field, char *why,
                      size_t whylen) {
  (void)o;
  int mode = is_word(s, "vmm") ? CFG_POOL_VMM : is_word(s, "regions") ? CFG_POOL_REGIONS : -1;
  if (mode < 0) {
    bool on = false;
    int rc = cfg_parse_bool(s, &on, why, whylen);
    if (rc != 0) {
      return rc;
    }
    mode = on ? CFG_POOL_ON : CFG_POOL_OFF;
  } else if (why != NULL && whylen > 0) {
    why[0] = '\0';
  }
  *(int *)field = mode;
  return 0;
}

static int parse_covers(const cfg_optinfo_t *o, const char *s, void *field, char *why,
                        size_t whylen) {
  (void)o;
  int covers = is_word(s, "process")       ? CFG_COVERS_PROCESS
               : is_word(s, "allocations") ? CFG_COVERS_ALLOCATIONS
                                           : -1;
  if (covers < 0) {
    (void)cfg_snprintf(why, whylen, "neither process nor allocations");
    return -EINVAL;
  }
  if (why != NULL && whylen > 0) {
    why[0] = '\0';
  }
  *(int *)field = covers;
  return 0;
}

static int parse_level(const cfg_optinfo_t *o, const char *s, void *field, char *why,
                       size_t whylen) {
  uint64_t v = 0;
  int rc = cfg_parse_uint(s, o->min, o->max, &v, why, whylen);
  if (rc == 0) {
    *(int *)field = (int)v;
  }
  return rc;
}

static int parse_arenas(const cfg_optinfo_t *o, const char *s, void *field, char *why,
                        size_t whylen) {
  if (is_word(s, "auto")) {
    *(int *)field = CFG_ARENAS_AUTO;
    if (why != NULL && whylen > 0) {
      why[0] = '\0';
    }
    return 0;
  }
  return parse_level(o, s, field, why, whylen);
}

static int parse_report(const cfg_optinfo_t *o, const char *s, void *field, char *why,
                        size_t whylen) {
  (void)o;
  return cfg_parse_dest(s, field, why, whylen);
}

/* v past its leading white space (what every parser trims). */
static const char *skip_space(const char *v) {
  while (*v == ' ' || (*v >= '\t' && *v <= '\r')) {
    v++;
  }
  return v;
}

static bool is_word(const char *v, const char *w) {
  size_t n = strlen(w);
  v = skip_space(v);
  return strncasecmp(v, w, n) == 0 && *skip_space(v + n) == '\0';
}

/* Whether v, white space around it aside, is `off` in any case. */
static bool is_off(const char *v) {
  return is_word(v, "off");
}

/* A file setting: `off` (as for GPUCAP_REPORT) leaves it without a file, "" in the field. */
static int parse_path(const cfg_optinfo_t *o, const char *s, void *field, char *why,
                      size_t whylen) {
  (void)o;
  if (s != NULL && is_off(s)) {
    *(char *)field = '\0';
    if (why != NULL && whylen > 0) {
      why[0] = '\0';
    }
    return 0;
  }
  return cfg_parse_path(s, field, PATH_MAX, why, whylen);
}

static int parse_name(const cfg_optinfo_t *o, const char *s, void *field, char *why,
                      size_t whylen) {
  (void)o;
  return cfg_parse_name(s, field, why, whylen);
}

static size_t format_limit(const cfg_optinfo_t *o, const void *field, char *buf, size_t len) {
  (void)o;
  return cfg_format_devvals(field, CFG_DEV_SIZE, buf, len);
}

static size_t format_fraction(const cfg_optinfo_t *o, const void *field, char *buf, size_t len) {
  (void)o;
  return cfg_format_devvals(field, CFG_DEV_FRACTION, buf, len);
}

static size_t format_bool(const cfg_optinfo_t *o, const void *field, char *buf, size_t len) {
  (void)o;
  return cfg_snprintf(buf, len, "%s", *(const bool *)field ? "true" : "false");
}

static size_t format_switch(const cfg_optinfo_t *o, const void *field, char *buf, size_t len) {
  (void)o;
  return cfg_snprintf(buf, len, "%s", *(const bool *)field ? "on" : "off");
}

static size_t format_pool(const cfg_optinfo_t *o, const void *field, char *buf, size_t len) {
  static const char *const names[] = {"off", "on", "vmm", "regions"};
  int mode = *(const int *)field;
  (void)o;
  return cfg_snprintf(buf, len, "%s", mode >= 0 && mode <= CFG_POOL_REGIONS ? names[mode] : "on");
}

static size_t format_covers(const cfg_optinfo_t *o, const void *field, char *buf, size_t len) {
  (void)o;
  return cfg_snprintf(buf, len, "%s",
                      *(const int *)field == CFG_COVERS_ALLOCATIONS ? "allocations" : "process");
}

static size_t format_level(const cfg_optinfo_t *o, const void *field, char *buf, size_t len) {
  (void)o;
  return cfg_snprintf(buf, len, "%d", *(const int *)field);
}

static size_t format_arenas(const cfg_optinfo_t *o, const void *field, char *buf, size_t len) {
  return *(const int *)field == CFG_ARENAS_AUTO ? cfg_snprintf(buf, len, "auto")
                                                : format_level(o, field, buf, len);
}

static size_t format_report(const cfg_optinfo_t *o, const void *field, char *buf, size_t len) {
  const cfg_dest_t *d = field;
  (void)o;
  switch (d->kind) {
  case CFG_DEST_OFF:
    return cfg_snprintf(buf, len, "off");
  case CFG_DEST_FILE:
    return cfg_snprintf(buf, len, "%s", d->path);
  case CFG_DEST_STDERR:
  default:
    return cfg_snprintf(buf, len, "stderr");
  }
}

static size_t format_path(const cfg_optinfo_t *o, const void *field, char *buf, size_t len) {
  (void)o;
  return cfg_snprintf(buf, len, "%s", (const char *)field);
}

static const struct {
  parse_fn *parse;
  format_fn *format;
} types[] = {
    [CFG_TYPE_LIMIT] = {parse_limit, format_limit},
    [CFG_TYPE_FRACTION] = {parse_fraction, format_fraction},
    [CFG_TYPE_BOOL] = {parse_bool, format_bool},
    [CFG_TYPE_SWITCH] = {parse_bool, format_switch},
    [CFG_TYPE_POOL] = {parse_pool, format_pool},
    [CFG_TYPE_COVERS] = {parse_covers, format_covers},
    [CFG_TYPE_LEVEL] = {parse_level, format_level},
    [CFG_TYPE_ARENAS] = {parse_arenas, format_arenas},
    [CFG_TYPE_REPORT] = {parse_report, format_report},
    [CFG_TYPE_PATH] = {parse_path, format_path},
    [CFG_TYPE_NAME] = {parse_name, format_path},
};

static void *field_of(cfg_t *cfg, const opt_t *o) {
  return (char *)cfg + o->offset;
}

static const void *cfield_of(const cfg_t *cfg, const opt_t *o) {
  return (const char *)cfg + o->offset;
}

/* ---------------------------------------------------------------- messages */

void cfg_quote(const char *v, char *out, size_t outlen) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  size_t i = 0;

  for (; v[i] != '\0' && i < CFG_QUOTE_IN && o + 5 < outlen; i++) {
    unsigned char c = (unsigned char)v[i];
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out[o++] = (char)c;
    } else {
      out[o++] = '\\';
      out[o++] = 'x';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 0xf];
    }
  }
  if (v[i] != '\0' && o + 3 < outlen) {
    memcpy(out + o, "...", 3);
    o += 3;
  }
  out[o] = '\0';
}

/* Whether v is empty or only white space: such a variable counts as unset (a template that
 * expands an unset value, `GPUCAP_MEMORY_LIMIT="{{ .Values.limit }}"`, means "no setting"). */
static bool blank(const char *v) {
  return *skip_space(v) == '\0';
}

static const char *process_getenv(void *ctx, const char *name, bool secure) {
  (void)ctx;
  // Settings that name files are written to: a set-user-ID program must not let its caller
  // choose them, so they go through secure_getenv (NULL there) like jemalloc's conf.
  return secure ? secure_getenv(name) : getenv(name);
}

/* Applies an alias the way TensorFlow's GetAllowGrowthValue (gpu_bfc_allocator.cc) reads
 * TF_FORCE_GPU_ALLOW_GROWTH: strcmp against exactly "true" and "false", nothing trimmed or
 * case-folded; anything else is reported and ignored. Returns true iff a warning was written. */
static bool apply_alias(cfg_t *cfg, const opt_t *o, const char *v, char *msg, size_t msglen) {
  char q[CFG_QUOTE_MAX];
  char def[16];

  if (strcmp(v, "true") == 0 || strcmp(v, "false") == 0) {
    *(bool *)field_of(cfg, o) = strcmp(v, "true") == 0;
    cfg->source[o - options] = CFG_SRC_ALIAS;
    return false;
  }
  if (msg != NULL && msglen > 0) {
    cfg_quote(v, q, sizeof q);
    types[o->info.type].format(&o->info, field_of(cfg, o), def, sizeof def);
    snprintf(msg, msglen,
             "gpucap: warning: %s='%s' is ignored: only the exact strings 'true' and 'false' "
             "count, as in TensorFlow; %s stays %s (its default)",
             o->info.alias, q, o->info.name, def);
  }
  return true;
}

/* ---------------------------------------------------------------- loading */

void cfg_defaults(cfg_t *cfg) {
  int saved = errno;

  memset(cfg, 0, sizeof *cfg);
  cfg->valid = true;
  for (size_t i = 0; i < CFG_OPT_COUNT; i++) {
    const opt_t *o = &options[i];
    cfg->source[i] = CFG_SRC_DEFAULT;
    if (o->info.def[0] != '\0' &&
        types[o->info.type].parse(&o->info, o->info.def, field_of(cfg, o), NULL, 0) != 0) {
      cfg->valid = false;
    }
  }
  errno = saved;
}

/* The host's physical memory (what a spill budget is checked against); UINT64_MAX when the
 * kernel does not say, so that nothing is refused on a guess. */
static uint64_t host_memory(void) {
  struct sysinfo si;
  if (sysinfo(&si) != 0 || si.totalram == 0) {
    return UINT64_MAX;
  }
  __extension__ unsigned __int128 b =
      (unsigned __int128)si.totalram * (si.mem_unit ? si.mem_unit : 1);
  return b > UINT64_MAX ? UINT64_MAX : (uint64_t)b;
}

/* Spilling asked for where it cannot happen: a warning, not a failure (nothing runs uncapped). */
static void spill_warning(const cfg_t *cfg, char *msg, size_t msglen) {
  bool budget =
      cfg->oversubscribe.every ? cfg->oversubscribe.every_value > 0 : cfg->oversubscribe.mask != 0;
  bool capped = cfg->limit.every || cfg->limit.mask || cfg->fraction.every || cfg->fraction.mask ||
                cfg->share[0] != '\0';
  if (msg == NULL || msglen == 0) {
    return;
  }
  if (cfg->spill && !budget) {
    snprintf(msg, msglen,
             "gpucap: warning: GPUCAP_SPILL=on has no effect without a spill budget "
             "(GPUCAP_OVERSUBSCRIBE): allocations the cap refuses are refused");
  } else if (budget && !capped) {
    snprintf(msg, msglen,
             "gpucap: warning: GPUCAP_OVERSUBSCRIBE has no effect without a cap "
             "(GPUCAP_MEMORY_LIMIT, GPUCAP_MEMORY_FRACTION or GPUCAP_SHARE): nothing is beyond it");
  }
}

int cfg_check_spill(const cfg_t *cfg, uint64_t host_bytes, char *msg, size_t msglen) {
  int saved = errno;
  const cfg_devvals_t *v = cfg != NULL ? &cfg->oversubscribe : NULL;
  uint64_t sum = 0, one = 0;
  int dev = -2; /* whose budget alone is too large: a device, -1 every device, -2 none */
  for (int d = 0; v != NULL && d < GPUCAP_MAX_DEVICES && dev == -2; d++) {
    uint64_t b = v->every ? (d == 0 ? v->every_value : 0) : (v->mask >> d & 1) ? v->value[d] : 0;
    sum = sum > UINT64_MAX - b ? UINT64_MAX : sum + b;
    if (b > host_bytes) {
      dev = v->every ? -1 : d;
      one = b;
    }
  }
  bool bad = dev != -2 || sum > host_bytes;
  if (bad && msg != NULL && msglen > 0) {
    char value[GPUCAP_MAX_DEVICES * 24], budget[32], host[48], all[32], whose[32];
    cfg_format_size(one, budget, sizeof budget);
    cfg_format_devvals(v, CFG_DEV_SIZE, value, sizeof value);
    cfg_format_size(sum, all, sizeof all);
    /* The host's memory is rarely a round size: in GiB with one decimal, rounded down. */
    snprintf(host, sizeof host, "%" PRIu64 ".%" PRIu64 " GiB", host_bytes >> 30,
             ((host_bytes & ((UINT64_C(1) << 30) - 1)) * 10) >> 30);
    snprintf(whose, sizeof whose, dev == -1 ? "every device" : "device %d", dev);
    if (dev != -2) {
      snprintf(msg, msglen,
               "gpucap: error: GPUCAP_OVERSUBSCRIBE='%s': the spill budget of %s (%s) is more "
               "than this host's memory (%s); accepted: budgets the host's memory holds",
               value, whose, budget, host);
    } else {
      snprintf(msg, msglen,
               "gpucap: error: GPUCAP_OVERSUBSCRIBE='%s': the spill budgets add up to %s, more "
               "than this host's memory (%s); accepted: budgets the host's memory holds",
               value, all, host);
    }
  }
  errno = saved;
  return bad ? -EINVAL : 0;
}

uint64_t cfg_spill_budget(const cfg_t *cfg, int ordinal) {
  uint64_t v = 0;
  if (cfg == NULL || !cfg->valid || ordinal < 0 ||
      !cfg_devvals_get(&cfg->oversubscribe, ordinal, &v)) {
    return 0;
  }
  return v;
}

int cfg_load(cfg_t *cfg, cfg_getenv_fn *get, void *ctx, char *msg, size_t msglen) {
  int saved = errno;
  bool failed = false;
  bool warned = false;
  char why[CFG_WHY_MAX];
  char q[CFG_QUOTE_MAX];

  if (msg != NULL && msglen > 0) {
    msg[0] = '\0';
  }
  if (cfg == NULL) {
    errno = saved;
    return -EINVAL;
  }
  if (get == NULL) {
    get = process_getenv;
  }
  cfg_defaults(cfg);
  failed = !cfg->valid;

  for (size_t i = 0; i < CFG_OPT_COUNT; i++) {
    const opt_t *o = &options[i];
    const char *v = get(ctx, o->info.name, o->info.secure);

    if (v != NULL && !blank(v)) {
      if (types[o->info.type].parse(&o->info, v, field_of(cfg, o), why, sizeof why) == 0) {
        cfg->source[i] = CFG_SRC_ENV;
        continue;
      }
      cfg->source[i] = CFG_SRC_INVALID;
      // One message: the first error replaces any warning, later errors add nothing.
      if (!failed && msg != NULL && msglen > 0) {
        cfg_quote(v, q, sizeof q);
        snprintf(msg, msglen, "gpucap: error: %s='%s': %s; accepted: %s", o->info.name, q, why,
                 o->info.accepted);
      }
      failed = true;
      continue;
    }
    bool boolean = o->info.type == CFG_TYPE_BOOL || o->info.type == CFG_TYPE_SWITCH;
    const char *a = o->info.alias != NULL && boolean ? get(ctx, o->info.alias, false) : NULL;
    if (a != NULL) {
      warned |= apply_alias(cfg, o, a, failed || warned ? NULL : msg, msglen);
    }
  }

  /* Spill budgets the host cannot hold are invalid even when another setting failed first
   * (its message stands; this one's error replaces any warning). */
  if (cfg_check_spill(cfg, host_memory(), failed ? NULL : msg, msglen) != 0) {
    cfg->source[CFG_OPT_OVERSUBSCRIBE] = CFG_SRC_INVALID;
    failed = true;
  }
  if (!failed && !warned) {
    spill_warning(cfg, msg, msglen);
  }
  cfg->valid = !failed;
  errno = saved;
  return failed ? -EINVAL : 0;
}

uint64_t cfg_device_cap(const cfg_t *cfg, int ordinal, uint64_t device_total_bytes) {
  uint64_t cap = UINT64_MAX;
  uint64_t v = 0;

  if (cfg == NULL || !cfg->valid || ordinal < 0) {
    return 0;
  }
  if (cfg_devvals_get(&cfg->limit, ordinal, &v) && v < cap) {
    cap = v;
  }
  if (cfg_devvals_get(&cfg->fraction, ordinal, &v)) {
    uint64_t share = cfg_fraction_of(device_total_bytes, v);
    if (share < cap) {
      cap = share;
    }
  }
  return cap;
}

/* ---------------------------------------------------------------- description */

const cfg_optinfo_t *cfg_option(cfg_opt_t id) {
  return (unsigned)id < CFG_OPT_COUNT ? &options[id].info : NULL;
}

cfg_source_t cfg_option_source(const cfg_t *cfg, cfg_opt_t id) {
  if (cfg == NULL || (unsigned)id >= CFG_OPT_COUNT || cfg->source[id] > CFG_SRC_INVALID) {
    return CFG_SRC_DEFAULT;
  }
  return (cfg_source_t)cfg->source[id];
}

size_t cfg_option_value(const cfg_t *cfg, cfg_opt_t id, char *buf, size_t len) {
  int saved = errno;
  size_t n = 0;

  if (buf != NULL && len > 0) {
    buf[0] = '\0';
  }
  if (cfg != NULL && (unsigned)id < CFG_OPT_COUNT) {
    const opt_t *o = &options[id];
    n = types[o->info.type].format(&o->info, cfield_of(cfg, o), buf, len);
  }
  errno = saved;
  return n;
}

typedef struct out {
  char *buf;
  size_t len;
  size_t pos; /* length of the whole text so far, which may run past len */
} out_t;

__attribute__((format(printf, 2, 3))) static void put(out_t *out, const char *f, ...) {
  char *dst = NULL;
  size_t cap = 0;
  if (out->pos < out->len) {
    dst = out->buf + out->pos;
    cap = out->len - out->pos;
  }
  va_list ap;
  va_start(ap, f);
  int n = vsnprintf(dst, cap, f, ap);
  va_end(ap);
  out->pos += n > 0 ? (size_t)n : 0;
}

static const char *source_text(const cfg_t *cfg, cfg_opt_t id) {
  switch (cfg_option_source(cfg, id)) {
  case CFG_SRC_ENV:
  case CFG_SRC_INVALID:
    return "environment";
  case CFG_SRC_ALIAS:
    return options[id].info.alias;
  case CFG_SRC_DEFAULT:
  default:
    return "default";
  }
}

size_t cfg_describe(const cfg_t *cfg, char *buf, size_t len) {
  int saved = errno;
  out_t out = {buf, len, 0};
  // Big enough for any value: a PATH_MAX path, or 64 list items of at most 24 bytes each.
  char value[PATH_MAX + 64];

  if (buf != NULL && len > 0) {
    buf[0] = '\0';
  }
  for (size_t i = 0; i < CFG_OPT_COUNT; i++) {
    const cfg_optinfo_t *o = &options[i].info;
    if (cfg == NULL) {
      put(&out, "%s  (%s; default: %s)\n    %s\n    accepted: %s\n", o->name, o->type_name,
          o->def[0] != '\0' ? o->def : "unset", o->doc, o->accepted);
      if (o->alias != NULL) {
        put(&out, "    when unset: %s, exactly 'true' or 'false' (as TensorFlow reads it)\n",
            o->alias);
      }
      continue;
    }
    cfg_option_value(cfg, (cfg_opt_t)i, value, sizeof value);
    const char *shown = value[0] != '\0' ? value : "(unset)";
    if (cfg_option_source(cfg, (cfg_opt_t)i) == CFG_SRC_INVALID) {
      shown = "(invalid)";
    }
    put(&out, "%-24s %-16s %s\n", o->name, shown, source_text(cfg, (cfg_opt_t)i));
  }
  errno = saved;
  return out.pos;
}
