/* TAP test of the fake driver's interprocess events: cuIpcGetEventHandle of an event made with
 * CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING (any other: INVALID_VALUE), cuIpcOpenEventHandle
 * in a second process (forked before either side initialised the driver: a fresh process), and
 * the event shared both ways: a record in one process, after a memset on its stream, is seen by
 * the other's query (NOT_READY on the first poll, then SUCCESS), synchronize and stream wait,
 * and the memset's bytes are there for it (legacy IPC memory, FAKECUDA_BACKING=1) although the
 * recording process never synchronised. Error codes of bad handles, the exporter's own handle,
 * and an event the exporter destroyed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/fakecuda/testlib.h"
#include "tests/tap.h"

#define SIZE 4096

struct shared {
  CUipcEventHandle event;
  CUipcMemHandle mem;
};

/* One step of the exchange: writes a byte, or reads one and checks it. */
static int say(int sock, char c) {
  return write(sock, &c, 1) == 1;
}

static int hear(int sock, char want) {
  char c = 0;
  return read(sock, &c, 1) == 1 && c == want;
}

/* Whether [p, p + SIZE) of device memory holds byte v everywhere. */
static int holds(CUdeviceptr p, unsigned char v) {
  static unsigned char buf[SIZE];
  if (cuMemcpyDtoH_v2(buf, p, SIZE) != CUDA_SUCCESS) {
    return 0;
  }
  for (size_t i = 0; i < SIZE; i++) {
    if (buf[i] != v) {
      return 0;
    }
  }
  return 1;
}

