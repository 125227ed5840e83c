/* cuRAND: host-API generators (the default pseudo-random one, Philox, and a quasi-random one)
 * filling device memory, and a generator asked for when the device is nearly full: cuRAND
 * answers its own allocation failure and the program goes on once it has made room. The fake
 * runs no device code: statuses and queued work are checked, never the numbers. */
#include <curand.h>

#include "tests/real/real.h"

static const char *rand_name(curandStatus_t st) {
  switch (st) {
  case CURAND_STATUS_SUCCESS:
    return "CURAND_STATUS_SUCCESS";
  case CURAND_STATUS_ALLOCATION_FAILED:
    return "CURAND_STATUS_ALLOCATION_FAILED";
  case CURAND_STATUS_LAUNCH_FAILURE:
    return "CURAND_STATUS_LAUNCH_FAILURE";
  case CURAND_STATUS_INITIALIZATION_FAILED:
    return "CURAND_STATUS_INITIALIZATION_FAILED";
  case CURAND_STATUS_INTERNAL_ERROR:
    return "CURAND_STATUS_INTERNAL_ERROR";
  case CURAND_STATUS_PREEXISTING_FAILURE:
    return "CURAND_STATUS_PREEXISTING_FAILURE";
  default:
    return "other";
  }
}

static void rnd(const char *name, curandStatus_t st, curandStatus_t want) {
  real_status(name, st, want, rand_name(st));
}
#define RAND(name, call) rnd((name), (call), CURAND_STATUS_SUCCESS)

int main(void) {
  size_t total = real_total("start");
  const size_t n = 1 << 20;
  float *x = NULL;
  double *z = NULL;
  unsigned int *u = NULL;
  OK("malloc_x", real_malloc((void **)&x, n * sizeof(float)));
  OK("malloc_z", real_malloc((void **)&z, n * sizeof(double)));
  OK("malloc_u", real_malloc((void **)&u, n * sizeof(unsigned)));
  curandGenerator_t g;
  RAND("create_default", curandCreateGenerator(&g, CURAND_RNG_PSEUDO_DEFAULT));
  RAND("seed", curandSetPseudoRandomGeneratorSeed(g, 1234));
  RAND("uniform", curandGenerateUniform(g, x, n));
  RAND("normal", curandGenerateNormalDouble(g, z, n, 0.0, 1.0));
  RAND("bits", curandGenerate(g, u, n));
  OK("sync_default", cudaDeviceSynchronize());
  RAND("destroy_default", curandDestroyGenerator(g));
  cudaStream_t s;
  OK("stream", cudaStreamCreate(&s));
  RAND("create_philox", curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  RAND("philox_stream", curandSetStream(g, s));
  RAND("philox_uniform", curandGenerateUniform(g, x, n));
  OK("sync_philox", cudaStreamSynchronize(s));
  RAND("destroy_philox", curandDestroyGenerator(g));
  RAND("create_sobol", curandCreateGenerator(&g, CURAND_RNG_QUASI_SOBOL32));
  RAND("sobol_dimensions", curandSetQuasiRandomGeneratorDimensions(g, 4));
  RAND("sobol_uniform", curandGenerateUniform(g, x, n));
  OK("sync_sobol", cudaDeviceSynchronize());
  RAND("destroy_sobol", curandDestroyGenerator(g));
  OK("stream_destroy", cudaStreamDestroy(s));

  /* Full: the generator's state does not fit, and cuRAND says so; the program destroys it,
   * makes room, and a new generator works. cuRAND carries its own copy of the runtime, whose
   * last error still holds the failure: the next call reports it once (PREEXISTING_FAILURE),
   * as on a GPU, and the one after succeeds. */
  static void *ballast[8192];
  int nb = real_ballast(ballast, 8192);
  RAND("create_when_full", curandCreateGenerator(&g, CURAND_RNG_PSEUDO_DEFAULT));
  rnd("generate_when_full", curandGenerateUniform(g, x, n), CURAND_STATUS_ALLOCATION_FAILED);
  RAND("destroy_failed", curandDestroyGenerator(g));
  real_ballast_free(ballast, nb);
  EXPECT("no_error_in_the_program", cudaPeekAtLastError(), cudaSuccess);
  RAND("create_after_room", curandCreateGenerator(&g, CURAND_RNG_PSEUDO_DEFAULT));
  rnd("first_call_reports_the_failure", curandGenerateUniform(g, x, n),
      CURAND_STATUS_PREEXISTING_FAILURE);
  RAND("generate_after_room", curandGenerateUniform(g, x, n));
  OK("sync_after_room", cudaDeviceSynchronize());
  RAND("destroy_after_room", curandDestroyGenerator(g));
  OK("free_x", cudaFree(x));
  OK("free_z", cudaFree(z));
  OK("free_u", cudaFree(u));
  real_over_cap("over", total);
  return real_end();
}
