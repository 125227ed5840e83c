/* run: `gpucap run` and `gpucap env` (contracts in run.h).
 *
 * Options become GPUCAP_* values (the table below) that override the environment; cfg_load
 * judges them through a getenv callback, so the CLI accepts exactly what the shim accepts and
 * its messages are the shim's. Options follow GNU conventions: the first word that is not an
 * option starts the command (`--` may still mark it), and a later option overrides an earlier
 * one that sets the same variable. Before it execs, `run` proves that the command will be
 * capped as asked: the library loads, the command is one the loader preloads into, per-device
 * caps name devices that exist, the output files can be written. Then it sets the variables,
 * puts the library in LD_PRELOAD and execs: no fork, so the command's status and signals reach
 * the caller unchanged.
 */
#include "scripts/run.h"

#include "config/cfg.h"
#include "core/report.h"
#include "scripts/cli.h"
#include "scripts/driver.h"
#include "scripts/found.h"
#include "scripts/outpath.h"
#include "scripts/preload.h"
#include "scripts/target.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEVLIST_MAX 4096 /* 64 devices of "63:18446744073709551615" fit with room to spare */
#define PRELOAD_MAX 65536
#define NO_VAR CFG_OPT_COUNT /* an option that sets no variable */

/* The options of `run` and `env`: each sets one GPUCAP_ variable, to its argument (metavar
 * non-NULL) or to a fixed value (a flag); --allow-uncapped sets none. */
static const struct runopt {
  const char *name;
  const char *metavar;
  cfg_opt_t var;
  const char *fixed;
  const char *doc;
} runopts[] = {
    {"--limit", "SIZE", CFG_OPT_MEMORY_LIMIT, NULL,
     "cap on every device: 8GiB, 8Gi, 512MiB, 1.5GiB; bytes from 1 MiB"},
    {"--fraction", "F", CFG_OPT_MEMORY_FRACTION, NULL,
     "cap as a share of each device's memory: 0.5 or 50%"},
    {"--device-limit", "LIST", CFG_OPT_MEMORY_LIMIT, NULL,
     "cap per device ordinal: 0=8GiB,1=4GiB (or 0:8GiB); lists join"},
    {"--share", "NAME", CFG_OPT_SHARE, NULL,
     "one budget for every process naming NAME: --limit/--fraction cap them together"},
    {"--min", "SIZE", CFG_OPT_SHARE_MIN, NULL,
     "with --share: each process's guarantee (the others cannot take it)"},
    {"--max", "SIZE", CFG_OPT_SHARE_MAX, NULL, "with --share: this process's own cap (its burst)"},
    {"--oversubscribe", "SIZE", CFG_OPT_OVERSUBSCRIBE, NULL,
     "spill budget per device, in host memory beyond the cap"},
    {"--spill", NULL, CFG_OPT_SPILL, "on",
     "with --oversubscribe: allocations the cap refuses spill too"},
    {"--cap-covers", "WHAT", CFG_OPT_CAP_COVERS, NULL,
     "process: the cap counts the driver's memory too (default); allocations: only them"},
    {"--growth", NULL, CFG_OPT_ALLOW_GROWTH, "true", "grow the pool as the program asks (default)"},
    {"--preallocate", NULL, CFG_OPT_ALLOW_GROWTH, "false",
     "reserve the whole cap at the first allocation"},
    {"--arenas", "N", CFG_OPT_ARENAS, NULL,
     "pools per context, each with its own lock: auto (default: another as threads contend) "
     "or 1-16"},
    {"--report", "PATH", CFG_OPT_REPORT, NULL,
     "exit report table to PATH (report.txt), stderr or off"},
    {"--json", "PATH", CFG_OPT_REPORT_JSON, NULL, "also write the exit report as JSON to PATH"},
    {"--trace", "PATH", CFG_OPT_TRACE, NULL, "write each allocation and free to PATH (RMM CSV)"},
    {"--oom-dump", "PATH", CFG_OPT_OOM_DUMP, NULL,
     "the pool's bins and map at the first refusal to PATH, or stderr"},
    {"--quiet", NULL, CFG_OPT_REPORT, "off",
     "silences the exit report table, the out-of-memory report and the notice of a missing "
     "cap; warnings and errors still print, and --json, --trace and --oom-dump still write"},
    {"--allow-uncapped", NULL, NO_VAR, NULL,
     "run (with a warning) what gpucap cannot cap, instead of refusing"},
};

