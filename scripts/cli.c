/* cli: shared helpers of the gpucap subcommands (contracts in cli.h).
 * Messages are built in one buffer and written with one fputs, so lines from concurrent
 * processes do not interleave mid-line. Single-threaded; no state.
 */
#include "scripts/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void message(const char *prefix, const char *fmt, va_list ap) {
  char line[2048];
  int n = snprintf(line, sizeof line, "%s", prefix);
  if (n < 0) {
    n = 0;
  }
  vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  fputs(line, stderr);
  fputc('\n', stderr);
}

void cli_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  message("gpucap: error: ", fmt, ap);
  va_end(ap);
}

void cli_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  message("gpucap: warning: ", fmt, ap);
  va_end(ap);
}

int cli_read_file(const char *what, const char *path, size_t max, char **buf, size_t *len) {
  bool is_stdin = strcmp(path, "-") == 0;
  FILE *f = is_stdin ? stdin : fopen(path, "rb");
  if (f == NULL) {
    cli_error("%s: cannot open '%s': %s", what, path, strerror(errno));
    return -1;
  }
  size_t cap = 0;
  size_t n = 0;
  char *p = NULL;
  int rc = 0;
  for (;;) {
    if (n + 1 >= cap) {
      if (n > max) {
        cli_error("%s: '%s' is larger than %zu bytes; is it the right file?", what, path, max);
        rc = -1;
        break;
      }
      size_t want = cap == 0 ? 4096 : cap * 2;
      char *q = realloc(p, want);
      if (q == NULL) {
        cli_error("%s: out of memory reading '%s'", what, path);
        rc = -1;
        break;
      }
      p = q;
      cap = want;
    }
    size_t got = fread(p + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) {
      if (ferror(f)) {
        cli_error("%s: cannot read '%s': %s", what, path, strerror(errno));
        rc = -1;
      } else if (n > max) {
        cli_error("%s: '%s' is larger than %zu bytes; is it the right file?", what, path, max);
        rc = -1;
      }
      break;
    }
  }
  if (!is_stdin) {
    fclose(f);
  }
  if (rc != 0) {
    free(p);
    return -1;
  }
  p[n] = '\0';
  *buf = p;
  *len = n;
  return 0;
}

int cli_write_file(const char *what, const char *path, const char *buf, size_t len) {
  bool is_stdout = strcmp(path, "-") == 0;
  FILE *f = is_stdout ? stdout : fopen(path, "wb");
  if (f == NULL) {
    cli_error("%s: cannot create '%s': %s", what, path, strerror(errno));
    return -1;
  }
  bool ok = fwrite(buf, 1, len, f) == len;
  ok = (is_stdout ? fflush(f) : fclose(f)) == 0 && ok;
  if (!ok) {
    cli_error("%s: cannot write '%s': %s", what, path, strerror(errno));
    return -1;
  }
  return 0;
}

bool cli_opt_value(int argc, char **argv, int *i, const char *name, const char *shortname,
                   const char **value) {
  const char *arg = argv[*i];
  size_t n = strlen(name);
  if (strncmp(arg, name, n) == 0 && arg[n] == '=') {
    *value = arg + n + 1;
    return true;
  }
  if (strcmp(arg, name) != 0 && (shortname == NULL || strcmp(arg, shortname) != 0)) {
    return false;
  }
  if (*i + 1 >= argc) {
    cli_error("%s needs a value (%s VALUE)", arg, arg);
    *value = NULL;
    return true;
  }
  *i += 1;
  *value = argv[*i];
  return true;
}

int cli_parse(const char *cmd, int argc, char **argv, const char *usage, const cli_opt_t *opts,
              int nopts, const char *input_name, const char **input) {
  bool dashdash = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!dashdash && cli_is_help(a)) {
      fputs(usage, stdout);
      return CLI_OK;
    }
    if (!dashdash && strcmp(a, "--version") == 0) {
      cli_print_version();
      return CLI_OK;
    }
    if (dashdash || a[0] != '-' || strcmp(a, "-") == 0) {
      if (*input != NULL) {
        cli_error("%s: one %s at a time ('%s' and '%s'); see gpucap %s --help", cmd, input_name,
                  *input, a, cmd);
        return CLI_USAGE;
      }
      *input = a;
      continue;
    }
    if (strcmp(a, "--") == 0) {
      dashdash = true;
      continue;
    }
    const char *v = NULL;
    int k = 0;
    while (k < nopts && !cli_opt_value(argc, argv, &i, opts[k].name, opts[k].shortname, &v)) {
      k++;
    }
    if (k == nopts) {
      cli_error("%s: unknown option '%s'; see gpucap %s --help", cmd, a, cmd);
      return CLI_USAGE;
    }
    if (v == NULL) {
      return CLI_USAGE;
    }
    if (*opts[k].value != NULL) {
      cli_error("%s: %s is given twice; give it once", cmd, a);
      return CLI_USAGE;
    }
    *opts[k].value = v;
  }
  return -1;
}

bool cli_is_help(const char *arg) {
  return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0;
}

void cli_print_version(void) {
  printf("gpucap %s\n", GPUCAP_VERSION);
}
