/* ipcpeer: one side of a legacy CUDA IPC exchange between two real processes, linked with
 * -lcuda (the fake driver, FAKECUDA_BACKING=1 so bytes really cross), run by tests/integ/ipc.sh
 * with or without gpucap preloaded. The two sides meet in DIR through files (each waits at most
 * 30 s for the other). IPCPEER_SIZE sets the shared block's size (default 3000 bytes);
 * IPCPEER_CAP (bytes) adds the checks that the cap is exact on both sides.
 *
 *   ipcpeer export DIR   allocates a spacer and the block B, fills B, exports B and an interior
 *                        address of B (the same handle), writes DIR/handle, DIR/pid, creates
 *                        DIR/exported; after DIR/imported checks that B holds what the importer
 *                        wrote (IPCPEER_EXPECT_WRITE=1) or its own bytes, and with IPCPEER_CAP
 *                        that it can still allocate up to its cap and no more; frees B, creates
 *                        DIR/freed, waits for DIR/done. Sharing takes at most one descriptor
 *                        (the socket it shares through). IPCPEER_FORK=1: it forks a child once
 *                        it exported, which waits for DIR/done.
 *   ipcpeer import DIR   opens DIR/handle: the address range and the range attributes are B's,
 *                        the bytes are the exporter's; writes its own, opens again (same
 *                        address), closes both (the address is gone, no descriptor is left
 *                        open); with IPCPEER_CAP opens it once more and allocates all but 4 MiB
 *                        of its cap (the opened block is not its charge); creates
 *                        DIR/imported; after DIR/freed an open
 *                        fails (IPCPEER_STALE_FAILS=1, else skipped); creates DIR/done.
 *   ipcpeer hold DIR     opens DIR/handle, checks the exporter's bytes, writes its own, creates
 *                        DIR/opened and waits for DIR/go (meanwhile the exporter is killed, or
 *                        this process is); then reads its bytes back through the mapping it
 *                        kept, closes it, and an open fails; creates DIR/done.
 *   ipcpeer refuse DIR   an importer that cannot use the handle (no gpucap for a gpucap handle):
 *                        the open fails, it is never handed an address; creates DIR/imported,
 *                        then DIR/done once DIR/freed exists.
 *   ipcpeer unshareable DIR  a block of a VMM-backed pool whose memory the driver will not
 *                        export (the test injects the failure): no handle (the driver's answer
 *                        for VMM memory), while the pointer queries still describe the block.
 * Every mode but export writes its pid to DIR/ipid (export writes DIR/pid). Prints TAP.
 */
#include "shim/base/cudadefs.h"
#include "tests/tap.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SPACER 1000
#define MiB ((size_t)1 << 20)

static const char *dir;
static size_t size = 3000; /* IPCPEER_SIZE */

static void path(char *buf, size_t len, const char *name) {
  snprintf(buf, len, "%s/%s", dir, name);
}

static void signal_peer(const char *name) {
  char p[512];
  path(p, sizeof p, name);
  int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
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

/* Descriptors this process has open. */
static int open_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
    n += e->d_name[0] != '.';
  }
  if (d) {
    closedir(d);
  }
  return n - 1; /* the directory's own */
}

static unsigned char pattern(size_t i, int side) {
  return (unsigned char)((i * 7 + 1) ^ (side ? 0xff : 0));
}

static int holds(CUdeviceptr p, int side) {
  unsigned char *buf = malloc(size);
  int ok = buf && cuMemcpyDtoH_v2(buf, p, size) == CUDA_SUCCESS;
  for (size_t i = 0; ok && i < size; i++) {
    ok = buf[i] == pattern(i, side);
  }
  free(buf);
  return ok;
}

static void fill(CUdeviceptr p, int side) {
  unsigned char *buf = malloc(size);
  for (size_t i = 0; buf && i < size; i++) {
    buf[i] = pattern(i, side);
  }
  TAP_EQ(buf ? cuMemcpyHtoD_v2(p, buf, size) : CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS,
         "write %zu bytes", size);
  free(buf);
}

static size_t cap(void) {
  const char *c = getenv("IPCPEER_CAP");
  return c ? (size_t)strtoull(c, NULL, 10) : 0;
}

static int env_is(const char *name) {
  const char *v = getenv(name);
  return v && strcmp(v, "1") == 0;
}

/* The exporter, holding `held` bytes, allocates 1 MiB blocks until refused: it gets its cap
 * less what it holds, within a unit or two of rounding, and is refused past it. */
