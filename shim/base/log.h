/* Messages from inside other people's programs: stderr only, through a stack buffer and one
 * write(2) per message (no malloc, no stdio buffering, errno preserved); and the files that
 * settings name (report, JSON, trace), created safely. Every line starts
 * `gpucap: `, `gpucap: warning: ` or `gpucap: error: `. Thread-safe; async-signal-unsafe only
 * through vsnprintf.
 */
#ifndef GPUCAP_SHIM_LOG_H
#define GPUCAP_SHIM_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum log_level { LOG_ERROR = -2, LOG_WARN = -1, LOG_INFO = 0, LOG_DEBUG = 1, LOG_TRACE = 2 };

/* Sets the verbosity: messages above `level` are dropped. Errors and warnings always print. */
void log_set_verbosity(int level);

/* Formats one message (without the prefix or trailing newline) and writes it to stderr, cut at
 * 1 KiB. Cost: one vsnprintf and one write. */
__attribute__((format(printf, 2, 3))) void log_msg(enum log_level level, const char *fmt, ...);

/* Writes `len` bytes of already formatted text to stderr as is (used for multi-line reports). */
void log_write_raw(const char *text, size_t len);

/* Writes all `len` bytes to fd, retrying short writes and EINTR; errno untouched. Returns 0
 * iff everything was written, else the errno of the write that failed (ENOSPC, EFBIG, EIO...;
 * EIO for a write that wrote nothing without an error); *done (when done is not NULL) gets the
 * bytes written. Async-signal-safe. */
int log_write_fd(int fd, const char *text, size_t len, size_t *done);

/* Creates the file a setting named, for writing and empty, its path expanded by
 * cfg_expand_path ("%p" the process id, "%%" a '%': so the processes of one job do not
 * overwrite each other's files; the result is copied to full[fullcap] for messages): mode 0666
 * less the user's umask, close-on-exec.
 * Follows a symbolic link only when it belongs to the user or to root (/dev/stdout), as
 * `gpucap run` checks (docs/configuration.md, "Output files"); a link of one's own to nothing
 * creates the file where it points. Refuses, after one warning naming `setting`, the path and
 * the reason: a symlink of another user (it may have been planted), an existing regular file
 * that another user owns (planted in a shared directory), the regular file the process's
 * standard output or error goes to (it would be truncated), and a regular file that another
 * of the process's output settings already created (GPUCAP_REPORT, GPUCAP_REPORT_JSON and
 * GPUCAP_TRACE naming one file would overwrite each other). An existing file is emptied only once
 * these checks pass; a FIFO or character device is written as it is. A non-empty regular file
 * written after this program started (another process of the job wrote it: a sibling, a fork
 * child, the parent) is replaced after one warning that suggests `%p` in the name. Returns the
 * fd, or -1. errno untouched; no malloc. */
int log_create(const char *setting, const char *path, char *full, size_t fullcap);

#endif
