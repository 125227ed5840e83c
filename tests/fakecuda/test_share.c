/* TAP test of the fake driver's POSIX file-descriptor shareable handles: cuMemCreate with
 * requestedHandleTypes, cuMemExportToShareableHandle to a descriptor, a second process (forked
 * before either side initialised the driver: a fresh process) receiving it over a unix socket
 * (SCM_RIGHTS) and another opening it through /proc/PID/fd, cuMemImportFromShareableHandle,
 * mapping, and the bytes crossing both ways (FAKECUDA_BACKING=1); the imported memory is not
 * the importer's device memory; the handle types an H100 without fabric refuses, and the error
 * codes of bad exports and imports.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/fakecuda/testlib.h"
#include "tests/fdpass.h"
#include "tests/tap.h"

#define SIZE (4 * MiB)

static CUmemAllocationProp props(unsigned types) {
  CUmemAllocationProp p = {0};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  p.requestedHandleTypes = (CUmemAllocationHandleType)types;
  return p;
}

/* Reserves, maps and grants read/write to the handle; returns the address or 0. */
static CUdeviceptr map(CUmemGenericAllocationHandle h) {
  CUdeviceptr va = 0;
  CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                         .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  if (cuMemAddressReserve(&va, SIZE, 0, 0, 0) != CUDA_SUCCESS ||
      cuMemMap(va, SIZE, 0, h, 0) != CUDA_SUCCESS || cuMemSetAccess(va, SIZE, &acc, 1)) {
    return 0;
  }
  return va;
}

static void unmap(CUdeviceptr va) {
  cuMemUnmap(va, SIZE);
  cuMemAddressFree(va, SIZE);
}

/* The importing process: receives a descriptor (or opens /proc/PID/fd/N), imports it, checks
 * the exporter's bytes and writes its own. Its own TAP lines go to stdout, prefixed by the
 * parent's ordering (the parent waits for it). Exits with the number of failures. */
static int importer(int sock, int how) {
  int bad = 0;
  CUcontext c;
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS ||
      cuCtxSetCurrent(c) != CUDA_SUCCESS) {
    return 100;
  }
  int fd = fdpass_recv(sock);
  if (how == 1) { /* /proc/PID/fd/N of the exporter, as pidfd_getfd-less peers do */
    char path[64];
    pid_t peer = 0;
    if (read(sock, &peer, sizeof peer) != (ssize_t)sizeof peer) {
      return 101;
    }
    int n = -1;
    if (read(sock, &n, sizeof n) != (ssize_t)sizeof n) {
      return 102;
    }
    close(fd);
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)peer, n);
    fd = open(path, O_RDWR | O_CLOEXEC);
  }
  CUmemGenericAllocationHandle h = 0;
  bad += cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS;
  close(fd); /* the import keeps the allocation; the descriptor is the program's */
  CUmemAllocationProp got = {0};
  bad += cuMemGetAllocationPropertiesFromHandle(&got, h) != CUDA_SUCCESS;
  bad +=
      got.location.id != 0 || got.requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUdeviceptr va = map(h);
  bad += va == 0;
  bad += used() != 0; /* imported memory is the exporter's */
  unsigned char buf[64];
  if (va != 0) {
    bad += cuMemcpyDtoH_v2(buf, va + 1000, sizeof buf) != CUDA_SUCCESS;
    for (size_t i = 0; i < sizeof buf; i++) {
      bad += buf[i] != 0x5a;
    }
    bad += cuMemsetD8_v2(va + 2 * MiB, 0xc3, 4096) != CUDA_SUCCESS;
    bad += cuCtxSynchronize() != CUDA_SUCCESS;
    CUmemGenericAllocationHandle again = 0;
    bad += cuMemRetainAllocationHandle(&again, (void *)va) != CUDA_SUCCESS || again != h;
    bad += cuMemRelease(again) != CUDA_SUCCESS;
  }
  bad += cuMemRelease(h) != CUDA_SUCCESS;
  if (va != 0) {
    unmap(va);
  }
  char done = 'd';
  bad += write(sock, &done, 1) != 1;
  return bad;
}

struct peer {
  pid_t pid;
  int sock;
};

/* Forks an importer (before this process initialises the driver: the child is a fresh
 * process for the fake, as after an exec). */
static struct peer spawn(int how) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
    return (struct peer){-1, -1};
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    _exit(importer(sv[1], how));
  }
  close(sv[1]);
  return (struct peer){pid, sv[0]};
}

/* One exchange with an importer: how 0 sends the descriptor over the socket, 1 lets the child
 * open /proc/PID/fd/N. */
