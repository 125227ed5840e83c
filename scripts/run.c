/* run: `gpucap run` and `gpucap env` (contracts in run.h).
 *
 * Options become GPUCAP_* values (the table below) that override the environment; cfg_load
 * judges them through a getenv callback, so the CLI accepts exactly what the shim accepts and
 * its messages are the shim's. `run` then sets the variables, puts the library in LD_PRELOAD
 * and execs: no fork, so the command's status and signals reach the caller unchanged.
 */
#include "scripts/run.h"

#include "config/cfg.h"
#include "scripts/cli.h"
#include "scripts/preload.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEVLIST_MAX 4096 /* 64 devices of "63:18446744073709551615" fit with room to spare */
#define PRELOAD_MAX 65536

/* The options of `run` and `env`: each sets one GPUCAP_ variable, to its argument (metavar
 * non-NULL) or to a fixed value (a flag). */
static const struct runopt {
  const char *name;
  const char *metavar;
  cfg_opt_t var;
  const char *fixed;
  const char *doc;
} runopts[] = {
    {"--limit", "SIZE", CFG_OPT_MEMORY_LIMIT, NULL,
     "cap on every device: 4GiB, 512MiB, 1.5GiB, bytes"},
    {"--fraction", "F", CFG_OPT_MEMORY_FRACTION, NULL,
     "cap as a fraction of each device's memory: 0.5"},
    {"--device-limit", "LIST", CFG_OPT_MEMORY_LIMIT, NULL,
     "cap per device ordinal: 0=8GiB,1=4GiB; may be repeated"},
    {"--growth", NULL, CFG_OPT_ALLOW_GROWTH, "true", "grow the pool as the program asks (default)"},
    {"--preallocate", NULL, CFG_OPT_ALLOW_GROWTH, "false",
     "reserve the whole cap at the first allocation"},
    {"--report", "PATH", CFG_OPT_REPORT, NULL,
     "exit report table to PATH (./report.txt), stderr or off"},
    {"--json", "PATH", CFG_OPT_REPORT_JSON, NULL, "also write the exit report as JSON to PATH"},
    {"--trace", "PATH", CFG_OPT_TRACE, NULL, "write each allocation and free to PATH (RMM CSV)"},
    {"--quiet", NULL, CFG_OPT_REPORT, "off", "no exit report table (--json still writes)"},
};

#define NOPTS (sizeof runopts / sizeof runopts[0])

