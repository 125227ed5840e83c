/* The exec family, interposed so that the buffered trace is written before the process image
 * is replaced (shutdown_before_exec); each then calls the next definition (glibc's) unchanged.
 * The list-taking forms (execl, execle, execlp) gather their arguments into an array on the
 * stack and call the vector forms' next definitions. No malloc: these may run in a vfork child
 * or a signal handler. posix_spawn, system and popen exec in a child that holds no trace.
 */
#include "shim/base/export.h"
#include "shim/entry/shutdown.h"
#include "shim/base/real.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <unistd.h>

typedef int execve_fn(const char *, char *const[], char *const[]);
typedef int execv_fn(const char *, char *const[]);
typedef int fexecve_fn(int, char *const[], char *const[]);

static execve_fn *next_execve, *next_execvpe;
static execv_fn *next_execv, *next_execvp;
static fexecve_fn *next_fexecve;
static pthread_once_t resolved = PTHREAD_ONCE_INIT;

static void resolve_next(void) {
  real_dlsym_init();
  *(void **)&next_execve = gpucap_real_dlsym(RTLD_NEXT, "execve");
  *(void **)&next_execvpe = gpucap_real_dlsym(RTLD_NEXT, "execvpe");
  *(void **)&next_execv = gpucap_real_dlsym(RTLD_NEXT, "execv");
  *(void **)&next_execvp = gpucap_real_dlsym(RTLD_NEXT, "execvp");
  *(void **)&next_fexecve = gpucap_real_dlsym(RTLD_NEXT, "fexecve");
}

/* Found by the constructor (dlsym is not async-signal-safe, exec is), or by an earlier call. */
__attribute__((constructor)) static void exec_init(void) {
  pthread_once(&resolved, resolve_next);
}

/* Before every exec: the next definitions are known and the trace is written. */
static void before(void) {
  pthread_once(&resolved, resolve_next);
  shutdown_before_exec();
}

/* The answer when glibc has no such function. */
static int missing(void) {
  errno = ENOSYS;
  return -1;
}

GPUCAP_EXPORT int execve(const char *path, char *const argv[], char *const envp[]) {
  before();
  return next_execve ? next_execve(path, argv, envp) : missing();
}

GPUCAP_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]) {
  before();
  return next_execvpe ? next_execvpe(file, argv, envp) : missing();
}

GPUCAP_EXPORT int execv(const char *path, char *const argv[]) {
  before();
  return next_execv ? next_execv(path, argv) : missing();
}

GPUCAP_EXPORT int execvp(const char *file, char *const argv[]) {
  before();
  return next_execvp ? next_execvp(file, argv) : missing();
}

GPUCAP_EXPORT int fexecve(int fd, char *const argv[], char *const envp[]) {
  before();
  return next_fexecve ? next_fexecve(fd, argv, envp) : missing();
}

enum list_form { LIST_L, LIST_LP, LIST_LE };

/* execl, execlp and execle: the arguments arg0, ... up to the NULL (then, for execle, the
 * environment) gathered into an array on the stack for the vector form's next definition. */
static int exec_list(enum list_form form, const char *path, const char *arg0, va_list ap) {
  va_list counting;
  va_copy(counting, ap);
  size_t argc = 0;
  for (const char *a = arg0; a != NULL; a = va_arg(counting, const char *)) {
    argc++;
  }
  va_end(counting);
  char *argv[argc + 1];
  argv[0] = (char *)arg0;
  for (size_t i = 1; i <= argc; i++) {
    argv[i] = va_arg(ap, char *);
  }
  char *const *envp = form == LIST_LE ? va_arg(ap, char *const *) : NULL;
  before();
  switch (form) {
  case LIST_L:
    return next_execv ? next_execv(path, argv) : missing();
  case LIST_LP:
    return next_execvp ? next_execvp(path, argv) : missing();
  default:
    return next_execve ? next_execve(path, argv, envp) : missing();
  }
}

/* execl, execlp and execle themselves: one definition each, by this macro. */
#define EXEC_LIST(name, form)                                                                      \
  GPUCAP_EXPORT int name(const char *path, const char *arg0, ...) {                                \
    va_list ap;                                                                                    \
    va_start(ap, arg0);                                                                            \
    int rc = exec_list(form, path, arg0, ap);                                                      \
    va_end(ap);                                                                                    \
    return rc;                                                                                     \
  }

EXEC_LIST(execl, LIST_L)
EXEC_LIST(execlp, LIST_LP)
EXEC_LIST(execle, LIST_LE)
