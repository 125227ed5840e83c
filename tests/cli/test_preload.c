/* Tests for scripts/preload: the LD_PRELOAD that `gpucap run` composes (what was there is kept,
 * sanitizer runtimes stay first, the library is never added twice, paths LD_PRELOAD cannot hold
 * are refused) and where the library is found (an installed tree, a build tree, GPUCAP_LIB),
 * over a scratch directory. Prints TAP.
 */
#include "scripts/preload.h"
#include "tests/tap.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LIB "/opt/gpucap/lib/gpucap/libgpucap.so"

static void compose(const char *old, int want_rc, const char *want, const char *what) {
  char out[512];
  int rc = preload_compose(LIB, old, out, sizeof out);
  if (!tap_ok(rc == want_rc && (want == NULL || strcmp(out, want) == 0), "%s", what)) {
    tap_diag("rc %d, got '%s', want '%s'", rc, out, want != NULL ? want : "(any)");
  }
}

static void test_compose(void) {
  compose(NULL, 0, LIB, "unset: the library alone");
  compose("", 0, LIB, "empty: the library alone");
  compose("/x/liba.so", 0, LIB ":/x/liba.so", "the library goes before what is there");
  compose("/x/liba.so /x/libb.so", 0, LIB ":/x/liba.so /x/libb.so",
          "what is there is kept as written, spaces included");
  compose("/usr/lib/libasan.so.8", 0, "/usr/lib/libasan.so.8:" LIB,
          "after a sanitizer runtime, which must come first");
  compose("/usr/lib/libasan.so.8 /x/liba.so", 0, "/usr/lib/libasan.so.8:" LIB " /x/liba.so",
          "between the sanitizer runtime and the rest");
  compose("libtsan.so.2:/x/libubsan.so.1:/x/liba.so", 0,
          "libtsan.so.2:/x/libubsan.so.1:" LIB ":/x/liba.so", "after every leading runtime");
  compose("/x/liba.so:/usr/lib/libasan.so.8", 0, LIB ":/x/liba.so:/usr/lib/libasan.so.8",
          "a runtime that is not leading does not move the library");
  compose("/l/libclang_rt.asan-x86_64.so", 0, "/l/libclang_rt.asan-x86_64.so:" LIB,
          "clang's runtimes count as sanitizer runtimes");
  compose("/x/liba.so:" LIB, 0, "/x/liba.so:" LIB, "already there: unchanged");
  compose("::/x/liba.so", 0, LIB ":::/x/liba.so", "empty entries are kept");
  compose("/other/libgpucap.so", -EEXIST, NULL, "another libgpucap.so is refused");

  char out[512];
  TAP_EQ(preload_compose("/my dir/libgpucap.so", NULL, out, sizeof out), -EINVAL,
         "a library path with a space is refused");
  tap_ok(strstr(out, "space or ':'") != NULL, "saying why: %s", out);
  TAP_EQ(preload_compose("/a:b/libgpucap.so", NULL, out, sizeof out), -EINVAL,
         "a library path with ':' is refused");
  TAP_EQ(preload_compose(LIB, "/x/liba.so", out, 20), -ENAMETOOLONG, "a result too long");
}

static void touch(const char *path) {
  FILE *f = fopen(path, "w");
  if (f != NULL) {
    fclose(f);
  }
}

static void test_find(void) {
  char root[] = "/tmp/gpucap-preload.XXXXXX";
  char path[PATH_MAX], exe[PATH_MAX], out[PATH_MAX + 256], want[PATH_MAX];
  preload_source_t src;
  if (mkdtemp(root) == NULL) {
    tap_ok(0, "mkdtemp");
    return;
  }
  /* An installed tree: bin/gpucap and lib/gpucap/libgpucap.so. */
  snprintf(path, sizeof path, "%s/bin", root);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/lib", root);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/lib/gpucap", root);
  mkdir(path, 0755);
  snprintf(exe, sizeof exe, "%s/bin/gpucap", root);
  touch(exe);

  TAP_EQ(preload_find(NULL, exe, out, sizeof out, &src), -ENOENT, "no library: not found");
  tap_ok(strstr(out, "/bin/../lib/gpucap/libgpucap.so'") != NULL &&
             strstr(out, "/bin/libgpucap.so'") != NULL && strstr(out, "GPUCAP_LIB") != NULL,
         "the message names both places and the fix: %s", out);

  snprintf(path, sizeof path, "%s/bin/libgpucap.so", root);
  touch(path);
  TAP_EQ(preload_find(NULL, exe, out, sizeof out, &src), 0, "found next to gpucap");
  TAP_EQ(src, PRELOAD_FROM_BUILD, "as in a build tree");
  tap_ok(realpath(path, want) != NULL && strcmp(out, want) == 0, "its real path: %s", out);

  snprintf(path, sizeof path, "%s/lib/gpucap/libgpucap.so", root);
  touch(path);
  TAP_EQ(preload_find(NULL, exe, out, sizeof out, &src), 0, "found in an installed tree");
  TAP_EQ(src, PRELOAD_FROM_INSTALL, "which wins");
  tap_ok(realpath(path, want) != NULL && strcmp(out, want) == 0 && strstr(out, "..") == NULL,
         "as an absolute path without '..': %s", out);

  /* Through a symlink to the executable, as /usr/bin/gpucap -> /opt/gpucap/bin/gpucap. */
  char link[PATH_MAX];
  snprintf(link, sizeof link, "%s/gpucap-link", root);
  if (symlink(exe, link) == 0) {
    TAP_EQ(preload_find(NULL, link, out, sizeof out, &src), 0, "found through a symlink");
    tap_ok(strcmp(out, want) == 0, "relative to the link's target");
  }

  /* LD_PRELOAD naming the same library by another path leaves it alone. */
  char alias[PATH_MAX], composed[2 * PATH_MAX];
  snprintf(alias, sizeof alias, "%s/alias", root);
  mkdir(alias, 0755);
  snprintf(alias, sizeof alias, "%s/alias/libgpucap.so", root);
  if (symlink(want, alias) == 0) {
    TAP_EQ(preload_compose(want, alias, composed, sizeof composed), 0,
           "the same library by a symlink in LD_PRELOAD is not added again");
    tap_ok(strcmp(composed, alias) == 0, "LD_PRELOAD stays as it was: %s", composed);
  }

  TAP_EQ(preload_find(path, NULL, out, sizeof out, &src), 0, "GPUCAP_LIB is used as is");
  TAP_EQ(src, PRELOAD_FROM_ENV, "and said to be");
  TAP_EQ(preload_find("/nonexistent/libgpucap.so", exe, out, sizeof out, &src), -ENOENT,
         "a GPUCAP_LIB that does not exist is an error, not a fallback");
  tap_ok(strstr(out, "GPUCAP_LIB='/nonexistent/libgpucap.so'") != NULL, "named: %s", out);
  TAP_EQ(preload_find("", exe, out, sizeof out, &src), -EINVAL, "an empty GPUCAP_LIB too");

  /* The running test program finds nothing next to itself in build/tests. */
  TAP_EQ(preload_find(NULL, NULL, out, sizeof out, &src), -ENOENT,
         "/proc/self/exe is used by default");

  snprintf(path, sizeof path, "rm -rf '%s'", root);
  TAP_EQ(system(path), 0, "cleanup");
}

int main(void) {
  test_compose();
  test_find();
  return tap_done();
}
