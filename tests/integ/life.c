/* life: the ends of a process's life under gpucap, driven from tests/integ/life.sh, which judges
 * from outside (timeouts, the files written, exit statuses). Like libcudart it dlopen()s
 * "libcuda.so.1" after every constructor has run and dlsym()s the entry points, so the driver's
 * pthread_atfork handlers are registered after gpucap's library was loaded.
 *
 * usage: life MODE [ARG]
 *   fork N        4 threads, each in its own context, allocate and free under a tight cap (so
 *                 pools grow, fail and trim each other) while the main thread forks N children
 *                 that exit at once; prints "forked N"
 *   busyexit      4 threads allocate and free in a loop while the main thread calls exit(0)
 *   sigexit       allocates and frees (a trace event each) until a SIGALRM calls exit(0) from
 *                 its handler (life.sh sends the trace to a FIFO nobody reads, and the signal
 *                 once the program is blocked writing it, with the trace's lock held)
 *   exports       4 threads allocate, export over IPC and free while the main thread exits
 *   exec N        N allocations and frees, then execv("/bin/true")
 *   many N        N allocations and frees, then exit
 *   tworegions    a 1 MiB and a 3 MiB block (two regions that cannot merge), both freed
 *   holes         eight 1 MiB blocks, every other one freed
 *   workers N     a parent that never touches CUDA forks N children that allocate and exit
 *   term SIG      allocate, then wait to be killed (prints "ready" first)
 *   ownterm       like term, with the program's own SIGTERM handler installed before CUDA is
 *                 first used: the handler prints "handled N" and exits 3
 *   lateterm      like ownterm, but the handler is installed after CUDA was first used
 *   ignterm       SIGTERM ignored before CUDA is used; raises SIGTERM itself, prints "survived"
 * Built twice: `life` is not linked with the driver (so the driver's destructor runs before
 * gpucap's at exit, as for the runtime), `lifelinked` is (-lcuda: gpucap's destructor first).
 */
#include "shim/base/cudadefs.h"
#include "tests/hold.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static struct {
  __typeof__(&cuInit) init;
  __typeof__(&cuDeviceGet) device_get;
  __typeof__(&cuDevicePrimaryCtxRetain) retain;
  __typeof__(&cuCtxCreate_v2) ctx_create;
  __typeof__(&cuCtxSetCurrent) set_current;
  __typeof__(&cuMemAlloc_v2) alloc;
  __typeof__(&cuMemFree_v2) free;
  __typeof__(&cuIpcGetMemHandle) export;
} cu;

static CUcontext primary;
static atomic_bool stop;
static atomic_int allocating; /* threads whose churn has made an allocation */

static void *sym(void *h, const char *name) {
  void *p = dlsym(h, name);
  if (!p) {
    fprintf(stderr, "life: %s: %s\n", name, dlerror());
    exit(2);
  }
  return p;
}

/* Loads the driver as the runtime does and makes the primary context of device 0 current. */
static void load(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "life: %s\n", dlerror());
    exit(2);
  }
  *(void **)&cu.init = sym(h, "cuInit");
  *(void **)&cu.device_get = sym(h, "cuDeviceGet");
  *(void **)&cu.retain = sym(h, "cuDevicePrimaryCtxRetain");
  *(void **)&cu.ctx_create = sym(h, "cuCtxCreate_v2");
  *(void **)&cu.set_current = sym(h, "cuCtxSetCurrent");
  *(void **)&cu.alloc = sym(h, "cuMemAlloc_v2");
  *(void **)&cu.free = sym(h, "cuMemFree_v2");
  *(void **)&cu.export = sym(h, "cuIpcGetMemHandle");
  CUdevice dev;
  if (cu.init(0) || cu.device_get(&dev, 0) || cu.retain(&primary, dev) || cu.set_current(primary)) {
    fprintf(stderr, "life: cannot set up device 0\n");
    exit(2);
  }
}

/* Allocates and frees random sizes of up to `mib` MiB until told to stop (or `rounds` rounds
 * when rounds > 0), exporting every fourth block when `share`. */
static void churn(unsigned seed, size_t mib, long rounds, bool share) {
  CUdeviceptr live[8] = {0};
  bool counted = false;
  for (long i = 0; rounds <= 0 || i < rounds; i++) {
    if (atomic_load_explicit(&stop, memory_order_relaxed)) {
      break;
    }
    int k = rand_r(&seed) % 8;
    if (live[k]) {
      cu.free(live[k]);
      live[k] = 0;
    } else if (cu.alloc(&live[k], ((size_t)rand_r(&seed) % (mib << 4) + 1) << 16) != 0) {
      live[k] = 0;
    } else if (!counted) {
      counted = true;
      atomic_fetch_add(&allocating, 1);
    } else if (share && i % 4 == 0) {
      CUipcMemHandle handle;
      cu.export(&handle, live[k]);
    }
  }
  for (int k = 0; k < 8; k++) {
    if (live[k]) {
      cu.free(live[k]);
    }
  }
}

struct worker {
  pthread_t tid;
  unsigned seed;
  bool own_context, share;
};

static void *work(void *arg) {
  struct worker *w = arg;
  CUcontext ctx = primary;
  if (w->own_context) {
    CUdevice dev;
    cu.device_get(&dev, 0);
    if (cu.ctx_create(&ctx, 0, dev) != 0) {
      ctx = primary;
    }
  }
  cu.set_current(ctx);
  churn(w->seed, 8, 0, w->share);
  return NULL;
}

