/* Parsing of the fake driver's FAKECUDA_* settings: pure functions, no getenv, no I/O.
 *
 * Grammar (whole strings, no spaces, decimal only, overflow rejected):
 *   FAKECUDA_DEVICES  N                    0..64 (default 1)
 *   FAKECUDA_MEMORY   SIZE | ORD:SIZE,...  SIZE = digits + optional B, K, KiB, M, MiB, G, GiB,
 *                                          T, TiB (binary units); 1 MiB..1 TiB per device
 *   FAKECUDA_CC       MAJOR.MINOR          e.g. 9.0 (default), 8.0, 8.6, 12.0
 *   FAKECUDA_BACKING  0 | 1
 *   FAKECUDA_FAIL     NAME:N[:CODE],...    NAME an exported symbol, N >= 1, CODE 1..100000
 *   FAKECUDA_STATS    PATH                 (any non-empty string)
 *   FAKECUDA_STUB     0 | 1
 *   FAKECUDA_TRACE    PATH | 1             1: stderr
 *   FAKECUDA_MACHINE  NAME                 1..64 of [A-Za-z0-9_.-], not starting with '.'
 *   FAKECUDA_LATENCY  NAME:TIME,...        NAME an exported symbol, each at most once; TIME =
 *                                          digits + ns, us or ms, at most 1 s
 *   FAKECUDA_LATENCY_SLEEP  0 | 1          (default 1)
 *   FAKECUDA_MIGRATION TIME               per 4 KiB managed page migrated (as LATENCY's TIME)
 *   FAKECUDA_PCI_BUS  ORD:BUS,...          BUS = 1 or 2 hex digits, each device's distinct
 *                                          (default: device N on bus N + 1)
 *   FAKECUDA_DRIVER_MEMORY  on | off | 1 | 0  (default on)
 *   FAKECUDA_CONTEXT_MEMORY SIZE           0..1 TiB (default 128MiB)
 *   FAKECUDA_MODULE_MEMORY  PERCENT[%]     0..10000 (default 100)
 *   FAKECUDA_PAGE_SIZE      SIZE           a power of two, 512 B..1 GiB (default 2MiB)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fakecuda/fk.h"

#define MIN_DEVICE_MEMORY ((size_t)1 << 20)
#define MAX_DEVICE_MEMORY ((size_t)1 << 40)

/* Parses decimal digits s[0..len) into *out; fails on no digits, non-digits or overflow. */
static int parse_u64(const char *s, size_t len, unsigned long long *out) {
  unsigned long long v = 0;
  if (len == 0) {
    return -EINVAL;
  }
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') {
      return -EINVAL;
    }
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (~0ULL - d) / 10) {
      return -EINVAL;
    }
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

/* Parses the decimal digits that start s[0..len) into *v; returns how many there are, 0 when
 * there are none or they overflow. */
static size_t leading_u64(const char *s, size_t len, unsigned long long *v) {
  size_t digits = 0;
  while (digits < len && s[digits] >= '0' && s[digits] <= '9') {
    digits++;
  }
  return parse_u64(s, digits, v) == 0 ? digits : 0;
}

static int size_n(const char *s, size_t len, size_t *out) {
  static const struct {
    const char *unit;
    unsigned shift;
  } units[] = {{"", 0},     {"B", 0},  {"K", 10},   {"KiB", 10}, {"M", 20},
               {"MiB", 20}, {"G", 30}, {"GiB", 30}, {"T", 40},   {"TiB", 40}};
  unsigned long long v;
  size_t digits = leading_u64(s, len, &v);
  if (digits == 0) {
    return -EINVAL;
  }
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    size_t ulen = strlen(units[i].unit);
    if (ulen == len - digits && memcmp(s + digits, units[i].unit, ulen) == 0) {
      if (units[i].shift > 0 && v > (~0ULL >> units[i].shift)) {
        return -EINVAL;
      }
      *out = (size_t)(v << units[i].shift);
      return 0;
    }
  }
  return -EINVAL;
}

