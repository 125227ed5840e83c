/* fakecuda_probe: runs a sequence of driver operations named on the command line against the
 * fake driver and prints one line per operation, for tests/fakecuda/test_env.sh (settings,
 * fault injection, the statistics report, fork). Not a TAP test itself.
 *
 * Operations (slots are the allocations made so far, numbered from 0):
 *   version         cuDriverGetVersion          init       cuInit(0)
 *   devices         count, then per device: total, compute capability, SM count, name
 *   ctx[:DEV]       retain DEV's primary context and make it current
 *   alloc:SIZE      cuMemAlloc_v2 into the next slot      free:SLOT   cuMemFree_v2
 *   managed:SIZE    cuMemAllocManaged (attached globally) into the next slot
 *   info            cuMemGetInfo_v2                       sync        cuCtxSynchronize
 *   work:SLOT       fakecudaEnqueueWork(legacy, slot, 1)  claim:SLOT  fakecudaClaim(slot, 1)
 *   gpa:NAME:VER    cuGetProcAddress_v2(NAME, VER, 0)
 *   callergpa:NAME:VER  the same query made from libfk_caller.so
 *   stale           a stream-ordered free overtakes a memset queued on another stream
 *   fork            a child that never uses CUDA exits normally
 *   forkcuda        a child calls cuMemGetInfo_v2 and prints its result
 *   hold            waits until its standard input ends (holding what it allocated)
 *   wait:PATH       waits until the file PATH exists (at most a minute)
 *   exec:PATH ARG.. executes PATH with the arguments that follow it (the last operation)
 * Output lines are "OP RESULT", RESULT being the CUresult or the value asked for.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakecuda.h"
#include "tests/fakecuda/fakedefs.h"

static CUdeviceptr slots[64];
static int nslots;

typedef int (*caller_fn)(const char *, int);

static int caller_query(const char *name, int version) {
  char exe[PATH_MAX], path[PATH_MAX + 32];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = '\0';
  char *slash = strrchr(exe, '/');
  if (slash != NULL) {
    *slash = '\0';
  }
  snprintf(path, sizeof path, "%s/libfk_caller.so", exe);
  void *h = dlopen(path, RTLD_NOW);
  void *sym = h ? dlsym(h, "fkCallerQuery") : NULL;
  if (sym == NULL) {
    return -1;
  }
  caller_fn fn;
  memcpy(&fn, &sym, sizeof fn);
  return fn(name, version);
}

static void stale(void) {
  CUstream s1, s2;
  CUdeviceptr a;
  cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING);
  cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING);
  cuMemAllocAsync(&a, 4096, s1);
  cuMemsetD8Async(a, 1, 4096, s2); /* unordered with the free below: a use-after-free race */
  cuMemFreeAsync(a, s1);
  cuStreamSynchronize(s1);
  cuStreamSynchronize(s2);
  cuStreamDestroy_v2(s1);
  cuStreamDestroy_v2(s2);
}

