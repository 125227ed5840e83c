/* fork() safety: one set of pthread_atfork handlers takes every gpucap lock in a fixed order
 * before fork (pool registry, pools, live blocks, VMM handles, arrays, IPC, trace), releases them
 * in the parent, and in the child starts over with no pool, no charge and no trace (a CUDA context
 * does not survive fork). Functions each module provides for it are declared here.
 */
#ifndef GPUCAP_SHIM_FORK_H
#define GPUCAP_SHIM_FORK_H

void vmm_fork_prepare(void);
void vmm_fork_parent(void);
void vmm_fork_child(void);

/* The child forgets which stream-ordered pool is on which device (shim/async.c). */
void async_fork_child(void);

/* The exit report is not written by a fork child. */
void exit_fork_child(void);

#endif
