/* The lazy start (see shim/entry/init.h). The settings are loaded by the first thread that finds
 * the driver adopted; the others wait for it in pthread_once, then skip all of it.
 */
#include "shim/entry/init.h"

#include "shim/accounting/ledger.h"
#include "shim/base/log.h"
#include "shim/base/real.h"
#include "shim/base/settings.h"

#include <pthread.h>
#include <stdatomic.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_bool ready;

static void start(void) {
  settings_get();
  ledger_init();
  log_msg(LOG_DEBUG, "driver adopted: %s", real_driver_name());
}

bool init_ready(const void *addr) {
  if (atomic_load_explicit(&ready, memory_order_acquire)) {
    return true;
  }
  if (!real_driver_ready(addr)) {
    return false;
  }
  pthread_once(&once, start);
  atomic_store_explicit(&ready, true, memory_order_release);
  return true;
}