int fk_env_size(const char *s, size_t *out) {
  return size_n(s, strlen(s), out);
}

static int fail_msg(char *err, size_t errlen, const char *var, const char *val, const char *why) {
  snprintf(err, errlen, "%s='%s': %s", var, val, why);
  return -EINVAL;
}

static int parse_memory(struct fk_config *cfg, const char *val, char *err, size_t errlen) {
  size_t sz;
  if (strchr(val, ':') == NULL) {
    if (fk_env_size(val, &sz) != 0) {
      return fail_msg(err, errlen, "FAKECUDA_MEMORY", val, "not a size (e.g. 16GiB)");
    }
    if (sz < MIN_DEVICE_MEMORY || sz > MAX_DEVICE_MEMORY) {
      return fail_msg(err, errlen, "FAKECUDA_MEMORY", val, "must be 1MiB..1TiB");
    }
    for (int d = 0; d < FK_MAX_DEVICES; d++) {
      cfg->mem[d] = sz;
    }
    return 0;
  }
  int seen[FK_MAX_DEVICES] = {0};
  const char *p = val;
  for (;;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *colon = memchr(p, ':', len);
    unsigned long long ord;
    if (colon == NULL || parse_u64(p, (size_t)(colon - p), &ord) != 0) {
      return fail_msg(err, errlen, "FAKECUDA_MEMORY", val, "expected ORDINAL:SIZE,...");
    }
    if (ord >= (unsigned long long)cfg->ndev) {
      return fail_msg(err, errlen, "FAKECUDA_MEMORY", val, "ordinal not below FAKECUDA_DEVICES");
    }
    if (seen[ord]) {
      return fail_msg(err, errlen, "FAKECUDA_MEMORY", val, "ordinal given twice");
    }
    seen[ord] = 1;
    if (size_n(colon + 1, len - (size_t)(colon + 1 - p), &sz) != 0) {
      return fail_msg(err, errlen, "FAKECUDA_MEMORY", val, "not a size (e.g. 16GiB)");
    }
    if (sz < MIN_DEVICE_MEMORY || sz > MAX_DEVICE_MEMORY) {
      return fail_msg(err, errlen, "FAKECUDA_MEMORY", val, "must be 1MiB..1TiB");
    }
    cfg->mem[ord] = sz;
    if (end == NULL) {
      return 0;
    }
    p = end + 1;
  }
}

/* FAKECUDA_PCI_BUS: ORDINAL:BUS,... with BUS in hex; every device's bus distinct. */
static int parse_pci_bus(struct fk_config *cfg, const char *val, char *err, size_t errlen) {
  for (const char *p = val;;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *colon = memchr(p, ':', len);
    unsigned long long ord;
    size_t hexlen = colon != NULL ? len - (size_t)(colon + 1 - p) : 0;
    if (colon == NULL || parse_u64(p, (size_t)(colon - p), &ord) != 0 || hexlen < 1 || hexlen > 2 ||
        strspn(colon + 1, "0123456789abcdefABCDEF") < hexlen) {
      return fail_msg(err, errlen, "FAKECUDA_PCI_BUS", val, "expected ORDINAL:BUS,... (0:3b,1:86)");
    }
    if (ord >= (unsigned long long)cfg->ndev) {
      return fail_msg(err, errlen, "FAKECUDA_PCI_BUS", val, "ordinal not below FAKECUDA_DEVICES");
    }
    char hex[3] = {0};
    memcpy(hex, colon + 1, hexlen);
    cfg->pci_bus[ord] = (unsigned)strtoul(hex, NULL, 16);
    if (end == NULL) {
      break;
    }
    p = end + 1;
  }
  for (int a = 0; a < cfg->ndev; a++) {
    for (int b = a + 1; b < cfg->ndev; b++) {
      if (cfg->pci_bus[a] == cfg->pci_bus[b]) {
        return fail_msg(err, errlen, "FAKECUDA_PCI_BUS", val, "two devices on one bus");
      }
    }
  }
  return 0;
}

