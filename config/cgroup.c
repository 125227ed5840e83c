/* The process's cgroup v2 directory (contracts in cgroup.h): the cgroup2 mount from
 * /proc/self/mountinfo, the process's path from the "0::" line of /proc/self/cgroup. Files are
 * read line by line through one stack buffer: a container's mountinfo can be long.
 */
#include "config/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define PATH_BYTES 1024 /* a cgroup path or mount point; longer ones are not followed */

typedef struct path_buf {
  char *buf;
  size_t len;
  bool found;
  int err; /* -ENAMETOOLONG when a match did not fit */
} path_buf_t;

/* Calls fn(arg, line, n) for each line of the file at path (without its newline); a line longer
 * than CFG_CGROUP_LINE_MAX - 1 bytes is skipped. Stops when fn returns true. Returns 0, or
 * -errno when the file cannot be opened or read. */
static int each_line(const char *path, bool (*fn)(void *arg, const char *line, size_t n),
                     void *arg) {
  char buf[CFG_CGROUP_LINE_MAX];
  size_t have = 0;
  bool skipping = false;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return -errno;
  }
  for (;;) {
    ssize_t got = read(fd, buf + have, sizeof buf - have);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got < 0) {
      int err = -errno;
      close(fd);
      return err;
    }
    have += (size_t)got;
    size_t start = 0;
    for (size_t i = 0; i < have; i++) {
      if (buf[i] != '\n') {
        continue;
      }
      if (!skipping && fn(arg, buf + start, i - start)) {
        close(fd);
        return 0;
      }
      skipping = false;
      start = i + 1;
    }
    memmove(buf, buf + start, have - start);
    have -= start;
    if (got == 0) {
      if (have > 0 && !skipping) {
        (void)fn(arg, buf, have);
      }
      break;
    }
    if (have == sizeof buf) { /* a line longer than the buffer: drop it up to its newline */
      skipping = true;
      have = 0;
    }
  }
  close(fd);
  return 0;
}

/* Copies n bytes of mountinfo field text into out[outlen] with its octal escapes (\040 for a
 * space, as the kernel writes them) decoded. False iff it does not fit. */
static bool unescape(const char *s, size_t n, char *out, size_t outlen) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c == '\\' && i + 3 < n && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      c = (char)(((s[i + 1] - '0') << 6) | ((s[i + 2] - '0') << 3) | (s[i + 3] - '0'));
      i += 3;
    }
    if (o + 1 >= outlen) {
      return false;
    }
    out[o++] = c;
  }
  out[o] = '\0';
  return true;
}

/* The n-th space-separated field (from 0) of line[0..len): its start and length. */
static bool field(const char *line, size_t len, int n, const char **at, size_t *flen) {
  size_t i = 0;
  for (int k = 0; k < n; k++) {
    while (i < len && line[i] != ' ') {
      i++;
    }
    if (i == len) {
      return false;
    }
    i++;
  }
  size_t start = i;
  while (i < len && line[i] != ' ') {
    i++;
  }
  *at = line + start;
  *flen = i - start;
  return true;
}

/* The mount point and mount root of the first cgroup2 file system in /proc/self/mountinfo. */
typedef struct mount_found {
  char point[PATH_BYTES];
  char root[PATH_BYTES];
  bool found;
} mount_found_t;

static bool mount_line(void *arg, const char *line, size_t n) {
  mount_found_t *m = arg;
  // "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS"
  const char *sep = NULL;
  for (size_t i = 0; i + 2 < n; i++) {
    if (line[i] == ' ' && line[i + 1] == '-' && line[i + 2] == ' ') {
      sep = line + i + 3;
      break;
    }
  }
  static const char fs[] = "cgroup2 ";
  if (sep == NULL || (size_t)(line + n - sep) < sizeof fs - 1 ||
      memcmp(sep, fs, sizeof fs - 1) != 0) {
    return false;
  }
  const char *root = NULL, *point = NULL;
  size_t rootn = 0, pointn = 0;
  if (!field(line, n, 3, &root, &rootn) || !field(line, n, 4, &point, &pointn)) {
    return false;
  }
  m->found = unescape(root, rootn, m->root, sizeof m->root) &&
             unescape(point, pointn, m->point, sizeof m->point);
  return m->found;
}

