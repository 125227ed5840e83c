/* found: the caps the cluster set (config/discover.h, GPUCAP_DISCOVER), as `gpucap run` checks
 * them before the program starts and `gpucap env` shows them: each source, its value, and per
 * device which cap wins (the driver asked for each device's PCI bus id and memory).
 */
#ifndef GPUCAP_SCRIPTS_FOUND_H
#define GPUCAP_SCRIPTS_FOUND_H

#include "config/cfg.h"
#include "config/discover.h"

/* Reads the sources for the settings cfg into *f (cfg_discover, the process environment).
 * Returns 0; or -1 after printing, for each source that cannot be parsed, "gpucap: error: " and
 * the line naming it with its accepted form, then one line on how to go on. */
int found_load(cfg_found_t *f, const cfg_t *cfg);

/* Prints to stdout, when f has sources: a line per source (its name, file, value, and whether it
 * is a limit or a guarantee and who holds it, or invalid), then a line per device the driver
 * knows: its cap and where it comes from (cfg's own settings or a source, with the line and the
 * margin), and its guarantee. Nothing when f is empty. Loads the driver (driver.h). */
void found_print(const cfg_found_t *f, const cfg_t *cfg);

#endif
