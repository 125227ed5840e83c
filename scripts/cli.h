/* cli: what every gpucap subcommand shares: exit statuses, messages on stderr, reading and
 * writing whole files, and matching `--name VALUE` / `--name=VALUE` arguments.
 *
 * The CLI is an ordinary program (it may allocate, print and exit), unlike the shim; it still
 * speaks gpucap's message prefixes (`gpucap: error: `, `gpucap: warning: `). Single-threaded.
 */
#ifndef GPUCAP_SCRIPTS_CLI_H
#define GPUCAP_SCRIPTS_CLI_H

#include <stdbool.h>
#include <stddef.h>

#ifndef GPUCAP_VERSION
#define GPUCAP_VERSION "unknown"
#endif

/* Exit statuses of gpucap's own commands. A usage error (a bad or missing command, option or
 * argument) is 2, as getopt-style tools have it, in every command but `gpucap run`: run exits
 * with its command's status, so every refusal of its own, a usage error included, uses the
 * statuses env(1), timeout(1) and nice(1) use, which a program rarely exits with (a Python
 * program's usage error is 2): a job log can then tell gpucap's refusal from the program's
 * failure. */
enum {
  CLI_OK = 0,
  CLI_FAIL = 1,         /* report, plot, export: an input unreadable or malformed, an output
                         * unwritten */
  CLI_USAGE = 2,        /* every command but run: a usage error */
  CLI_ERROR = 125,      /* run, env: a bad setting; run: a usage error or a failed check */
  CLI_CANNOT_RUN = 126, /* run: the command was found but cannot be executed */
  CLI_NOT_FOUND = 127,  /* run: the command was not found */
};

/* Prints "gpucap: error: " + the formatted text + "\n" to stderr. Never fails. */
__attribute__((format(printf, 1, 2))) void cli_error(const char *fmt, ...);

/* Prints "gpucap: warning: " + the formatted text + "\n" to stderr. Never fails. */
__attribute__((format(printf, 1, 2))) void cli_warn(const char *fmt, ...);

/* Reads the whole file at `path` ("-" is standard input) into a malloc'ed buffer with a NUL
 * after its *len bytes; the caller frees *buf. Fails iff the file cannot be opened or read, is
 * larger than `max` bytes, or memory runs out: returns -1 after printing an error that names
 * `what` and the path; 0 on success. O(file size). */
int cli_read_file(const char *what, const char *path, size_t max, char **buf, size_t *len);

/* Writes buf[0..len) to `path` ("-" is standard output), created or emptied with mode 0666 less
 * the umask. Fails iff the file cannot be created or written (returns -1 after printing an
 * error naming `what` and the path); 0 on success. O(len). */
int cli_write_file(const char *what, const char *path, const char *buf, size_t len);

/* Matches argv[*i] against the long option `name` ("--limit") that takes a value: either
 * "--limit=V" or "--limit" followed by V in argv[*i + 1] (then *i is advanced past V).
 * Returns true and sets *value on a match; prints an error and sets *value to NULL when the
 * option matches but its value is missing (the caller then fails with CLI_USAGE). Returns false
 * when argv[*i] is another argument. `shortname` ("-o") may be NULL. O(length of the args). */
bool cli_opt_value(int argc, char **argv, int *i, const char *name, const char *shortname,
                   const char **value);

/* An option that takes a value, for cli_parse: its long name ("--output"), its short name
 * ("-o", or NULL) and where its value goes (NULL until given). */
typedef struct cli_opt {
  const char *name, *shortname;
  const char **value;
} cli_opt_t;

/* The arguments of a command that reads one input file (`gpucap plot`, `gpucap export`):
 * argv[1..argc) holds options from opts[0..nopts) (each at most once), -h/--help, --version,
 * and one positional argument (*input, called `input_name` in messages; "-" is one, and
 * everything after "--" is positional).
 * Returns -1 when the caller should go on; CLI_OK after printing `usage` or the version to
 * stdout; CLI_USAGE after printing an error naming `cmd` (an unknown or repeated option, a
 * missing value, a second input). Does not check that options or the input were given. */
int cli_parse(const char *cmd, int argc, char **argv, const char *usage, const cli_opt_t *opts,
              int nopts, const char *input_name, const char **input);

/* Returns true iff argument `arg` is "-h" or "--help". */
bool cli_is_help(const char *arg);

/* Prints "gpucap VERSION" to stdout. */
void cli_print_version(void);

#endif