#define NOPTS (sizeof runopts / sizeof runopts[0])

/* The values options gave, by setting. */
typedef struct settings {
  const char *value[CFG_OPT_COUNT]; /* NULL: not set by an option; "": unset by one */
  const struct runopt *from[CFG_OPT_COUNT];
  cfg_devvals_t devvals;     /* the --device-limit items so far, later ones winning */
  char devlist[DEVLIST_MAX]; /* ... as the variable's text */
  bool allow_uncapped;
} settings_t;

static const char *settings_getenv(void *ctx, const char *name, bool secure) {
  const settings_t *s = ctx;
  for (int i = 0; i < CFG_OPT_COUNT; i++) {
    if (s->value[i] != NULL && strcmp(cfg_option((cfg_opt_t)i)->name, name) == 0) {
      return s->value[i];
    }
  }
  // Options that name files are read as the shim reads them (secure_getenv).
  return secure ? secure_getenv(name) : getenv(name);
}

/* Whether v is empty or white space: the library reads such a variable as unset. */
static bool blank(const char *v) {
  return v[strspn(v, " \t\n\v\f\r")] == '\0';
}

static bool is_list_option(const struct runopt *o) {
  return strcmp(o->name, "--device-limit") == 0;
}

/* Merges the items of a --device-limit argument ("0=8GiB,1=4GiB") into s->devvals, an item for
 * a device given before being replaced, and writes the result as the variable's text. */
static int add_devlist(settings_t *s, const char *arg) {
  cfg_devvals_t add;
  char why[CFG_WHY_MAX];
  if (cfg_parse_devvals(arg, CFG_DEV_SIZE, &add, why, sizeof why) != 0) {
    cli_error("--device-limit '%s': %s; write e.g. --device-limit 0=8GiB,1=4GiB", arg, why);
    return -1;
  }
  if (add.every) {
    cli_error("--device-limit '%s' names no device; write ORDINAL=SIZE, e.g. --device-limit "
              "0=8GiB,1=4GiB, or --limit SIZE for every device",
              arg);
    return -1;
  }
  for (int i = 0; i < GPUCAP_MAX_DEVICES; i++) {
    if (add.mask & (UINT64_C(1) << i)) {
      s->devvals.value[i] = add.value[i];
    }
  }
  s->devvals.mask |= add.mask;
  cfg_format_devvals(&s->devvals, CFG_DEV_SIZE, s->devlist, sizeof s->devlist);
  return 0;
}

/* Records one option. A later option for the same variable wins (GNU); only --limit and
 * --device-limit together are refused: either reading would leave devices uncapped that the
 * user meant to cap. An empty value unsets the variable for the command. */
static int set_option(settings_t *s, const struct runopt *o, const char *value) {
  if (o->var == NO_VAR) {
    s->allow_uncapped = true;
    return 0;
  }
  cfg_opt_t v = o->var;
  const struct runopt *prev = s->from[v];
  bool empty = blank(value);
  if (v == CFG_OPT_MEMORY_LIMIT && !empty && prev != NULL && !blank(s->value[v]) &&
      is_list_option(prev) != is_list_option(o)) {
    cli_error("%s and %s both set %s: --limit caps every device, --device-limit only those it "
              "lists; give one of them (a list may name every device)",
              prev->name, o->name, cfg_option(v)->name);
    return -1;
  }
  if (v == CFG_OPT_MEMORY_LIMIT && (empty || !is_list_option(o))) {
    memset(&s->devvals, 0, sizeof s->devvals);
  }
  if (is_list_option(o) && !empty) {
    if (add_devlist(s, value) != 0) {
      return -1;
    }
    value = s->devlist;
  }
  s->from[v] = o;
  s->value[v] = value;
  return 0;
}

