/* arrays: CUDA arrays and mipmapped arrays under a 64 MiB cap, over the fake driver (linked with
 * -lcuda and the fake's test hooks), with gpucap preloaded. Prints TAP; the charge modes also
 * print "# charged N bytes" for tests/integ/arrays.sh to compare with the fake's own report.
 * usage: arrays charge 2d|1d|3d|layered|cubemap|mipmap|mipmap-layered|skewed
 *        arrays refuse|destroy|bad|deferred|ctxdestroy|reset|release|share|narrow
 * Run with GPUCAP_MEMORY_LIMIT=64MiB (share: with GPUCAP_POOL=off too). */
#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/tap.h"

#include <string.h>

#define MiB (1ull << 20)
#define CAP (64 * MiB)

static CUcontext ctx;
static CUdevice dev;

static size_t free_now(void) {
  size_t f = 0, t = 0;
  cuMemGetInfo_v2(&f, &t);
  return f;
}

static CUDA_ARRAY3D_DESCRIPTOR desc3(size_t w, size_t h, size_t d, CUarray_format f, unsigned ch,
                                     unsigned flags) {
  CUDA_ARRAY3D_DESCRIPTOR d3 = {
      .Width = w, .Height = h, .Depth = d, .Format = f, .NumChannels = ch, .Flags = flags};
  return d3;
}

static CUDA_ARRAY_DESCRIPTOR desc2(size_t w, size_t h, CUarray_format f, unsigned ch) {
  CUDA_ARRAY_DESCRIPTOR d2 = {.Width = w, .Height = h, .Format = f, .NumChannels = ch};
  return d2;
}

/* One array of each kind, left alive at exit so the fake's report holds exactly its bytes.
 * E is gpucap's lower bound; the fake pads rows to 512 bytes. */
static void charge(const char *kind) {
  CUarray a = NULL;
  CUmipmappedArray m = NULL;
  CUresult rc = CUDA_ERROR_UNKNOWN;
  unsigned long long lower = 0; /* E */
  TAP_EQ(free_now(), CAP, "get-info shows the whole cap before");
  if (strcmp(kind, "2d") == 0) {
    CUDA_ARRAY_DESCRIPTOR d = desc2(1000, 1000, CU_AD_FORMAT_FLOAT, 1);
    rc = cuArrayCreate_v2(&a, &d);
    lower = 4000000;
  } else if (strcmp(kind, "1d") == 0) {
    CUDA_ARRAY_DESCRIPTOR d = desc2(30000, 0, CU_AD_FORMAT_FLOAT, 2);
    rc = cuArrayCreate_v2(&a, &d);
    lower = 240000;
  } else if (strcmp(kind, "3d") == 0) {
    CUDA_ARRAY3D_DESCRIPTOR d = desc3(200, 100, 50, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0);
    rc = cuArray3DCreate_v2(&a, &d);
    lower = 4000000;
  } else if (strcmp(kind, "layered") == 0) {
    CUDA_ARRAY3D_DESCRIPTOR d = desc3(256, 256, 16, CU_AD_FORMAT_HALF, 2, CUDA_ARRAY3D_LAYERED);
    rc = cuArray3DCreate_v2(&a, &d);
    lower = 256ull * 256 * 16 * 4;
  } else if (strcmp(kind, "cubemap") == 0) {
    CUDA_ARRAY3D_DESCRIPTOR d = desc3(128, 128, 6, CU_AD_FORMAT_FLOAT, 4, CUDA_ARRAY3D_CUBEMAP);
    rc = cuArray3DCreate_v2(&a, &d);
    lower = 128ull * 128 * 6 * 16;
  } else if (strcmp(kind, "mipmap") == 0) {
    CUDA_ARRAY3D_DESCRIPTOR d = desc3(1024, 1024, 0, CU_AD_FORMAT_FLOAT, 1, 0);
    rc = cuMipmappedArrayCreate(&m, &d, 32); /* clamped to 11 levels */
    lower = 4ull * 1398101;                  /* 4^0 + 4^1 + ... + 4^10 elements */
  } else if (strcmp(kind, "mipmap-layered") == 0) {
    CUDA_ARRAY3D_DESCRIPTOR d =
        desc3(4096, 0, 8, CU_AD_FORMAT_UNSIGNED_INT8, 1, CUDA_ARRAY3D_LAYERED);
    rc = cuMipmappedArrayCreate(&m, &d, 13);
    lower = 8ull * 8191; /* the 8 layers do not shrink */
  } else if (strcmp(kind, "skewed") == 0) {
    /* Rows of 4 bytes padded to 512: the driver's 32 MiB are far more than E (256 KiB), and
     * what the deferred twin says the array needs. */
    CUDA_ARRAY3D_DESCRIPTOR d = desc3(1, 32768, 2, CU_AD_FORMAT_FLOAT, 1, 0);
    rc = cuArray3DCreate_v2(&a, &d);
    lower = 262144;
  } else {
    tap_ok(0, "unknown kind '%s'", kind);
    return;
  }
  TAP_EQ(rc, CUDA_SUCCESS, "create the %s array", kind);
  unsigned long long charged = CAP - free_now();
  tap_ok(charged >= lower, "get-info shows cap minus a charge of at least E (%llu >= %llu)",
         charged, lower);
  if (strcmp(kind, "skewed") == 0) {
    TAP_EQ(charged, 32 * MiB, "the charge is the driver's 32 MiB, not E");
  }
  tap_diag("charged %llu bytes", charged);
}

