/* The driver's stream-ordered memory pools (what cuMemAllocAsync and cuMemAllocFromPoolAsync
 * allocate from): the device each one lies on, and the charge of what each one holds. A pool
 * keeps freed memory up to its release threshold (CuPy's MemoryAsyncPool sets the maximum), so
 * the device holds what the pool reserved, not what its live blocks add up to: a pool gpucap
 * knows is charged its reserved memory (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), read after each
 * allocation from it, at get-info and before a refusal. A pool's reserve grows only through
 * allocations, which gpucap admits before the driver is asked and serialises per pool from the
 * admission's last step to the read that follows the driver's answer; it shrinks on its own
 * (the driver releases beyond the threshold at synchronisations). So the charge is never below
 * what the pool holds, and never counts one growth twice.
 * Locking: a mutex per pool, held by an allocation from it across the driver's call (which
 * never waits for the device) and by the reads and trims; inside it, one mutex over the table.
 * Neither is held across any other lock or driver call.
 */
#ifndef GPUCAP_SHIM_ORDERED_H
#define GPUCAP_SHIM_ORDERED_H

#include "shim/base/cudadefs.h"

#include <stdbool.h>
#include <stdint.h>

#define ORDERED_HOST (-2)    /* a pool of host memory: not device memory, not charged */
#define ORDERED_UNKNOWN (-1) /* a pool gpucap cannot place */

/* A pool charged as a whole, held by one allocation at a time (opaque). */
typedef struct ordered_pool ordered_pool_t;

/* Records that pool lies on dev (a device ordinal, or ORDERED_HOST), replacing what was known
 * of that handle; its charge starts at nothing. A full table records nothing (the pool is then
 * unknown: its blocks are charged one by one). */
void ordered_learn(CUmemoryPool pool, int dev);

/* The device of pool: recorded, else found among the devices' default and current pools (and
 * recorded); ORDERED_UNKNOWN otherwise. */
int ordered_device(CUmemoryPool pool);

/* Device dev's current pool (what cuMemAllocAsync allocates from), recorded; NULL when the
 * driver does not say. */
CUmemoryPool ordered_current(int dev);

/* Holds pool (on device dev) for one allocation: returns it locked iff gpucap charges it as a
 * whole on dev, else NULL. Every non-NULL hold ends with ordered_settle. While held, the
 * holder makes no call that may relieve memory (ctx_admit, ctx_retry): ordered_drop and
 * ordered_hold again around them. */
ordered_pool_t *ordered_hold(CUmemoryPool pool, int dev);

/* Lets go of a hold without an allocation made under it (to relieve memory meanwhile). */
void ordered_drop(ordered_pool_t *p);

/* The bytes the held pool holds without a live block in them (reserved - used), which the
 * allocation may take without growing it; 0 when the driver does not say. */
uint64_t ordered_spare(ordered_pool_t *p);

/* Ends a hold after the driver's answer to the allocation (success or not), for which
 * `admitted` bytes were charged to the pool's device beforehand: the pool's charge becomes what
 * it holds now, the admission is returned, the hold ends. If the driver cannot say what the
 * pool holds, the admission stays with the pool (never credited early). Returns false iff the
 * device is now charged beyond its cap (the pool grew by more than was admitted: the driver's
 * rounding); the caller then gives the block back and calls ordered_relieve. */
bool ordered_settle(ordered_pool_t *p, uint64_t admitted);

/* Gives back the memory dev's pools hold unused (cuMemPoolTrimTo(pool, 0): memory whose free
 * the stream has not reached stays) and brings their charges to what they hold; returns the
 * bytes whose charge came back. Holds each pool in turn: the caller holds none. */
uint64_t ordered_relieve(int dev);

/* Brings the charges of dev's pools to what they hold (a program looking at free memory). The
 * caller holds none. */
void ordered_refresh(int dev);

/* The driver destroyed pool, freeing what it held unused: its charge returns and it is
 * forgotten (its live blocks take charges of their own: passthru_pool_gone, first). */
void ordered_forget(CUmemoryPool pool);

/* Device dev's stream-ordered memory was freed wholesale (a reset of its primary context): the
 * charges of its pools return; the next read charges whatever they still hold. No driver call;
 * waits for allocations from those pools under way. */
void ordered_reset(int dev);

#endif