static int run(const char *op) {
  char name[128];
  int v = 0;
  if (strcmp(op, "version") == 0) {
    CUresult rc = cuDriverGetVersion(&v);
    return printf("version %d %d\n", rc, v);
  }
  if (strcmp(op, "init") == 0) {
    return printf("init %d\n", cuInit(0));
  }
  if (strcmp(op, "devices") == 0) {
    int n = -1;
    CUresult rc = cuDeviceGetCount(&n);
    printf("devices %d %d\n", rc, n);
    for (int d = 0; d < n; d++) {
      size_t total = 0;
      int major = 0, minor = 0, sms = 0;
      char dname[64] = "", bus[32] = "";
      int busnum = -1;
      cuDeviceTotalMem_v2(&total, d);
      cuDeviceGetPCIBusId(bus, sizeof bus, d);
      cuDeviceGetAttribute(&busnum, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d);
      cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
      cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
      cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
      cuDeviceGetName(dname, sizeof dname, d);
      printf("device%d total=%zu cc=%d.%d sms=%d name=%s pci=%s bus=%d\n", d, total, major, minor,
             sms, dname, bus, busnum);
    }
    return 1;
  }
  if (strncmp(op, "ctx", 3) == 0) {
    int dev = op[3] == ':' ? atoi(op + 4) : 0;
    CUcontext c;
    CUresult rc = cuDevicePrimaryCtxRetain(&c, dev);
    if (rc == CUDA_SUCCESS) {
      rc = cuCtxSetCurrent(c);
    }
    return printf("ctx %d\n", rc);
  }
  if (strncmp(op, "alloc:", 6) == 0) {
    CUdeviceptr p = 0;
    CUresult rc = cuMemAlloc_v2(&p, strtoull(op + 6, NULL, 10));
    if (nslots < 64) {
      slots[nslots++] = p;
    }
    return printf("alloc %d\n", rc);
  }
  if (strncmp(op, "managed:", 8) == 0) {
    CUdeviceptr p = 0;
    CUresult rc = cuMemAllocManaged(&p, strtoull(op + 8, NULL, 10), CU_MEM_ATTACH_GLOBAL);
    if (nslots < 64) {
      slots[nslots++] = p;
    }
    return printf("managed %d\n", rc);
  }
  if (strncmp(op, "free:", 5) == 0) {
    return printf("free %d\n", cuMemFree_v2(slots[atoi(op + 5)]));
  }
  if (strcmp(op, "info") == 0) {
    size_t fr = 0, tot = 0;
    CUresult rc = cuMemGetInfo_v2(&fr, &tot);
    return printf("info %d free=%zu total=%zu\n", rc, fr, tot);
  }
  if (strcmp(op, "sync") == 0) {
    return printf("sync %d\n", cuCtxSynchronize());
  }
  if (strncmp(op, "work:", 5) == 0) {
    return printf("work %d\n", fakecudaEnqueueWork(NULL, slots[atoi(op + 5)], 1));
  }
  if (strncmp(op, "claim:", 6) == 0) {
    return printf("claim %d\n", fakecudaClaim(slots[atoi(op + 6)], 1));
  }
  if (sscanf(op, "gpa:%127[^:]:%d", name, &v) == 2) {
    void *pfn = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult rc = cuGetProcAddress_v2(name, &pfn, v, 0, &st);
    return printf("gpa %d %d\n", rc, st);
  }
  if (sscanf(op, "callergpa:%127[^:]:%d", name, &v) == 2) {
    return printf("callergpa %d\n", caller_query(name, v));
  }
  if (strcmp(op, "stale") == 0) {
    stale();
    return printf("stale done\n");
  }
  if (strcmp(op, "fork") == 0 || strcmp(op, "forkcuda") == 0) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      if (strcmp(op, "forkcuda") == 0) {
        size_t fr, tot;
        printf("child %d\n", cuMemGetInfo_v2(&fr, &tot));
      }
      exit(0); /* runs the fake's destructor: it must not write the parent's report */
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return printf("%s %d\n", op, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  }
  if (strncmp(op, "wait:", 5) == 0) {
    /* At most a minute: a bound for hangs, not a timing. */
    for (int i = 0; i < 1200 && access(op + 5, F_OK) != 0; i++) {
      usleep(50000);
    }
    return printf("wait %d\n", access(op + 5, F_OK) == 0 ? 0 : 1);
  }
  if (strcmp(op, "hold") == 0) {
    printf("holding\n");
    fflush(stdout);
    while (getchar() != EOF) {
    }
    return printf("hold 0\n");
  }
  fprintf(stderr, "fakecuda_probe: unknown operation %s\n", op);
  exit(2);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "exec:", 5) == 0) {
      /* The program and the rest of the command line: exec:/bin/sh -c 'echo $$' */
      argv[i] += 5;
      fflush(stdout);
      execv(argv[i], argv + i);
      printf("exec %d\n", errno);
      return 1;
    }
    run(argv[i]);
    fflush(stdout);
  }
  return 0;
}
