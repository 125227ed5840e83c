/* The library runs on glibc 2.28 and later (RHEL/Rocky 8, the oldest distribution the CUDA 13
 * toolkit supports), whichever glibc builds it. A build on glibc 2.33+ would otherwise import
 * fstat and lstat at GLIBC_2.33 (before, they were inline wrappers of __fxstat), and on 2.34+
 * the dl* and pthread_* functions at GLIBC_2.34 (when they moved from libdl and libpthread into
 * libc): the loader then refuses the library on an older system, and with LD_PRELOAD that means
 * "ignored" and a program running uncapped.
 *
 * So this file gives the library its own hidden definitions of those names, which the linker
 * binds every call in the library to: the dl and pthread ones call the oldest version of the
 * function (`.symver`), which every glibc since still exports; the stat ones make the system
 * call. The library links libdl.so.2 and libpthread.so.0 by name, where glibc before 2.34
 * defines them. tests/unit/glibc_versions.sh checks the GLIBC_ versions the library needs.
 * Nothing here is exported (the version script), and nothing holds state.
 */
#include <features.h>

#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 33)

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define GLIBC_BASE "GLIBC_2.2.5"
#define GLIBC_DLINFO "GLIBC_2.3.3" /* dlinfo and dladdr1 appeared later on x86-64 */
#define GLIBC_ROBUST "GLIBC_2.12"  /* robust mutexes (shim/accounting/budget.c) */
#define GLIBC_JOIN "GLIBC_2.3.3"   /* pthread_timedjoin_np */
#elif defined(__aarch64__)
#define GLIBC_BASE "GLIBC_2.17"
#define GLIBC_DLINFO "GLIBC_2.17"
#define GLIBC_ROBUST "GLIBC_2.17"
#define GLIBC_JOIN "GLIBC_2.17"
#else
#error "gpucap supports x86-64 and AArch64 only"
#endif

// GCC checks these definitions against the declarations of the headers, which is the point.
// Uninstrumented: a sanitizer runtime calls dlsym, and so dlvsym here, before it is ready.
#define HIDDEN __attribute__((visibility("hidden"), no_sanitize("address", "undefined", "thread")))

int fstat(int fd, struct stat *st) HIDDEN;
int lstat(const char *restrict path, struct stat *restrict st) HIDDEN;
int stat(const char *restrict path, struct stat *restrict st) HIDDEN;

int fstat(int fd, struct stat *st) {
  return (int)syscall(SYS_fstat, fd, st);
}

int lstat(const char *restrict path, struct stat *restrict st) {
  return (int)syscall(SYS_newfstatat, AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
}

int stat(const char *restrict path, struct stat *restrict st) {
  return (int)syscall(SYS_newfstatat, AT_FDCWD, path, st, 0);
}

#if __GLIBC_PREREQ(2, 34)

/* OLDV(version, ret, name, params, args): `name` calling name@version through the alias
 * old_name. dlopen is not among them: the library exports its own (shim/entry/deepbind.c), which
 * reaches glibc's through dlvsym. */
#define OLDV(version, ret, name, params, args)                                                     \
  ret old_##name params;                                                                           \
  __asm__(".symver old_" #name ", " #name "@" version);                                            \
  ret name params HIDDEN;                                                                          \
  ret name params {                                                                                \
    return old_##name args;                                                                        \
  }
#define OLD(ret, name, params, args) OLDV(GLIBC_BASE, ret, name, params, args)

OLDV(GLIBC_DLINFO, int, dlinfo, (void *restrict handle, int request, void *restrict arg),
     (handle, request, arg))
OLDV(GLIBC_DLINFO, int, dladdr1, (const void *addr, Dl_info *info, void **extra, int flags),
     (addr, info, extra, flags))
OLD(int, dlclose, (void *handle), (handle))
OLD(void *, dlvsym, (void *restrict handle, const char *restrict name, const char *restrict v),
    (handle, name, v))
OLD(int, dladdr, (const void *addr, Dl_info *info), (addr, info))
OLD(char *, dlerror, (void), ())
OLD(int, pthread_once, (pthread_once_t * once, void (*init)(void)), (once, init))
OLD(int, pthread_mutex_trylock, (pthread_mutex_t * m), (m))
OLD(int, pthread_mutex_timedlock, (pthread_mutex_t *restrict m, const struct timespec *restrict t),
    (m, t))
OLD(int, pthread_key_create, (pthread_key_t * key, void (*dtor)(void *)), (key, dtor))
OLD(int, pthread_key_delete, (pthread_key_t key), (key))
/* glibc declares the value never read through (access none), which GCC turns into a false
 * "may be used uninitialized" here. */
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
int old_pthread_setspecific(pthread_key_t key, const void *value);
__asm__(".symver old_pthread_setspecific, pthread_setspecific@" GLIBC_BASE);
int pthread_setspecific(pthread_key_t key, const void *value) HIDDEN;
int pthread_setspecific(pthread_key_t key, const void *value) {
  return old_pthread_setspecific(key, value);
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
OLD(int, pthread_rwlock_rdlock, (pthread_rwlock_t * l), (l))
OLD(int, pthread_rwlock_wrlock, (pthread_rwlock_t * l), (l))
OLD(int, pthread_rwlock_unlock, (pthread_rwlock_t * l), (l))
OLD(int, pthread_mutexattr_init, (pthread_mutexattr_t * a), (a))
OLD(int, pthread_mutexattr_destroy, (pthread_mutexattr_t * a), (a))
OLD(int, pthread_mutexattr_setpshared, (pthread_mutexattr_t * a, int shared), (a, shared))
OLDV(GLIBC_ROBUST, int, pthread_mutexattr_setrobust, (pthread_mutexattr_t * a, int robust),
     (a, robust))
OLDV(GLIBC_ROBUST, int, pthread_mutex_consistent, (pthread_mutex_t * m), (m))
/* The IPC server thread (shim/entry/ipc.c), started with every signal blocked (pthread_sigmask also
 * gained a version in 2.32). */
OLD(int, pthread_create,
    (pthread_t *restrict t, const pthread_attr_t *restrict a, void *(*fn)(void *),
     void *restrict arg),
    (t, a, fn, arg))
OLD(int, pthread_sigmask, (int how, const sigset_t *restrict set, sigset_t *restrict old),
    (how, set, old))
/* ... and joined at a normal exit, for a bounded time. */
OLDV(GLIBC_JOIN, int, pthread_timedjoin_np, (pthread_t t, void **ret, const struct timespec *at),
     (t, ret, at))
/* The per-library ledger's stack bounds (pthread_getattr_np also gained a version in 2.32). */
OLD(int, pthread_getattr_np, (pthread_t t, pthread_attr_t *a), (t, a))
OLD(int, pthread_attr_getstack,
    (const pthread_attr_t *restrict a, void **restrict addr, size_t *restrict size),
    (a, addr, size))

#endif
#else
typedef int glibc_compat_unused; /* an empty file is not valid ISO C */
#endif
