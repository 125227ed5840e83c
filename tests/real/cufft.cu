/* cuFFT: plans of every shape a program makes (1D of a power of two, of a composite and of a
 * prime size, batched; 2D real-to-complex; 3D double complex; a plan whose work area the
 * program provides, on a stream), each executed; the work areas cuFFT takes
 * from device memory and gives back at cufftDestroy; a plan refused when the device is full and
 * made once room is made. cuFFT loads each kernel as a module and finds its function through
 * the driver's private tools-module table. The fake runs no device code: an execution's status,
 * the device work it queued (the fake's pending-work counter) and the memory are checked, never
 * the transform. */
#include <cufft.h>

#include "tests/real/real.h"

static const char *fft_status(cufftResult r) {
  switch (r) {
  case CUFFT_SUCCESS:
    return "CUFFT_SUCCESS";
  case CUFFT_INVALID_PLAN:
    return "CUFFT_INVALID_PLAN";
  case CUFFT_ALLOC_FAILED:
    return "CUFFT_ALLOC_FAILED";
  case CUFFT_INVALID_VALUE:
    return "CUFFT_INVALID_VALUE";
  case CUFFT_INTERNAL_ERROR:
    return "CUFFT_INTERNAL_ERROR";
  case CUFFT_EXEC_FAILED:
    return "CUFFT_EXEC_FAILED";
  case CUFFT_SETUP_FAILED:
    return "CUFFT_SETUP_FAILED";
  case CUFFT_INVALID_SIZE:
    return "CUFFT_INVALID_SIZE";
  default:
    return "CUFFT_OTHER";
  }
}

static int fft(const char *name, cufftResult r) {
  return real_status(name, r, CUFFT_SUCCESS, fft_status(r));
}

static size_t free_now(void) {
  size_t f = 0, t = 0;
  cudaMemGetInfo(&f, &t);
  return f;
}

/* Executes plan p on data (in place; forward and back, but an R2C plan forward only) on its
 * stream s: each execution queues device work that is complete once s is synchronised. */
static void exec_both(const char *name, cufftHandle p, cufftType type, void *data, cudaStream_t s) {
  char key[96];
  int before = real_pending();
  cufftResult f, b;
  switch (type) {
  case CUFFT_C2C:
    f = cufftExecC2C(p, (cufftComplex *)data, (cufftComplex *)data, CUFFT_FORWARD);
    b = cufftExecC2C(p, (cufftComplex *)data, (cufftComplex *)data, CUFFT_INVERSE);
    break;
  case CUFFT_Z2Z:
    f = cufftExecZ2Z(p, (cufftDoubleComplex *)data, (cufftDoubleComplex *)data, CUFFT_FORWARD);
    b = cufftExecZ2Z(p, (cufftDoubleComplex *)data, (cufftDoubleComplex *)data, CUFFT_INVERSE);
    break;
  default: /* R2C: forward only (the inverse is a C2R plan's) */
    f = cufftExecR2C(p, (cufftReal *)data, (cufftComplex *)data);
    b = CUFFT_SUCCESS;
    break;
  }
  snprintf(key, sizeof key, "%s_forward", name);
  fft(key, f);
  if (type != CUFFT_R2C) {
    snprintf(key, sizeof key, "%s_inverse", name);
    fft(key, b);
  }
  real_queued_then_done(name, before, s);
}

int main(void) {
  size_t total = real_total("start");
  void *data = NULL;
  const size_t bytes = 64 * MiB;
  OK("malloc_data", real_malloc(&data, bytes));
  int version = 0;
  fft("version", cufftGetVersion(&version));
  FACT("cufft_version", "%d", version);

  static const int sizes[] = {1024, 1000, 4099}; /* 4099: a prime, transformed by Bluestein's
                                                  * algorithm through a work area */
  for (int i = 0; i < 3; i++) {
    char name[64];
    cufftHandle p;
    snprintf(name, sizeof name, "plan1d_%d", sizes[i]);
    size_t before = free_now();
    if (fft(name, cufftPlan1d(&p, sizes[i], CUFFT_C2C, 8))) {
      size_t ws = 0;
      snprintf(name, sizeof name, "plan1d_%d_size", sizes[i]);
      fft(name, cufftGetSize(p, &ws));
      printf("plan1d_%d_work_area=%zu\n", sizes[i], ws);
      snprintf(name, sizeof name, "plan1d_%d_work_area_taken", sizes[i]);
      real_check(name, before - free_now() >= ws && (sizes[i] != 4099 || ws > 0),
                 "cudaMemGetInfo fell by the work area (the prime's is not empty)");
      snprintf(name, sizeof name, "plan1d_%d", sizes[i]);
      exec_both(name, p, CUFFT_C2C, data, 0);
      snprintf(name, sizeof name, "plan1d_%d_destroy", sizes[i]);
      fft(name, cufftDestroy(p));
    }
  }
  cufftHandle p;
  if (fft("plan2d_r2c", cufftPlan2d(&p, 256, 256, CUFFT_R2C))) {
    exec_both("plan2d_r2c", p, CUFFT_R2C, data, 0);
    fft("plan2d_r2c_destroy", cufftDestroy(p));
  }
  if (fft("plan3d_z2z", cufftPlan3d(&p, 64, 64, 64, CUFFT_Z2Z))) {
    exec_both("plan3d_z2z", p, CUFFT_Z2Z, data, 0);
    fft("plan3d_z2z_destroy", cufftDestroy(p));
  }

  /* The program's own work area, on a stream: cuFFT takes no device memory for the plan. */
  cudaStream_t s;
  OK("stream", cudaStreamCreate(&s));
  int n[1] = {4099};
  size_t ws = 0;
  fft("create", cufftCreate(&p));
  fft("auto_allocation_off", cufftSetAutoAllocation(p, 0));
  size_t before = free_now();
  fft("make_plan_many",
      cufftMakePlanMany(p, 1, n, NULL, 1, n[0], NULL, 1, n[0], CUFFT_C2C, 16, &ws));
  printf("plan_many_work_area=%zu\n", ws);
  CHECK("plan_many_needs_a_work_area", ws > 0);
  CHECK("plan_many_takes_no_work_area", before - free_now() < ws);
  void *work = NULL;
  OK("malloc_work_area", real_malloc(&work, ws));
  fft("set_work_area", cufftSetWorkArea(p, work));
  fft("set_stream", cufftSetStream(p, s));
  exec_both("plan_many", p, CUFFT_C2C, data, s);
  fft("plan_many_destroy", cufftDestroy(p));
  OK("free_work_area", cudaFree(work));
  OK("stream_destroy", cudaStreamDestroy(s));

  /* Full: a plan that needs a work area cannot get it; after making room it can. */
  static void *ballast[8192];
  int nb = real_ballast(ballast, 8192);
  cufftResult r = cufftPlan1d(&p, 4099, CUFFT_C2C, 8);
  printf("plan_when_full=%s\n", fft_status(r));
  CHECK("plan_when_full_refused", r != CUFFT_SUCCESS);
  if (r == CUFFT_SUCCESS) {
    cufftDestroy(p);
  }
  cudaGetLastError();
  real_ballast_free(ballast, nb);
  if (fft("plan_after_room", cufftPlan1d(&p, 4099, CUFFT_C2C, 8))) {
    exec_both("plan_after_room", p, CUFFT_C2C, data, 0);
    fft("plan_after_room_destroy", cufftDestroy(p));
  }
  OK("free_data", cudaFree(data));
  real_over_cap("over", total);
  return real_end();
}