/* The path of the "0::" line of /proc/self/cgroup. */
static bool cgroup_line(void *arg, const char *line, size_t n) {
  path_buf_t *p = arg;
  if (n < 3 || memcmp(line, "0::", 3) != 0) {
    return false;
  }
  p->found = true;
  if (n - 3 >= p->len) {
    p->err = -ENAMETOOLONG;
    return true;
  }
  memcpy(p->buf, line + 3, n - 3);
  p->buf[n - 3] = '\0';
  return true;
}

int cfg_cgroup_dir(const char *root, char *out, size_t outlen, size_t *rootlen) {
  int saved = errno;
  static const char *const self_cgroup = "/proc/self/cgroup";
  char path[PATH_BYTES];
  path_buf_t p = {path, sizeof path, false, 0};
  mount_found_t m;
  int rc = each_line(self_cgroup, cgroup_line, &p);
  if (rc == 0 && (!p.found || p.err != 0)) {
    rc = p.found ? p.err : -ENOENT;
  }
  if (rc == 0) {
    m.found = false;
    if (root != NULL && root[0] != '\0' && strlen(root) >= sizeof m.point) {
      rc = -ENAMETOOLONG;
    } else if (root != NULL && root[0] != '\0') {
      (void)snprintf(m.point, sizeof m.point, "%s", root);
      (void)snprintf(m.root, sizeof m.root, "/");
      m.found = true;
    } else {
      rc = each_line("/proc/self/mountinfo", mount_line, &m);
    }
    if (rc == 0 && !m.found) {
      rc = -ENOENT;
    }
  }
  const char *rel = path;
  if (rc == 0 && strcmp(m.root, "/") != 0) {
    // A mount of a subtree (a container's view): the cgroup path must lie under its root.
    size_t rn = strlen(m.root);
    if (strncmp(path, m.root, rn) != 0 || (path[rn] != '/' && path[rn] != '\0')) {
      rc = -ENOENT;
    }
    rel = path + rn;
  }
  if (rc == 0) {
    size_t pn = strlen(m.point);
    while (pn > 0 && m.point[pn - 1] == '/') {
      pn--; /* "/" itself becomes "", the root of the paths below */
    }
    while (*rel == '/') {
      rel++;
    }
    size_t rn = strlen(rel);
    while (rn > 0 && rel[rn - 1] == '/') {
      rn--;
    }
    if (pn + 1 + rn + 1 > outlen) {
      rc = -ENAMETOOLONG;
    } else {
      memcpy(out, m.point, pn);
      size_t o = pn;
      if (rn > 0) {
        out[o++] = '/';
        memcpy(out + o, rel, rn);
        o += rn;
      }
      out[o] = '\0';
      *rootlen = pn;
    }
  }
  errno = saved;
  return rc;
}

int cfg_cgroup_read(const char *path, char *buf, size_t len) {
  int saved = errno;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = -errno;
    errno = saved;
    return err;
  }
  size_t have = 0;
  int rc = 0;
  for (;;) {
    if (have + 1 >= len) {
      char extra;
      ssize_t more = read(fd, &extra, 1);
      rc = more > 0 ? -EFBIG : 0;
      break;
    }
    ssize_t got = read(fd, buf + have, len - 1 - have);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got < 0) {
      rc = -errno;
      break;
    }
    if (got == 0) {
      break;
    }
    have += (size_t)got;
  }
  close(fd);
  buf[rc == 0 ? have : 0] = '\0';
  errno = saved;
  return rc;
}