/* Arrays over the cap never reach the driver; one whose measured size passes the cap is
 * destroyed again. */
static void refuse(void) {
  CUarray a = (CUarray)0x1;
  CUmipmappedArray m = NULL;
  CUDA_ARRAY_DESCRIPTOR d2 = desc2(4096, 4096, CU_AD_FORMAT_FLOAT, 4);
  CUDA_ARRAY3D_DESCRIPTOR d3 = desc3(512, 512, 65, CU_AD_FORMAT_FLOAT, 1, 0);
  CUDA_ARRAY3D_DESCRIPTOR dm = desc3(4096, 4096, 0, CU_AD_FORMAT_FLOAT, 1, 0);
  TAP_EQ(cuArrayCreate_v2(&a, &d2), CUDA_ERROR_OUT_OF_MEMORY, "a 256 MiB array: OUT_OF_MEMORY");
  TAP_EQ(cuArray3DCreate_v2(&a, &d3), CUDA_ERROR_OUT_OF_MEMORY, "a 65 MiB 3D array: OUT_OF_MEMORY");
  TAP_EQ(cuMipmappedArrayCreate(&m, &dm, 13), CUDA_ERROR_OUT_OF_MEMORY,
         "an 85 MiB mipmapped array: OUT_OF_MEMORY");
  TAP_EQ(fakecudaCalls("cuArrayCreate_v2") + fakecudaCalls("cuArray3DCreate_v2") +
             fakecudaCalls("cuMipmappedArrayCreate"),
         0, "the driver was never asked");
  TAP_EQ(free_now(), CAP, "nothing is charged");

  /* E = 100 x 1024 x 150 floats = 58.6 MiB fits; the driver's 75 MiB do not: its deferred
   * twin (which holds no memory) says so before the array is made. */
  d3 = desc3(100, 1024, 150, CU_AD_FORMAT_FLOAT, 1, 0);
  TAP_EQ(cuArray3DCreate_v2(&a, &d3), CUDA_ERROR_OUT_OF_MEMORY,
         "an array whose layout passes the cap: OUT_OF_MEMORY");
  TAP_EQ(fakecudaCalls("cuArray3DCreate_v2"), 1, "  the driver made only its deferred twin ...");
  TAP_EQ(fakecudaCalls("cuArrayDestroy"), 1, "  ... which gpucap destroyed");
  TAP_EQ(free_now(), CAP, "  nothing stays charged");
  d3 = desc3(100, 1024, 100, CU_AD_FORMAT_FLOAT, 1, 0);
  TAP_EQ(cuArray3DCreate_v2(&a, &d3), CUDA_SUCCESS, "a 50 MiB one fits");
  TAP_EQ(cuArrayDestroy(a), CUDA_SUCCESS, "destroy it");
}

