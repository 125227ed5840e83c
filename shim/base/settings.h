/* The process's settings, loaded once from config/ (the only code that reads the environment)
 * at the first CUDA call that reaches gpucap, never at load time: a process that never uses
 * CUDA reads none. With them, the caps the cluster set (config/discover.h, GPUCAP_DISCOVER).
 * Loading prints the settings' error or warnings once, one warning per discovered source that
 * cannot be parsed (that source is ignored), and sets the log's verbosity. Every other part of
 * the shim takes the loaded structs from here.
 * Thread-safe (pthread_once); the struct is immutable once loaded.
 */
#ifndef GPUCAP_SHIM_SETTINGS_H
#define GPUCAP_SHIM_SETTINGS_H

#include "config/cfg.h"
#include "config/discover.h"

#include <stdbool.h>

/* The loaded settings (loaded by the first call). When they are not valid this is what
 * cfg_load left, and settings_valid() says so. */
const cfg_t *settings_get(void);

/* True iff the settings are valid (loading them by the first call). When they are not, every
 * device's cap is 0: gpucap fails closed. */
bool settings_valid(void);

/* The caps the cluster set, as loaded with the settings (empty when the settings are invalid or
 * GPUCAP_DISCOVER is off). Immutable once loaded. */
const cfg_found_t *settings_found(void);

#endif