static void exchange(struct peer peer, int how, const char *what) {
  if (peer.pid < 0) {
    tap_ok(0, "%s: the importer started", what);
    return;
  }
  int sv[2] = {peer.sock, -1};
  CUmemAllocationProp prop = props(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CUmemGenericAllocationHandle h = 0;
  CK(cuMemCreate(&h, SIZE, &prop, 0));
  CUdeviceptr va = map(h);
  tap_ok(va != 0, "%s: the exporter maps its allocation", what);
  CK(cuMemsetD8_v2(va, 0x5a, SIZE));
  CK(cuCtxSynchronize());
  int fd = -1;
  CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  tap_ok(fd >= 0, "%s: exported to descriptor %d", what, fd);
  tap_ok(fdpass_send(sv[0], fd) == 0, "%s: sent", what);
  if (how == 1) {
    pid_t me = getpid();
    tap_ok(write(sv[0], &me, sizeof me) == (ssize_t)sizeof me &&
               write(sv[0], &fd, sizeof fd) == (ssize_t)sizeof fd,
           "%s: its number sent", what);
  }
  char done = 0;
  tap_ok(read(sv[0], &done, 1) == 1 && done == 'd', "%s: the importer finished", what);
  int st = 0;
  waitpid(peer.pid, &st, 0);
  tap_ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
         "%s: the importer imported, mapped and read the exporter's bytes, writing its own, "
         "and none of it counted as its memory (%d failures)",
         what, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  unsigned char b = 0;
  CK(cuMemcpyDtoH_v2(&b, va + 2 * MiB + 17, 1));
  TAP_EQ(b, 0xc3, "%s: the exporter reads what the importer wrote", what);
  close(fd);
  close(sv[0]);
  unmap(va);
  CK(cuMemRelease(h));
  TAP_EQ(used(), 0, "%s: the exporter's memory is freed", what);
}

static void types_and_errors(void) {
  CUmemGenericAllocationHandle h = 0, h2 = 0, plain = 0;
  CUmemAllocationProp p = props(CU_MEM_HANDLE_TYPE_FABRIC);
  TAP_EQ(cuMemCreate(&h, SIZE, &p, 0), CUDA_ERROR_NOT_SUPPORTED, "fabric handles: NOT_SUPPORTED");
  p = props(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_FABRIC);
  TAP_EQ(cuMemCreate(&h, SIZE, &p, 0), CUDA_ERROR_NOT_SUPPORTED, "... with a descriptor too");
  p = props(CU_MEM_HANDLE_TYPE_WIN32);
  TAP_EQ(cuMemCreate(&h, SIZE, &p, 0), CUDA_ERROR_NOT_SUPPORTED, "Win32 handles: NOT_SUPPORTED");
  p = props(0x10);
  TAP_EQ(cuMemCreate(&h, SIZE, &p, 0), CUDA_ERROR_INVALID_VALUE, "an unknown type: INVALID_VALUE");
  TAP_EQ(used(), 0, "no memory taken by the refusals");
  int v = -1;
  CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0));
  TAP_EQ(v, 1, "descriptors supported");
  CK(cuDeviceGetAttribute(&v, (CUdevice_attribute)128, 0)); /* HANDLE_TYPE_FABRIC_SUPPORTED */
  TAP_EQ(v, 0, "fabric not supported");

  p = props(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  CK(cuMemCreate(&h, SIZE, &p, 0));
  TAP_EQ(used(), SIZE, "a shareable allocation is device memory");
  CUmemAllocationProp none = props(0);
  CK(cuMemCreate(&plain, SIZE, &none, 0));
  int fd = -1, fd2 = -1;
  TAP_EQ(cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
         CUDA_ERROR_INVALID_VALUE, "exporting an allocation made without the type");
  TAP_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0),
         CUDA_ERROR_INVALID_VALUE, "... or to another type");
  TAP_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1),
         CUDA_ERROR_INVALID_VALUE, "flags 1");
  TAP_EQ(cuMemExportToShareableHandle(NULL, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
         CUDA_ERROR_INVALID_VALUE, "NULL output");
  TAP_EQ(cuMemExportToShareableHandle(&fd, 12345, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
         CUDA_ERROR_INVALID_VALUE, "an unknown handle");
  TAP_EQ(fd, -1, "... nothing written");
  CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  CK(cuMemExportToShareableHandle(&fd2, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  tap_ok(fd >= 0 && fd2 >= 0 && fd != fd2, "each export is a new descriptor");
  CK(cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)fd,
                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  TAP_EQ(h2, h, "importing in the exporting process: its own handle");
  TAP_EQ(used(), 2 * SIZE, "... no more memory");
  CK(cuMemRelease(h2));
  TAP_EQ(cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_FABRIC),
         CUDA_ERROR_NOT_SUPPORTED, "importing a fabric handle: NOT_SUPPORTED");
  FILE *junk = tmpfile();
  fputs("not a shareable handle, though a file as long as one's description\n", junk);
  fflush(junk);
  TAP_EQ(cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)fileno(junk),
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
         CUDA_ERROR_INVALID_VALUE, "importing a descriptor the driver did not make");
  fclose(junk);
  TAP_EQ(cuMemImportFromShareableHandle(&h2, (void *)(intptr_t)-1,
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
         CUDA_ERROR_INVALID_VALUE, "... or no descriptor");
  TAP_EQ(cuMemImportFromShareableHandle(NULL, (void *)(intptr_t)fd,
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
         CUDA_ERROR_INVALID_VALUE, "NULL output");
  CUdeviceptr va = map(h);
  unsigned long long types = 0;
  CK(cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, va));
  TAP_EQ(types, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, "the mapping's allowed handle types");
  unmap(va);
  CK(cuMemRelease(h));
  CK(cuMemRelease(plain));
  TAP_EQ(used(), 0, "released: freed (the open descriptors do not keep this process's count)");
  close(fd);
  close(fd2);
}

int main(void) {
  setenv("FAKECUDA_DRIVER_MEMORY", "off", 1); /* exact figures: test_driver.c has the driver's */
  setenv("FAKECUDA_BACKING", "1", 1);
  setenv("FAKECUDA_MEMORY", "256MiB", 1);
  struct peer by_socket = spawn(0), by_proc = spawn(1);
  CUcontext c;
  CK(cuInit(0));
  CK(cuDevicePrimaryCtxRetain(&c, 0));
  CK(cuCtxSetCurrent(c));
  exchange(by_socket, 0, "over a unix socket");
  exchange(by_proc, 1, "through /proc/PID/fd");
  types_and_errors();
  CK(cuDevicePrimaryCtxRelease(0));
  return tap_done();
}
