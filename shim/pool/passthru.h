/* The pass-through path shared by every allocation hook that is not served by a context's pool
 * (GPUCAP_POOL=off, the legacy ABIs, stream-ordered, managed and array allocations): the
 * current device, the charge, and the records of what each live block or array was charged and
 * the context it was made in, so that a free credits exactly what was charged and a context's
 * teardown (shim/context/ctx.h) returns what the context held. Counters per device for the exit
 * report. Thread-safe; the records' mutexes are never held across a driver call.
 */
#ifndef GPUCAP_SHIM_PASSTHRU_H
#define GPUCAP_SHIM_PASSTHRU_H

#include "shim/pool/charges.h"
#include "shim/base/cudadefs.h"

#include <stdbool.h>
#include <stdint.h>

/* A driver call that frees the block at ptr (arg: whatever it needs, e.g. a stream). */
typedef CUresult (*passthru_free_fn)(uint64_t ptr, void *arg);

/* The current context's device in *dev, or -1 when it is beyond what gpucap can cap (the
 * allocation must then be refused: never uncapped), and CUDA_SUCCESS; otherwise the context
 * query's error. */
CUresult passthru_current_device(int *dev);

/* How an allocation hook proceeds. Returns true with *dev set (see passthru_current_device)
 * when gpucap handles the call. Returns false with *rc = CUDA_SUCCESS when the driver must
 * answer it itself (args_ok false: its own error code for bad arguments; or no usable context),
 * or with *rc = the error to return (a context query failed otherwise: never allocate
 * uncapped). */
bool passthru_prepare(bool args_ok, int *dev, CUresult *rc);

/* Charges `bytes` to dev (from passthru_current_device) iff that stays within the cap, waiting
 * for the device's pending stream-ordered frees (shim/pool/pending.h) before giving up; returns
 * true iff charged. The hooks admit through ctx_admit (shim/context/ctx.h), which also gives the
 * pools' wholly free regions back. */
bool passthru_admit(int dev, uint64_t bytes);

/* What a tracked block belongs to: the context it was made in (freed with it), or, for
 * stream-ordered memory, no context (freed with its device's primary context). A block of a
 * driver's pool that gpucap charges as a whole (shim/pool/ordered.h) carries no charge of its own:
 * it is recorded for the counters, the ledger and the trace only. */
enum passthru_kind { PASSTHRU_CONTEXT = 0, PASSTHRU_ORDERED = 1, PASSTHRU_IN_POOL = 2 };

/* Finishes an admitted allocation with the driver's answer rc: returns the charge and rc on
 * failure, else tracks the block at ptr (passthru_track). */
CUresult passthru_settle(CUresult rc, uint64_t ptr, int dev, uint64_t bytes,
                         enum passthru_kind kind, passthru_free_fn driver_free, void *arg);

/* passthru_settle of a managed block of the current context (cuMemAllocManaged), counted in
 * cap_managed while it lives. */
CUresult passthru_settle_managed(CUresult rc, uint64_t ptr, int dev, uint64_t bytes,
                                 passthru_free_fn driver_free);

/* Counts a refusal and returns CUDA_ERROR_OUT_OF_MEMORY (logged at debug level); the trace's
 * row names the library that called the hook (ledger_caller). */
CUresult passthru_refuse(int dev, uint64_t bytes);

/* passthru_refuse on behalf of library lib (the ledger's index: LEDGER_GRAPHS for a graph's). */
CUresult passthru_refuse_as(int dev, uint64_t bytes, int lib);

/* passthru_refuse_as of a request beyond the cap that the spill budget refused too (verdict
 * spill_full: shim/accounting/oom.h). */
CUresult passthru_refuse_spill(int dev, uint64_t bytes, int lib);

/* Serves `bytes` the cap refused on dev (dev >= 0) beyond it (GPUCAP_OVERSUBSCRIBE; docs/
 * design.md, "Beyond the card"), as managed memory (cuMemAllocManaged with `flags`): the part
 * the cap still holds, in whole 2 MiB, is charged to it and may live on the device; the rest is
 * charged to the spill budget and advised to stay on the host (spill_keep_on_host), recorded as
 * spilled (shim/accounting/spill.h) and tracked as a block of the current context for library lib,
 * so a free or the context's teardown returns both charges. Returns CUDA_SUCCESS with *dptr; else
 * CUDA_ERROR_OUT_OF_MEMORY with *budget_full true when the spill budget cannot hold the rest
 * (the caller reports the refusal), or the driver's error (CUDA_ERROR_OUT_OF_MEMORY when the
 * advice failed: the block is freed, never left where a device could take it), with nothing
 * charged. Makes driver calls; holds no lock across them. */
