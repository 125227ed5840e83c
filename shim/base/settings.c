/* Loading the settings (see shim/base/settings.h): cfg_load and cfg_discover once under
 * pthread_once, their messages and the warning about unknown GPUCAP_ variables printed as
 * config/ wrote them.
 */
#include "shim/base/settings.h"

#include "shim/base/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_bool loaded; /* set once load() is done: every later call skips pthread_once */
static cfg_t settings;
static cfg_found_t found;
static bool valid;

/* Each line of cfg_discover's message as a warning: that source is ignored, the rest apply. */
static void warn_sources(const char *msg) {
  for (const char *line = msg; *line != '\0';) {
    size_t n = strcspn(line, "\n");
    log_msg(LOG_WARN, "%.*s; this source is ignored (GPUCAP_DISCOVER=off ignores them all)", (int)n,
            line);
    line += n + (line[n] == '\n');
  }
}

static void load(void) {
  char msg[1024] = "";
  valid = cfg_load(&settings, NULL, NULL, msg, sizeof msg) == 0;
  if (msg[0]) {
    size_t n = strlen(msg);
    if (msg[n - 1] != '\n' && n + 1 < sizeof msg) {
      msg[n++] = '\n';
    }
    log_write_raw(msg, n);
  }
  log_set_verbosity(settings.verbose);
  static char sources[4096]; /* static: loading runs once, on a thread of someone else's */
  if (cfg_discover(&found, &settings, NULL, NULL, sources, sizeof sources) != 0) {
    warn_sources(sources);
  }
  char unknown[1024];
  if (cfg_unknown(NULL, unknown, sizeof unknown) > 0) {
    log_write_raw(unknown, strlen(unknown));
  }
  atomic_store_explicit(&loaded, true, memory_order_release);
}

static inline void ensure_loaded(void) {
  if (!atomic_load_explicit(&loaded, memory_order_acquire)) {
    pthread_once(&once, load);
  }
}

const cfg_t *settings_get(void) {
  ensure_loaded();
  return &settings;
}

const cfg_found_t *settings_found(void) {
  ensure_loaded();
  return &found;
}

bool settings_valid(void) {
  ensure_loaded();
  return valid;
}
