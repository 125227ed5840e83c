/* preload: where `gpucap run` finds libgpucap.so, and the LD_PRELOAD it hands the command.
 *
 * The library is found relative to the running gpucap executable (/proc/self/exe, symlinks
 * resolved), so an installed tree works wherever it was copied to: $PREFIX/bin/gpucap uses
 * $PREFIX/lib/gpucap/libgpucap.so, and build/gpucap in a source tree uses build/libgpucap.so.
 * GPUCAP_LIB, when set, names the library instead. Pure functions apart from the file system
 * look-ups; no global state.
 */
#ifndef GPUCAP_SCRIPTS_PRELOAD_H
#define GPUCAP_SCRIPTS_PRELOAD_H

#include <stddef.h>

/* Where preload_find got the library from. */
typedef enum preload_source {
  PRELOAD_FROM_ENV,     /* GPUCAP_LIB */
  PRELOAD_FROM_INSTALL, /* <dir of gpucap>/../lib/gpucap/libgpucap.so */
  PRELOAD_FROM_BUILD,   /* <dir of gpucap>/libgpucap.so */
} preload_source_t;

/* Finds the library: `override` (GPUCAP_LIB's value, or NULL when unset), else the two places
 * next to the executable `self` (NULL means /proc/self/exe), first match wins. Stores its
 * absolute, symlink-free path in out[outlen] and where it came from in *src.
 * Fails iff no readable file is found there (-ENOENT), `override` is empty (-EINVAL), or the
 * path does not fit (-ENAMETOOLONG); then `out` holds a one-line reason naming the paths tried
 * and how to fix it. O(path length) plus three file-system look-ups. */
int preload_find(const char *override, const char *self, char *out, size_t outlen,
                 preload_source_t *src);

/* Writes into out[outlen] the LD_PRELOAD value that loads `lib` before `old` (the current
 * value, or NULL when unset), keeping every entry of `old` and its separators:
 *   - `lib` goes first, except after the sanitizer runtimes (libasan, libtsan, libubsan,
 *     libhwasan, libmsan, libclang_rt.*) that `old` starts with, which must stay first;
 *   - when `old` already has `lib` (that path, or another path to the same file), the value
 *     is `old` unchanged.
 * Fails iff `lib` contains a space or ':', which LD_PRELOAD cannot hold (-EINVAL); `old`
 * preloads another file named libgpucap.so, which would interpose twice (-EEXIST); or the result
 * does not fit (-ENAMETOOLONG). O(length of old) plus a realpath per libgpucap.so entry. */
int preload_compose(const char *lib, const char *old, char *out, size_t outlen);

/* Proves that the loader can load `lib` on this system, by loading it into this process
 * (dlopen, then dlclose; its constructor only registers fork handlers, its destructor writes
 * nothing for a process that used no device memory). Without this, a library the loader cannot
 * load (built against a newer glibc, not a shared object, another architecture) is skipped
 * with one "ignored" line from ld.so and the program runs uncapped. Fails iff it cannot be
 * loaded (-ENOEXEC), with why[whylen] holding the loader's reason. Cost: one dlopen. */
int preload_probe(const char *lib, char *why, size_t whylen);

#endif