/* The values options gave, by setting. */
typedef struct settings {
  const char *value[CFG_OPT_COUNT]; /* NULL: not set by an option */
  const struct runopt *from[CFG_OPT_COUNT];
  char devlist[DEVLIST_MAX]; /* --device-limit items, translated to ordinal:size */
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

/* Appends the items of a --device-limit argument ("0=8GiB,1=4GiB") to s->devlist as the
 * variable's "0:8GiB,1:4GiB". The parser judges the result; this only swaps the separator and
 * refuses items that have none, which the variable would read as "every device". */
static int add_devlist(settings_t *s, const char *arg) {
  size_t used = strlen(s->devlist);
  const char *item = arg;
  for (;;) {
    const char *end = strchr(item, ',');
    size_t n = end != NULL ? (size_t)(end - item) : strlen(item);
    size_t blank = strspn(item, " \t");
    if (blank < n && memchr(item, '=', n) == NULL) {
      cli_error("--device-limit '%s': '%.*s' is not ORDINAL=SIZE; write e.g. "
                "--device-limit 0=8GiB,1=4GiB, or --limit SIZE for every device",
                arg, (int)n, item);
      return -1;
    }
    if (used + n + 2 > sizeof s->devlist) {
      cli_error("--device-limit: the list is too long");
      return -1;
    }
    if (used > 0) {
      s->devlist[used++] = ',';
    }
    memcpy(s->devlist + used, item, n);
    char *eq = memchr(s->devlist + used, '=', n);
    if (eq != NULL) {
      *eq = ':';
    }
    used += n;
    s->devlist[used] = '\0';
    if (end == NULL) {
      return 0;
    }
    item = end + 1;
  }
}

static int set_option(settings_t *s, const struct runopt *o, const char *value) {
  cfg_opt_t v = o->var;
  bool both_devlist = s->from[v] == o && strcmp(o->name, "--device-limit") == 0;
  if (s->from[v] != NULL && !both_devlist) {
    if (s->from[v] == o) {
      cli_error("%s is given twice; give it once", o->name);
    } else {
      cli_error("%s and %s both set %s; give only one of them", s->from[v]->name, o->name,
                cfg_option(v)->name);
    }
    return -1;
  }
  s->from[v] = o;
  if (strcmp(o->name, "--device-limit") == 0) {
    if (add_devlist(s, value) != 0) {
      return -1;
    }
    value = s->devlist;
  }
  s->value[v] = value;
  return 0;
}

enum { PARSED, PARSED_HELP, PARSED_VERSION, PARSE_ERROR };

/* Reads options from argv[1..]. For run (`command` not NULL) they end at "--", after which
 * *command is the index of COMMAND; env takes no "--". */
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
    if (command != NULL && strcmp(a, "--") == 0) {
      if (i + 1 >= argc) {
        cli_error("run: no command after '--'; usage: gpucap run [OPTIONS] -- COMMAND [ARGS...]");
        return PARSE_ERROR;
      }
      *command = i + 1;
      return PARSED;
    }
    bool matched = false;
    for (size_t k = 0; k < NOPTS && !matched; k++) {
      const struct runopt *o = &runopts[k];
      const char *value = o->fixed;
      if (o->metavar != NULL) {
        if (!cli_opt_value(argc, argv, &i, o->name, NULL, &value)) {
          continue;
        }
        if (value == NULL) {
          return PARSE_ERROR;
        }
      } else if (strcmp(a, o->name) != 0) {
        if (strncmp(a, o->name, strlen(o->name)) == 0 && a[strlen(o->name)] == '=') {
          cli_error("%s: %s takes no value", sub, o->name);
          return PARSE_ERROR;
        }
        continue;
      }
      matched = true;
      if (set_option(s, o, value) != 0) {
        return PARSE_ERROR;
      }
    }
    if (matched) {
      continue;
    }
    if (a[0] == '-') {
      cli_error("%s: unknown option '%s'; see gpucap %s --help", sub, a, sub);
    } else if (command != NULL) {
      cli_error("run: put '--' before the command: gpucap run [OPTIONS] -- %s ...", a);
    } else {
      cli_error("%s: unexpected argument '%s'; see gpucap %s --help", sub, a, sub);
    }
    return PARSE_ERROR;
  }
  if (command != NULL) {
    cli_error("run: no command; usage: gpucap run [OPTIONS] -- COMMAND [ARGS...]");
    return PARSE_ERROR;
  }
  return PARSED;
}

/* cfg_load over the options and the environment. On a bad value prints the shim's message and
 * where the value came from, and returns -1; warnings are printed only when `warn`. */