static void fill_to_cap(size_t held) {
  enum { MAXB = 4096 };
  static CUdeviceptr b[MAXB];
  size_t n = 0;
  CUresult rc = CUDA_SUCCESS;
  while (n < MAXB && (rc = cuMemAlloc_v2(&b[n], MiB)) == CUDA_SUCCESS) {
    n++;
  }
  TAP_EQ(rc, CUDA_ERROR_OUT_OF_MEMORY, "the exporter is refused at its cap");
  tap_ok(n * MiB + held + 4 * MiB >= cap() && n * MiB + held <= cap(),
         "... after %zu MiB more besides the %zu bytes it holds (cap %zu)", n, held, cap());
  for (size_t i = 0; i < n; i++) {
    cuMemFree_v2(b[i]);
  }
}

static void exporter(void) {
  CUdeviceptr spacer = 0, b = 0;
  CUipcMemHandle h, hi;
  CUresult rc;
  TAP_EQ(cuMemAlloc_v2(&spacer, SPACER) || cuMemAlloc_v2(&b, size), CUDA_SUCCESS,
         "allocate a spacer and the block to share");
  fill(b, 0);
  int fds = open_fds();
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
  if (env_is("IPCPEER_FORK") && fork() == 0) {
    /* A child that outlives its parent: it must not keep the parent's exports reachable. */
    char p[512];
    path(p, sizeof p, "done");
    for (int i = 0; i < 3000 && access(p, F_OK) != 0; i++) {
      nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    _exit(0);
  }
  signal_peer("exported");
  if (wait_for("imported")) {
    if (env_is("IPCPEER_EXPECT_WRITE")) {
      tap_ok(holds(b, 1), "the block holds what the importer wrote");
    } else {
      tap_ok(holds(b, 0), "the block holds what it held (the importer could not write)");
    }
    int now = open_fds();
    tap_ok(now <= fds + 1, "sharing it took at most one descriptor (%d, then %d)", fds, now);
  }
  if (cap()) {
    fill_to_cap(SPACER + size);
  }
  TAP_EQ(cuMemFree_v2(b), CUDA_SUCCESS, "free the block");
  signal_peer("freed");
  wait_for("done");
  TAP_EQ(cuMemFree_v2(spacer), CUDA_SUCCESS, "free the spacer");
}

static int read_handle(CUipcMemHandle *h) {
  if (!wait_for("exported") || !read_file("handle", h, sizeof *h)) {
    tap_ok(0, "read the handle");
    return 0;
  }
  return 1;
}

static void importer(void) {
  CUipcMemHandle h;
  CUdeviceptr p = 0, again = 0, base = 0, attr = 0;
  size_t got = 0, attr_size = 0;
  int fds = open_fds();
  if (!read_handle(&h)) {
    return;
  }
  TAP_EQ(cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_SUCCESS,
         "open the handle");
  TAP_EQ(cuMemGetAddressRange_v2(&base, &got, p + 10), CUDA_SUCCESS, "its address range");
  TAP_EQ(base, p, "... starts at the opened address");
  TAP_EQ(got, size, "... and is the block's size");
  TAP_EQ(cuPointerGetAttribute(&attr, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 10) ||
             cuPointerGetAttribute(&attr_size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 10),
         CUDA_SUCCESS, "its range attributes");
  tap_ok(attr == p && attr_size == size, "... describe the block (%#llx, %zu)",
         (unsigned long long)attr, attr_size);
  tap_ok(holds(p, 0), "it holds the exporter's bytes");
  fill(p, 1);
  TAP_EQ(cuIpcOpenMemHandle_v2(&again, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_SUCCESS,
         "open it again");
  TAP_EQ(again, p, "... the same address");
  TAP_EQ(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE, "cuMemFree of opened memory is refused");
  TAP_EQ(cuIpcCloseMemHandle(p), CUDA_SUCCESS, "close once");
  TAP_EQ(cuMemGetAddressRange_v2(&base, &got, p), CUDA_SUCCESS, "... still open");
  tap_ok(holds(p, 1), "... and readable");
  TAP_EQ(cuIpcCloseMemHandle(p), CUDA_SUCCESS, "close twice");
  TAP_EQ(cuIpcCloseMemHandle(p), CUDA_ERROR_INVALID_VALUE, "a third close is refused");
  tap_ok(cuMemGetAddressRange_v2(&base, &got, p) != CUDA_SUCCESS, "the address is gone");
  int now = open_fds();
  TAP_EQ(now, fds, "no descriptor left open (%d before the opens)", fds);
  if (cap()) {
    CUdeviceptr mine = 0;
    TAP_EQ(cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_SUCCESS,
           "open it once more");
    TAP_EQ(cuMemAlloc_v2(&mine, cap() - 4 * MiB), CUDA_SUCCESS,
           "all but 4 MiB of the cap is still this process's to allocate");
    TAP_EQ(cuMemFree_v2(mine) || cuIpcCloseMemHandle(p), CUDA_SUCCESS, "... freed, closed");
  }
  signal_peer("imported");
  if (wait_for("freed")) {
    if (env_is("IPCPEER_STALE_FAILS")) {
      CUresult rc = cuIpcOpenMemHandle_v2(&again, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      tap_ok(rc != CUDA_SUCCESS, "after the exporter freed the block an open fails (%d)", rc);
    } else {
      tap_skip("after the exporter freed the block an open fails",
               "the driver does not promise to refuse a stale handle");
    }
  }
  signal_peer("done");
}

static void holder(void) {
  CUipcMemHandle h;
  CUdeviceptr p = 0, again = 0;
  if (!read_handle(&h)) {
    return;
  }
  TAP_EQ(cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_SUCCESS,
         "open the handle");
  tap_ok(holds(p, 0), "it holds the exporter's bytes");
  fill(p, 1);
  TAP_EQ(cuCtxSynchronize(), CUDA_SUCCESS, "written");
  signal_peer("opened");
  if (wait_for("go")) {
    tap_ok(holds(p, 1), "the mapping kept still reads what this process wrote");
    TAP_EQ(cuIpcCloseMemHandle(p), CUDA_SUCCESS, "close it");
    CUresult rc = cuIpcOpenMemHandle_v2(&again, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    tap_ok(rc != CUDA_SUCCESS && again == 0, "the exporter is gone: an open fails (%d)", rc);
  }
  signal_peer("done");
}

static void refuser(void) {
  CUipcMemHandle h;
  CUdeviceptr p = 0;
  if (read_handle(&h)) {
    CUresult rc = cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    tap_ok(rc != CUDA_SUCCESS, "the open fails (%d)", rc);
    TAP_EQ(p, 0, "... and hands out no address");
  }
  signal_peer("imported");
  wait_for("freed");
  signal_peer("done");
}

/* A block of a VMM-backed pool that the driver will not export: no legacy IPC handle (the
 * driver's own answer for VMM memory), while the pointer queries still describe the block. */
static void unshareable(void) {
  CUdeviceptr spacer = 0, b = 0, base = 0;
  size_t got = 0;
  CUipcMemHandle h;
  TAP_EQ(cuMemAlloc_v2(&spacer, SPACER) || cuMemAlloc_v2(&b, size), CUDA_SUCCESS,
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
  tap_ok(start == b && range == size, "... are the block's");
  TAP_EQ(cuMemGetAddressRange_v2(&base, &got, b + 10), CUDA_SUCCESS, "cuMemGetAddressRange");
  tap_ok(base == b && got == size, "... is the block's");
  TAP_EQ(cuMemFree_v2(b) || cuMemFree_v2(spacer), CUDA_SUCCESS, "free both");
}

int main(int argc, char **argv) {
  CUdevice dev;
  CUcontext ctx;
  if (argc != 3) {
    fprintf(stderr, "usage: ipcpeer export|import|hold|refuse|unshareable DIR\n");
    return 2;
  }
  dir = argv[2];
  if (getenv("IPCPEER_SIZE")) {
    size = (size_t)strtoull(getenv("IPCPEER_SIZE"), NULL, 10);
  }
  TAP_EQ(cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
             cuCtxSetCurrent(ctx),
         CUDA_SUCCESS, "set up the primary context");
  long pid = (long)getpid();
  if (strcmp(argv[1], "export") != 0 && strcmp(argv[1], "unshareable") != 0) {
    write_file("ipid", &pid, sizeof pid);
  }
  if (strcmp(argv[1], "export") == 0) {
    exporter();
  } else if (strcmp(argv[1], "import") == 0) {
    importer();
  } else if (strcmp(argv[1], "hold") == 0) {
    holder();
  } else if (strcmp(argv[1], "unshareable") == 0) {
    unshareable();
  } else {
    refuser();
  }
  return tap_done();
}
