/* The device-memory hooks' pass-through path, as seen by the exit report. */
#ifndef GPUCAP_SHIM_MEMORY_H
#define GPUCAP_SHIM_MEMORY_H

#include "core/bfc.h"

/* Calls fn for every device the pass-through path (GPUCAP_POOL=off, legacy ABIs) served or
 * refused, with counters laid out as the pool's: pool bytes = bytes in use = bytes charged.
 * Lock-free snapshot; makes no CUDA call (caps are cached by then). */
void memory_each_passthrough(void (*fn)(void *arg, int dev, const bfc_stats_t *stats),
                             void *arg);

#endif
