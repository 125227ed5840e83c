/* sharepeer: one side of a VMM memory exchange through a POSIX file-descriptor shareable handle
 * between two real processes, linked with -lcuda (the fake driver, FAKECUDA_BACKING=1 so bytes
 * really cross), run by tests/integ/share.sh with or without gpucap preloaded. The exporter
 * listens on the unix socket DIR/sock; the importer connects and receives the descriptor
 * (SCM_RIGHTS). SHAREPEER_CAP: the cap in bytes the side runs under, 0 for none; each side
 * checks what that cap allows.
 *
 *   sharepeer export DIR   creates a 32 MiB shareable allocation, maps it and fills it; 48 MiB
 *                          more fit only without a cap of 64 MiB; exports the allocation, sends
 *                          the descriptor, waits for the importer; checks the bytes it wrote;
 *                          unmaps and releases.
 *   sharepeer import DIR   imports the descriptor, maps it, reads the exporter's bytes and
 *                          writes its own; the imported memory is not its own (its free memory
 *                          is unchanged, 64 MiB of its own still fit under a cap of 64 MiB and
 *                          not 32 MiB more); releases.
 * Prints TAP.
 */
#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/fdpass.h"
#include "tests/tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define SIZE (32 * MiB)

static size_t cap;

static CUmemAllocationProp prop(unsigned types) {
  CUmemAllocationProp p;
  memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  p.requestedHandleTypes = (CUmemAllocationHandleType)types;
  return p;
}

static size_t free_now(void) {
  size_t f = 0, t = 0;
  cuMemGetInfo_v2(&f, &t);
  return f;
}

/* Reserves size bytes of addresses, maps h there and grants device 0 read/write; 0 on failure. */
static CUdeviceptr map(CUmemGenericAllocationHandle h, size_t size) {
  CUdeviceptr va = 0;
  CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (cuMemAddressReserve(&va, size, 0, 0, 0) != CUDA_SUCCESS) {
    return 0;
  }
  if (cuMemMap(va, size, 0, h, 0) != CUDA_SUCCESS ||
      cuMemSetAccess(va, size, &acc, 1) != CUDA_SUCCESS) {
    cuMemUnmap(va, size);
    cuMemAddressFree(va, size);
    return 0;
  }
  return va;
}

static CUresult unmap(CUdeviceptr va, size_t size) {
  CUresult rc = cuMemUnmap(va, size);
  return rc != CUDA_SUCCESS ? rc : cuMemAddressFree(va, size);
}

/* Whether n bytes at va all read `byte`. */
static int holds(CUdeviceptr va, size_t n, unsigned char byte) {
  static unsigned char buf[1 << 16];
  if (n > sizeof buf || cuMemcpyDtoH_v2(buf, va, n) != CUDA_SUCCESS) {
    return 0;
  }
  for (size_t i = 0; i < n; i++) {
    if (buf[i] != byte) {
      return 0;
    }
  }
  return 1;
}

static struct sockaddr_un address(const char *dir) {
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  snprintf(a.sun_path, sizeof a.sun_path, "%s/sock", dir);
  return a;
}

static void exporter(const char *dir) {
  CUmemAllocationProp p = prop(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CUmemGenericAllocationHandle h = 0, more = 0;
  TAP_EQ(cuMemCreate(&h, SIZE, &p, 0), CUDA_SUCCESS, "create 32 MiB with a descriptor handle");
  CUdeviceptr va = map(h, SIZE);
  tap_ok(va != 0, "map it");
  TAP_EQ(cuMemsetD8_v2(va, 0x5a, SIZE) || cuCtxSynchronize(), CUDA_SUCCESS, "fill it");
  CUresult rc = cuMemCreate(&more, 48 * MiB, &p, 0);
  TAP_EQ(rc, cap != 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS, "48 MiB more %s",
         cap != 0 ? "pass the cap" : "fit on the device");
  if (rc == CUDA_SUCCESS) {
    cuMemRelease(more);
  }
  int fd = -1;
  TAP_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
         CUDA_SUCCESS, "export it to a descriptor");
  int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = address(dir);
  tap_ok(ls >= 0 && bind(ls, (struct sockaddr *)&a, sizeof a) == 0 && listen(ls, 1) == 0,
         "listen on %s", a.sun_path);
  int s = accept(ls, NULL, NULL);
  tap_ok(s >= 0 && fdpass_send(s, fd) == 0, "send the descriptor to the importer");
  close(fd); /* the importer has its own */
  char done = 0;
  tap_ok(read(s, &done, 1) == 1 && done == 'd', "the importer is done");
  tap_ok(holds(va + SIZE / 2, 4096, 0xc3), "the allocation holds what the importer wrote");
  tap_ok(holds(va, 4096, 0x5a), "... and what it did not write is unchanged");
  TAP_EQ(unmap(va, SIZE) || cuMemRelease(h), CUDA_SUCCESS, "unmap and release");
  close(s);
  close(ls);
}

