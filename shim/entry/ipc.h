/* Legacy CUDA IPC of pooled blocks (cuIpcGetMemHandle / cuIpcOpenMemHandle / ...Close).
 *
 * The driver can only export a whole allocation, and a pooled block is a slice of a pool region
 * (or, in a VMM-backed pool, of units of physical memory that VMM memory's legacy IPC cannot
 * export at all), so an importer handed the driver's handle would open the wrong memory or
 * none. gpucap therefore exports a pooled block as a gpucap handle: a magic, the exporter's pid
 * and uid, the random key of its server and a token. The exporting process serves its exports
 * from one thread of its own, started at its first export, on an abstract unix socket
 * (shim/entry/ipcwire.h): to an importer running under gpucap it answers, for a block of a region
 * pool, the region's driver handle and the block's offset, which the importer opens through the
 * driver; for a block of a VMM-backed pool, a POSIX file descriptor of each unit of physical
 * memory the block lies in (cuMemExportToShareableHandle), which the importer imports, maps
 * into an address range of its own and grants access to. Either way the importer answers the
 * block's address, its pointer queries describe the block, and bytes written on one side are
 * read on the other. An importer without gpucap passes the gpucap handle to the driver, which
 * refuses it as a handle it never made: never a wrong address. Memory that is not pooled
 * (GPUCAP_POOL=off, stream-ordered, ...) keeps the driver's own handles. Nothing is written to
 * any file system, so nothing outlives a process, however it ends. Imported memory is the
 * exporter's charge, never the importer's. Thread-safe (one mutex, never held across a driver
 * call or a socket operation).
 */
#ifndef GPUCAP_SHIM_IPC_H
#define GPUCAP_SHIM_IPC_H

#include "shim/base/cudadefs.h"

#include <stdbool.h>
#include <stdint.h>

/* A pooled block at base is about to be freed: its export (if any) is withdrawn, so a later
 * open fails instead of mapping memory that will belong to another block. Called before the
 * pool can hand the block out again. O(1) when nothing is exported, else O(exports). */
void ipc_forget_block(uint64_t base);

/* The driver destroyed context ctx: the exports of blocks of its pools are withdrawn (before
 * their memory goes back to the driver). O(exports). */
void ipc_forget_context(CUcontext ctx);

/* Whether addr lies in a block this process opened from another gpucap process; if so stores
 * the address the open returned and the block's size. O(imports). */
bool ipc_imported_block(uint64_t addr, uint64_t *base, uint64_t *size);

/* At exit: stops serving exports (an open from now on fails; the socket goes with the
 * process). No CUDA call, no lock, no malloc; async-signal-safe when `wait` is false. With
 * `wait` (a normal exit, not a signal's), also waits up to EXIT_WAIT_MS for the server thread
 * to end, so that nothing of it outlives the program's own threads. */
void ipc_exit(bool wait);

#endif
