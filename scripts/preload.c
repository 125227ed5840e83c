/* preload: locating libgpucap.so and composing LD_PRELOAD (contracts in preload.h).
 * ld.so splits LD_PRELOAD at spaces and colons; entries are compared by their exact text, so a
 * library named twice by different paths is detected by its file name (libgpucap.so).
 */
#include "scripts/preload.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LIB_NAME "libgpucap.so"

/* Tries dir + rel; on success stores the real path in out and returns true. */
static bool try_path(const char *dir, const char *rel, char *out, size_t outlen, char *tried,
                     size_t triedlen) {
  char path[PATH_MAX];
  char real[PATH_MAX];
  int n = snprintf(path, sizeof path, "%s%s", dir, rel);
  if (n < 0 || (size_t)n >= sizeof path) {
    return false;
  }
  size_t t = strlen(tried);
  snprintf(tried + t, triedlen - t, "%s'%s'", t > 0 ? " and " : "", path);
  size_t len = 0;
  if (access(path, R_OK) != 0 || realpath(path, real) == NULL || (len = strlen(real)) >= outlen) {
    return false;
  }
  memcpy(out, real, len + 1);
  return true;
}

int preload_find(const char *override, const char *self, char *out, size_t outlen,
                 preload_source_t *src) {
  char exe[PATH_MAX];
  char tried[3 * PATH_MAX];

  if (override != NULL) {
    char real[PATH_MAX];
    if (override[0] == '\0') {
      snprintf(out, outlen, "GPUCAP_LIB is set but empty; unset it or give the path of %s",
               LIB_NAME);
      return -EINVAL;
    }
    if (access(override, R_OK) != 0 || realpath(override, real) == NULL) {
      snprintf(out, outlen, "GPUCAP_LIB='%s': %s; unset it or give the path of %s", override,
               strerror(errno), LIB_NAME);
      return -ENOENT;
    }
    size_t n = strlen(real);
    if (n >= outlen) {
      snprintf(out, outlen, "GPUCAP_LIB: the path is too long");
      return -ENAMETOOLONG;
    }
    memcpy(out, real, n + 1);
    *src = PRELOAD_FROM_ENV;
    return 0;
  }

  if (self == NULL) {
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
      snprintf(out, outlen,
               "cannot find the gpucap executable (/proc/self/exe: %s); set GPUCAP_LIB to the "
               "path of %s",
               strerror(errno), LIB_NAME);
      return -ENOENT;
    }
    exe[n] = '\0';
  } else if (realpath(self, exe) == NULL) {
    snprintf(out, outlen, "cannot resolve '%s': %s; set GPUCAP_LIB to the path of %s", self,
             strerror(errno), LIB_NAME);
    return -ENOENT;
  }
  char *slash = strrchr(exe, '/');
  if (slash == NULL) {
    snprintf(out, outlen, "'%s' is not an absolute path; set GPUCAP_LIB", exe);
    return -ENOENT;
  }
  slash[1] = '\0'; /* exe is now the directory, with its trailing '/' */
  tried[0] = '\0';
  if (try_path(exe, "../lib/gpucap/" LIB_NAME, out, outlen, tried, sizeof tried)) {
    *src = PRELOAD_FROM_INSTALL;
    return 0;
  }
  if (try_path(exe, LIB_NAME, out, outlen, tried, sizeof tried)) {
    *src = PRELOAD_FROM_BUILD;
    return 0;
  }
  snprintf(out, outlen,
           "cannot find %s: looked for %s; reinstall gpucap (make install) or set GPUCAP_LIB "
           "to the library's path",
           LIB_NAME, tried);
  return -ENOENT;
}

/* Whether the LD_PRELOAD entry s[0..n) names the file at the real path `real`. */
static bool same_file(const char *s, size_t n, const char *real) {
  char path[PATH_MAX];
  char resolved[PATH_MAX];
  if (n >= sizeof path) {
    return false;
  }
  memcpy(path, s, n);
  path[n] = '\0';
  return realpath(path, resolved) != NULL && strcmp(resolved, real) == 0;
}

static bool is_sep(char c) {
  return c == ':' || c == ' ';
}

/* The file name of the entry s[0..n). */
static const char *base_of(const char *s, size_t n, size_t *bn) {
  size_t i = n;
  while (i > 0 && s[i - 1] != '/') {
    i--;
  }
  *bn = n - i;
  return s + i;
}

static bool starts(const char *s, size_t n, const char *prefix) {
  size_t p = strlen(prefix);
  return n >= p && memcmp(s, prefix, p) == 0;
}

static bool is_sanitizer(const char *s, size_t n) {
  size_t bn = 0;
  const char *b = base_of(s, n, &bn);
  return starts(b, bn, "libasan") || starts(b, bn, "libtsan") || starts(b, bn, "libubsan") ||
         starts(b, bn, "libhwasan") || starts(b, bn, "libmsan") || starts(b, bn, "libclang_rt.");
}

int preload_compose(const char *lib, const char *old, char *out, size_t outlen) {
  size_t liblen = strlen(lib);
  if (liblen == 0 || strpbrk(lib, ": ") != NULL) {
    snprintf(out, outlen,
             "the library path '%s' contains a space or ':', which LD_PRELOAD cannot hold; "
             "install gpucap under a path without them or set GPUCAP_LIB",
             lib);
    return -EINVAL;
  }
  if (old == NULL) {
    old = "";
  }
  size_t insert = 0; /* offset in old after the leading sanitizer runtimes */
  bool leading = true;
  for (size_t i = 0; old[i] != '\0';) {
    while (is_sep(old[i])) {
      i++;
    }
    size_t start = i;
    while (old[i] != '\0' && !is_sep(old[i])) {
      i++;
    }
    size_t n = i - start;
    if (n == 0) {
      break;
    }
    size_t bn = 0;
    const char *b = base_of(old + start, n, &bn);
    bool named = bn == strlen(LIB_NAME) && memcmp(b, LIB_NAME, bn) == 0;
    if ((n == liblen && memcmp(old + start, lib, n) == 0) ||
        (named && same_file(old + start, n, lib))) {
      size_t oldlen = strlen(old);
      if (oldlen >= outlen) {
        snprintf(out, outlen, "LD_PRELOAD is too long");
        return -ENAMETOOLONG;
      }
      memcpy(out, old, oldlen + 1);
      return 0;
    }
    if (named) {
      snprintf(out, outlen,
               "LD_PRELOAD already loads another gpucap library '%.*s'; two copies would both "
               "interpose: remove it from LD_PRELOAD, or set GPUCAP_LIB to it",
               (int)n, old + start);
      return -EEXIST;
    }
    if (leading && is_sanitizer(old + start, n)) {
      insert = i;
    } else {
      leading = false;
    }
  }
  bool before = insert == 0; /* lib goes before everything in old */
  size_t oldlen = strlen(old);
  int w = before ? snprintf(out, outlen, "%s%s%s", lib, oldlen > 0 ? ":" : "", old)
                 : snprintf(out, outlen, "%.*s:%s%s", (int)insert, old, lib, old + insert);
  if (w < 0 || (size_t)w >= outlen) {
    snprintf(out, outlen, "LD_PRELOAD would be too long");
    return -ENAMETOOLONG;
  }
  return 0;
}

int preload_probe(const char *lib, char *why, size_t whylen) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char *e = dlerror();
    snprintf(why, whylen, "%s", e != NULL ? e : "unknown reason");
    return -ENOEXEC;
  }
  dlclose(h);
  if (whylen > 0) {
    why[0] = '\0';
  }
  return 0;
}