/* The second process: exits with its number of failed checks (each named on stderr). */
static int importer(int sock) {
  int bad = 0;
#define EXPECT(cond)                                                                               \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "importer: failed: %s\n", #cond);                                            \
      bad++;                                                                                       \
    }                                                                                              \
  } while (0)
  struct shared sh;
  CUcontext c;
  CUevent ev = NULL;
  CUstream s = NULL;
  CUdeviceptr mem = 0;
  EXPECT(read(sock, &sh, sizeof sh) == (ssize_t)sizeof sh);
  EXPECT(cuInit(0) == CUDA_SUCCESS);
  EXPECT(cuIpcOpenEventHandle(&ev, sh.event) == CUDA_ERROR_INVALID_CONTEXT); /* no context */
  EXPECT(cuDevicePrimaryCtxRetain(&c, 0) == CUDA_SUCCESS && cuCtxSetCurrent(c) == CUDA_SUCCESS);
  EXPECT(cuIpcOpenEventHandle(NULL, sh.event) == CUDA_ERROR_INVALID_VALUE);
  EXPECT(cuIpcOpenEventHandle(&ev, sh.event) == CUDA_SUCCESS);
  EXPECT(cuIpcOpenMemHandle_v2(&mem, sh.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS);
  EXPECT(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  EXPECT(cuEventQuery(ev) == CUDA_SUCCESS); /* never recorded: complete */
  float ms = 0;
  EXPECT(cuEventElapsedTime(&ms, ev, ev) == CUDA_ERROR_INVALID_HANDLE); /* no timing */
  EXPECT(say(sock, 'o'));                                               /* opened */

  /* The exporter queued a memset of 0x5a and recorded the event after it. */
  EXPECT(hear(sock, 'r'));
  EXPECT(cuEventQuery(ev) == CUDA_ERROR_NOT_READY);
  EXPECT(cuEventQuery(ev) == CUDA_SUCCESS);
  EXPECT(cuEventSynchronize(ev) == CUDA_SUCCESS);
  EXPECT(cuStreamWaitEvent(s, ev, 0) == CUDA_SUCCESS);
  EXPECT(holds(mem, 0x5a)); /* the exporter never synchronised */

  /* Now this side records: a memset of 0xc3 on its own stream, then the event. */
  EXPECT(cuMemsetD8Async(mem, 0xc3, SIZE, s) == CUDA_SUCCESS);
  EXPECT(cuEventRecord(ev, s) == CUDA_SUCCESS);
  EXPECT(say(sock, 'R'));
  EXPECT(hear(sock, 'S')); /* the exporter saw it */
  EXPECT(cuEventDestroy_v2(ev) == CUDA_SUCCESS);
  EXPECT(say(sock, 'd'));

  /* The exporter destroyed its event: the handle opens no more. */
  EXPECT(hear(sock, 'x'));
  CUevent stale = NULL;
  EXPECT(cuIpcOpenEventHandle(&stale, sh.event) == CUDA_ERROR_INVALID_VALUE && stale == NULL);
  EXPECT(cuIpcCloseMemHandle(mem) == CUDA_SUCCESS);
  EXPECT(cuStreamDestroy_v2(s) == CUDA_SUCCESS);
  EXPECT(say(sock, 'e'));
#undef EXPECT
  return bad;
}

static void errors(void) {
  CUevent plain = NULL, notiming = NULL, ipc = NULL;
  CUipcEventHandle h;
  CK(cuEventCreate(&plain, 0));
  CK(cuEventCreate(&notiming, CU_EVENT_DISABLE_TIMING));
  TAP_EQ(cuIpcGetEventHandle(&h, plain), CUDA_ERROR_INVALID_VALUE,
         "an event made without CU_EVENT_INTERPROCESS has no handle");
  TAP_EQ(cuIpcGetEventHandle(&h, notiming), CUDA_ERROR_INVALID_VALUE,
         "... nor one made with CU_EVENT_DISABLE_TIMING alone");
  TAP_EQ(cuEventCreate(&ipc, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE,
         "CU_EVENT_INTERPROCESS needs CU_EVENT_DISABLE_TIMING");
  CK(cuEventCreate(&ipc, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
  TAP_EQ(cuIpcGetEventHandle(NULL, ipc), CUDA_ERROR_INVALID_VALUE, "NULL output");
  CK(cuIpcGetEventHandle(&h, ipc));
  CUipcEventHandle again;
  CK(cuIpcGetEventHandle(&again, ipc));
  tap_ok(memcmp(&h, &again, sizeof h) == 0, "the same event gives the same handle");
  CUevent opened = NULL;
  TAP_EQ(cuIpcOpenEventHandle(&opened, h), CUDA_ERROR_INVALID_CONTEXT,
         "the exporting process cannot open its own handle");
  CUipcEventHandle junk;
  memset(&junk, 0x17, sizeof junk);
  TAP_EQ(cuIpcOpenEventHandle(&opened, junk), CUDA_ERROR_INVALID_VALUE,
         "bytes the driver did not make");
  int v = 0;
  CK(cuDeviceGetAttribute(&v, (CUdevice_attribute)125, 0)); /* IPC_EVENT_SUPPORTED */
  TAP_EQ(v, 1, "CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED");
  CK(cuEventDestroy_v2(ipc));
  TAP_EQ(cuIpcGetEventHandle(&h, ipc), CUDA_ERROR_INVALID_HANDLE, "a destroyed event");
  CK(cuEventDestroy_v2(plain));
  CK(cuEventDestroy_v2(notiming));
}

int main(void) {
  setenv("FAKECUDA_BACKING", "1", 1);
  setenv("FAKECUDA_MEMORY", "256MiB", 1);
  setenv("FAKECUDA_DRIVER_MEMORY", "off", 1); /* exact figures: test_driver.c has the driver's */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
    tap_ok(0, "socketpair");
    return tap_done();
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    _exit(importer(sv[1]));
  }
  close(sv[1]);
  int sock = sv[0];
  CUcontext c;
  CUevent ev = NULL;
  CUstream s = NULL;
  CUdeviceptr mem = 0;
  struct shared sh;
  CK(cuInit(0));
  CK(cuDevicePrimaryCtxRetain(&c, 0));
  CK(cuCtxSetCurrent(c));
  errors();
  CK(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuMemAlloc_v2(&mem, SIZE));
  CK(cuMemsetD8_v2(mem, 0, SIZE));
  CK(cuCtxSynchronize());
  CK(cuIpcGetEventHandle(&sh.event, ev));
  CK(cuIpcGetMemHandle(&sh.mem, mem));
  tap_ok(write(sock, &sh, sizeof sh) == (ssize_t)sizeof sh, "hand the handles over");
  tap_ok(hear(sock, 'o'), "the other process opened the event");

  CK(cuMemsetD8Async(mem, 0x5a, SIZE, s));
  CK(cuEventRecord(ev, s));
  tap_ok(say(sock, 'r'), "recorded after a memset, never synchronised here");
  tap_ok(hear(sock, 'R'), "the other process saw the record and recorded in turn");
  TAP_EQ(cuEventQuery(ev), CUDA_ERROR_NOT_READY, "its record, first poll: NOT_READY");
  TAP_EQ(cuEventQuery(ev), CUDA_SUCCESS, "... then SUCCESS");
  CK(cuEventSynchronize(ev));
  tap_ok(holds(mem, 0xc3), "the other process's memset before its record is done");
  tap_ok(say(sock, 'S'), "seen");
  tap_ok(hear(sock, 'd'), "the other process destroyed its opened event");
  CK(cuEventQuery(ev));
  CK(cuEventDestroy_v2(ev));
  tap_ok(say(sock, 'x'), "destroyed here");
  tap_ok(hear(sock, 'e'), "the other process finished");
  int st = 0;
  waitpid(pid, &st, 0);
  tap_ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
         "the other process: opened, saw both records, and the stale handle was refused "
         "(%d failures)",
         WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  CK(cuMemFree_v2(mem));
  CK(cuStreamDestroy_v2(s));
  CK(cuDevicePrimaryCtxRelease(0));
  return tap_done();
}
