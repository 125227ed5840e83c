/* TAP test of the fake driver's entry-point resolution, driven the way libcudart 13 drives a
 * driver (shared/research/cudart-probe.md section 1): dlopen("libcuda.so.1", RTLD_NOW), dlsym
 * of cuGetProcAddress_v2 only, the ("", 0, 0) probe, then every recorded query before cuInit,
 * each answer checked by dladdr against the symbol the typedef rule names. Also: the v1 ABI,
 * every line of gpa_table.inc, statuses, flags, bad arguments, cuGetExportTable, and -Bsymbolic
 * (this program is linked against libfk_interpose.so, which exports two of the same names).
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim/base/cudadefs.h"
#include "tests/tap.h"

typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t,
                            CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*export_table_fn)(const void **, const CUuuid *);

enum { GPA_PT_NONE, GPA_PT_PTDS, GPA_PT_PTSZ };

static const struct {
  const char *name;
  int version;
  int pt;
  const char *symbol;
} table[] = {
#define GPA_ENTRY(name, version, pt, symbol) {name, version, pt, symbol},
#include "tests/fakecuda/gpa_table.inc"
#undef GPA_ENTRY
};
#define NTABLE (sizeof table / sizeof table[0])

static void *lib;
static char libname[PATH_MAX];

/* Function pointers travel as void * through cuGetProcAddress; convert without casts that
 * -Wpedantic rejects. */
#define AS_FN(type, var, ptr) memcpy(&(var), &(ptr), sizeof(var))

/* The name of the symbol at p if it lies in the fake driver, else NULL. */
static const char *fake_symbol(void *p) {
  Dl_info info;
  if (p == NULL || dladdr(p, &info) == 0 || info.dli_sname == NULL || info.dli_saddr != p ||
      strcmp(info.dli_fname, libname) != 0) {
    return NULL;
  }
  return info.dli_sname;
}

static const char *requests_path(void) {
  static char path[PATH_MAX];
  const char *top = getenv("TOP");
  snprintf(path, sizeof path, "%s%stests/fakecuda/cudart-probe-gpa-requests.txt", top ? top : "",
           top ? "/" : "");
  return path;
}

