/* deeptest: a program that loads a library with RTLD_DEEPBIND (tests/integ/deeplib.c) and has
 * it allocate device memory. usage: deeptest LIBRARY BYTES COUNT [via-loader]
 * LIBRARY is opened by the name given, with RTLD_NOW | RTLD_DEEPBIND, by the program itself
 * (its RUNPATH finds bare names) or, with via-loader, by libdeeploader.so (whose RUNPATH does).
 * Prints `loaded=0|1 got=N` for tests/integ/deepbind.sh. Not linked with libcuda. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: deeptest LIBRARY BYTES COUNT [via-loader]\n");
    return 2;
  }
  void *lib;
  if (argc > 4 && strcmp(argv[4], "via-loader") == 0) {
    void *loader = dlopen("libdeeploader.so", RTLD_NOW);
    void *(*load)(const char *);
    *(void **)&load = loader ? dlsym(loader, "deep_load") : NULL;
    lib = load ? load(argv[1]) : NULL;
  } else {
    if (argc > 4 && strcmp(argv[4], "after-cuda") == 0 && !dlopen("libcuda.so.1", RTLD_NOW)) {
      return 1;
    }
    lib = dlopen(argv[1], RTLD_NOW | RTLD_DEEPBIND);
  }
  int (*deep_alloc)(size_t, int);
  *(void **)&deep_alloc = lib ? dlsym(lib, "deep_alloc") : NULL;
  printf("loaded=%d ", deep_alloc != NULL);
  if (!deep_alloc) {
    printf("error=%s\n", dlerror());
    return 1;
  }
  printf("got=%d\n", deep_alloc(strtoull(argv[2], NULL, 0), atoi(argv[3])));
  return 0;
}
