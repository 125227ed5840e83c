/* ipcpeer: one side of a legacy CUDA IPC exchange between two real processes, linked with
 * -lcuda (the fake driver, FAKECUDA_BACKING=1 so bytes really cross), run by tests/integ/ipc.sh
 * and tests/fakecuda/test_ipc.sh with or without gpucap preloaded. The two sides meet in DIR
 * through files (each waits at most 30 s for the other):
 *
 *   ipcpeer export DIR   allocates a spacer and a SIZE-byte block B, fills B, exports B and an
 *                        interior address of B (the same handle), writes DIR/handle, DIR/pid,
 *                        creates DIR/exported; after DIR/imported checks that B holds what the
 *                        importer wrote (IPCPEER_EXPECT_WRITE=1) or its own bytes; frees B,
 *                        creates DIR/freed, waits for DIR/done.
 *   ipcpeer import DIR   opens DIR/handle: the address range and the range attributes are B's,
 *                        the bytes are the exporter's; writes its own, opens again (same
 *                        address), closes both, creates DIR/imported; after DIR/freed an open
 *                        fails (IPCPEER_STALE_FAILS=1, else skipped); creates DIR/done.
 *   ipcpeer refuse DIR   an importer that cannot use the handle (no gpucap for a gpucap handle):
 *                        the open fails, it is never handed an address; creates DIR/imported,
 *                        then DIR/done once DIR/freed exists.
 * Prints TAP.
 */
#include "shim/cudadefs.h"
#include "tests/tap.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SIZE 3000
#define SPACER 1000

static const char *dir;

static void path(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "%s/%s", dir, name);
}

static void signal_peer(const char *name) {
  char p[512];
  path(p, sizeof p, name);
  int fd = open(p, O_WRONLY | O_CREAT, 0600);
  if (fd >= 0) {
    close(fd);
  }
}

static int wait_for(const char *name) {
  char p[512];
  path(p, sizeof p, name);
  for (int i = 0; i < 3000; i++) {
    if (access(p, F_OK) == 0) {
      return 1;
    }
    nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
  }
  tap_ok(0, "the other side created %s within 30 s", name);
  return 0;
}

static int write_file(const char *name, const void *data, size_t len) {
  char p[512];
  path(p, sizeof p, name);
  FILE *f = fopen(p, "wb");
  int ok = f && fwrite(data, 1, len, f) == len;
  return (f && fclose(f) == 0) && ok;
}

static int read_file(const char *name, void *data, size_t len) {
  char p[512];
  path(p, sizeof p, name);
  FILE *f = fopen(p, "rb");
  int ok = f && fread(data, 1, len, f) == len;
  if (f) {
    fclose(f);
  }
  return ok;
}

static unsigned char pattern(size_t i, int side) {
  return (unsigned char)((i * 7 + 1) ^ (side ? 0xff : 0));
}

static int holds(CUdeviceptr p, int side) {
  static unsigned char buf[SIZE];
  if (cuMemcpyDtoH_v2(buf, p, SIZE) != CUDA_SUCCESS) {
    return 0;
  }
  for (size_t i = 0; i < SIZE; i++) {
    if (buf[i] != pattern(i, side)) {
      return 0;
    }
  }
  return 1;
}

static void fill(CUdeviceptr p, int side) {
  static unsigned char buf[SIZE];
  for (size_t i = 0; i < SIZE; i++) {
    buf[i] = pattern(i, side);
  }
  TAP_EQ(cuMemcpyHtoD_v2(p, buf, SIZE), CUDA_SUCCESS, "write %d bytes", SIZE);
}

