/* This process's part in a shared budget (GPUCAP_SHARE): several processes under one cap per
 * device, kept in the budget's file (shim/accounting/budget.h). Without GPUCAP_SHARE every function
 * here does nothing and answers "no budget", so the per-process cap alone applies.
 *
 * The process joins at its first use of a device (share_limit, from cap_bind): it takes a slot,
 * and each CUDA ordinal it uses is bound to the budget's entry for that device's UUID. A process
 * whose settings differ from the budget's (or that cannot use the file) is refused: its cap is 0
 * on every device, one error line says why. Charges go to the file under its lock after the
 * per-process cap admitted them (shim/accounting/cap.c). Thread-safe; a fork child starts with no
 * slot and joins at its first charge.
 */
#ifndef GPUCAP_SHIM_SHARE_H
#define GPUCAP_SHIM_SHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* True iff GPUCAP_SHARE names a budget (the settings are valid). */
bool share_active(void);

/* Device dev's cap for this process under the budget, given `cap`, what the settings make of it
 * for the device of `physical` bytes (the budget's cap): min(budget's cap, GPUCAP_SHARE_MAX);
 * 0 when the process is refused; `cap` unchanged without a budget. Joins the budget and binds
 * dev at the first call for dev. */
uint64_t share_limit(int dev, uint64_t cap, uint64_t physical);

/* Charges bytes to dev in the budget iff they fit in its headroom for this process (the cap less
 * everyone's charges and the other processes' unmet guarantees); on refusal asks the others to
 * give their idle pool memory back. True iff charged, or without a budget. */
bool share_charge(int dev, uint64_t bytes);

/* Charges bytes the driver already took, over the budget if it must. */
void share_add(int dev, uint64_t bytes);

/* Returns a charge. */
void share_credit(int dev, uint64_t bytes);

/* The driver's own memory for this process on dev is now `bytes` (it was `old` by the caller's
 * count): the slot holds it as charged, over the budget if it must (the driver took it), and
 * shows it apart. What a device not bound yet missed is caught up at the next call. */
void share_overhead(int dev, uint64_t old, uint64_t bytes);

/* The budget's view for dev: what this process may still be charged (*headroom) and the
 * budget's cap (*cap). Also publishes `idle` (bytes this process's pools hold unused) for
 * `gpucap top`. Returns false (nothing written) without a budget or before dev is bound. */
bool share_view(int dev, uint64_t idle, uint64_t *headroom, uint64_t *cap);

/* A bit per device (CUDA ordinal) on which another process asked for idle memory since this
 * process last answered; 0 without a budget. One atomic load per bound device. */
uint64_t share_asked(void);

/* Records that this process answered the asks on dev (gave back its idle memory there). */
void share_answered(int dev);

/* The CUDA ordinal bound to the budget's device of this UUID ("GPU-..."), or -1. */
int share_ordinal(const char *uuid);

/* For a process that may not have joined (an NVML tool): the budget's cap on the device of
 * this UUID and the room it has left (cap - everyone's charges - unmet guarantees). False
 * without a budget, when it does not exist yet, or when it has no such device. */
bool share_peek(const char *uuid, uint64_t *cap, uint64_t *room);

/* The budget's live processes on the device of this UUID (those that used it): up to cap
 * entries of (pid, bytes charged); returns how many there are. 0 without a budget. */
struct share_proc {
  pid_t pid;
  uint64_t bytes;
};
unsigned share_processes(const char *uuid, struct share_proc *out, unsigned cap);

#endif
