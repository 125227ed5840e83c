/* rjson: reads a saved exit report (the JSON document of docs/report.md) back into the rows the
 * shim reported, so `gpucap report` prints them with the shim's own table formatter
 * (report_format_text): one layout, one implementation.
 *
 * The document must be what report_format_json writes: every key of every device object
 * present with its type (unknown keys are ignored, so a newer report still reads). No state.
 */
#ifndef GPUCAP_SCRIPTS_RJSON_H
#define GPUCAP_SCRIPTS_RJSON_H

#include "core/report.h"

#include <stddef.h>

/* Parses a JSON exit report text[0..len) into a malloc'ed array of rows (*rows, freed by the
 * caller; NULL when there are none), their number (*n) and what the table shows of the run
 * (*run: pid, 0 when null; ended_by and notes, empty when absent; the rest zero).
 * Fails iff the text is not strict JSON, or is JSON but not an exit report: a key missing or
 * of the wrong type, a negative or fractional count, a fraction outside [0, 1], a device or
 * context ordinal above INT_MAX, a note too long (-EINVAL; err gets one line naming the key and
 * the device index); or memory runs out (-ENOMEM). On failure *rows is NULL and *n is 0.
 * Reads reports of every gpucap version: keys added since are optional. O(len). */
int rjson_read(const char *text, size_t len, report_row_t **rows, int *n, report_run_t *run,
               char *err, size_t errlen);

/* `gpucap report`: argv[0] is "report". Returns the exit status. */
int rjson_main(int argc, char **argv);

#endif
