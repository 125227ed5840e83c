/* found: the discovered caps in `gpucap run` and `gpucap env` (contracts in found.h). The
 * reading and the arithmetic are config/'s, the same the library does; this only reports them.
 */
#include "scripts/found.h"

#include "scripts/cli.h"
#include "scripts/driver.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define SIZE_TEXT 32

int found_load(cfg_found_t *f, const cfg_t *cfg) {
  static char msg[16384];
  if (cfg_discover(f, cfg, NULL, NULL, msg, sizeof msg) == 0) {
    return 0;
  }
  for (const char *line = msg; *line != '\0';) {
    size_t n = strcspn(line, "\n");
    cli_error("%.*s", (int)n, line);
    line += n + (line[n] == '\n');
  }
  fputs("gpucap: correct the value or unset it; the library would ignore that source with a "
        "warning (GPUCAP_DISCOVER=off ignores every one)\n",
        stderr);
  return -1;
}

static const char *size_text(uint64_t bytes, char *buf) {
  cfg_format_size(bytes, buf, SIZE_TEXT);
  return buf;
}

/* gpucap's own cap of device dev and the setting it comes from, or UINT64_MAX. */
static uint64_t own_cap(const cfg_t *cfg, int dev, uint64_t total, const char **from) {
  uint64_t cap = UINT64_MAX, v = 0;
  *from = NULL;
  if (cfg_devvals_get(&cfg->limit, dev, &v)) {
    cap = v;
    *from = cfg_option(CFG_OPT_MEMORY_LIMIT)->name;
  }
  if (cfg_devvals_get(&cfg->fraction, dev, &v) && cfg_fraction_of(total, v) < cap) {
    cap = cfg_fraction_of(total, v);
    *from = cfg_option(CFG_OPT_MEMORY_FRACTION)->name;
  }
  return cap;
}

static void print_device(const cfg_found_t *f, const cfg_t *cfg, int dev) {
  char bus[64] = "", a[SIZE_TEXT], b[SIZE_TEXT], c[SIZE_TEXT];
  uint64_t total = 0;
  if (driver_device_info(dev, bus, sizeof bus, &total) != 0) {
    printf("  device %d: unknown (the driver does not describe it)\n", dev);
    return;
  }
  cfg_pci_t pci;
  bool known = cfg_parse_pci(bus, strnlen(bus, sizeof bus), &pci) == 0;
  cfg_devcap_t d;
  bool margin = cfg->cap_covers == CFG_COVERS_ALLOCATIONS;
  cfg_discover_device(f, dev, known ? &pci : NULL, margin, &d);
  const char *own_from = NULL;
  uint64_t own = own_cap(cfg, dev, total, &own_from);
  printf("  device %d (%s, %s): ", dev, bus, size_text(total, a));
  if (d.limit_src >= 0 && d.cap < own) {
    const cfg_found_src_t *s = &f->src[d.limit_src];
    if (margin) {
      printf("cap %s from %s (%s less a margin of %s)", size_text(d.cap, a), s->name,
             size_text(d.line, b), size_text(d.line - d.cap, c));
    } else {
      printf("cap %s from %s (the line; the driver's own memory counted in it)",
             size_text(d.cap, a), s->name);
    }
  } else if (own_from != NULL) {
    printf("cap %s from %s", size_text(own, a), own_from);
  } else {
    printf("no cap");
  }
  if (d.soft_src >= 0) {
    printf("; guarantee %s from %s", size_text(d.soft, a), f->src[d.soft_src].name);
  }
  printf("\n");
}

void found_print(const cfg_found_t *f, const cfg_t *cfg) {
  if (f->n == 0) {
    return;
  }
  printf("\nCaps the cluster set (GPUCAP_DISCOVER=on):\n");
  for (int i = 0; i < f->n; i++) {
    const cfg_found_src_t *s = &f->src[i];
    printf("  %s%s%s%s='%s'  ", s->name, s->where[0] ? " (" : "", s->where, s->where[0] ? ")" : "",
           s->value);
    if (!s->valid) {
      printf("invalid: ignored\n");
    } else {
      printf("%s, held by %s\n", s->kind == CFG_LINE_LIMIT ? "limit" : "guarantee", s->enforcer);
    }
  }
  printf("Each device's cap: the smallest of gpucap's settings and the limits%s:\n",
         cfg->cap_covers == CFG_COVERS_ALLOCATIONS ? ", a margin under each line" : "");
  int count = 0;
  int rc = driver_device_count(&count);
  if (rc != 0) {
    printf("  (the devices are unknown here: %s)\n",
           rc == -ENOENT ? "no CUDA driver can be loaded" : "the CUDA driver does not start");
    return;
  }
  for (int dev = 0; dev < count && dev < GPUCAP_MAX_DEVICES; dev++) {
    print_device(f, cfg, dev);
  }
}
