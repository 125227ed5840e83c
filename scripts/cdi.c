/* cdi: `gpucap cdi` (contracts in cdi.h). Its own options are taken out of argv first; the rest
 * are gpucap run's, judged by the library's parser (run_options) with the environment left
 * out: a spec carries what its options say, not what the shell that wrote it happened to have.
 * The spec is written through one buffer, so a failed write leaves no half file behind.
 */
#include "scripts/cdi.h"

#include "config/cfg.h"
#include "scripts/cli.h"
#include "scripts/preload.h"
#include "scripts/run.h"

#include <ctype.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 256

/* The CDI versions the spec may claim; annotations need 0.6.0 or later. */
static const char *const versions[] = {"0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"};
#define DEFAULT_VERSION "0.6.0"

static void cdi_usage(void) {
  fputs("Usage: gpucap cdi [--name NAME] [--cdi-version V] [--lib PATH] [--container-lib PATH]\n"
        "                  [-o FILE] [OPTIONS]\n"
        "\n"
        "Writes a Container Device Interface spec (JSON) of one device, " CDI_KIND "=NAME:\n"
        "a container that asks for it (podman run --device " CDI_KIND "=NAME, or a Kubernetes\n"
        "device plug-in or DRA driver that injects it) gets gpucap's library bind-mounted\n"
        "read-only, LD_PRELOAD naming it, and the settings the OPTIONS give (as for gpucap run;\n"
        "the environment of this command is not copied). Place the file in /etc/cdi or\n"
        "/var/run/cdi. A setting left out of the spec keeps its default in the container, where\n"
        "the library still takes the caps the cluster set (GPUCAP_DISCOVER).\n"
        "\n"
        "  --name NAME           the device's name (default: default): letters, digits, '.', '_'\n"
        "                        and '-', beginning and ending with a letter or digit\n"
        "  --cdi-version V       the spec's CDI version, 0.5.0 to 1.1.0 (default " DEFAULT_VERSION
        "; 0.5.0\n"
        "                        for runtimes that read no later one, such as podman 4.3)\n"
        "  --lib PATH            the library on the host (default: the one gpucap run preloads)\n"
        "  --container-lib PATH  where the container sees it (default: the same path)\n"
        "  -o, --output FILE     write the spec to FILE (default: standard output)\n"
        "\n"
        "Options (the settings the device sets):\n",
        stdout);
  run_print_options();
  fputs("\n"
        "Exit status: 0; 125 for a bad option or setting; 1 when the spec cannot be written.\n"
        "\n"
        "Example: gpucap cdi --name 8g --limit 8GiB -o /etc/cdi/gpucap-8g.json\n"
        "         podman run --device " CDI_KIND "=8g image python train.py\n",
        stdout);
}

typedef struct cdi_opts {
  const char *name, *version, *lib, *container_lib, *output;
} cdi_opts_t;

/* Takes cdi's own options out of argv into *o, the rest (argv[0] first) into rest[]. Returns
 * -1 to go on, else an exit status (a missing value: printed). */
static int own_options(int argc, char **argv, cdi_opts_t *o, char **rest, int *nrest) {
  static const struct {
    const char *name, *shortname;
    size_t field;
  } own[] = {
      {"--name", NULL, offsetof(cdi_opts_t, name)},
      {"--cdi-version", NULL, offsetof(cdi_opts_t, version)},
      {"--lib", NULL, offsetof(cdi_opts_t, lib)},
      {"--container-lib", NULL, offsetof(cdi_opts_t, container_lib)},
      {"--output", "-o", offsetof(cdi_opts_t, output)},
  };
  *nrest = 0;
  rest[(*nrest)++] = argv[0];
  for (int i = 1; i < argc; i++) {
    bool taken = false;
    for (size_t k = 0; k < sizeof own / sizeof own[0] && !taken; k++) {
      const char *v = NULL;
      if (cli_opt_value(argc, argv, &i, own[k].name, own[k].shortname, &v)) {
        if (v == NULL) {
          return CLI_ERROR;
        }
        *(const char **)((char *)o + own[k].field) = v;
        taken = true;
      }
    }
    if (!taken && *nrest < MAX_ARGS - 1) {
      rest[(*nrest)++] = argv[i];
    } else if (!taken) {
      cli_error("cdi: too many arguments");
      return CLI_ERROR;
    }
  }
  rest[*nrest] = NULL;
  return -1;
}

/* Whether s is printable ASCII without `"` or `\`, so it goes into the JSON text as it is. */
static bool plain(const char *s) {
  for (; *s != '\0'; s++) {
    if (*s < 0x20 || *s > 0x7e || *s == '"' || *s == '\\') {
      return false;
    }
  }
  return true;
}

