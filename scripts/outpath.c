/* outpath: checking the files the settings name before the program starts (contracts in
 * outpath.h). Relative paths are checked against the working directory the program starts in.
 */
#include "scripts/outpath.h"

#include "config/parse.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether fd is open on the regular file st. */
static bool same_as_fd(int fd, const struct stat *st) {
  struct stat f;
  return fstat(fd, &f) == 0 && S_ISREG(f.st_mode) && f.st_dev == st->st_dev &&
         f.st_ino == st->st_ino;
}

/* An existing file, reached through an allowed link or none. */
static int check_existing(outpath_t *out, const struct stat *st, char *why, size_t whylen) {
  const char *p = out->path;
  out->dev = st->st_dev;
  out->ino = st->st_ino;
  out->name[0] = '\0';
  if (S_ISCHR(st->st_mode) || S_ISFIFO(st->st_mode)) {
    out->stream = true;
    if (access(p, W_OK) != 0) {
      snprintf(why, whylen, "'%s' cannot be written: %s", p, strerror(errno));
      return -EACCES;
    }
    return 0;
  }
  if (S_ISDIR(st->st_mode)) {
    snprintf(why, whylen, "'%s' is a directory; name a file in it", p);
    return -EPERM;
  }
  if (!S_ISREG(st->st_mode)) {
    snprintf(why, whylen, "'%s' is neither a file, a character device nor a pipe", p);
    return -EPERM;
  }
  if (st->st_uid != geteuid()) {
    snprintf(why, whylen,
             "'%s' belongs to another user (uid %u): gpucap never writes into another user's "
             "file; remove it or name another",
             p, (unsigned)st->st_uid);
    return -EPERM;
  }
  if (access(p, W_OK) != 0) {
    snprintf(why, whylen, "'%s' cannot be written: %s", p, strerror(errno));
    return -EACCES;
  }
  if (same_as_fd(STDOUT_FILENO, st) || same_as_fd(STDERR_FILENO, st)) {
    snprintf(why, whylen,
             "'%s' is the file the command's standard %s goes to: writing it at exit would "
             "overwrite what the command wrote; name a file of its own (or write the report "
             "table to stderr)",
             p, same_as_fd(STDOUT_FILENO, st) ? "output" : "error");
    return -EPERM;
  }
  return 0;
}

/* A file still to be created at `file` (the path, or where a link at it points): its directory
 * must exist and be writable. */
static int check_new(outpath_t *out, const char *file, char *why, size_t whylen) {
  char dir[PATH_MAX];
  const char *slash = strrchr(file, '/');
  const char *name = slash != NULL ? slash + 1 : file;
  if (slash == NULL) {
    strcpy(dir, ".");
  } else {
    size_t n = slash == file ? 1 : (size_t)(slash - file);
    memcpy(dir, file, n);
    dir[n] = '\0';
  }
  if (strlen(file) >= PATH_MAX) {
    snprintf(why, whylen, "'%.64s...' is too long", file);
    return -ENAMETOOLONG;
  }
  if (name[0] == '\0' || strlen(name) > NAME_MAX) {
    snprintf(why, whylen, "'%s' does not name a file", file);
    return -EPERM;
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(why, whylen, "cannot create '%s': the directory '%s' %s", file, dir,
             errno == ENOENT ? "does not exist" : "is not a directory");
    return -ENOENT;
  }
  if (access(dir, W_OK | X_OK) != 0) {
    snprintf(why, whylen, "cannot create '%s' in '%s': %s", file, dir, strerror(errno));
    return -EACCES;
  }
  out->dev = st.st_dev;
  out->ino = st.st_ino;
  strcpy(out->name, name);
  out->stream = false;
  return 0;
}

int outpath_check(const char *path, outpath_t *out, char *why, size_t whylen) {
  struct stat lst;
  struct stat st;
  if (whylen > 0) {
    why[0] = '\0';
  }
  memset(out, 0, sizeof *out);
  if (cfg_expand_path(path, (long)getpid(), out->path, sizeof out->path) != 0) {
    snprintf(why, whylen, "'%s' is too long once %%p is expanded", path);
    return -ENAMETOOLONG;
  }
  const char *p = out->path;
  if (lstat(p, &lst) != 0) {
    if (errno != ENOENT) {
      snprintf(why, whylen, "cannot reach '%s': %s", p, strerror(errno));
      return errno == EACCES ? -EACCES : -ENOENT;
    }
    return check_new(out, out->path, why, whylen);
  }
  if (!S_ISLNK(lst.st_mode)) {
    return check_existing(out, &lst, why, whylen);
  }
  if (lst.st_uid != geteuid() && lst.st_uid != 0) {
    snprintf(why, whylen,
             "'%s' is a symbolic link of another user (uid %u): gpucap never writes through a "
             "link someone else may have planted; remove it or name another file",
             p, (unsigned)lst.st_uid);
    return -EPERM;
  }
  if (stat(p, &st) == 0) {
    return check_existing(out, &st, why, whylen);
  }
  // A link of one's own to a file still to be created: the file is created where it points.
  int err = errno;
  char target[PATH_MAX];
  char file[2 * PATH_MAX];
  ssize_t n = err == ENOENT ? readlink(p, target, sizeof target - 1) : -1;
  if (n <= 0) {
    snprintf(why, whylen, "cannot follow the link '%s': %s", p, strerror(err));
    return -EPERM;
  }
  target[n] = '\0';
  const char *slash = strrchr(p, '/');
  if (target[0] == '/' || slash == NULL) {
    snprintf(file, sizeof file, "%s", target);
  } else {
    snprintf(file, sizeof file, "%.*s/%s", (int)(slash - p), p, target);
  }
  return check_new(out, file, why, whylen);
}

bool outpath_same(const outpath_t *a, const outpath_t *b) {
  return !a->stream && !b->stream && a->dev == b->dev && a->ino == b->ino &&
         strcmp(a->name, b->name) == 0;
}