static int load_settings(settings_t *s, cfg_t *cfg, bool warn) {
  char msg[CFG_MSG_MAX];
  if (cfg_load(cfg, settings_getenv, s, msg, sizeof msg) == 0) {
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

void run_print_settings(void) {
  size_t n = cfg_describe(NULL, NULL, 0);
  char *buf = malloc(n + 1);
  if (buf != NULL) {
    cfg_describe(NULL, buf, n + 1);
    fputs(buf, stdout);
    free(buf);
  }
}

static void print_options(void) {
  for (size_t k = 0; k < NOPTS; k++) {
    const struct runopt *o = &runopts[k];
    char left[64];
    snprintf(left, sizeof left, "%s%s%s", o->name, o->metavar != NULL ? " " : "",
             o->metavar != NULL ? o->metavar : "");
    printf("  %-21s %s\n", left, o->doc);
    if (o->fixed != NULL) {
      printf("  %-21s (%s=%s)\n", "", cfg_option(o->var)->name, o->fixed);
    } else {
      printf("  %-21s (%s)\n", "", cfg_option(o->var)->name);
    }
  }
  printf("  %-21s %s\n", "-h, --help", "print this help");
  printf("  %-21s %s\n", "--version", "print gpucap's version");
}

static void run_usage(void) {
  fputs("Usage: gpucap run [OPTIONS] -- COMMAND [ARGS...]\n"
        "\n"
        "Runs COMMAND with gpucap's library added in front of LD_PRELOAD, so its CUDA device\n"
        "memory is capped, pooled, and reported when it exits. Every setting, from the options\n"
        "and from the environment, is first checked by the parser the library itself uses: a\n"
        "bad one stops here with the library's message and nothing is started. Then gpucap\n"
        "becomes COMMAND (exec): the output, exit status and signals are COMMAND's own.\n"
        "\n"
        "Options (each sets the variable shown for COMMAND, overriding the environment):\n",
        stdout);
  print_options();
  fputs("\nSettings (what the library reads; `gpucap env` shows their current values):\n", stdout);
  run_print_settings();
  fputs("\n"
        "GPUCAP_LIB, when set, names the library to preload; by default it is found next to\n"
        "gpucap ($PREFIX/lib/gpucap/libgpucap.so for $PREFIX/bin/gpucap).\n"
        "\n"
        "Exit status: COMMAND's; 2 when gpucap cannot start it (a bad option or setting, no\n"
        "command, a command not found or not executable, the library not found).\n"
        "\n"
        "Example: gpucap run --limit 8GiB --json ./run.json -- python train.py\n",
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
  print_options();
  fputs("\n"
        "Exit status: 0 when every setting is valid; 2 when one is not (its message is printed\n"
        "on stderr, as gpucap run would print it) or on a usage error.\n",
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
  case PARSE_ERROR:
    return CLI_USAGE;
  default:
    return -1;
  }
}

int run_main(int argc, char **argv) {
  static settings_t s; /* large; static keeps it off the stack */
  static cfg_t cfg;
  int command = 0;
  int status = parse_or_answer(argc, argv, &s, &command, run_usage);
  if (status >= 0) {
    return status;
  }
  if (load_settings(&s, &cfg, false) != 0) {
    return CLI_USAGE;
  }

  static char lib[PATH_MAX + 256];
  static char preload[PRELOAD_MAX];
  preload_source_t src;
  if (preload_find(getenv("GPUCAP_LIB"), NULL, lib, sizeof lib, &src) != 0) {
    cli_error("run: %s", lib);
    return CLI_USAGE;
  }
  if (preload_compose(lib, getenv("LD_PRELOAD"), preload, sizeof preload) != 0) {
    cli_error("run: %s", preload);
    return CLI_USAGE;
  }
  for (int i = 0; i < CFG_OPT_COUNT; i++) {
    if (s.value[i] != NULL && setenv(cfg_option((cfg_opt_t)i)->name, s.value[i], 1) != 0) {
      cli_error("run: cannot set %s: %s", cfg_option((cfg_opt_t)i)->name, strerror(errno));
      return CLI_USAGE;
    }
  }
  if (setenv("LD_PRELOAD", preload, 1) != 0) {
    cli_error("run: cannot set LD_PRELOAD: %s", strerror(errno));
    return CLI_USAGE;
  }
  fflush(stdout);
  execvp(argv[command], argv + command);

  int e = errno;
  if (e == ENOENT && strchr(argv[command], '/') == NULL) {
    cli_error("run: '%s': command not found in PATH; check its name or give its path",
              argv[command]);
  } else if (e == EACCES) {
    cli_error("run: '%s': permission denied; is it an executable file?", argv[command]);
  } else {
    cli_error("run: cannot run '%s': %s", argv[command], strerror(e));
  }
  return CLI_USAGE;
}

/* Prints cfg_describe's listing with "environment" replaced by the option for the settings
 * that options gave. */
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
  int bad = load_settings(&s, &cfg, true);
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
  fflush(stdout);
  return bad != 0 ? CLI_USAGE : CLI_OK;
}
