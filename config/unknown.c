/* Names in the environment that look like gpucap settings but are not: a misspelled
 * GPUCAP_MEMORY_LIMIT would otherwise leave the program uncapped without a word.
 */
#include "config/cfg.h"

#include <string.h>

extern char **environ;

#define PREFIX "GPUCAP_"
#define NAME_MAX_CMP 64

/* Variables of the gpucap command itself (not settings of the shim). */
static const char *const command_vars[] = {"GPUCAP_LIB"};

/* Levenshtein distance of a[0..na) and b[0..nb), both at most NAME_MAX_CMP long. */
static size_t distance(const char *a, size_t na, const char *b, size_t nb) {
  size_t row[NAME_MAX_CMP + 1];
  for (size_t j = 0; j <= nb; j++) {
    row[j] = j;
  }
  for (size_t i = 1; i <= na; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= nb; j++) {
      size_t up = row[j];
      size_t best = diag + (a[i - 1] != b[j - 1]);
      best = up + 1 < best ? up + 1 : best;
      best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
      row[j] = best;
      diag = up;
    }
  }
  return row[nb];
}

/* The setting closest to name[0..n), if within 2 edits and 1 edit per 4 characters after the
 * prefix (so GPUCAP_FOO suggests nothing), else NULL. */
static const char *suggest(const char *name, size_t n) {
  const char *best = NULL;
  size_t best_d = 3, skip = strlen(PREFIX);
  if (n > NAME_MAX_CMP) {
    return NULL;
  }
  for (int id = 0; id < CFG_OPT_COUNT; id++) {
    const char *opt = cfg_option((cfg_opt_t)id)->name;
    size_t d = distance(name + skip, n - skip, opt + skip, strlen(opt) - skip);
    if (d < best_d && 4 * d <= n - skip) {
      best_d = d;
      best = opt;
    }
  }
  return best;
}

static bool known(const char *name, size_t n) {
  for (int id = 0; id < CFG_OPT_COUNT; id++) {
    const char *opt = cfg_option((cfg_opt_t)id)->name;
    if (strlen(opt) == n && memcmp(opt, name, n) == 0) {
      return true;
    }
  }
  for (size_t i = 0; i < sizeof command_vars / sizeof *command_vars; i++) {
    if (strlen(command_vars[i]) == n && memcmp(command_vars[i], name, n) == 0) {
      return true;
    }
  }
  return false;
}

int cfg_unknown(const char *const *env, char *msg, size_t msglen) {
  return cfg_unknown_check(env, false, msg, msglen);
}

int cfg_unknown_check(const char *const *env, bool refuse, char *msg, size_t msglen) {
  int count = 0;
  size_t used = 0;
  if (msg && msglen > 0) {
    msg[0] = '\0';
  }
  if (!env) {
    env = (const char *const *)environ;
  }
  for (; env && *env; env++) {
    const char *eq = strchr(*env, '=');
    size_t n = eq ? (size_t)(eq - *env) : strlen(*env);
    if (n <= strlen(PREFIX) || strncmp(*env, PREFIX, strlen(PREFIX)) != 0 || known(*env, n)) {
      continue;
    }
    count++;
    const char *near = suggest(*env, n);
    size_t left = used < msglen ? msglen - used : 0;
    size_t w =
        cfg_snprintf(msg ? msg + used : NULL, msg ? left : 0,
                     "gpucap: %s: %.*s is not a gpucap setting%s%s%s%s\n",
                     refuse ? "error" : "warning", (int)n, *env, refuse ? "" : " and is ignored",
                     near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
    used += w < left ? w : left;
  }
  return count;
}
