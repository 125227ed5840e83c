/* The process's settings, loaded once from config/ (the only code that reads the environment)
 * at the first CUDA call that reaches gpucap, never at load time: a process that never uses
 * CUDA reads none. Loading prints the settings' error or warnings once and sets the log's
 * verbosity. Every other part of the shim takes the loaded struct from here.
 * Thread-safe (pthread_once); the struct is immutable once loaded.
 */
#ifndef GPUCAP_SHIM_SETTINGS_H
#define GPUCAP_SHIM_SETTINGS_H

#include "config/cfg.h"

#include <stdbool.h>

/* The loaded settings (loaded by the first call). When they are not valid this is what
 * cfg_load left, and settings_valid() says so. */
const cfg_t *settings_get(void);

/* True iff the settings are valid (loading them by the first call). When they are not, every
 * device's cap is 0: gpucap fails closed. */
bool settings_valid(void);

#endif
