/* early: linked with libearly.so, whose constructor allocated before main (and before a
 * preloaded gpucap's constructors). Run with GPUCAP_MEMORY_LIMIT=64MiB. Prints TAP. */
#include "shim/base/cudadefs.h"
#include "tests/tap.h"

CUresult early_big(void);
CUresult early_small(void);

int main(void) {
  TAP_EQ(early_big(), CUDA_ERROR_OUT_OF_MEMORY,
         "a 100 MiB allocation from another library's constructor is already capped");
  TAP_EQ(early_small(), CUDA_SUCCESS, "a 1 MiB one is served and freed");
  return tap_done();
}