static void destroy(void) {
  CUarray a = NULL, level = NULL;
  CUmipmappedArray m = NULL;
  CUcontext popped = NULL;
  CUDA_ARRAY_DESCRIPTOR d2 = desc2(2000, 2000, CU_AD_FORMAT_FLOAT, 1);
  CUDA_ARRAY3D_DESCRIPTOR dm = desc3(2048, 2048, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0);
  TAP_EQ(cuArrayCreate_v2(&a, &d2), CUDA_SUCCESS, "a 2000 x 2000 float array");
  size_t charged = CAP - free_now();
  tap_ok(charged >= 16000000, "is charged (%zu bytes)", charged);
  TAP_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS, "no current context ...");
  TAP_EQ(cuArrayDestroy(a), CUDA_ERROR_INVALID_CONTEXT, "... a destroy fails: driver's code");
  TAP_EQ(cuCtxPushCurrent_v2(popped), CUDA_SUCCESS, "the context back");
  TAP_EQ(CAP - free_now(), charged, "the failed destroy kept the charge");
  TAP_EQ(cuArrayDestroy(a), CUDA_SUCCESS, "cuArrayDestroy");
  TAP_EQ(free_now(), CAP, "gives the charge back");
  TAP_EQ(cuArrayDestroy(a), CUDA_ERROR_INVALID_HANDLE, "a second cuArrayDestroy: driver's code");
  TAP_EQ(free_now(), CAP, "  and no second credit");

  TAP_EQ(cuMipmappedArrayCreate(&m, &dm, 12), CUDA_SUCCESS, "a mipmapped array");
  charged = CAP - free_now();
  tap_ok(charged >= 4ull * 2048 * 2048, "is charged (%zu bytes)", charged);
  TAP_EQ(cuMipmappedArrayGetLevel(&level, m, 0), CUDA_SUCCESS, "its level 0");
  TAP_EQ(cuArrayDestroy(level), CUDA_ERROR_INVALID_HANDLE,
         "destroying a level on its own: driver's code");
  TAP_EQ(CAP - free_now(), charged, "  the charge stays");
  TAP_EQ(cuArrayDestroy((CUarray)m), CUDA_ERROR_INVALID_HANDLE,
         "cuArrayDestroy of a mipmapped array's handle: driver's code");
  TAP_EQ(CAP - free_now(), charged, "  the charge stays");
  TAP_EQ(cuMipmappedArrayDestroy(m), CUDA_SUCCESS, "cuMipmappedArrayDestroy");
  TAP_EQ(free_now(), CAP, "gives the charge back");
  TAP_EQ(cuMipmappedArrayDestroy(m), CUDA_ERROR_INVALID_HANDLE, "a second one: driver's code");
}

/* Bad arguments reach the driver, whose own code the program gets; nothing stays charged. */
static void bad(void) {
  CUarray a = NULL;
  CUmipmappedArray m = NULL;
  CUcontext popped = NULL;
  CUDA_ARRAY_DESCRIPTOR d2 = desc2(16, 16, CU_AD_FORMAT_FLOAT, 3);
  CUDA_ARRAY3D_DESCRIPTOR d3 = desc3(0, 16, 0, CU_AD_FORMAT_FLOAT, 1, 0);
  unsigned long long before = fakecudaCalls("cuArrayCreate_v2") +
                              fakecudaCalls("cuArray3DCreate_v2") +
                              fakecudaCalls("cuMipmappedArrayCreate");
  TAP_EQ(cuArrayCreate_v2(&a, &d2), CUDA_ERROR_INVALID_VALUE, "3 channels: INVALID_VALUE");
  TAP_EQ(cuArray3DCreate_v2(&a, &d3), CUDA_ERROR_INVALID_VALUE, "width 0: INVALID_VALUE");
  d3 = desc3(16, 16, 0, CU_AD_FORMAT_FLOAT, 1, 0x200);
  TAP_EQ(cuArray3DCreate_v2(&a, &d3), CUDA_ERROR_INVALID_VALUE, "an unknown flag: INVALID_VALUE");
  d3 = desc3(16, 16, 5, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP);
  TAP_EQ(cuMipmappedArrayCreate(&m, &d3, 2), CUDA_ERROR_INVALID_VALUE,
         "a cubemap of 5 faces: INVALID_VALUE");
  TAP_EQ(cuArray3DCreate_v2(&a, NULL), CUDA_ERROR_INVALID_VALUE, "no descriptor: INVALID_VALUE");
  d3 = desc3(16, 16, 0, CU_AD_FORMAT_FLOAT, 1, 0);
  TAP_EQ(cuArray3DCreate_v2(NULL, &d3), CUDA_ERROR_INVALID_VALUE, "no handle: INVALID_VALUE");
  d3.Format = CU_AD_FORMAT_BC1_UNORM;
  TAP_EQ(cuArray3DCreate_v2(&a, &d3), CUDA_ERROR_NOT_SUPPORTED,
         "a format the fake does not model: its NOT_SUPPORTED");
  d3.Format = CU_AD_FORMAT_FLOAT;
  TAP_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS, "no current context ...");
  TAP_EQ(cuArray3DCreate_v2(&a, &d3), CUDA_ERROR_INVALID_CONTEXT, "... INVALID_CONTEXT");
  TAP_EQ(cuCtxPushCurrent_v2(popped), CUDA_SUCCESS, "the context back");
  unsigned long long calls = fakecudaCalls("cuArrayCreate_v2") +
                             fakecudaCalls("cuArray3DCreate_v2") +
                             fakecudaCalls("cuMipmappedArrayCreate") - before;
  tap_ok(calls >= 8, "every one reached the driver (%llu creations, deferred twins included)",
         calls);
  TAP_EQ(free_now(), CAP, "nothing is charged");
}

