/* jobtask: what a task of a Slurm job does in tests/cluster/slurm.sh, over the fake driver:
 * says what cuMemGetInfo shows it, allocates blocks until one is refused, and optionally holds
 * them until told to end, so that several tasks (or jobs) hold memory at once.
 *
 * usage: jobtask BLOCK_BYTES MAX_BLOCKS [READY_FILE GO_FILE]
 * Prints "total=T free=F" (cuMemGetInfo_v2 on device 0 before allocating) and "allocs=N".
 * With READY_FILE, then appends "allocs=N" to it and waits (at most ten minutes) until GO_FILE
 * exists, holding every block. Exits 0, or 1 when CUDA cannot be set up.
 */
#include "shim/base/cudadefs.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc != 3 && argc != 5) {
    fprintf(stderr, "usage: jobtask BLOCK_BYTES MAX_BLOCKS [READY_FILE GO_FILE]\n");
    return 2;
  }
  size_t block = strtoull(argv[1], NULL, 0);
  int max = atoi(argv[2]), n = 0;
  CUdevice dev;
  CUcontext ctx;
  size_t f = 0, t = 0;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
      cuCtxSetCurrent(ctx) || cuMemGetInfo_v2(&f, &t)) {
    printf("setup_failed=1\n");
    return 1;
  }
  printf("total=%zu free=%zu\n", t, f);
  for (CUdeviceptr p; n < max && cuMemAlloc_v2(&p, block) == CUDA_SUCCESS; n++) {
  }
  printf("allocs=%d\n", n);
  fflush(stdout);
  if (argc == 5) {
    char line[64];
    int len = snprintf(line, sizeof line, "allocs=%d\n", n);
    int fd = open(argv[3], O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd < 0 || write(fd, line, (size_t)len) != len) {
      return 1;
    }
    close(fd);
    struct timespec tick = {0, 50 * 1000 * 1000};
    for (int i = 0; i < 12000 && access(argv[4], F_OK) != 0; i++) {
      nanosleep(&tick, NULL);
    }
  }
  return 0;
}
