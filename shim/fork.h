/* fork() safety without a prepare handler. The driver registers its own pthread_atfork
 * handlers, usually after gpucap's (the runtime dlopen()s it later), so its prepare handler runs
 * first and holds the driver's locks while the others run; a gpucap prepare handler that then
 * waited for a pool lock held by a thread inside the driver would wait forever. So gpucap holds
 * nothing across fork: its only handler runs in the child, where every module starts over with
 * no pool, no charge, no export and no trace of the parent's (a CUDA context does not survive
 * fork), re-initialising its locks and abandoning the parent's bookkeeping unread. Functions
 * each module provides for it are declared here or in its header; none may take a lock.
 */
#ifndef GPUCAP_SHIM_FORK_H
#define GPUCAP_SHIM_FORK_H

void vmm_fork_child(void);

/* The child forgets which stream-ordered pool is on which device (shim/async.c). */
void async_fork_child(void);

/* The exit path of a fork child starts over (shim/exit.c). */
void exit_fork_child(void);

#endif