/* Deferred-mapping arrays hold no memory until mapped (from cuMemCreate, charged there). */
static void deferred(void) {
  CUarray a = NULL;
  CUmipmappedArray m = NULL;
  CUDA_ARRAY_MEMORY_REQUIREMENTS req;
  CUDA_ARRAY3D_DESCRIPTOR d =
      desc3(4096, 4096, 0, CU_AD_FORMAT_FLOAT, 4, CUDA_ARRAY3D_DEFERRED_MAPPING);
  TAP_EQ(cuArray3DCreate_v2(&a, &d), CUDA_SUCCESS, "a 256 MiB deferred-mapping array");
  TAP_EQ(free_now(), CAP, "is charged nothing");
  TAP_EQ(cuArrayGetMemoryRequirements(&req, a, dev), CUDA_SUCCESS, "its memory requirements");
  TAP_EQ(req.size, 256 * MiB, "  are the driver's own");
  TAP_EQ(cuMipmappedArrayCreate(&m, &d, 13), CUDA_SUCCESS, "a deferred-mapping mipmapped array");
  TAP_EQ(free_now(), CAP, "is charged nothing");
  TAP_EQ(cuArrayDestroy(a) || cuMipmappedArrayDestroy(m), CUDA_SUCCESS, "destroy both");
  TAP_EQ(free_now(), CAP, "nothing was credited either");
}

/* Arrays in a context that goes away: charge of 3 arrays, then back to the whole cap. */
static void make_three(void) {
  CUarray a = NULL, b = NULL;
  CUmipmappedArray m = NULL;
  CUDA_ARRAY_DESCRIPTOR d2 = desc2(2000, 2000, CU_AD_FORMAT_FLOAT, 1);
  CUDA_ARRAY3D_DESCRIPTOR d3 = desc3(256, 256, 64, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED);
  CUDA_ARRAY3D_DESCRIPTOR dm = desc3(1024, 1024, 0, CU_AD_FORMAT_FLOAT, 4, 0);
  TAP_EQ(cuArrayCreate_v2(&a, &d2) || cuArray3DCreate_v2(&b, &d3) ||
             cuMipmappedArrayCreate(&m, &dm, 11),
         CUDA_SUCCESS, "an array, a layered array and a mipmapped array");
  size_t charged = CAP - free_now();
  tap_ok(charged >= 16000000 + 16 * MiB + 16 * MiB, "are charged (%zu bytes)", charged);
}

static void whole_cap_back(const char *after) {
  CUarray a = NULL;
  CUDA_ARRAY3D_DESCRIPTOR d = desc3(1024, 1024, 15, CU_AD_FORMAT_FLOAT, 1, 0);
  TAP_EQ(free_now(), CAP, "after %s: get-info shows the whole cap", after);
  TAP_EQ(cuArray3DCreate_v2(&a, &d), CUDA_SUCCESS, "after %s: a 60 MiB array fits", after);
  cuArrayDestroy(a);
}

