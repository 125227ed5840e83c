/* A single-rank NCCL communicator on device 0, for tests/integ/nccl.sh: prints each step's
 * result ("version V", "uniqueid R", "setdevice R", "init R NAME", "destroy R"). Built there
 * against the toolkit's libnccl and libcudart, which it needs to run. */
#include <stdio.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

int main(void) {
  int v = 0;
  ncclGetVersion(&v);
  printf("version %d\n", v);
  ncclUniqueId id;
  printf("uniqueid %d\n", (int)ncclGetUniqueId(&id));
  printf("setdevice %d\n", (int)cudaSetDevice(0));
  ncclComm_t comm;
  ncclResult_t r = ncclCommInitRank(&comm, 1, id, 0);
  printf("init %d %s\n", (int)r, ncclGetErrorString(r));
  if (r == ncclSuccess) {
    printf("destroy %d\n", (int)ncclCommDestroy(comm));
  }
  return 0;
}