enum { PARSED, PARSED_HELP, PARSED_VERSION, PARSE_USAGE, PARSE_BAD };

/* Matches argv[*i] against one option; returns 1 when it matched and was recorded, 0 when it
 * is another argument, -1 on a usage error (a missing value, a value for a flag), -2 on a bad
 * setting (printed). */
static int match_option(int argc, char **argv, int *i, settings_t *s, const struct runopt *o) {
  const char *a = argv[*i];
  const char *value = o->fixed != NULL ? o->fixed : "";
  if (o->metavar != NULL) {
    if (!cli_opt_value(argc, argv, i, o->name, NULL, &value)) {
      return 0;
    }
    if (value == NULL) {
      return -1;
    }
  } else if (strcmp(a, o->name) != 0) {
    if (strncmp(a, o->name, strlen(o->name)) == 0 && a[strlen(o->name)] == '=') {
      cli_error("%s: %s takes no value", argv[0], o->name);
      return -1;
    }
    return 0;
  }
  return set_option(s, o, value) == 0 ? 1 : -2;
}

/* Reads options from argv[1..]. For run (`command` not NULL) they end at the first word that is
 * not an option, or after "--"; *command is then the index of COMMAND. env takes no command. */
static int parse_options(int argc, char **argv, settings_t *s, int *command) {
  const char *sub = argv[0];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (cli_is_help(a)) {
      return PARSED_HELP;
    }
    if (strcmp(a, "--version") == 0) {
      return PARSED_VERSION;
    }
    if (command != NULL && (strcmp(a, "--") == 0 || a[0] != '-')) {
      *command = a[0] == '-' ? i + 1 : i;
      if (*command >= argc) {
        cli_error("run: no command after '--'; usage: gpucap run [OPTIONS] [--] COMMAND "
                  "[ARGS...]");
        return PARSE_USAGE;
      }
      return PARSED;
    }
    int matched = 0;
    for (size_t k = 0; k < NOPTS && matched == 0; k++) {
      matched = match_option(argc, argv, &i, s, &runopts[k]);
    }
    if (matched < 0) {
      return matched == -1 ? PARSE_USAGE : PARSE_BAD;
    }
    if (matched > 0) {
      continue;
    }
    if (a[0] == '-') {
      cli_error("%s: unknown option '%s'; see gpucap %s --help", sub, a, sub);
    } else {
      cli_error("%s: unexpected argument '%s'; see gpucap %s --help", sub, a, sub);
    }
    return PARSE_USAGE;
  }
  if (command != NULL) {
    cli_error("run: no command; usage: gpucap run [OPTIONS] [--] COMMAND [ARGS...]");
    return PARSE_USAGE;
  }
  return PARSED;
}

/* Where setting v came from, for messages: "--json" or "the environment". */
static const char *origin(const settings_t *s, int v) {
  return s->from[v] != NULL ? s->from[v]->name : "the environment";
}

/* Refuses GPUCAP_ variables that are not settings: the library would ignore them, so the
 * program would run without what its user meant. Returns -1 after the messages, else 0. */
static int refuse_unknown(void) {
  char msg[CFG_MSG_MAX];
  if (cfg_unknown_check(NULL, true, msg, sizeof msg) == 0) {
    return 0;
  }
  fputs(msg, stderr);
  fputs("gpucap: the library would ignore it: correct the name, or unset it\n", stderr);
  return -1;
}

/* cfg_load over the options and, through `get`, what else counts (settings_getenv: the
 * environment). On a bad value prints the shim's message and where the value came from, and
 * returns -1; warnings are printed only when `warn`. */
