/* target: what `gpucap run` is about to execute, looked at before it does: where the command
 * is (as execvp would find it), and whether the loader will preload a library into it at all.
 *
 * The loader drops LD_PRELOAD silently for a statically linked program, a set-ID program
 * (secure-execution mode), a program of another ELF class or machine than the library, and a
 * program of another C library's loader (musl); a script is run by its `#!` interpreter, which is
 * then what matters. Such a program would run uncapped: `gpucap run` refuses it unless told
 * --allow-uncapped. Only reads files; no state; single-threaded like the rest of the CLI.
 */
#ifndef GPUCAP_SCRIPTS_TARGET_H
#define GPUCAP_SCRIPTS_TARGET_H

#include <stddef.h>

/* Finds the executable that execvp(name, ...) would run: `name` itself when it contains a '/',
 * else the first regular file named `name` that the caller may execute in a directory of PATH
 * (an empty entry is the working directory; "/bin:/usr/bin" when PATH is unset). Stores its
 * path in out[outlen]. Fails iff nothing is found (-ENOENT), only files that cannot be executed
 * are found or `name` names one (-EACCES), or the path does not fit (-ENAMETOOLONG).
 * O(length of PATH) file-system look-ups. */
int target_find(const char *name, char *out, size_t outlen);

/* Decides whether the program at `path` (found by target_find) can have `lib` (the library
 * gpucap run preloads, whose ELF class and machine the program must share) preloaded.
 * Returns 0 when it can or when this cannot be told (an unreadable file; a format the kernel
 * hands to a handler); otherwise 1, with a one-line reason in why[whylen] naming the program
 * (and the interpreter a script runs through) and what makes the loader skip the library:
 * statically linked, set-user-ID or set-group-ID or given file capabilities (unless the process
 * cannot gain privileges: no_new_privs or a nosuid mount), another ELF class or machine, or a
 * loader that is not glibc's. Interpreters are followed through `#!` lines (and `env NAME`) up
 * to 4 levels, as the kernel does. O(file headers read); never changes anything. */
int target_check(const char *path, const char *lib, char *why, size_t whylen);

#endif
