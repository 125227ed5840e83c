/* replay: a stand-alone driver for the fuzz targets, so the committed corpora are replayed by
 * every `make test` pass (plain and ASan+UBSan, built with the project's compiler) even where
 * libFuzzer is missing. Each argument is a file or a directory of files; every file is fed once
 * to LLVMFuzzerTestOneInput. A target aborts on a failed check, so a bad input ends the run
 * with a nonzero status. Prints TAP: one line per argument with the number of inputs replayed.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    return -1;
  }
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  size_t got;
  while (buf != NULL && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      uint8_t *bigger = realloc(buf, cap * 2);
      if (bigger == NULL) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = bigger;
      cap *= 2;
    }
  }
  fclose(f);
  if (buf == NULL) {
    return -1;
  }
  /* An exact-size copy, so ASan sees reads past the input's end. */
  uint8_t *exact = malloc(n ? n : 1);
  if (exact == NULL) {
    free(buf);
    return -1;
  }
  memcpy(exact, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(exact, n);
  free(exact);
  return 0;
}

int main(int argc, char **argv) {
  int failed = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    long inputs = 0, unreadable = 0;
    if (stat(argv[i], &st) != 0) {
      unreadable++;
    } else if (S_ISDIR(st.st_mode)) {
      DIR *d = opendir(argv[i]);
      struct dirent *e;
      while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
          continue;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
        if (run_file(path) == 0) {
          inputs++;
        } else {
          unreadable++;
        }
      }
      if (d != NULL) {
        closedir(d);
      }
    } else if (run_file(argv[i]) == 0) {
      inputs++;
    } else {
      unreadable++;
    }
    int ok = unreadable == 0 && inputs > 0;
    failed += !ok;
    printf("%sok %d - %s: %ld inputs replayed, %ld unreadable\n", ok ? "" : "not ", i, argv[i],
           inputs, unreadable);
  }
  printf("1..%d\n", argc - 1);
  return failed ? 1 : 0;
}