static int load_from(settings_t *s, cfg_getenv_fn *get, cfg_t *cfg, bool warn) {
  char msg[CFG_MSG_MAX];
  if (cfg_load(cfg, get, s, msg, sizeof msg) == 0) {
    if (warn && msg[0] != '\0') {
      fprintf(stderr, "%s\n", msg);
    }
    return 0;
  }
  fprintf(stderr, "%s\n", msg);
  for (int i = 0; i < CFG_OPT_COUNT; i++) {
    if (cfg_option_source(cfg, (cfg_opt_t)i) == CFG_SRC_INVALID) {
      const char *name = cfg_option((cfg_opt_t)i)->name;
      if (s->from[i] != NULL) {
        const struct runopt *o = s->from[i];
        fprintf(stderr, "gpucap: %s comes from %s%s%s (%s): correct it there\n", name, o->name,
                o->metavar != NULL ? " " : "", o->metavar != NULL ? o->metavar : "", o->doc);
      } else {
        fprintf(stderr, "gpucap: %s comes from the environment: correct it or unset it\n", name);
      }
      break;
    }
  }
  return -1;
}

static int load_settings(settings_t *s, cfg_t *cfg, bool warn) {
  return load_from(s, settings_getenv, cfg, warn);
}

void run_print_settings(void) {
  size_t n = cfg_describe(NULL, NULL, 0);
  char *buf = malloc(n + 1);
  if (buf != NULL) {
    cfg_describe(NULL, buf, n + 1);
    fputs(buf, stdout);
    free(buf);
  }
}

/* Prints text in the help's right column (from column 25), wrapped at word boundaries to stay
 * under 100 columns; the first line follows `left`. */
static void print_wrapped(const char *left, const char *text) {
  enum { WIDTH = 74 };
  printf("  %-21s ", left);
  while (strlen(text) > WIDTH) {
    int cut = WIDTH;
    while (cut > 0 && text[cut] != ' ') {
      cut--;
    }
    if (cut == 0) {
      break;
    }
    printf("%.*s\n  %-21s ", cut, text, "");
    text += cut + 1;
  }
  printf("%s\n", text);
}

void run_print_options(void) {
  for (size_t k = 0; k < NOPTS; k++) {
    const struct runopt *o = &runopts[k];
    char left[64];
    snprintf(left, sizeof left, "%s%s%s", o->name, o->metavar != NULL ? " " : "",
             o->metavar != NULL ? o->metavar : "");
    print_wrapped(left, o->doc);
    if (o->var == NO_VAR) {
      printf("  %-21s (run only; sets no variable)\n", "");
    } else if (o->fixed != NULL) {
      printf("  %-21s (%s=%s)\n", "", cfg_option(o->var)->name, o->fixed);
    } else {
      printf("  %-21s (%s)\n", "", cfg_option(o->var)->name);
    }
  }
  printf("  %-21s %s\n", "-h, --help", "print this help");
  printf("  %-21s %s\n", "--version", "print gpucap's version");
}

static void run_usage(void) {
  fputs("Usage: gpucap run [OPTIONS] [--] COMMAND [ARGS...]\n"
        "\n"
        "Runs COMMAND with gpucap's library added in front of LD_PRELOAD, so its CUDA device\n"
        "memory is capped, pooled, and reported when it exits. Options end at the first word\n"
        "that is not one (or at --); what follows is COMMAND's. Before COMMAND starts, gpucap\n"
        "checks every setting, from the options and from the environment, with the parser the\n"
        "library itself uses, and refuses what would leave the program uncapped or lose its\n"
        "report: a GPUCAP_ variable that is not a setting, a library the loader cannot load, a\n"
        "program it would not be loaded into (static, set-ID, another architecture), a\n"
        "per-device cap naming a device that does not exist while one that does gets none, an\n"
        "output file that cannot be written. Then gpucap becomes COMMAND (exec): the output,\n"
        "exit status and signals are COMMAND's own.\n"
        "\n"
        "Options (each sets the variable shown for COMMAND, overriding the environment; a\n"
        "later option wins over an earlier one; an empty value unsets the variable):\n",
        stdout);
  run_print_options();
  fputs("\nSettings (what the library reads; `gpucap env` shows their current values):\n", stdout);
  run_print_settings();
  fputs("\n"
        "GPUCAP_LIB, when set, names the library to preload; by default it is found next to\n"
        "gpucap ($PREFIX/lib/gpucap/libgpucap.so for $PREFIX/bin/gpucap).\n"
        "\n"
        "Exit status: COMMAND's; 125 when gpucap refuses to start it (a usage error such as an\n"
        "unknown option, a bad setting, a check above: run's own failures are never 2, which\n"
        "a program may exit with), 126 when COMMAND cannot be executed, 127 when it is not\n"
        "found.\n"
        "\n"
        "Example: gpucap run --limit 8GiB --json run.json python train.py\n",
        stdout);
}

