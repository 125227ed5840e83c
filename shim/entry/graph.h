/* Graph memory: what CUDA graphs allocate (allocation nodes, added explicitly or captured from
 * stream-ordered allocations). Nothing is allocated when such a node is made: the driver maps
 * the memory when the graph is uploaded or launched, and keeps it in the device's graph pool
 * (reused by later launches) until cuDeviceGraphMemTrim, the graph's destruction or a device
 * reset. gpucap admits an executable graph's allocation nodes against the cap before the
 * launch that first maps them, and keeps each device's charge equal to the memory the
 * driver's graph pool holds (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT). The hooks are in
 * shim/entry/graph.c.
 */
#ifndef GPUCAP_SHIM_GRAPH_H
#define GPUCAP_SHIM_GRAPH_H

#include "shim/base/cudadefs.h"

#include <stdbool.h>

/* The driver destroyed ctx (its graphs went with it): forgets its executable graphs and
 * brings the charges back to what the graph pools hold. */
void graph_forget_context(CUcontext ctx);

/* Device dev's primary context was reset or destroyed: the memory of its graphs went with it
 * (graphs of other contexts on dev keep theirs). */
void graph_forget_device(CUcontext primary, int dev);

#endif
