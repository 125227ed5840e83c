/* The pass-through path shared by every allocation hook that is not served by the pool
 * (GPUCAP_POOL=off, the legacy ABIs, stream-ordered and managed allocations): the current
 * device, the charge, and the map of live blocks with the bytes each one was charged.
 * Thread-safe; the live-block map's mutex is never held across a driver call. */
#ifndef GPUCAP_SHIM_MEMORY_H
#define GPUCAP_SHIM_MEMORY_H

#include "core/bfc.h"
#include "shim/charges.h"
#include "shim/cudadefs.h"

#include <stdbool.h>
#include <stdint.h>

/* A driver call that frees the block at ptr (arg: whatever it needs, e.g. a stream). */
typedef CUresult (*mem_free_fn)(uint64_t ptr, void *arg);

/* The current context's device in *dev, or -1 when it is beyond what gpucap can cap (the
 * allocation must then be refused: never uncapped), and CUDA_SUCCESS; otherwise the context
 * query's error. */
CUresult mem_current_device(int *dev);

/* How an allocation hook proceeds. Returns true with *dev set (see mem_current_device) when
 * gpucap handles the call. Returns false with *rc = CUDA_SUCCESS when the driver must answer
 * it itself (args_ok false: its own error code for bad arguments; or no usable context), or
 * with *rc = the error to return (a context query failed otherwise: never allocate
 * uncapped). */
bool mem_prepare(bool args_ok, int *dev, CUresult *rc);

/* Charges `bytes` to dev (from mem_current_device) iff that stays within the cap, waiting for
 * the device's pending stream-ordered frees (shim/pending.h) and releasing the pools' wholly
 * free regions on dev (pool_trim) before giving up; returns true iff charged. The caller holds
 * no pool lock. */
bool mem_admit(int dev, uint64_t bytes);

/* Moves a charge of `admitted` bytes on dev to `exact` once the driver said what it used:
 * admits the difference (as mem_admit) or returns it. Returns false, with the whole charge
 * returned, iff the larger charge does not fit under the cap (the caller frees what the driver
 * made and refuses). */
bool mem_recharge(int dev, uint64_t admitted, uint64_t exact);

/* What a tracked block belongs to: the context it was made in (freed with it), or, for
 * stream-ordered memory, no context (freed with its device's primary context). */
enum mem_kind { MEM_CONTEXT = 0, MEM_ORDERED = 1 };

/* Finishes an admitted allocation with the driver's answer rc: returns the charge and rc on
 * failure, else tracks the block at ptr (mem_track). */
CUresult mem_settle(CUresult rc, uint64_t ptr, int dev, uint64_t bytes, enum mem_kind kind,
                    mem_free_fn driver_free, void *arg);

/* Counts a refusal and returns CUDA_ERROR_OUT_OF_MEMORY (logged at debug level). */
CUresult mem_refuse(int dev, uint64_t bytes);

/* Records a block the driver just handed out under a charge of `bytes` to dev. If the host
 * cannot record it, frees it with driver_free(ptr, arg), returns the charge and answers
 * CUDA_ERROR_OUT_OF_MEMORY; else CUDA_SUCCESS. An address still recorded was freed in a way
 * gpucap did not see (the driver hands out only free addresses): its charge returns. */
CUresult mem_track(uint64_t ptr, int dev, uint64_t bytes, enum mem_kind kind,
                   mem_free_fn driver_free, void *arg);

/* What becomes of a freed block's charge: NULL credits it at once; a function takes it over
 * (a stream-ordered free: shim/pending.h) with the block's record and `arg`. */
typedef void (*mem_after_fn)(const charge_t *e, void *arg);

/* Frees ptr through driver_free(ptr, arg) whatever it is (an unknown pointer gets the driver's
 * own answer) and returns the driver's answer. The block's charge is returned (or handed to
 * after) only when gpucap charged it and the driver freed it: a failed free keeps block and
 * charge, and of two frees of one block racing each other, the one the driver lets succeed
 * returns the charge, once. */
CUresult mem_untrack_free(uint64_t ptr, mem_free_fn driver_free, void *arg, mem_after_fn after);

/* The driver destroyed ctx and freed its memory: returns the charges of the tracked blocks
 * made in it (pass-through and managed; stream-ordered memory belongs to no context) and
 * forgets them. */
void memory_drop_context(CUcontext ctx);

/* The driver freed every stream-ordered allocation of dev (its primary context was reset or
 * released for the last time): returns their charges and forgets them. */
void memory_drop_ordered(int dev);

/* Calls fn for every device the pass-through path (GPUCAP_POOL=off, legacy ABIs) served or
 * refused, with counters laid out as the pool's: pool bytes = bytes in use = bytes charged.
 * Lock-free snapshot; makes no CUDA call (caps are cached by then). */
void memory_each_passthrough(void (*fn)(void *arg, int dev, const bfc_stats_t *stats), void *arg);

/* fork() support (shim/fork.c), in the child: forget every block and counter (the parent's
 * memory is not the child's). */
void memory_fork_child(void);

#endif