static void env_usage(void) {
  fputs("Usage: gpucap env [OPTIONS]\n"
        "\n"
        "Prints the settings a `gpucap run` with the same OPTIONS would give its command, one\n"
        "line each: the variable, its value ((unset) or (invalid)), and where it came from\n"
        "(an option, the environment, TF_FORCE_GPU_ALLOW_GROWTH, or the default); then the\n"
        "library gpucap run would preload (GPUCAP_LIB).\n"
        "\n"
        "Options (as for gpucap run):\n",
        stdout);
  run_print_options();
  fputs("\n"
        "Exit status: 0 when every setting is valid; 125 when one is not, or when a GPUCAP_\n"
        "variable is not a setting (the message is printed on stderr, as gpucap run would\n"
        "print it); 2 on a usage error.\n",
        stdout);
}

/* Parses the options of `run` or `env` (see parse_options) and answers --help, --version and
 * usage errors itself: returns -1 when the subcommand should go on, else its exit status. */
static int parse_or_answer(int argc, char **argv, settings_t *s, int *command,
                           void (*usage)(void)) {
  switch (parse_options(argc, argv, s, command)) {
  case PARSED_HELP:
    usage();
    return CLI_OK;
  case PARSED_VERSION:
    cli_print_version();
    return CLI_OK;
  case PARSE_USAGE:
    /* run's status is otherwise its command's (a Python program's usage error is 2 too): every
     * refusal of its own is 125, as env(1) and timeout(1) have it. */
    return command != NULL ? CLI_ERROR : CLI_USAGE;
  case PARSE_BAD:
    return CLI_ERROR;
  default:
    return -1;
  }
}

/* Checks the files the settings name (outpath.h), and that no two name one file. */
static int check_outputs(const settings_t *s, const cfg_t *cfg) {
  enum { FILES = 4 };
  static outpath_t out[FILES];
  const struct {
    int var;
    const char *path;
  } files[FILES] = {
      {CFG_OPT_REPORT, cfg->report.kind == CFG_DEST_FILE ? cfg->report.path : ""},
      {CFG_OPT_OOM_DUMP, cfg->oom_dump.kind == CFG_DEST_FILE ? cfg->oom_dump.path : ""},
      {CFG_OPT_REPORT_JSON, cfg->report_json},
      {CFG_OPT_TRACE, cfg->trace},
  };
  char why[PATH_MAX + 256];
  for (int i = 0; i < FILES; i++) {
    const char *name = cfg_option((cfg_opt_t)files[i].var)->name;
    if (files[i].path[0] != '\0' && outpath_check(files[i].path, &out[i], why, sizeof why) != 0) {
      cli_error("run: %s (from %s): %s; nothing was started", name, origin(s, files[i].var), why);
      return -1;
    }
    for (int j = 0; j < i && files[i].path[0] != '\0'; j++) {
      if (files[j].path[0] != '\0' && outpath_same(&out[j], &out[i])) {
        cli_error("run: %s and %s both name '%s': each would overwrite the other; name two "
                  "files",
                  cfg_option((cfg_opt_t)files[j].var)->name, name, out[i].path);
        return -1;
      }
    }
  }
  return 0;
}

