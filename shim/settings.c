/* Loading the settings (see shim/settings.h): cfg_load once under pthread_once, its message and
 * the warning about unknown GPUCAP_ variables printed as config/ wrote them.
 */
#include "shim/settings.h"

#include "shim/log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_bool loaded; /* set once load() is done: every later call skips pthread_once */
static cfg_t settings;
static bool valid;

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

bool settings_valid(void) {
  ensure_loaded();
  return valid;
}