/* A machine name becomes part of a file name in /dev/shm (fk_machine.c): no '/', no "..". */
static int machine_name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > FK_MACHINE_NAME_MAX || s[0] == '.') {
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == '-')) {
      return 0;
    }
  }
  return 1;
}

static int parse_fail(struct fk_config *cfg, const char *val, char *err, size_t errlen) {
  const char *p = val;
  for (;;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *c1 = memchr(p, ':', len);
    if (c1 == NULL || c1 == p) {
      return fail_msg(err, errlen, "FAKECUDA_FAIL", val, "expected NAME:N[:CODE],...");
    }
    char name[128];
    size_t nlen = (size_t)(c1 - p);
    if (nlen >= sizeof name) {
      return fail_msg(err, errlen, "FAKECUDA_FAIL", val, "name too long");
    }
    memcpy(name, p, nlen);
    name[nlen] = '\0';
    int idx = fk_export_index(name);
    if (idx < 0) {
      return fail_msg(err, errlen, "FAKECUDA_FAIL", val, "not an exported entry point");
    }
    const char *rest = c1 + 1;
    size_t rlen = len - (size_t)(rest - p);
    const char *c2 = memchr(rest, ':', rlen);
    unsigned long long nth, code = CUDA_ERROR_OUT_OF_MEMORY;
    if (parse_u64(rest, c2 ? (size_t)(c2 - rest) : rlen, &nth) != 0 || nth == 0) {
      return fail_msg(err, errlen, "FAKECUDA_FAIL", val, "N must be a call number >= 1");
    }
    if (c2 != NULL && (parse_u64(c2 + 1, rlen - (size_t)(c2 + 1 - rest), &code) != 0 || code == 0 ||
                       code > 100000)) {
      return fail_msg(err, errlen, "FAKECUDA_FAIL", val, "CODE must be 1..100000");
    }
    if (cfg->nfail == FK_MAX_FAILS) {
      return fail_msg(err, errlen, "FAKECUDA_FAIL", val, "too many entries");
    }
    cfg->fail[cfg->nfail].export_index = idx;
    cfg->fail[cfg->nfail].nth = nth;
    cfg->fail[cfg->nfail].code = (int)code;
    cfg->nfail++;
    if (end == NULL) {
      return 0;
    }
    p = end + 1;
  }
}

#define MAX_LATENCY_NS 1000000000ULL

/* Parses digits + ns/us/ms into nanoseconds, at most MAX_LATENCY_NS. */
static int time_ns(const char *s, size_t len, unsigned long long *out) {
  static const struct {
    const char *unit;
    unsigned long long ns;
  } units[] = {{"ns", 1}, {"us", 1000}, {"ms", 1000000}};
  unsigned long long v;
  size_t digits = leading_u64(s, len, &v);
  if (digits == 0) {
    return -EINVAL;
  }
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    if (len - digits == 2 && memcmp(s + digits, units[i].unit, 2) == 0) {
      if (v > MAX_LATENCY_NS / units[i].ns) {
        return -EINVAL;
      }
      *out = v * units[i].ns;
      return 0;
    }
  }
  return -EINVAL;
}