/* Refuses a command the loader will not preload into (target.h), unless allowed. */
static int check_target(const settings_t *s, const char *path, const char *lib) {
  char why[PATH_MAX + 1024];
  if (target_check(path, lib, why, sizeof why) == 0) {
    return 0;
  }
  if (s->allow_uncapped) {
    cli_warn("run: %s; it runs uncapped and unreported (--allow-uncapped)", why);
    return 0;
  }
  cli_error("run: %s. gpucap cannot cap it (docs/compatibility.md), so nothing was started; "
            "to run it uncapped anyway, add --allow-uncapped",
            why);
  return -1;
}

/* Writes "5" or "5, 7" (the ordinals of mask) into buf. */
static void ordinals(uint64_t mask, char *buf, size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < GPUCAP_MAX_DEVICES && n < len; i++) {
    if (mask & (UINT64_C(1) << i)) {
      n += (size_t)snprintf(buf + n, len - n, "%s%d", n > 0 ? ", " : "", i);
    }
  }
}

/* Warns about each of the `count` devices whose cap is above its memory. */
static void warn_oversize(const settings_t *s, const cfg_t *cfg, int count) {
  for (int i = 0; i < count; i++) {
    uint64_t v = 0, total = 0;
    if (cfg_devvals_get(&cfg->limit, i, &v) && driver_device_info(i, NULL, 0, &total) == 0 &&
        total > 0 && cfg_device_cap(cfg, i, total) > total) {
      char want[REPORT_SIZE_MAX], has[REPORT_SIZE_MAX];
      report_format_size(v, want, sizeof want);
      report_format_size(total, has, sizeof has);
      cli_warn("run: the cap of device %d (%s, from %s) is more than its %s: the device's memory "
               "is the only limit there",
               i, want, origin(s, CFG_OPT_MEMORY_LIMIT), has);
    }
  }
}

/* Per-device caps, checked against the devices the program will see (the driver is asked only
 * for them): a cap above a device's memory is a warning; caps naming devices the program will
 * not see are refused when a device it does see then gets no cap (a numbering mistake: the cap
 * meant for it went elsewhere), a warning when every device it sees is capped anyway (one job
 * script for machines of different sizes). */
static int check_devices(const settings_t *s, const cfg_t *cfg) {
  uint64_t named = cfg->limit.mask | cfg->fraction.mask;
  int count = 0;
  if (named == 0 || driver_device_count(&count) != 0 || count <= 0 || count >= GPUCAP_MAX_DEVICES) {
    return 0;
  }
  warn_oversize(s, cfg, count);
  if ((named >> count) == 0) {
    return 0;
  }
  uint64_t capped = 0;
  for (int i = 0; i < count; i++) {
    uint64_t v = 0;
    if (cfg_devvals_get(&cfg->limit, i, &v) || cfg_devvals_get(&cfg->fraction, i, &v)) {
      capped |= UINT64_C(1) << i;
    }
  }
  uint64_t all = (UINT64_C(1) << count) - 1;
  char missing[256], bare[256];
  ordinals(named & ~all, missing, sizeof missing);
  ordinals(all & ~capped, bare, sizeof bare);
  const char *from = s->from[CFG_OPT_MEMORY_LIMIT] != NULL      ? origin(s, CFG_OPT_MEMORY_LIMIT)
                     : s->from[CFG_OPT_MEMORY_FRACTION] != NULL ? origin(s, CFG_OPT_MEMORY_FRACTION)
                                                                : "the environment";
  if (capped == all) {
    cli_warn("run: the per-device caps (from %s) name device %s, which the program does not "
             "see (it sees %d); that part is ignored",
             from, missing, count);
    return 0;
  }
  if (s->allow_uncapped) {
    cli_warn("run: the per-device caps (from %s) name device %s, which the program does not "
             "see; device %s runs uncapped (--allow-uncapped)",
             from, missing, bare);
    return 0;
  }
  cli_error("run: the per-device caps (from %s) name device %s, but the program sees %d "
            "device%s (ordinals from 0, after CUDA_VISIBLE_DEVICES) and device %s would get no "
            "cap; nothing was started. Name the devices as the program sees them, or add "
            "--allow-uncapped",
            from, missing, count, count == 1 ? "" : "s", bare);
  return -1;
}

