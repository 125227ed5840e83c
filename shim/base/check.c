/* The checked build's failure path (see shim/base/check.h); built always, called only there. */
#include "shim/base/check.h"

#include "shim/base/log.h"

#include <errno.h>
#include <stdlib.h>

void check_failed(const char *cond, const char *file, int line) {
  log_msg(LOG_ERROR, "internal check failed: %s (%s:%d)", cond, file, line);
  abort();
}

bool check_held(pthread_mutex_t *m) {
  int rc = pthread_mutex_trylock(m);
  if (rc == 0) {
    pthread_mutex_unlock(m);
  }
  return rc == EBUSY;
}
