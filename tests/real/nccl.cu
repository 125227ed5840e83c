/* NCCL: a single-rank communicator on device 0 as a multi-process program makes one
 * (ncclGetUniqueId, whose bootstrap listens on a socket, then ncclCommInitRank), its rank, size
 * and device;
 * an out-of-place sum all-reduce on a stream of the program's, which for one rank is a
 * device-to-device copy (so with FAKECUDA_BACKING=1 its result is real bytes: the input), and an
 * in-place one that leaves the buffer alone; ncclMemAlloc, NCCL's own VMM allocation (a
 * file-descriptor shareable handle where the device supports one), written and read back, and
 * refused beyond the device; ncclCommDestroy; then a communicator of ncclCommInitAll (the
 * single-process shape), and the runtime's own over-size allocation. */
#include <nccl.h>

#include "tests/real/real.h"

#define NCCLCALL(name, call) nccl((name), (call))
static int nccl(const char *name, ncclResult_t r) {
  return real_status(name, r, ncclSuccess, ncclGetErrorString(r));
}

/* Prints a communicator's rank, size and device and checks it is rank 0 of 1 on device 0. */
static void comm_facts(const char *name, ncclComm_t comm) {
  int count = -1, device = -1, rank = -1;
  char key[64];
  snprintf(key, sizeof key, "%s_count", name);
  NCCLCALL(key, ncclCommCount(comm, &count));
  snprintf(key, sizeof key, "%s_cu_device", name);
  NCCLCALL(key, ncclCommCuDevice(comm, &device));
  snprintf(key, sizeof key, "%s_user_rank", name);
  NCCLCALL(key, ncclCommUserRank(comm, &rank));
  printf("%s=%d ranks, rank %d on device %d\n", name, count, rank, device);
  snprintf(key, sizeof key, "%s_single_rank", name);
  CHECK(key, count == 1 && rank == 0 && device == 0);
}

int main(void) {
  size_t total = real_total("start");
  int version = 0;
  NCCLCALL("version", ncclGetVersion(&version));
  FACT("nccl_version", "%d", version);
  ncclComm_t comm = NULL;
  ncclUniqueId id;
  OK("set_device", cudaSetDevice(0));
  if (!NCCLCALL("unique_id", ncclGetUniqueId(&id)) ||
      !NCCLCALL("init_rank", ncclCommInitRank(&comm, 1, id, 0))) {
    return real_end();
  }
  comm_facts("comm", comm);

  const size_t n = 1 << 18, bytes = n * sizeof(float);
  float *send = NULL, *recv = NULL;
  OK("malloc_send", real_malloc((void **)&send, bytes));
  OK("malloc_recv", real_malloc((void **)&recv, bytes));
  real_put("send", send, bytes, 3);
  OK("memset_recv", cudaMemset(recv, 0, bytes));
  cudaStream_t s;
  OK("stream", cudaStreamCreate(&s));
  NCCLCALL("allreduce", ncclAllReduce(send, recv, n, ncclFloat, ncclSum, comm, s));
  OK("allreduce_sync", cudaStreamSynchronize(s));
  real_get_ok("allreduce_result", recv, bytes, 3); /* one rank: the sum is the input */
  NCCLCALL("allreduce_in_place", ncclAllReduce(recv, recv, n, ncclFloat, ncclSum, comm, s));
  OK("allreduce_in_place_sync", cudaStreamSynchronize(s));
  real_get_ok("allreduce_in_place_result", recv, bytes, 3);

  void *vmm = NULL;
  if (NCCLCALL("mem_alloc", ncclMemAlloc(&vmm, 8 * MiB))) {
    real_put("mem_alloc", vmm, 8 * MiB, 5);
    real_get_ok("mem_alloc", vmm, 8 * MiB, 5);
    NCCLCALL("mem_free", ncclMemFree(vmm));
  }
  void *huge = NULL;
  ncclResult_t r = ncclMemAlloc(&huge, total + 64 * MiB);
  printf("mem_alloc_over_device=%s\n", ncclGetErrorString(r));
  CHECK("mem_alloc_over_device_refused", r != ncclSuccess);
  if (r == ncclSuccess) {
    ncclMemFree(huge);
  }
  cudaGetLastError();

  OK("stream_destroy", cudaStreamDestroy(s));
  OK("free_send", cudaFree(send));
  OK("free_recv", cudaFree(recv));
  NCCLCALL("destroy", ncclCommDestroy(comm));

  int devs[1] = {0};
  if (NCCLCALL("init_all", ncclCommInitAll(&comm, 1, devs))) {
    comm_facts("comm_all", comm);
    NCCLCALL("destroy_all", ncclCommDestroy(comm));
  }
  real_over_cap("over", total);
  return real_end();
}