/* Says once, before the command starts, that it runs with no cap at all (no limit, fraction or
 * per-process share cap on any device): gpucap then only reports, which a user who
 * forgot --limit would otherwise learn only from an out-of-memory error. --quiet silences it. */
static void notice_uncapped(const cfg_t *cfg) {
  const cfg_devvals_t *caps[] = {&cfg->limit, &cfg->fraction, &cfg->share_max};
  for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
    if (caps[i]->every || caps[i]->mask != 0) {
      return;
    }
  }
  if (cfg->report.kind != CFG_DEST_OFF) {
    fputs("gpucap: no cap is set (--limit, --fraction, --device-limit): the command's device "
          "memory is not limited, only reported\n",
          stderr);
  }
}

/* Finds and proves the library, and composes LD_PRELOAD with it into preload[len]. */
static int prepare_library(char *lib, size_t liblen, char *preload, size_t len) {
  preload_source_t src;
  char why[1024];
  if (preload_find(getenv("GPUCAP_LIB"), NULL, lib, liblen, &src) != 0) {
    cli_error("run: %s", lib);
    return -1;
  }
  if (preload_probe(lib, why, sizeof why) != 0) {
    cli_error("run: the library cannot be loaded on this system, so the command would run "
              "uncapped; nothing was started. The loader says: %s. (A library built against a "
              "newer glibc than this system's? See docs/cluster.md.)",
              why);
    return -1;
  }
  if (preload_compose(lib, getenv("LD_PRELOAD"), preload, len) != 0) {
    cli_error("run: %s", preload);
    return -1;
  }
  return 0;
}

/* Sets the variables the options gave (an empty one unset) and LD_PRELOAD. */
static int set_environment(const settings_t *s, const char *preload) {
  for (int i = 0; i < CFG_OPT_COUNT; i++) {
    const char *name = cfg_option((cfg_opt_t)i)->name;
    const char *v = s->value[i];
    if (v != NULL && (blank(v) ? unsetenv(name) : setenv(name, v, 1)) != 0) {
      cli_error("run: cannot set %s: %s", name, strerror(errno));
      return -1;
    }
  }
  if (setenv("LD_PRELOAD", preload, 1) != 0) {
    cli_error("run: cannot set LD_PRELOAD: %s", strerror(errno));
    return -1;
  }
  return 0;
}

/* Says why `name` (found at `path` when found) cannot run, and returns the exit status. */
static int cannot_run(const char *name, int err, bool found) {
  if (err == ENOENT && !found) {
    if (strchr(name, '/') == NULL) {
      cli_error("run: '%s': command not found in PATH; check its name or give its path", name);
    } else {
      cli_error("run: cannot run '%s': No such file or directory", name);
    }
    return CLI_NOT_FOUND;
  }
  if (err == ENOENT) {
    cli_error("run: cannot run '%s': its interpreter (the #! line) or loader was not found", name);
    return CLI_NOT_FOUND;
  }
  if (err == EACCES) {
    cli_error("run: '%s': permission denied; is it an executable file?", name);
  } else {
    cli_error("run: cannot run '%s': %s", name, strerror(err));
  }
  return CLI_CANNOT_RUN;
}

int run_main(int argc, char **argv) {
  static settings_t s; /* large; static keeps it off the stack */
  static cfg_t cfg;
  static char lib[PATH_MAX + 256];
  static char preload[PRELOAD_MAX];
  static char path[PATH_MAX];
  int command = 0;
  int status = parse_or_answer(argc, argv, &s, &command, run_usage);
  if (status >= 0) {
    return status;
  }
  static cfg_found_t caps;
  if (refuse_unknown() != 0 || load_settings(&s, &cfg, false) != 0 ||
      found_load(&caps, &cfg) != 0 ||
      prepare_library(lib, sizeof lib, preload, sizeof preload) != 0 ||
      check_outputs(&s, &cfg) != 0) {
    return CLI_ERROR;
  }
  const char *name = argv[command];
  int found = target_find(name, path, sizeof path);
  if (found != 0) {
    return cannot_run(name, -found, false);
  }
  if (check_target(&s, path, lib) != 0 || check_devices(&s, &cfg) != 0 ||
      set_environment(&s, preload) != 0) {
    return CLI_ERROR;
  }
  notice_uncapped(&cfg);
  fflush(stdout);
  execvp(name, argv + command);
  return cannot_run(name, errno, true);
}

