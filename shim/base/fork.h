/* fork() safety without a prepare handler. The driver registers its own pthread_atfork
 * handlers, usually after gpucap's (the runtime dlopen()s it later), so its prepare handler runs
 * first and holds the driver's locks while the others run; a gpucap prepare handler that then
 * waited for a pool lock held by a thread inside the driver would wait forever. So gpucap holds
 * nothing across fork: each module that keeps state registers a child handler of its own
 * (FORK_CHILD), in which it starts over with no context, no charge, no export and no trace of
 * the parent's (a CUDA context does not survive fork), re-initialising its locks and abandoning
 * the parent's bookkeeping unread. A child handler takes no lock, waits for nothing and reads
 * no other module's state, so their order does not matter.
 */
#ifndef GPUCAP_SHIM_FORK_H
#define GPUCAP_SHIM_FORK_H

#include <pthread.h>

/* Registers fn (a `static void fn(void)` of the including file) as a pthread_atfork child
 * handler from a constructor, which makes no CUDA call. Use once per module, at file scope. */
#define FORK_CHILD(fn)                                                                             \
  __attribute__((constructor)) static void fn##_register(void) {                                   \
    pthread_atfork(NULL, NULL, fn);                                                                \
  }

#endif
