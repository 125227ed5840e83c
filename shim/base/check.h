/* Preconditions the shim states in its headers, checked in the checked build: DEBUG=1 and every
 * sanitizer build define GPUCAP_CHECKED=1 (Makefile), so `make test`'s ASan+UBSan and TSan
 * passes run with them. A failed check prints one `gpucap: error:` line naming the condition
 * and aborts: a bug in gpucap, never the program's. In a release build each check compiles to
 * nothing (the condition is not evaluated).
 */
#ifndef GPUCAP_SHIM_CHECK_H
#define GPUCAP_SHIM_CHECK_H

#include "core/limits.h"

#include <pthread.h>
#include <stdbool.h>

/* Prints the failed condition and where, then aborts. */
__attribute__((noreturn)) void check_failed(const char *cond, const char *file, int line);

/* True iff some thread holds m (never takes it for good). */
bool check_held(pthread_mutex_t *m);

#if defined(GPUCAP_CHECKED) && GPUCAP_CHECKED
#define CHECK(cond) ((cond) ? (void)0 : check_failed(#cond, __FILE__, __LINE__))
#else
#define CHECK(cond) ((void)0)
#endif

/* A device ordinal gpucap keeps state for. */
#define CHECK_DEVICE(dev) CHECK((dev) >= 0 && (dev) < GPUCAP_MAX_DEVICES)

/* A mutex the caller must hold (held by some thread: a cheap trylock probe). */
#define CHECK_HELD(m) CHECK(check_held(m))

#endif
