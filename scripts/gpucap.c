/* gpucap: the command-line front end. `gpucap run` starts a program with the library preloaded
 * and its settings checked; `report`, `plot`, `export` and `env` read what a run left behind
 * or would use. This file only dispatches; each command lives in its own module (run.c,
 * rjson.c, plot.c, export.c). Exit statuses: cli.h.
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
    {"top", top_main, "top [--once] [--json]",
     "show the shared budgets (--share) on this machine: processes, use, pools, caps"},
    {"cdi", cdi_main, "cdi [--name NAME] [-o FILE] [OPTIONS]",
     "write a CDI spec that puts containers under gpucap (podman, containerd, CRI-O)"},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(void) {
  fputs("Usage: gpucap COMMAND [ARGS...]\n"
        "\n"
        "gpucap caps the device memory of a CUDA program, serves it from a pool, and prints\n"
        "allocation and fragmentation statistics when the program exits.\n"
        "\n"
        "Commands:\n",
        stdout);
  for (size_t i = 0; i < NCOMMANDS; i++) {
    printf("  %s\n      %s\n", commands[i].synopsis, commands[i].doc);
  }
  printf("  %s\n      %s\n", "help [COMMAND]", "print this help, or COMMAND's");
  fputs("\n"
        "Options:\n"
        "  -h, --help     print this help (gpucap COMMAND --help for a command's)\n"
        "  --version      print gpucap's version\n"
        "\n"
        "Settings (environment variables the library reads; gpucap run's options set them):\n",
        stdout);
  run_print_settings();
  fputs("\n"
        "Exit status: gpucap run exits with its command's status, or 125 when gpucap refuses\n"
        "to start it, 126 when it cannot be executed, 127 when it is not found (as env(1));\n"
        "gpucap env exits 0, or 125 for a bad setting; report, plot and export exit 0, 1 when\n"
        "an input or output fails, 2 on a usage error; gpucap itself exits 125 on a usage error.\n"
        "\n"
        "Example: gpucap run --limit 8GiB --json run.json python train.py\n"
        "Documentation: man gpucap; README.md and docs/ (installed in share/doc/gpucap).\n",
        stdout);
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
    cli_error("no command given; try gpucap --help (commands: run, report, plot, export, env)");
    return CLI_ERROR;
  }
  const char *name = argv[1];
  if (cli_is_help(name)) {
    usage();
    return CLI_OK;
  }
  if (strcmp(name, "--version") == 0) {
    cli_print_version();
    return CLI_OK;
  }
  if (strcmp(name, "help") == 0) {
    if (argc < 3) {
      usage();
      return CLI_OK;
    }
    const struct command *c = find(argv[2]);
    if (c == NULL || argc > 3) {
      cli_error("help: %s; commands: run, report, plot, export, env",
                argc > 3 ? "one command at a time" : "no such command");
      return CLI_ERROR;
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
      cli_error(
          "unknown command '%s'; commands: run, report, plot, export, env (see gpucap --help)",
          name);
    }
    return CLI_ERROR;
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