static void exporter(void) {
  CUdeviceptr spacer = 0, b = 0;
  CUipcMemHandle h, hi;
  CUresult rc;
  TAP_EQ(cuMemAlloc_v2(&spacer, SPACER) || cuMemAlloc_v2(&b, SIZE), CUDA_SUCCESS,
         "allocate a spacer and the block to share");
  fill(b, 0);
  TAP_EQ(cuIpcGetMemHandle(&h, b), CUDA_SUCCESS, "export the block");
  TAP_EQ(cuIpcGetMemHandle(&hi, b + 100), CUDA_SUCCESS, "export an address inside it");
  tap_ok(memcmp(&h, &hi, sizeof h) == 0, "... which names the same block");
  TAP_EQ(cuIpcGetMemHandle(&hi, b), CUDA_SUCCESS, "export it again");
  tap_ok(memcmp(&h, &hi, sizeof h) == 0, "... the same handle");
  CUdeviceptr own = 0;
  rc = cuIpcOpenMemHandle_v2(&own, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  TAP_EQ(rc, CUDA_ERROR_INVALID_CONTEXT, "the exporting process cannot open its own handle");
  long pid = (long)getpid();
  tap_ok(write_file("handle", &h, sizeof h) && write_file("pid", &pid, sizeof pid),
         "hand the handle over");
  signal_peer("exported");
  if (wait_for("imported")) {
    const char *want = getenv("IPCPEER_EXPECT_WRITE");
    if (want && strcmp(want, "1") == 0) {
      tap_ok(holds(b, 1), "the block holds what the importer wrote");
    } else {
      tap_ok(holds(b, 0), "the block holds what it held (the importer could not write)");
    }
  }
  TAP_EQ(cuMemFree_v2(b), CUDA_SUCCESS, "free the block");
  signal_peer("freed");
  wait_for("done");
  TAP_EQ(cuMemFree_v2(spacer), CUDA_SUCCESS, "free the spacer");
}

static void importer(void) {
  CUipcMemHandle h;
  CUdeviceptr p = 0, again = 0, base = 0, attr = 0;
  size_t size = 0, attr_size = 0;
  if (!wait_for("exported") || !read_file("handle", &h, sizeof h)) {
    tap_ok(0, "read the handle");
    return;
  }
  TAP_EQ(cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_SUCCESS,
         "open the handle");
  TAP_EQ(cuMemGetAddressRange_v2(&base, &size, p + 10), CUDA_SUCCESS, "its address range");
  TAP_EQ(base, p, "... starts at the opened address");
  TAP_EQ(size, SIZE, "... and is the block's size");
  TAP_EQ(cuPointerGetAttribute(&attr, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 10) ||
             cuPointerGetAttribute(&attr_size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 10),
         CUDA_SUCCESS, "its range attributes");
  tap_ok(attr == p && attr_size == SIZE, "... describe the block (%#llx, %zu)",
         (unsigned long long)attr, attr_size);
  tap_ok(holds(p, 0), "it holds the exporter's bytes");
  fill(p, 1);
  TAP_EQ(cuIpcOpenMemHandle_v2(&again, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_SUCCESS,
         "open it again");
  TAP_EQ(again, p, "... the same address");
  TAP_EQ(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE, "cuMemFree of opened memory is refused");
  TAP_EQ(cuIpcCloseMemHandle(p), CUDA_SUCCESS, "close once");
  TAP_EQ(cuMemGetAddressRange_v2(&base, &size, p), CUDA_SUCCESS, "... still open");
  TAP_EQ(cuIpcCloseMemHandle(p), CUDA_SUCCESS, "close twice");
  TAP_EQ(cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_VALUE, "a third close is refused");
  signal_peer("imported");
  if (wait_for("freed")) {
    const char *want = getenv("IPCPEER_STALE_FAILS");
    if (want && strcmp(want, "1") == 0) {
      CUresult rc = cuIpcOpenMemHandle_v2(&again, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      tap_ok(rc != CUDA_SUCCESS, "after the exporter freed the block an open fails (%d)", rc);
    } else {
      tap_skip("after the exporter freed the block an open fails",
               "the driver does not promise to refuse a stale handle");
    }
  }
  signal_peer("done");
}

static void refuser(void) {
  CUipcMemHandle h;
  CUdeviceptr p = 0;
  if (!wait_for("exported") || !read_file("handle", &h, sizeof h)) {
    tap_ok(0, "read the handle");
  } else {
    CUresult rc = cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    tap_ok(rc != CUDA_SUCCESS, "the open fails (%d)", rc);
    TAP_EQ(p, 0, "... and hands out no address");
  }
  signal_peer("imported");
  wait_for("freed");
  signal_peer("done");
}

/* A block of a VMM-backed pool: VMM memory to the driver, so no legacy IPC handle (the
 * driver's own answer), while the pointer queries still describe the block. */
static void vmm_block(void) {
  CUdeviceptr spacer = 0, b = 0, base = 0;
  size_t size = 0;
  CUipcMemHandle h;
  TAP_EQ(cuMemAlloc_v2(&spacer, SPACER) || cuMemAlloc_v2(&b, SIZE), CUDA_SUCCESS,
         "allocate a spacer and a block");
  TAP_EQ(cuIpcGetMemHandle(&h, b), CUDA_ERROR_INVALID_VALUE,
         "no legacy IPC handle: the driver's answer for VMM memory");
  unsigned int capable = 1, mapped = 0;
  CUdeviceptr start = 0;
  size_t range = 0;
  TAP_EQ(cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, b),
         CUDA_SUCCESS, "pointer attribute IS_LEGACY_CUDA_IPC_CAPABLE");
  TAP_EQ(capable, 0, "... says so");
  TAP_EQ(cuPointerGetAttribute(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, b), CUDA_SUCCESS,
         "pointer attribute MAPPED");
  TAP_EQ(mapped, 1, "... is true");
  TAP_EQ(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, b + 10) ||
             cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, b + 10),
         CUDA_SUCCESS, "pointer attributes RANGE_START_ADDR and RANGE_SIZE");
  tap_ok(start == b && range == SIZE, "... are the block's");
  TAP_EQ(cuMemGetAddressRange_v2(&base, &size, b + 10), CUDA_SUCCESS, "cuMemGetAddressRange");
  tap_ok(base == b && size == SIZE, "... is the block's");
  TAP_EQ(cuMemFree_v2(b) || cuMemFree_v2(spacer), CUDA_SUCCESS, "free both");
}

int main(int argc, char **argv) {
  CUdevice dev;
  CUcontext ctx;
  if (argc != 3) {
    fprintf(stderr, "usage: ipcpeer export|import|refuse|vmm DIR\n");
    return 2;
  }
  dir = argv[2];
  TAP_EQ(cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
             cuCtxSetCurrent(ctx),
         CUDA_SUCCESS, "set up the primary context");
  if (strcmp(argv[1], "export") == 0) {
    exporter();
  } else if (strcmp(argv[1], "import") == 0) {
    importer();
  } else if (strcmp(argv[1], "vmm") == 0) {
    vmm_block();
  } else {
    refuser();
  }
  return tap_done();
}