CUresult passthru_spill(CUdeviceptr *dptr, int dev, uint64_t bytes, unsigned flags, int lib,
                        bool *budget_full);

/* Records a block the driver just handed out under a charge of `bytes` to dev (none for
 * PASSTHRU_IN_POOL). If the host cannot record it, frees it with driver_free(ptr, arg), returns
 * the charge and answers CUDA_ERROR_OUT_OF_MEMORY; else CUDA_SUCCESS. An address still recorded was
 * freed in a way gpucap did not see (the driver hands out only free addresses): its charge returns.
 */
CUresult passthru_track(uint64_t ptr, int dev, uint64_t bytes, enum passthru_kind kind,
                        passthru_free_fn driver_free, void *arg);

/* The bytes a block's record carries as its own charge to the cap: none for PASSTHRU_IN_POOL,
 * and not those charged to the spill budget. */
uint64_t passthru_charge_of(const charge_t *e);

/* passthru_track of a block of `pool`, a driver's pool charged as a whole (PASSTHRU_IN_POOL). */
CUresult passthru_track_in_pool(uint64_t ptr, int dev, uint64_t bytes, CUmemoryPool pool,
                                passthru_free_fn driver_free, void *arg);

/* The driver destroyed `pool` while blocks of it were live: they stay allocated (the driver
 * releases their memory as they are freed), so each takes a charge of its own bytes from now
 * on, as a block of a pool charged block by block (PASSTHRU_ORDERED). Call it before the
 * pool's own charge returns (ordered_forget). */
void passthru_pool_gone(CUmemoryPool pool);

/* What becomes of a freed block's charge (passthru_charge_of): NULL credits it at once; a
 * function takes it over (a stream-ordered free: shim/pool/pending.h) with the block's record and
 * `arg`. */
typedef void (*passthru_after_fn)(const charge_t *e, void *arg);

/* Frees ptr through driver_free(ptr, arg) whatever it is (an unknown pointer gets the driver's
 * own answer) and returns the driver's answer. The block's charge is returned (or handed to
 * after) only when gpucap charged it and the driver freed it: a failed free keeps block and
 * charge, and of two frees of one block racing each other, the one the driver lets succeed
 * returns the charge, once. */
CUresult passthru_untrack_free(uint64_t ptr, passthru_free_fn driver_free, void *arg,
                               passthru_after_fn after);

/* An array or mipmapped array the driver just made in the current context under a charge of
 * `bytes` to dev, recorded by its handle. A handle still recorded was handed out again, so the
 * array it named went with a context teardown gpucap did not see: its charge returns. Returns
 * false iff host memory ran out (nothing recorded: the caller destroys the array and credits). */
bool passthru_remember_array(uint64_t handle, int dev, uint64_t bytes);

/* Destroys the array `handle` through destroy(handle, arg) and returns the driver's answer;
 * its charge returns only when gpucap charged it and the driver destroyed it (a failed destroy
 * keeps array and charge; of two racing destroys, the one the driver lets succeed returns it). */
CUresult passthru_destroy_array(uint64_t handle, CUresult (*destroy)(uint64_t handle, void *arg),
                                void *arg);

/* The driver destroyed ctx (not NULL) and freed its memory: returns the charges of the blocks
 * and arrays made in it (pass-through and managed; stream-ordered memory belongs to no
 * context) and forgets them. No driver call; O(records). */
void passthru_drop_context(CUcontext ctx);

/* The driver freed every stream-ordered allocation of dev (its primary context was reset or
 * released for the last time): returns their charges and forgets them. */
void passthru_drop_ordered(int dev);

/* The pass-through path's counters for one device: allocations served, frees, refusals, bytes
 * in use, their peak and the largest block. */
typedef struct passthru_counts {
  uint64_t allocs, frees, ooms, in_use, peak, largest;
} passthru_counts_t;

/* Device dev's counters (0 <= dev < GPUCAP_MAX_DEVICES): a lock-free snapshot. */
void passthru_counts(int dev, passthru_counts_t *out);

#endif