/* Checks the values that go into the spec; prints why and returns false otherwise. */
static bool check(const cdi_opts_t *o, const char *lib, const char *inside) {
  char name[CFG_NAME_MAX], why[CFG_WHY_MAX];
  // A budget's name (cfg_parse_name) less a trailing '.', '_' or '-', which CDI refuses.
  size_t n = strlen(o->name);
  if (cfg_parse_name(o->name, name, why, sizeof why) != 0 || strcmp(name, o->name) != 0 ||
      !isalnum((unsigned char)o->name[n - 1])) {
    cli_error("cdi: --name '%s' is not a CDI device name: letters, digits, '.', '_' and '-', "
              "beginning and ending with a letter or digit, at most %d bytes",
              o->name, CFG_NAME_MAX - 1);
    return false;
  }
  bool known = false;
  for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
    known |= strcmp(o->version, versions[i]) == 0;
  }
  if (!known) {
    cli_error("cdi: --cdi-version '%s' is not one gpucap writes: 0.5.0, 0.6.0, 0.7.0, 0.8.0, "
              "1.0.0 or 1.1.0",
              o->version);
    return false;
  }
  if (inside[0] != '/' || !plain(inside) || !plain(lib)) {
    cli_error("cdi: the library's paths must be absolute and of printable ASCII without quotes "
              "or backslashes ('%s', '%s')",
              lib, inside);
    return false;
  }
  return true;
}

/* The spec as JSON text into f. */
static void write_spec(FILE *f, const cdi_opts_t *o, const char *lib, const char *inside,
                       const cfg_t *cfg, const bool given[CFG_OPT_COUNT]) {
  char value[PATH_MAX + 64];
  bool annotations = strcmp(o->version, "0.5.0") != 0;
  fprintf(f, "{\n  \"cdiVersion\": \"%s\",\n  \"kind\": \"%s\",\n", o->version, CDI_KIND);
  if (annotations) {
    fprintf(f, "  \"annotations\": {\"gpucap.dev/version\": \"%s\"},\n", GPUCAP_VERSION);
  }
  fprintf(f, "  \"devices\": [\n    {\n      \"name\": \"%s\",\n", o->name);
  fprintf(f, "      \"containerEdits\": {\n        \"env\": [\n          \"LD_PRELOAD=%s\"",
          inside);
  for (int i = 0; i < CFG_OPT_COUNT; i++) {
    if (given[i]) {
      cfg_option_value(cfg, (cfg_opt_t)i, value, sizeof value);
      fprintf(f, ",\n          \"%s=%s\"", cfg_option((cfg_opt_t)i)->name, value);
    }
  }
  fprintf(f,
          "\n        ],\n        \"mounts\": [\n          {\"hostPath\": \"%s\", "
          "\"containerPath\": \"%s\", \"options\": [\"ro\", \"nosuid\", \"nodev\", "
          "\"bind\"]}\n        ]\n      }\n    }\n  ]\n}\n",
          lib, inside);
}

int cdi_main(int argc, char **argv) {
  static char *rest[MAX_ARGS];
  static cfg_t cfg;
  static bool given[CFG_OPT_COUNT];
  static char lib[PATH_MAX + 256];
  cdi_opts_t o = {"default", DEFAULT_VERSION, NULL, NULL, "-"};
  int nrest = 0;
  int status = own_options(argc, argv, &o, rest, &nrest);
  if (status < 0) {
    status = run_options(nrest, rest, cdi_usage, &cfg, given);
  }
  if (status >= 0) {
    return status;
  }
  preload_source_t src;
  if (preload_find(o.lib != NULL ? o.lib : getenv("GPUCAP_LIB"), NULL, lib, sizeof lib, &src) !=
      0) {
    cli_error("cdi: %s", lib);
    return CLI_ERROR;
  }
  const char *inside = o.container_lib != NULL ? o.container_lib : lib;
  if (!check(&o, lib, inside)) {
    return CLI_ERROR;
  }
  for (int i = 0; i < CFG_OPT_COUNT; i++) {
    char value[PATH_MAX + 64];
    cfg_option_value(&cfg, (cfg_opt_t)i, value, sizeof value);
    if (given[i] && !plain(value)) {
      cli_error("cdi: %s='%s' is not printable ASCII without quotes or backslashes",
                cfg_option((cfg_opt_t)i)->name, value);
      return CLI_ERROR;
    }
  }
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL) {
    cli_error("cdi: out of memory");
    return CLI_FAIL;
  }
  write_spec(f, &o, lib, inside, &cfg, given);
  if (fclose(f) != 0) {
    free(text);
    cli_error("cdi: out of memory");
    return CLI_FAIL;
  }
  int rc = cli_write_file("the CDI spec", o.output, text, len);
  free(text);
  return rc == 0 ? CLI_OK : CLI_FAIL;
}