static void ctxdestroy(void) {
  CUcontext c2;
  TAP_EQ(cuCtxCreate_v2(&c2, 0, dev), CUDA_SUCCESS, "a created context");
  make_three();
  TAP_EQ(cuCtxDestroy_v2(c2), CUDA_SUCCESS, "cuCtxDestroy_v2 with the arrays alive");
  TAP_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS, "back to the primary context");
  whole_cap_back("cuCtxDestroy_v2");
}

static void reset(void) {
  make_three();
  TAP_EQ(cuDevicePrimaryCtxReset_v2(dev), CUDA_SUCCESS, "reset the primary context");
  TAP_EQ(cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx), CUDA_SUCCESS,
         "retain it again");
  whole_cap_back("cuDevicePrimaryCtxReset_v2");
}

static void release(void) {
  make_three();
  TAP_EQ(cuDevicePrimaryCtxRelease_v2(dev), CUDA_SUCCESS, "the last release");
  TAP_EQ(cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx), CUDA_SUCCESS,
         "retain it again");
  whole_cap_back("the last cuDevicePrimaryCtxRelease_v2");
}

/* Arrays and cuMemAlloc share the device's cap (GPUCAP_POOL=off: no pool headroom). */
static void share(void) {
  CUdeviceptr p = 0, q = 0;
  CUarray a = NULL;
  CUDA_ARRAY_DESCRIPTOR big = desc2(8000, 1000, CU_AD_FORMAT_FLOAT, 1);
  CUDA_ARRAY_DESCRIPTOR small = desc2(4000, 1000, CU_AD_FORMAT_FLOAT, 1);
  TAP_EQ(cuMemAlloc_v2(&p, 40 * MiB), CUDA_SUCCESS, "40 MiB from cuMemAlloc");
  TAP_EQ(cuArrayCreate_v2(&a, &big), CUDA_ERROR_OUT_OF_MEMORY, "a 30.5 MiB array: refused");
  TAP_EQ(cuArrayCreate_v2(&a, &small), CUDA_SUCCESS, "a 15.3 MiB array fits");
  TAP_EQ(free_now(), CAP - 40 * MiB - 16384000, "get-info counts both");
  TAP_EQ(cuMemAlloc_v2(&q, 10 * MiB), CUDA_ERROR_OUT_OF_MEMORY, "10 MiB more: refused");
  TAP_EQ(cuArrayDestroy(a) || cuMemFree_v2(p), CUDA_SUCCESS, "free both");
  TAP_EQ(free_now(), CAP, "the whole cap is back");
}

/* Arrays whose rows the driver pads far beyond their lower bound: 1 x 32768 x 2 floats, E =
 * 256 KiB, 32 MiB in the driver's layout. Under the 64 MiB cap, two fit, not sixteen. */
static void narrow(void) {
  CUDA_ARRAY3D_DESCRIPTOR d = desc3(1, 32768, 2, CU_AD_FORMAT_FLOAT, 1, 0);
  CUarray a = NULL;
  int made = 0;
  CUresult rc = CUDA_SUCCESS;
  while (made < 16 && (rc = cuArray3DCreate_v2(&a, &d)) == CUDA_SUCCESS) {
    made++;
  }
  TAP_EQ(made, 2, "narrow-row arrays of 32 MiB each: 2 under the cap");
  TAP_EQ(rc, CUDA_ERROR_OUT_OF_MEMORY, "  the third: OUT_OF_MEMORY");
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "";
  TAP_EQ(cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
             cuCtxSetCurrent(ctx),
         0, "context on device 0");
  if (strcmp(what, "charge") == 0) {
    charge(argc > 2 ? argv[2] : "");
  } else if (strcmp(what, "refuse") == 0) {
    refuse();
  } else if (strcmp(what, "destroy") == 0) {
    destroy();
  } else if (strcmp(what, "bad") == 0) {
    bad();
  } else if (strcmp(what, "deferred") == 0) {
    deferred();
  } else if (strcmp(what, "ctxdestroy") == 0) {
    ctxdestroy();
  } else if (strcmp(what, "reset") == 0) {
    reset();
  } else if (strcmp(what, "release") == 0) {
    release();
  } else if (strcmp(what, "share") == 0) {
    share();
  } else if (strcmp(what, "narrow") == 0) {
    narrow();
  } else {
    tap_ok(0, "unknown mode '%s'", what);
  }
  return tap_done();
}
