/* The out-of-memory message and its hint (see shim/oom.h). */
#include "shim/oom.h"

#include "shim/cap.h"
#include "shim/log.h"
#include "shim/settings.h"
#include "shim/share.h"

#include <string.h>

/* The setting that would help. driver_full: the driver itself refused a region for want of
 * memory (then the device is full, whatever the cap). */
static void hint(int dev, uint64_t bytes, const bfc_stats_t *s, bool driver_full,
                 uint64_t others_hold) {
  uint64_t cap = cap_limit(dev, 0);
  if (s->free_bytes >= bytes && s->largest_free_block_bytes < bytes) {
    log_msg(LOG_INFO, "hint: enough memory is free but fragmented; GPUCAP_ALLOW_GROWTH=false "
                      "preallocates one region and fragments less");
  } else if (driver_full && others_hold > 0) {
    log_msg(LOG_INFO,
            "hint: device %d is full: other processes hold %.1f MiB (%llu bytes, the "
            "driver's own memory included), below the cap",
            dev, (double)others_hold / 1048576.0, (unsigned long long)others_hold);
  } else if (driver_full) {
    log_msg(LOG_INFO,
            "hint: device %d itself is out of memory (the driver refused it, below "
            "the cap): other processes or allocations outside gpucap's pools hold the rest",
            dev);
  } else if (share_active() && cap != CAP_NONE && cap_used(dev) <= cap &&
             bytes <= cap - cap_used(dev)) {
    log_msg(LOG_INFO,
            "hint: the shared budget '%s' is full on device %d: its other processes hold the rest "
            "(gpucap top lists them); they give idle pool memory back at their next allocation",
            settings_get()->share, dev);
  } else if (cap != CAP_NONE) {
    log_msg(LOG_INFO,
            "hint: the cap on device %d is %llu bytes; raise GPUCAP_MEMORY_LIMIT or "
            "GPUCAP_MEMORY_FRACTION if the device has room",
            dev, (unsigned long long)cap);
  } else {
    log_msg(LOG_INFO, "hint: device %d itself is out of memory (no cap is set)", dev);
  }
}

void oom_print(int dev, size_t bytes, const char *report, size_t len, const bfc_stats_t *s,
               bool driver_full, uint64_t others_hold) {
  log_msg(LOG_WARN, "device %d: out of memory allocating %zu bytes under the cap", dev, bytes);
  log_write_raw(report, strnlen(report, len));
  hint(dev, bytes, s, driver_full, others_hold);
}
