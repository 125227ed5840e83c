/* run: `gpucap run`, which checks the settings and execs a command with the library preloaded,
 * and `gpucap env`, which shows the settings such a run would have. Both read their options
 * into GPUCAP_* values and judge them, with the environment, by cfg_load: the shim's parser.
 */
#ifndef GPUCAP_SCRIPTS_RUN_H
#define GPUCAP_SCRIPTS_RUN_H

#include "config/cfg.h"

#include <stdbool.h>

/* `gpucap run [OPTIONS] -- COMMAND [ARGS...]`; argv[0] is "run". Returns only on failure
 * (CLI_USAGE) or for --help/--version (CLI_OK); otherwise the process becomes COMMAND. */
int run_main(int argc, char **argv);

/* `gpucap env [OPTIONS]`; argv[0] is "env". Returns the exit status. */
int run_env_main(int argc, char **argv);

/* Writes the settings listing of --help (cfg_describe without a cfg: every GPUCAP_ variable,
 * its type, default, meaning and accepted forms) to stdout. */
void run_print_settings(void);

/* Prints the options `run` and `env` take, one line each with the variable it sets, to stdout. */
void run_print_options(void);

/* Reads the options of `run` and `env` from argv[1..] (no command; argv[0] names the command in
 * messages) as settings, judged by the library's parser with the environment left out: cfg gets
 * them (defaults elsewhere) and given[i] says whether an option set option i. Returns -1 when
 * the caller should go on; otherwise the exit status after --help (usage printed), --version,
 * or an error (printed: CLI_ERROR). */
int run_options(int argc, char **argv, void (*usage)(void), cfg_t *cfg, bool given[CFG_OPT_COUNT]);

#endif