static int parse_latency(struct fk_config *cfg, const char *val, char *err, size_t errlen) {
  const char *var = "FAKECUDA_LATENCY", *p = val;
  for (;;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *colon = memchr(p, ':', len);
    char name[128];
    size_t nlen = colon ? (size_t)(colon - p) : 0;
    if (nlen == 0 || nlen >= sizeof name) {
      return fail_msg(err, errlen, var, val, "expected NAME:TIME,... (e.g. cuMemCreate:200us)");
    }
    memcpy(name, p, nlen);
    name[nlen] = '\0';
    int idx = fk_export_index(name);
    if (idx < 0) {
      return fail_msg(err, errlen, var, val, "not an exported entry point");
    }
    unsigned long long ns;
    if (time_ns(colon + 1, len - nlen - 1, &ns) != 0) {
      return fail_msg(err, errlen, var, val, "TIME must be digits + ns, us or ms, at most 1 s");
    }
    if (cfg->latency_ns[idx] != 0) {
      return fail_msg(err, errlen, var, val, "entry point given twice");
    }
    cfg->latency_ns[idx] = ns;
    if (end == NULL) {
      return 0;
    }
    p = end + 1;
  }
}

/* The driver's own memory (fk_driver.c): whether it is modelled, and its figures. */
static int parse_driver_memory(struct fk_config *cfg, const char *(*get)(const char *name),
                               char *err, size_t errlen) {
  const char *on = get("FAKECUDA_DRIVER_MEMORY"), *ctx = get("FAKECUDA_CONTEXT_MEMORY");
  const char *module = get("FAKECUDA_MODULE_MEMORY"), *page = get("FAKECUDA_PAGE_SIZE");
  cfg->driver_memory = 1;
  cfg->context_memory = FK_DEFAULT_CONTEXT_MEMORY;
  cfg->module_pct = 100;
  cfg->page = FK_DEFAULT_PAGE;
  if (on != NULL) {
    int yes = strcmp(on, "on") == 0 || strcmp(on, "1") == 0;
    if (!yes && strcmp(on, "off") != 0 && strcmp(on, "0") != 0) {
      return fail_msg(err, errlen, "FAKECUDA_DRIVER_MEMORY", on, "must be on, off, 1 or 0");
    }
    cfg->driver_memory = yes;
  }
  if (ctx != NULL &&
      (fk_env_size(ctx, &cfg->context_memory) != 0 || cfg->context_memory > MAX_DEVICE_MEMORY)) {
    return fail_msg(err, errlen, "FAKECUDA_CONTEXT_MEMORY", ctx, "not a size up to 1TiB");
  }
  if (module != NULL) {
    size_t len = strlen(module);
    unsigned long long pct;
    if (len > 0 && module[len - 1] == '%') {
      len--;
    }
    if (parse_u64(module, len, &pct) != 0 || pct > 10000) {
      return fail_msg(err, errlen, "FAKECUDA_MODULE_MEMORY", module,
                      "must be a percentage 0..10000 (e.g. 100%)");
    }
    cfg->module_pct = (unsigned)pct;
  }
  if (page != NULL && (fk_env_size(page, &cfg->page) != 0 || cfg->page < FK_ALLOC_ALIGN ||
                       cfg->page > ((size_t)1 << 30) || (cfg->page & (cfg->page - 1)) != 0)) {
    return fail_msg(err, errlen, "FAKECUDA_PAGE_SIZE", page,
                    "must be a power of two from 512 to 1GiB (e.g. 2MiB)");
  }
  return 0;
}