static struct worker workers[4];

static void start(bool own_context, bool share) {
  for (int i = 0; i < 4; i++) {
    workers[i] = (struct worker){
        .seed = (unsigned)getpid() * 31u + (unsigned)i, .own_context = own_context, .share = share};
    pthread_create(&workers[i].tid, NULL, work, &workers[i]);
  }
}

static void stop_all(void) {
  atomic_store(&stop, true);
  for (int i = 0; i < 4; i++) {
    pthread_join(workers[i].tid, NULL);
  }
}

static void nap(long usec) {
  struct timespec ts = {usec / 1000000, (usec % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static void on_alarm(int sig) {
  (void)sig;
  exit(0);
}

static volatile sig_atomic_t got_term;

static void on_term(int sig) {
  got_term = sig;
}

/* Allocates a little, says so, and waits for a signal; with `own` a SIGTERM handler of the
 * program's reports what it saw and exits 3. */
static int wait_for_signal(int own) {
  signal(SIGINT, SIG_DFL); /* a shell starts background jobs with SIGINT ignored */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_term;
  if (own == 1) {
    sigaction(SIGTERM, &sa, NULL);
  }
  load();
  CUdeviceptr p;
  cu.alloc(&p, 3 << 20);
  cu.free(p);
  cu.alloc(&p, 1 << 20);
  if (own == 2) {
    struct sigaction old;
    sigaction(SIGTERM, &sa, &old);
    printf("old %s\n", old.sa_handler == SIG_DFL ? "default" : "other");
  }
  printf("ready\n");
  fflush(stdout);
  for (int i = 0; i < 3000 && !got_term; i++) {
    nap(10000);
  }
  if (got_term) {
    printf("handled %d\n", (int)got_term);
    fflush(stdout);
    exit(3);
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  long n = argc > 2 ? atol(argv[2]) : 0;
  setvbuf(stdout, NULL, _IONBF, 0);
  if (strcmp(mode, "workers") == 0) {
    int failed = 0;
    for (long i = 0; i < n; i++) {
      pid_t pid = fork();
      if (pid == 0) {
        load();
        churn((unsigned)getpid(), 2, 200, false);
        test_hold(); /* its pool still mapped, for a watcher (tests/gpu/check.sh) */
        exit(0);
      }
      int status = 0;
      failed += pid < 0 || waitpid(pid, &status, 0) != pid || status != 0;
    }
    return failed != 0;
  }
  if (strcmp(mode, "term") == 0 || strcmp(mode, "ownterm") == 0 || strcmp(mode, "lateterm") == 0) {
    return wait_for_signal(mode[0] == 't' ? 0 : mode[0] == 'o' ? 1 : 2);
  }
  if (strcmp(mode, "ignterm") == 0) {
    signal(SIGTERM, SIG_IGN);
    load();
    CUdeviceptr p;
    cu.alloc(&p, 1 << 20);
    raise(SIGTERM);
    printf("survived\n");
    return 0;
  }
  load();
  if (strcmp(mode, "fork") == 0) {
    start(true, false);
    long forked = 0;
    for (long i = 0; i < n; i++) {
      pid_t pid = fork();
      if (pid == 0) {
        _exit(0);
      }
      if (pid > 0 && waitpid(pid, NULL, 0) == pid) {
        forked++;
      }
    }
    stop_all();
    printf("forked %ld\n", forked);
    return 0;
  }
  if (strcmp(mode, "busyexit") == 0 || strcmp(mode, "exports") == 0) {
    start(false, mode[0] == 'e');
    /* Every thread allocating before the exit, however loaded the host (at most 10 s). */
    for (int i = 0; i < 10000 && atomic_load(&allocating) < 4; i++) {
      nap(1000);
    }
    nap(20000 + (long)(getpid() % 7) * 3000);
    exit(0);
  }
  if (strcmp(mode, "sigexit") == 0) {
    signal(SIGALRM, on_alarm);
    for (;;) {
      CUdeviceptr p;
      if (cu.alloc(&p, 256) == 0) {
        cu.free(p);
      }
    }
  }
  if (strcmp(mode, "exec") == 0 || strcmp(mode, "many") == 0) {
    for (long i = 0; i < n; i++) {
      CUdeviceptr p;
      if (cu.alloc(&p, 4096) == 0) {
        cu.free(p);
      }
    }
    if (mode[1] == 'x') {
      execv("/bin/true", (char *[]){"true", NULL});
      perror("life: execv");
      return 2;
    }
    return 0;
  }
  if (strcmp(mode, "holes") == 0) {
    CUdeviceptr b[8];
    int rc = 0;
    for (int i = 0; i < 8; i++) {
      rc |= cu.alloc(&b[i], 1 << 20) != CUDA_SUCCESS;
    }
    for (int i = 0; i < 8; i += 2) {
      rc |= cu.free(b[i]) != CUDA_SUCCESS;
    }
    return rc;
  }
  if (strcmp(mode, "tworegions") == 0) {
    CUdeviceptr a, b;
    int rc = cu.alloc(&a, 1 << 20) || cu.alloc(&b, 3 << 20) || cu.free(a) || cu.free(b);
    return rc;
  }
  fprintf(stderr, "life: unknown mode '%s'\n", mode);
  return 2;
}