static void importer(const char *dir) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a = address(dir);
  int connected = 0;
  for (int i = 0; i < 3000 && !connected; i++) { /* at most 30 s for the exporter to listen */
    connected = connect(s, (struct sockaddr *)&a, sizeof a) == 0;
    if (!connected) {
      nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
  }
  tap_ok(connected, "connect to the exporter");
  int fd = connected ? fdpass_recv(s) : -1;
  tap_ok(fd >= 0, "receive the descriptor");
  size_t before = free_now();
  CUmemGenericAllocationHandle h = 0;
  TAP_EQ(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
         CUDA_SUCCESS, "import it");
  close(fd);
  CUmemAllocationProp got;
  memset(&got, 0, sizeof got);
  TAP_EQ(cuMemGetAllocationPropertiesFromHandle(&got, h), CUDA_SUCCESS, "its properties");
  tap_ok(got.location.type == CU_MEM_LOCATION_TYPE_DEVICE && got.location.id == 0 &&
             got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
         "... device 0, shareable by descriptor");
  CUdeviceptr va = map(h, SIZE);
  tap_ok(va != 0, "map it");
  tap_ok(holds(va + 4096, 4096, 0x5a), "it holds the exporter's bytes");
  TAP_EQ(cuMemsetD8_v2(va + SIZE / 2, 0xc3, 4096) || cuCtxSynchronize(), CUDA_SUCCESS,
         "write its own");
  TAP_EQ(free_now(), before, "the imported memory is not this process's: free memory unchanged");
  /* Its own memory: a cap of 64 MiB holds 48 MiB of its own beside the import, not 32 more. */
  CUmemAllocationProp own = prop(0);
  CUmemGenericAllocationHandle mine = 0, more = 0;
  TAP_EQ(cuMemCreate(&mine, 48 * MiB, &own, 0), CUDA_SUCCESS, "48 MiB of its own");
  CUresult rc = cuMemCreate(&more, 32 * MiB, &own, 0);
  TAP_EQ(rc, cap != 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS, "32 MiB more %s",
         cap != 0 ? "pass the cap" : "fit on the device");
  if (rc == CUDA_SUCCESS) {
    cuMemRelease(more);
  }
  TAP_EQ(cuMemRelease(mine), CUDA_SUCCESS, "release its own");
  TAP_EQ(unmap(va, SIZE) || cuMemRelease(h), CUDA_SUCCESS, "unmap and release the import");
  tap_ok(write(s, "d", 1) == 1, "tell the exporter");
  close(s);
}

int main(int argc, char **argv) {
  CUdevice dev;
  CUcontext ctx;
  if (argc != 3 || (strcmp(argv[1], "export") != 0 && strcmp(argv[1], "import") != 0)) {
    fprintf(stderr, "usage: sharepeer export|import DIR\n");
    return 2;
  }
  const char *c = getenv("SHAREPEER_CAP");
  cap = c != NULL ? (size_t)strtoull(c, NULL, 10) : 0;
  TAP_EQ(cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
             cuCtxSetCurrent(ctx),
         CUDA_SUCCESS, "set up the primary context");
  if (strcmp(argv[1], "export") == 0) {
    exporter(argv[2]);
  } else {
    importer(argv[2]);
  }
  return tap_done();
}