/* Prints cfg_describe's listing with "environment" replaced by the option for the settings
 * that options gave, and a note on those an empty option value unset. */
static void print_listing(const settings_t *s, const cfg_t *cfg) {
  static const char env_word[] = "environment";
  size_t n = cfg_describe(cfg, NULL, 0);
  char *buf = malloc(n + 1);
  if (buf == NULL) {
    cli_error("env: out of memory");
    return;
  }
  cfg_describe(cfg, buf, n + 1);
  char *line = buf;
  for (int i = 0; *line != '\0'; i++) {
    char *nl = strchr(line, '\n');
    size_t len = nl != NULL ? (size_t)(nl - line) : strlen(line);
    size_t w = sizeof env_word - 1;
    if (i < CFG_OPT_COUNT && s->from[i] != NULL && len >= w &&
        memcmp(line + len - w, env_word, w) == 0) {
      printf("%.*soption %s\n", (int)(len - w), line, s->from[i]->name);
    } else if (i < CFG_OPT_COUNT && s->from[i] != NULL && blank(s->value[i])) {
      printf("%.*s (option %s unset it)\n", (int)len, line, s->from[i]->name);
    } else {
      printf("%.*s\n", (int)len, line);
    }
    if (nl == NULL) {
      break;
    }
    line = nl + 1;
  }
  free(buf);
}

int run_env_main(int argc, char **argv) {
  static settings_t s;
  static cfg_t cfg;
  int status = parse_or_answer(argc, argv, &s, NULL, env_usage);
  if (status >= 0) {
    return status;
  }
  static cfg_found_t found;
  int bad = refuse_unknown();
  bad |= load_settings(&s, &cfg, true);
  bad |= found_load(&found, &cfg);
  print_listing(&s, &cfg);

  static char lib[PATH_MAX + 256];
  preload_source_t src = PRELOAD_FROM_BUILD;
  const char *override = getenv("GPUCAP_LIB");
  if (preload_find(override, NULL, lib, sizeof lib, &src) == 0) {
    printf("%-24s %-16s %s\n", "GPUCAP_LIB", lib,
           src == PRELOAD_FROM_ENV ? "environment" : "default (next to gpucap)");
  } else {
    printf("%-24s %-16s %s\n", "GPUCAP_LIB", "(not found)",
           override != NULL ? "environment" : "default (next to gpucap)");
    cli_warn("env: %s", lib);
  }
  found_print(&found, &cfg);
  fflush(stdout);
  return bad != 0 ? CLI_ERROR : CLI_OK;
}

/* The options' values alone (the process environment is not read). */
static const char *options_getenv(void *ctx, const char *name, bool secure) {
  const settings_t *s = ctx;
  (void)secure;
  for (int i = 0; i < CFG_OPT_COUNT; i++) {
    if (s->value[i] != NULL && strcmp(cfg_option((cfg_opt_t)i)->name, name) == 0) {
      return s->value[i];
    }
  }
  return NULL;
}

int run_options(int argc, char **argv, void (*usage)(void), cfg_t *cfg, bool given[CFG_OPT_COUNT]) {
  static settings_t s;
  memset(&s, 0, sizeof s);
  int status = parse_or_answer(argc, argv, &s, NULL, usage);
  if (status >= 0) {
    return status;
  }
  if (load_from(&s, options_getenv, cfg, true) != 0) {
    return CLI_ERROR;
  }
  for (int i = 0; i < CFG_OPT_COUNT; i++) {
    given[i] = s.value[i] != NULL && !blank(s.value[i]);
  }
  return -1;
}