int fk_env_parse(struct fk_config *cfg, const char *(*get)(const char *name), char *err,
                 size_t errlen) {
  const char *devices = get("FAKECUDA_DEVICES"), *memory = get("FAKECUDA_MEMORY");
  const char *cc = get("FAKECUDA_CC"), *backing = get("FAKECUDA_BACKING");
  const char *fail = get("FAKECUDA_FAIL"), *stats = get("FAKECUDA_STATS");
  const char *stub = get("FAKECUDA_STUB"), *trace = get("FAKECUDA_TRACE");
  const char *machine = get("FAKECUDA_MACHINE"), *latency = get("FAKECUDA_LATENCY");
  const char *latency_sleep = get("FAKECUDA_LATENCY_SLEEP"), *pci_bus = get("FAKECUDA_PCI_BUS");
  const char *migration = get("FAKECUDA_MIGRATION");
  memset(cfg, 0, sizeof *cfg);
  cfg->ndev = 1;
  cfg->cc_major = 9;
  cfg->cc_minor = 0;
  for (int d = 0; d < FK_MAX_DEVICES; d++) {
    cfg->mem[d] = FK_DEFAULT_MEMORY;
    cfg->pci_bus[d] = (unsigned)d + 1;
  }
  if (devices != NULL) {
    unsigned long long n;
    if (parse_u64(devices, strlen(devices), &n) != 0 || n > FK_MAX_DEVICES) {
      return fail_msg(err, errlen, "FAKECUDA_DEVICES", devices, "must be 0..64");
    }
    cfg->ndev = (int)n;
  }
  if (memory != NULL && parse_memory(cfg, memory, err, errlen) != 0) {
    return -EINVAL;
  }
  if (pci_bus != NULL && parse_pci_bus(cfg, pci_bus, err, errlen) != 0) {
    return -EINVAL;
  }
  if (cc != NULL) {
    const char *dot = strchr(cc, '.');
    unsigned long long major, minor;
    if (dot == NULL || parse_u64(cc, (size_t)(dot - cc), &major) != 0 ||
        parse_u64(dot + 1, strlen(dot + 1), &minor) != 0 || major < 1 || major > 99 || minor > 9) {
      return fail_msg(err, errlen, "FAKECUDA_CC", cc, "expected MAJOR.MINOR, e.g. 9.0");
    }
    cfg->cc_major = (int)major;
    cfg->cc_minor = (int)minor;
  }
  if (backing != NULL) {
    if (strcmp(backing, "0") != 0 && strcmp(backing, "1") != 0) {
      return fail_msg(err, errlen, "FAKECUDA_BACKING", backing, "must be 0 or 1");
    }
    cfg->backing = backing[0] == '1';
  }
  if (stub != NULL) {
    if (strcmp(stub, "0") != 0 && strcmp(stub, "1") != 0) {
      return fail_msg(err, errlen, "FAKECUDA_STUB", stub, "must be 0 or 1");
    }
    cfg->stub = stub[0] == '1';
  }
  if (fail != NULL && parse_fail(cfg, fail, err, errlen) != 0) {
    return -EINVAL;
  }
  if (stats != NULL) {
    if (stats[0] == '\0' || strlen(stats) >= sizeof cfg->stats_path) {
      return fail_msg(err, errlen, "FAKECUDA_STATS", stats, "empty or too long");
    }
    strcpy(cfg->stats_path, stats);
  }
  if (trace != NULL) {
    if (strlen(trace) >= sizeof cfg->trace_path) {
      return fail_msg(err, errlen, "FAKECUDA_TRACE", trace, "too long");
    }
    strcpy(cfg->trace_path, trace);
  }
  if (machine != NULL) {
    if (!machine_name_ok(machine)) {
      return fail_msg(err, errlen, "FAKECUDA_MACHINE", machine,
                      "must be 1..64 letters, digits, '_', '.' or '-', not starting with '.'");
    }
    strcpy(cfg->machine, machine);
  }
  if (latency != NULL && parse_latency(cfg, latency, err, errlen) != 0) {
    return -EINVAL;
  }
  if (latency_sleep != NULL) {
    if (strcmp(latency_sleep, "0") != 0 && strcmp(latency_sleep, "1") != 0) {
      return fail_msg(err, errlen, "FAKECUDA_LATENCY_SLEEP", latency_sleep, "must be 0 or 1");
    }
    cfg->latency_charge_only = latency_sleep[0] == '0';
  }
  if (migration != NULL && time_ns(migration, strlen(migration), &cfg->migration_ns) != 0) {
    return fail_msg(err, errlen, "FAKECUDA_MIGRATION", migration,
                    "TIME must be digits + ns, us or ms, at most 1 s");
  }
  return parse_driver_memory(cfg, get, err, errlen);
}
