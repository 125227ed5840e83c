/* outpath: the files the settings name (GPUCAP_REPORT, GPUCAP_REPORT_JSON, GPUCAP_TRACE),
 * checked by `gpucap run` before the program starts, so that a path the library could not
 * write at exit fails at once instead of after the whole job.
 *
 * The rules are the library's rules for creating these files (docs/configuration.md, "Rules for
 * file paths"): `%p` is the process id; a symbolic link is followed only when it belongs to the
 * user or to root (/dev/stdout, /proc/self/fd/1), never one another user planted; what it names
 * must be a regular file of the user's, a character device (a terminal, /dev/null) or a pipe;
 * a new file needs an existing, writable directory. Reads the file system only; no state.
 */
#ifndef GPUCAP_SCRIPTS_OUTPATH_H
#define GPUCAP_SCRIPTS_OUTPATH_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* One checked output: what it names, for telling whether two settings name the same file. */
typedef struct outpath {
  char path[PATH_MAX]; /* the path with %p expanded */
  bool stream;         /* a character device or a pipe, which several settings may share */
  dev_t dev;           /* the file's, or for a file still to be created its directory's */
  ino_t ino;
  char name[NAME_MAX + 1]; /* "" for an existing file, else the name to create */
} outpath_t;

/* Checks that the library will be able to write `path` (a setting's value, `%p` standing for
 * the process id, which exec keeps: this process's) when the program exits. Fills *out.
 * Fails iff the path is too long once expanded (-ENAMETOOLONG), or names a symbolic link of
 * another user, a link to nothing, a directory, a socket or block device, another user's file,
 * a file the user cannot write, or the command's own standard output or error when that is a
 * regular file (the report would overwrite what the command wrote) (-EPERM), or a new file in
 * a directory that does not exist or cannot be written (-ENOENT, -EACCES): then why[whylen]
 * holds one line that names the path and the rule. O(path length) plus a few look-ups. */
int outpath_check(const char *path, outpath_t *out, char *why, size_t whylen);

/* Whether two checked outputs are one file that both would create or overwrite (streams
 * excepted: two reports may well go to one terminal or /dev/null). O(1). */
bool outpath_same(const outpath_t *a, const outpath_t *b);

#endif
