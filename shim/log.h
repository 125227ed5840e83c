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

/* Writes all `len` bytes to fd, retrying short writes and EINTR; errno untouched. Returns
 * true iff everything was written. */
bool log_write_fd(int fd, const char *text, size_t len);

/* Creates (truncates) the file a setting named, for writing, "%p" in the path replaced by the
 * process id (so the processes of one job do not overwrite each other's files): never through
 * a symlink planted at the path (O_NOFOLLOW), mode 0666 less the user's umask, close-on-exec.
 * Returns the fd, or -1 after one warning naming `setting`, the path and the reason. errno
 * untouched. */
int log_create(const char *setting, const char *path);

#endif
