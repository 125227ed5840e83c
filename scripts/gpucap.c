/* gpucap: the command-line front end. `gpucap run` starts a program with the library preloaded
 * and its settings checked; `report`, `plot`, `export`, `env` and `top` read what a run left
 * behind, would use or is doing. This file only dispatches, from the one table of commands that
 * every listing of them (help, usage errors) is printed from; each command lives in its own
 * module (run.c, rjson.c, plot.c, export.c, top.c). Exit statuses: cli.h.
 */
#include "scripts/cdi.h"
#include "scripts/cli.h"
#include "scripts/export.h"
#include "scripts/plot.h"
#include "scripts/rjson.h"
#include "scripts/run.h"
#include "scripts/top.h"

#include <stdio.h>
#include <string.h>

static const struct command {
  const char *name;
  int (*main)(int argc, char **argv);
  const char *synopsis;
  const char *doc;
} commands[] = {
    {"run", run_main, "run [OPTIONS] [--] COMMAND [ARGS...]",
     "run COMMAND with its device memory capped, pooled and reported"},
    {"report", rjson_main, "report FILE.json", "print a saved JSON exit report as a table"},
    {"plot", plot_main, "plot TRACE.csv -o OUT.svg", "draw a trace as a timeline picture (SVG)"},
    {"export", export_main, "export --format FORMAT TRACE.csv -o OUT",
     "write a trace for PyTorch's memory viewer or Perfetto"},
    {"env", run_env_main, "env [OPTIONS]", "show the settings a run would use and their origin"},
    {"top", top_main, "top [--once] [--json] [--clean]",
     "show the processes running under gpucap on this machine, and the shared budgets"},
    {"cdi", cdi_main, "cdi [--name NAME] [-o FILE] [OPTIONS]",
     "write a CDI spec that puts containers under gpucap (podman, containerd, CRI-O)"},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

/* The commands' names, "run, report, ...", for messages. */
static const char *names(void) {
  static char list[256];
  size_t n = 0;
  for (size_t i = 0; i < NCOMMANDS && n < sizeof list; i++) {
    n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i > 0 ? ", " : "", commands[i].name);
  }
  return list;
}

/* The help, to stdout when asked for, to stderr (after a usage error) otherwise. */
static void usage(FILE *f) {
  fputs("Usage: gpucap COMMAND [ARGS...]\n"
        "\n"
        "gpucap caps the device memory of a CUDA program, serves it from a pool, and prints\n"
        "allocation and fragmentation statistics when the program exits.\n"
        "\n"
        "Commands:\n",
        f);
  for (size_t i = 0; i < NCOMMANDS; i++) {
    fprintf(f, "  %s\n      %s\n", commands[i].synopsis, commands[i].doc);
  }
  fprintf(f, "  %s\n      %s\n", "help [COMMAND]", "print this help, or COMMAND's");
  fputs("\n"
        "Options:\n"
        "  -h, --help     print this help (gpucap COMMAND --help for a command's)\n"
        "  --version      print gpucap's version\n"
        "\n"
        "Settings (environment variables the library reads; gpucap run's options set them):\n",
        f);
  fflush(f);
  if (f == stdout) {
    run_print_settings();
  } else {
    fputs("  (gpucap --help lists them)\n", f);
  }
  fputs("\n"
        "Exit status: 2 on a usage error (a bad or missing command, option or argument), but\n"
        "in gpucap run, which exits with its command's status, or 125 when it refuses to start\n"
        "it (a usage error, a bad setting, a failed check), 126 when it cannot be executed,\n"
        "127 when it is not found (as env(1)); gpucap env exits 125 for a bad setting; report,\n"
        "plot and export exit 1 when an input or output fails; 0 otherwise.\n"
        "\n"
        "Example: gpucap run --limit 8GiB --json run.json python train.py\n"
        "Documentation: man gpucap; README.md and docs/ (installed in share/doc/gpucap).\n",
        f);
}

static const struct command *find(const char *name) {
  for (size_t i = 0; i < NCOMMANDS; i++) {
    if (strcmp(commands[i].name, name) == 0) {
      return &commands[i];
    }
  }
  return NULL;
}

static int dispatch(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    cli_error("no command given (commands: %s)", names());
    return CLI_USAGE;
  }
  const char *name = argv[1];
  if (cli_is_help(name)) {
    usage(stdout);
    return CLI_OK;
  }
  if (strcmp(name, "--version") == 0) {
    cli_print_version();
    return CLI_OK;
  }
  if (strcmp(name, "help") == 0) {
    if (argc < 3) {
      usage(stdout);
      return CLI_OK;
    }
    const struct command *c = find(argv[2]);
    if (c == NULL || argc > 3) {
      cli_error("help: %s; commands: %s", argc > 3 ? "one command at a time" : "no such command",
                names());
      return CLI_USAGE;
    }
    char help[] = "--help";
    char *args[] = {argv[2], help, NULL};
    return c->main(2, args);
  }
  const struct command *c = find(name);
  if (c == NULL) {
    if (name[0] == '-') {
      cli_error("unknown option '%s'; options go after the command: gpucap run %s ... COMMAND "
                "(see gpucap --help)",
                name, name);
    } else {
      cli_error("unknown command '%s'; commands: %s (see gpucap --help)", name, names());
    }
    return CLI_USAGE;
  }
  return c->main(argc - 1, argv + 1);
}

int main(int argc, char **argv) {
  int status = dispatch(argc, argv);
  // Help, listings and `-o -` pictures go to stdout: a full disk or a closed pipe must not
  // look like success.
  if ((fflush(stdout) != 0 || ferror(stdout)) && status == CLI_OK) {
    cli_error("cannot write to standard output");
    return CLI_FAIL;
  }
  return status;
}