/* Replays the recorded queries: one check per line when each is set, else one in total. */
static void replay(gpa2_fn gpa2, gpa1_fn gpa1, int each) {
  FILE *f = fopen(requests_path(), "r");
  if (!tap_ok(f != NULL, "request list %s readable", requests_path())) {
    return;
  }
  char line[512], name[128], arrow[8], expected[128];
  int version, lines = 0, bad = 0;
  unsigned flags;
  while (fgets(line, sizeof line, f) != NULL) {
    if (line[0] == '#' ||
        sscanf(line, "%127s %d %x %7s %127s", name, &version, &flags, arrow, expected) != 5) {
      continue;
    }
    lines++;
    void *pfn = (void *)&pfn;
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    CUresult rc = gpa2 ? gpa2(name, &pfn, version, flags, &st) : gpa1(name, &pfn, version, flags);
    int ok;
    if (strcmp(expected, "NULL") == 0) {
      ok = rc == CUDA_ERROR_NOT_FOUND && pfn == NULL &&
           (!gpa2 || st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    } else {
      const char *got = fake_symbol(pfn);
      ok = rc == CUDA_SUCCESS && (!gpa2 || st == CU_GET_PROC_ADDRESS_SUCCESS) && got != NULL &&
           strcmp(got, expected) == 0 && dlsym(lib, expected) == pfn;
      if (!ok) {
        tap_diag("%s %d 0x%x: rc %d status %d symbol %s", name, version, flags, rc, st,
                 got ? got : "(not in the fake)");
      }
    }
    if (each) {
      tap_ok(ok, "%s %d 0x%x -> %s", name, version, flags, expected);
    }
    bad += !ok;
  }
  fclose(f);
  if (!each) {
    tap_ok(bad == 0 && lines == 439, "v1 cuGetProcAddress answers all %d queries alike", lines);
  } else {
    TAP_EQ(lines, 439, "the request list has 439 queries");
  }
}

static void table_checks(gpa2_fn gpa2) {
  int sorted = 1, bad = 0, low = 0;
  for (size_t i = 1; i < NTABLE; i++) {
    int c = strcmp(table[i - 1].name, table[i].name);
    sorted &= c < 0 || (c == 0 && table[i - 1].version <= table[i].version);
  }
  tap_ok(sorted, "gpa_table.inc is sorted by name then version");
  TAP_EQ(NTABLE, 637, "gpa_table.inc has one entry per PFN typedef (637)");
  for (size_t i = 0; i < NTABLE; i++) {
    void *pfn = NULL;
    CUdriverProcAddressQueryResult st;
    cuuint64_t flags =
        table[i].pt == GPA_PT_NONE ? 0 : CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    CUresult rc = gpa2(table[i].name, &pfn, table[i].version, flags, &st);
    const char *got = fake_symbol(pfn);
    if (rc != CUDA_SUCCESS || got == NULL || strcmp(got, table[i].symbol) != 0) {
      tap_diag("entry %s %d -> %s: got rc %d %s", table[i].name, table[i].version, table[i].symbol,
               rc, got ? got : "NULL");
      bad++;
    }
    if (i == 0 || strcmp(table[i - 1].name, table[i].name) != 0) {
      rc = gpa2(table[i].name, &pfn, table[i].version - 1, 0, &st);
      low += rc != CUDA_ERROR_NOT_FOUND || st != CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ||
             pfn != NULL;
    }
  }
  TAP_EQ(bad, 0, "every gpa_table.inc entry resolves to its exported symbol");
  TAP_EQ(low, 0, "every name below its first version: NOT_FOUND, VERSION_NOT_SUFFICIENT");
}

static void status_checks(gpa2_fn gpa2) {
  void *pfn = (void *)&pfn;
  CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
  TAP_EQ(gpa2("cuMemAllocAsync", &pfn, 11010, 0, &st), CUDA_ERROR_NOT_FOUND,
         "too-low version: CUDA_ERROR_NOT_FOUND");
  TAP_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, "too-low version: VERSION_NOT_SUFFICIENT");
  tap_ok(pfn == NULL, "too-low version: *pfn = NULL");
  pfn = (void *)&pfn;
  TAP_EQ(gpa2("cuNoSuchFunction", &pfn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND,
         "unknown name: CUDA_ERROR_NOT_FOUND");
  TAP_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, "unknown name: SYMBOL_NOT_FOUND");
  tap_ok(pfn == NULL, "unknown name: *pfn = NULL");
  TAP_EQ(gpa2("cuMemAlloc_v2", &pfn, 13000, 0, &st), CUDA_ERROR_NOT_FOUND,
         "a versioned symbol name is not a base name: NOT_FOUND");
  TAP_EQ(gpa2(NULL, &pfn, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE, "NULL symbol: INVALID_VALUE");
  TAP_EQ(gpa2("cuInit", NULL, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE, "NULL pfn: INVALID_VALUE");
  TAP_EQ(gpa2("cuInit", &pfn, 13000, 4, &st), CUDA_ERROR_INVALID_VALUE, "flags 4: INVALID_VALUE");
  TAP_EQ(gpa2("cuInit", &pfn, 13000, 1ULL << 40, &st), CUDA_ERROR_INVALID_VALUE,
         "flags 1<<40: INVALID_VALUE");
  TAP_EQ(gpa2("cuInit", &pfn, 13010, 0, &st), CUDA_ERROR_INVALID_VALUE,
         "cudaVersion above the driver's 13000: INVALID_VALUE");
  TAP_EQ(gpa2("cuInit", &pfn, 13000, 0, NULL), CUDA_SUCCESS, "symbolStatus is optional");

  static const struct {
    const char *name;
    int version;
    unsigned flags;
    const char *symbol;
  } cases[] = {
      {"cuMemcpyHtoD", 7000, 0, "cuMemcpyHtoD_v2"},
      {"cuMemcpyHtoD", 7000, 1, "cuMemcpyHtoD_v2"},
      {"cuMemcpyHtoD", 7000, 2, "cuMemcpyHtoD_v2_ptds"},
      {"cuMemcpyHtoD", 7000, 3, "cuMemcpyHtoD_v2_ptds"},
      {"cuMemcpyHtoD", 6050, 2, "cuMemcpyHtoD_v2"},
      {"cuMemcpyHtoD", 2000, 0, "cuMemcpyHtoD"},
      {"cuMemAlloc", 3010, 0, "cuMemAlloc"},
      {"cuMemAlloc", 13000, 2, "cuMemAlloc_v2"},
      {"cuMemAllocAsync", 13000, 2, "cuMemAllocAsync_ptsz"},
      {"cuStreamGetCaptureInfo", 12000, 2, "cuStreamGetCaptureInfo_v2_ptsz"},
      {"cuCtxCreate", 13000, 0, "cuCtxCreate_v4"},
      {"cuCtxCreate", 12040, 0, "cuCtxCreate_v3"},
      {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
      {"cuGetProcAddress", 13000, 0, "cuGetProcAddress_v2"},
      {"cuProfilerStart", 4000, 0, "cuProfilerStart"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pfn = NULL;
    CUresult rc = gpa2(cases[i].name, &pfn, cases[i].version, cases[i].flags, &st);
    const char *got = fake_symbol(pfn);
    tap_ok(rc == CUDA_SUCCESS && st == CU_GET_PROC_ADDRESS_SUCCESS && got != NULL &&
               strcmp(got, cases[i].symbol) == 0,
           "%s %d flags %u -> %s (got %s)", cases[i].name, cases[i].version, cases[i].flags,
           cases[i].symbol, got ? got : "NULL");
  }
}

int main(void) {
  lib = dlopen("libcuda.so.1", RTLD_NOW); /* exactly cudart's call (no RTLD_GLOBAL) */
  if (!tap_ok(lib != NULL, "dlopen(\"libcuda.so.1\", RTLD_NOW): %s", lib ? "ok" : dlerror())) {
    return tap_done();
  }
  void *gpa2_sym = dlsym(lib, "cuGetProcAddress_v2");
  Dl_info info;
  tap_ok(gpa2_sym != NULL && dladdr(gpa2_sym, &info) != 0 &&
             strstr(info.dli_fname, "fakecuda/libcuda.so.1") != NULL,
         "dlsym(handle, cuGetProcAddress_v2) is the fake's");
  snprintf(libname, sizeof libname, "%s", info.dli_fname);
  gpa2_fn gpa2;
  AS_FN(gpa2_fn, gpa2, gpa2_sym);

  void *pfn = (void *)&pfn;
  CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
  TAP_EQ(gpa2("", &pfn, 0, 0, &st), CUDA_ERROR_NOT_FOUND, "probe (\"\", 0, 0): NOT_FOUND");
  TAP_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, "probe: SYMBOL_NOT_FOUND");

  replay(gpa2, NULL, 1);

  /* -Bsymbolic: global lookup finds the interposer, the fake still answers with its own. */
  void *global_alloc = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
  tap_ok(global_alloc != NULL && dladdr(global_alloc, &info) != 0 &&
             strstr(info.dli_fname, "libfk_interpose.so") != NULL,
         "the global scope's cuMemAlloc_v2 is the interposer's");
  pfn = NULL;
  gpa2("cuMemAlloc", &pfn, 3020, 0, &st);
  tap_ok(pfn != NULL && pfn != global_alloc && fake_symbol(pfn) != NULL,
         "cuGetProcAddress_v2(cuMemAlloc, 3020) is the fake's own, not the interposer's");
  pfn = NULL;
  gpa2("cuGetProcAddress", &pfn, 12000, 0, &st);
  tap_ok(pfn == gpa2_sym, "the (cuGetProcAddress, 12000) self-query returns the fake's _v2");

  gpa1_fn gpa1 = NULL;
  pfn = NULL;
  gpa2("cuGetProcAddress", &pfn, 11030, 0, &st);
  AS_FN(gpa1_fn, gpa1, pfn);
  tap_ok(gpa1 != NULL && pfn == dlsym(lib, "cuGetProcAddress"),
         "(cuGetProcAddress, 11030) returns the v1 entry point");
  if (gpa1 != NULL) {
    replay(NULL, gpa1, 0);
    TAP_EQ(gpa1("", &pfn, 0, 0), CUDA_ERROR_NOT_FOUND, "v1 probe: NOT_FOUND");
    TAP_EQ(gpa1(NULL, &pfn, 13000, 0), CUDA_ERROR_INVALID_VALUE, "v1 NULL symbol: INVALID_VALUE");
  }

  table_checks(gpa2);
  status_checks(gpa2);

  export_table_fn export_table;
  void *et_sym = dlsym(lib, "cuGetExportTable");
  AS_FN(export_table_fn, export_table, et_sym);
  const void *table_ptr = &table_ptr;
  CUuuid id = {{0}};
  TAP_EQ(export_table(&table_ptr, &id), CUDA_ERROR_INVALID_VALUE,
         "cuGetExportTable of an unknown table before cuInit: INVALID_VALUE");
  tap_ok(table_ptr == &table_ptr, "... and the table pointer is left alone");

  init_fn init;
  void *init_sym = dlsym(lib, "cuInit");
  AS_FN(init_fn, init, init_sym);
  TAP_EQ(init(0), CUDA_SUCCESS, "cuInit(0) after the resolution phase");
  TAP_EQ(export_table(&table_ptr, &id), CUDA_ERROR_INVALID_VALUE,
         "cuGetExportTable of an unknown table after cuInit: INVALID_VALUE");
  pfn = NULL;
  TAP_EQ(gpa2("cuMemFree", &pfn, 3020, 0, &st), CUDA_SUCCESS, "resolution works after cuInit");
  tap_ok(fake_symbol(pfn) != NULL && strcmp(fake_symbol(pfn), "cuMemFree_v2") == 0,
         "... cuMemFree@3020 -> cuMemFree_v2");
  dlclose(lib);
  return tap_done();
}
