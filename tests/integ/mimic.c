/* cudart-mimic: resolves the driver exactly as libcudart 13 does and checks, from outside the
 * shim, where every answer points.
 *
 * usage: mimic REQUESTS HOOKED [--fallback]
 *   REQUESTS  lines "name version flags -> symbol" (cudart's 439 queries, in order)
 *   HOOKED    the names libgpucap.so exports (nm -D), one per line
 * Like cudart it dlopen()s "libcuda.so.1" (no path), dlsym()s cuGetProcAddress_v2, probes
 * ("", 0, 0) and then asks every query; with --fallback, or when the probe answers
 * CUDA_ERROR_STUB_LIBRARY, it dlsym()s every versioned symbol directly instead. For each
 * answer dladdr() must name exactly the expected symbol, inside libgpucap.so when gpucap
 * hooks that symbol and inside the driver otherwise. Then it calls the resolved memory entry
 * points the way the runtime would. Prints TAP.
 */
#include "shim/base/cudadefs.h"
#include "tests/tap.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HOOKED 256

static char hooked[MAX_HOOKED][64];
static int nhooked;

static bool is_hooked(const char *sym) {
  for (int i = 0; i < nhooked; i++) {
    if (strcmp(hooked[i], sym) == 0) {
      return true;
    }
  }
  return false;
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* Checks one resolved pointer; returns true iff it is where it must be. */
static bool check_target(void *p, const char *want, int *in_shim, int *in_driver) {
  Dl_info info;
  if (!p || !dladdr(p, &info) || !info.dli_sname || !info.dli_fname) {
    tap_diag("%s: pointer %p has no symbol", want, p);
    return false;
  }
  bool shim = strncmp(base_name(info.dli_fname), "libgpucap", 9) == 0;
  bool ok = strcmp(info.dli_sname, want) == 0 && shim == is_hooked(want);
  if (!ok) {
    tap_diag("%s: resolved to %s in %s", want, info.dli_sname, info.dli_fname);
  }
  *(shim ? in_shim : in_driver) += 1;
  return ok;
}

typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t,
                              CUdriverProcAddressQueryResult *);

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: mimic REQUESTS HOOKED [--fallback]\n");
    return 2;
  }
  bool fallback = argc > 3 && strcmp(argv[3], "--fallback") == 0;
  FILE *hf = fopen(argv[2], "r");
  if (!hf) {
    perror(argv[2]);
    return 2;
  }
  while (nhooked < MAX_HOOKED && fscanf(hf, "%63s", hooked[nhooked]) == 1) {
    nhooked++;
  }
  fclose(hf);

  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  tap_ok(h != NULL, "dlopen(\"libcuda.so.1\", RTLD_NOW)");
  if (!h) {
    return tap_done();
  }
  void *gpa_ptr = dlsym(h, "cuGetProcAddress_v2");
  gpa_v2_fn gpa;
  *(void **)&gpa = gpa_ptr;
  tap_ok(gpa != NULL, "dlsym(handle, \"cuGetProcAddress_v2\")");
  if (!gpa) {
    return tap_done();
  }
  int s = 0, d = 0;
  tap_ok(check_target(gpa_ptr, "cuGetProcAddress_v2", &s, &d),
         "cuGetProcAddress_v2 from dlsym is gpucap's wrapper");
  void *probe = NULL;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
  CUresult prc = gpa("", &probe, 0, 0, &st);
  if (prc == CUDA_ERROR_STUB_LIBRARY) {
    fallback = true;
  }
  tap_ok(prc != CUDA_SUCCESS, "probe (\"\", 0, 0) is refused (rc %d)", prc);

  FILE *rf = fopen(argv[1], "r");
  if (!rf) {
    perror(argv[1]);
    return 2;
  }
  char line[512];
  int queries = 0, bad = 0, not_found = 0, in_shim = 0, in_driver = 0;
  void *mem[8] = {0}; /* cuInit, DeviceGet, PrimaryCtxRetain, CtxSetCurrent, Alloc, Free, Info */
  const char *mem_names[8] = {"cuInit",          "cuDeviceGet",       "cuDevicePrimaryCtxRetain",
                              "cuCtxSetCurrent", "cuMemAlloc_v2",     "cuMemFree_v2",
                              "cuMemGetInfo_v2", "cuMemAllocPitch_v2"};
  while (fgets(line, sizeof line, rf)) {
    char name[128], want[128];
    int version;
    unsigned flags;
    if (line[0] == '#' || sscanf(line, "%127s %d %x -> %127s", name, &version, &flags, want) != 4) {
      continue;
    }
    queries++;
    bool expect_null = strcmp(want, "NULL") == 0;
    void *p = NULL;
    if (fallback) {
      if (expect_null) {
        continue;
      }
      p = dlsym(h, want);
    } else {
      CUresult rc = gpa(name, &p, version, flags, &st);
      if (expect_null) {
        bool ok = rc == CUDA_ERROR_NOT_FOUND && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        not_found += ok;
        bad += !ok;
        if (!ok) {
          tap_diag("%s@%d: rc %d status %d, want NOT_FOUND", name, version, rc, st);
        }
        continue;
      }
      if (rc != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS) {
        tap_diag("%s@%d/%u: rc %d status %d", name, version, flags, rc, st);
        bad++;
        continue;
      }
    }
    bad += !check_target(p, want, &in_shim, &in_driver);
    for (int i = 0; i < 8; i++) {
      if (strcmp(want, mem_names[i]) == 0) {
        mem[i] = p;
      }
    }
  }
  fclose(rf);
  tap_ok(queries > 400, "replayed %d queries%s", queries, fallback ? " via dlsym" : "");
  tap_ok(bad == 0, "every answer names the expected symbol in the expected object (%d bad)", bad);
  tap_ok(in_shim >= 5, "%d answers are gpucap hooks, %d are the driver's own", in_shim, in_driver);
  if (!fallback) {
    tap_ok(not_found > 0, "%d interop names answer CUDA_ERROR_NOT_FOUND", not_found);
  }

  /* Use the answers the way the runtime does. */
  for (int i = 0; i < 8; i++) {
    if (!mem[i]) {
      tap_ok(0, "%s was resolved", mem_names[i]);
      return tap_done();
    }
  }
  CUresult (*init)(unsigned);
  CUresult (*dev_get)(CUdevice *, int);
  CUresult (*retain)(CUcontext *, CUdevice);
  CUresult (*set_cur)(CUcontext);
  CUresult (*alloc)(CUdeviceptr *, size_t);
  CUresult (*mfree)(CUdeviceptr);
  CUresult (*info)(size_t *, size_t *);
  CUresult (*pitch)(CUdeviceptr *, size_t *, size_t, size_t, unsigned);
  *(void **)&init = mem[0];
  *(void **)&dev_get = mem[1];
  *(void **)&retain = mem[2];
  *(void **)&set_cur = mem[3];
  *(void **)&alloc = mem[4];
  *(void **)&mfree = mem[5];
  *(void **)&info = mem[6];
  *(void **)&pitch = mem[7];
  CUdevice dev;
  CUcontext ctx;
  TAP_EQ(init(0), CUDA_SUCCESS, "cuInit");
  TAP_EQ(dev_get(&dev, 0), CUDA_SUCCESS, "cuDeviceGet(0)");
  TAP_EQ(retain(&ctx, dev), CUDA_SUCCESS, "cuDevicePrimaryCtxRetain");
  TAP_EQ(set_cur(ctx), CUDA_SUCCESS, "cuCtxSetCurrent");
  CUdeviceptr a = 0, b = 0;
  size_t free_b = 0, total_b = 0, pitch_b = 0;
  TAP_EQ(alloc(&a, 1 << 20), CUDA_SUCCESS, "cuMemAlloc_v2(1 MiB)");
  TAP_EQ(pitch(&b, &pitch_b, 1000, 10, 4), CUDA_SUCCESS, "cuMemAllocPitch_v2(1000 x 10)");
  tap_ok(pitch_b >= 1000, "pitch %zu covers the row", pitch_b);
  TAP_EQ(info(&free_b, &total_b), CUDA_SUCCESS, "cuMemGetInfo_v2");
  tap_ok(free_b <= total_b && total_b > 0, "get-info: free %zu <= total %zu", free_b, total_b);
  printf("# get-info: free=%zu total=%zu\n", free_b, total_b);
  TAP_EQ(mfree(a), CUDA_SUCCESS, "cuMemFree_v2(a)");
  TAP_EQ(mfree(b), CUDA_SUCCESS, "cuMemFree_v2(b)");
  TAP_EQ(mfree(a), CUDA_ERROR_INVALID_VALUE, "a second cuMemFree_v2(a) is the driver's error");
  return tap_done();
}
