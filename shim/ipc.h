/* Legacy CUDA IPC of pooled blocks (cuIpcGetMemHandle / cuIpcOpenMemHandle / ...Close).
 *
 * The driver can only export a whole allocation, and a pooled block is a slice of a pool
 * region, so an importer handed the driver's handle would open the region at its base: a
 * silently wrong address. gpucap therefore exports a pooled block as a gpucap handle (a magic,
 * the exporter's pid and uid and a token) and publishes the region's driver handle with the
 * block's offset and size in a file of /dev/shm/gpucap-UID (mode 0600, directory 0700). An
 * importer running under gpucap reads it, opens the region through the driver and answers the
 * block's address; its pointer queries describe the block. An importer without gpucap passes
 * the gpucap handle to the driver, which refuses it as a handle it never made: never a wrong
 * address. Memory that is not pooled (GPUCAP_POOL=off, stream-ordered, ...) keeps the
 * driver's own handles. Thread-safe (one mutex, never held across a driver call).
 */
#ifndef GPUCAP_SHIM_IPC_H
#define GPUCAP_SHIM_IPC_H

#include "shim/cudadefs.h"

#include <stdbool.h>
#include <stdint.h>

/* A pooled block at base was freed: its export (if any) is withdrawn, so a later open fails
 * instead of mapping memory that now belongs to another block. O(1) when nothing is exported,
 * else O(exports). */
void ipc_forget_block(uint64_t base);

/* Whether addr lies in a block this process opened from another gpucap process; if so stores
 * the address the open returned and the block's size. O(imports). */
bool ipc_imported_block(uint64_t addr, uint64_t *base, uint64_t *size);

/* At exit: withdraws every export of this process (removes every file of its pid, even while
 * other threads are exporting: an export finished after this call removes its own file). No
 * CUDA call, no lock, no malloc; async-signal-safe. */
void ipc_exit(void);

#endif
