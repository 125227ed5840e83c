/* gpuwatch: the oracle of `make gpu-check` (tests/gpu/check.sh), a process outside the programs
 * under test that watches the device the way an administrator would: NVML's per-process used
 * memory (nvmlDeviceGetComputeRunningProcesses_v3, else _v2, else v1) and cuMemGetInfo_v2 of the
 * driver, from its own primary context on every device. Never run under gpucap; needs no toolkit:
 * both libraries are dlopen()ed (libnvidia-ml.so.1 and libcuda.so.1, the real ones or the fakes
 * in build/fakecuda, whichever the loader finds).
 *
 *   gpuwatch info
 *       one JSON object: the libraries loaded (and whether they are gpucap's fakes), the driver,
 *       NVML and CUDA versions, and per device its name, UUID, totals, VMM granularity and what
 *       this bare process's own context costs there, as NVML lists it for this process and as
 *       the device's used memory rose when the context was made
 *   gpuwatch run [-i MICROSECONDS] [-s SETTLE_MS] -o FILE -- COMMAND [ARG...]
 *       runs COMMAND (in a process group of its own; this process is the child subreaper of its
 *       descendants) and samples both figures until it and every descendant have ended; writes
 *       FILE (JSON): per device the rise of the device's used memory over what it was before the
 *       command (peak_delta), and per process of the command's tree that NVML listed its peak,
 *       its "settled" figure (the value of the last run of identical samples that lasted at
 *       least SETTLE_MS: what a process holding still at its end holds) and how often it was
 *       seen; processes NVML listed that are not of the tree (nor this one) are "foreign".
 *       Exits with the command's status (128 + N for signal N); 124 after SIGTERM or SIGINT,
 *       which it passes on to the command's group as SIGKILL; 125 when it cannot watch.
 *
 * A sample is a snapshot: a peak shorter than the gap between two samples can be missed, so the
 * file gives the number of samples and the largest gap between two. One thread; no locks.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/nvml/nvmldefs.h"

#define MAXDEV 16
#define MAXREC 512
#define MAXLIST 1024
#define WATCH_ERROR 125
#define WATCH_STOPPED 124

/* dlsym's answer as a function pointer (ISO C has no cast between the two). */
#define SYM(h, name, fp) (memcpy(&(fp), &(void *){dlsym((h), (name))}, sizeof(fp)), (fp) != NULL)

static struct {
  void *lib;
  __typeof__(&cuInit) init;
  __typeof__(&cuDriverGetVersion) version;
  __typeof__(&cuDeviceGetCount) count;
  __typeof__(&cuDeviceGet) get;
  __typeof__(&cuDeviceGetName) name;
  __typeof__(&cuDeviceTotalMem_v2) total;
  __typeof__(&cuDevicePrimaryCtxRetain) retain;
  __typeof__(&cuCtxSetCurrent) set;
  __typeof__(&cuMemGetInfo_v2) info;
  __typeof__(&cuMemGetAllocationGranularity) granularity;
} cu;

static struct {
  void *lib;
  __typeof__(&nvmlInit_v2) init;
  __typeof__(&nvmlSystemGetDriverVersion) driver;
  __typeof__(&nvmlSystemGetNVMLVersion) version;
  __typeof__(&nvmlDeviceGetHandleByIndex_v2) handle;
  __typeof__(&nvmlDeviceGetName) name;
  __typeof__(&nvmlDeviceGetUUID) uuid;
  __typeof__(&nvmlDeviceGetMemoryInfo) memory;
  __typeof__(&nvmlDeviceGetComputeRunningProcesses_v3) procs; /* _v3 or _v2: the same entry */
  __typeof__(&nvmlDeviceGetComputeRunningProcesses) procs_v1; /* v1 entries */
  const char *procs_name;
} nv;

static int ndev;
static CUcontext ctx[MAXDEV];
static nvmlDevice_t nvdev[MAXDEV];
static pid_t self;

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "gpuwatch: error: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(WATCH_ERROR);
}

/* The path of the loaded library that defines sym ("?" when it cannot be said). */
static const char *path_of(void *lib, const char *sym) {
  Dl_info di;
  void *p = dlsym(lib, sym);
  return p != NULL && dladdr(p, &di) && di.dli_fname != NULL ? di.dli_fname : "?";
}

static void load(void) {
  cu.lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (cu.lib == NULL) {
    die("no CUDA driver: libcuda.so.1 cannot be loaded (%s)", dlerror());
  }
  if (!SYM(cu.lib, "cuInit", cu.init) || !SYM(cu.lib, "cuDriverGetVersion", cu.version) ||
      !SYM(cu.lib, "cuDeviceGetCount", cu.count) || !SYM(cu.lib, "cuDeviceGet", cu.get) ||
      !SYM(cu.lib, "cuDeviceGetName", cu.name) || !SYM(cu.lib, "cuDeviceTotalMem_v2", cu.total) ||
      !SYM(cu.lib, "cuDevicePrimaryCtxRetain", cu.retain) ||
      !SYM(cu.lib, "cuCtxSetCurrent", cu.set) || !SYM(cu.lib, "cuMemGetInfo_v2", cu.info) ||
      !SYM(cu.lib, "cuMemGetAllocationGranularity", cu.granularity)) {
    die("libcuda.so.1 lacks an entry point gpuwatch needs (%s)", path_of(cu.lib, "cuInit"));
  }
  nv.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  if (nv.lib == NULL) {
    die("no NVML: libnvidia-ml.so.1 cannot be loaded (%s)", dlerror());
  }
  if (!SYM(nv.lib, "nvmlInit_v2", nv.init) ||
      !SYM(nv.lib, "nvmlSystemGetDriverVersion", nv.driver) ||
      !SYM(nv.lib, "nvmlSystemGetNVMLVersion", nv.version) ||
      !SYM(nv.lib, "nvmlDeviceGetHandleByIndex_v2", nv.handle) ||
      !SYM(nv.lib, "nvmlDeviceGetName", nv.name) || !SYM(nv.lib, "nvmlDeviceGetUUID", nv.uuid) ||
      !SYM(nv.lib, "nvmlDeviceGetMemoryInfo", nv.memory)) {
    die("libnvidia-ml.so.1 lacks an entry point gpuwatch needs (%s)",
        path_of(nv.lib, "nvmlInit_v2"));
  }
  /* The newest process list the library has; v1's entries are smaller. */
  static const char *const lists[] = {"nvmlDeviceGetComputeRunningProcesses_v3",
                                      "nvmlDeviceGetComputeRunningProcesses_v2"};
  for (size_t i = 0; i < sizeof lists / sizeof lists[0] && nv.procs == NULL; i++) {
    if (SYM(nv.lib, lists[i], nv.procs)) {
      nv.procs_name = lists[i];
    }
  }
  if (nv.procs == NULL) {
    if (!SYM(nv.lib, "nvmlDeviceGetComputeRunningProcesses", nv.procs_v1)) {
      die("libnvidia-ml.so.1 has no nvmlDeviceGetComputeRunningProcesses");
    }
    nv.procs_name = "nvmlDeviceGetComputeRunningProcesses";
  }
  nvmlReturn_t nr = nv.init();
  if (nr != NVML_SUCCESS) {
    die("nvmlInit_v2 answered %d", nr);
  }
}

/* NVML's used memory of device d (the whole device, every process). */
static unsigned long long nvml_used(int d) {
  nvmlMemory_t m;
  return nv.memory(nvdev[d], &m) == NVML_SUCCESS ? m.used : 0;
}

/* Initialises the driver, retains every device's primary context (this process's own context
 * on each device is part of what it measures) and finds NVML's handle of each. ctx_rise[d] gets
 * how much NVML's used memory of device d rose while the context was made. */
static void attach(unsigned long long ctx_rise[MAXDEV]) {
  CUresult rc = cu.init(0);
  if (rc != CUDA_SUCCESS) {
    die("cuInit answered %d", rc);
  }
  if ((rc = cu.count(&ndev)) != CUDA_SUCCESS || ndev < 1) {
    die("no CUDA device (cuDeviceGetCount answered %d)", rc);
  }
  ndev = ndev > MAXDEV ? MAXDEV : ndev;
  for (int d = 0; d < ndev; d++) {
    nvmlReturn_t nr = nv.handle((unsigned)d, &nvdev[d]);
    if (nr != NVML_SUCCESS) {
      die("nvmlDeviceGetHandleByIndex_v2 answered %d", nr);
    }
    unsigned long long before = nvml_used(d);
    CUdevice dev;
    if ((rc = cu.get(&dev, d)) != CUDA_SUCCESS || (rc = cu.retain(&ctx[d], dev)) != CUDA_SUCCESS ||
        (rc = cu.set(ctx[d])) != CUDA_SUCCESS) {
      die("the primary context of device %d: the driver answered %d", d, rc);
    }
    /* A context's memory is committed when it is first used, not when it is retained. */
    size_t f, t;
    cu.info(&f, &t);
    unsigned long long after = nvml_used(d);
    ctx_rise[d] = after > before ? after - before : 0;
  }
}

/* cuMemGetInfo_v2 of device d from this process: bytes used on the device (total - free). */
static unsigned long long cuda_used(int d, unsigned long long *total) {
  size_t f = 0, t = 0;
  if (cu.set(ctx[d]) != CUDA_SUCCESS || cu.info(&f, &t) != CUDA_SUCCESS) {
    return 0;
  }
  *total = t;
  return t - f;
}

/* NVML's compute processes of device d: up to max entries into out; returns the count, -1 when
 * NVML refused the query. */
static int list_procs(int d, nvmlProcessInfo_t *out, unsigned max) {
  static nvmlProcessInfo_v1_t v1[MAXLIST];
  unsigned n = max;
  nvmlReturn_t nr;
  if (nv.procs != NULL) {
    nr = nv.procs(nvdev[d], &n, out);
  } else {
    nr = nv.procs_v1(nvdev[d], &n, v1);
    for (unsigned i = 0; nr == NVML_SUCCESS && i < n; i++) {
      out[i].pid = v1[i].pid;
      out[i].usedGpuMemory = v1[i].usedGpuMemory;
    }
  }
  return nr == NVML_SUCCESS ? (int)n : -1;
}

/* The device's used memory at a moment, and this process's own entry in NVML's list. */
static unsigned long long own_nvml(int d) {
  static nvmlProcessInfo_t list[MAXLIST];
  int n = list_procs(d, list, MAXLIST);
  for (int i = 0; i < n; i++) {
    if ((pid_t)list[i].pid == self) {
      return list[i].usedGpuMemory;
    }
  }
  return 0;
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') {
      fprintf(f, "\\%c", *s);
    } else if ((unsigned char)*s < 0x20) {
      fprintf(f, "\\u%04x", *s);
    } else {
      fputc(*s, f);
    }
  }
  fputc('"', f);
}

static int info(void) {
  unsigned long long rise[MAXDEV];
  attach(rise);
  int version = 0;
  char driver[96] = "?", nvml_version[96] = "?";
  cu.version(&version);
  nv.driver(driver, sizeof driver);
  nv.version(nvml_version, sizeof nvml_version);
  printf("{\n  \"libcuda\": ");
  json_string(stdout, path_of(cu.lib, "cuInit"));
  printf(",\n  \"libnvidia_ml\": ");
  json_string(stdout, path_of(nv.lib, "nvmlInit_v2"));
  /* The fakes have test hooks no real library has. */
  printf(",\n  \"fake\": %s,\n  \"driver_version\": ",
         dlsym(cu.lib, "fakecudaPeakBytes") != NULL ? "true" : "false");
  json_string(stdout, driver);
  printf(",\n  \"nvml_version\": ");
  json_string(stdout, nvml_version);
  printf(",\n  \"cuda_driver_version\": %d,\n  \"process_list\": \"%s\",\n  \"devices\": [\n",
         version, nv.procs_name);
  for (int d = 0; d < ndev; d++) {
    char name[256] = "?", uuid[96] = "?";
    CUdevice dev = 0;
    size_t total = 0, gran = 0;
    unsigned long long t = 0;
    nvmlMemory_t m = {0};
    cu.get(&dev, d);
    cu.name(name, sizeof name, dev);
    cu.total(&total, dev);
    nv.uuid(nvdev[d], uuid, sizeof uuid);
    nv.memory(nvdev[d], &m);
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = d;
    cu.set(ctx[d]);
    cu.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    unsigned long long used = cuda_used(d, &t);
    printf("    {\"ordinal\": %d, \"name\": ", d);
    json_string(stdout, name);
    printf(", \"uuid\": ");
    json_string(stdout, uuid);
    printf(", \"total_bytes\": %zu, \"nvml_total_bytes\": %llu, \"used_bytes\": %llu, "
           "\"granularity_bytes\": %zu, \"context_nvml_bytes\": %llu, "
           "\"context_rise_bytes\": %llu}%s\n",
           total, m.total, used, gran, own_nvml(d), rise[d], d + 1 < ndev ? "," : "");
  }
  printf("  ]\n}\n");
  return 0;
}

/* ---- run ---- */

struct rec {
  pid_t pid;
  int dev;
  bool ours;
  bool unavailable; /* NVML gave no figure (NVML_VALUE_NOT_AVAILABLE) */
  unsigned long long peak, cur, settled;
  bool has_settled;
  double first_ms, last_ms, cur_since;
  long samples;
};

static struct rec recs[MAXREC];
static int nrec;
static pid_t child;
static volatile sig_atomic_t stop_signal;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Whether pid is of the command's tree: its parent chain reaches this process (the subreaper
 * of every orphan of the tree). */
static bool of_tree(pid_t pid) {
  for (int depth = 0; depth < 64 && pid > 1; depth++) {
    if (pid == self) {
      return true;
    }
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
      return false;
    }
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    int ppid = 0;
    if (p == NULL || sscanf(p + 1, " %*c %d", &ppid) != 1) {
      return false;
    }
    pid = ppid;
  }
  return false;
}

static struct rec *rec_of(pid_t pid, int dev, double t) {
  for (int i = 0; i < nrec; i++) {
    if (recs[i].pid == pid && recs[i].dev == dev) {
      return &recs[i];
    }
  }
  if (nrec == MAXREC) {
    return NULL;
  }
  struct rec *r = &recs[nrec++];
  memset(r, 0, sizeof *r);
  r->pid = pid;
  r->dev = dev;
  r->ours = pid != self && of_tree(pid);
  r->first_ms = r->cur_since = t;
  return r;
}

static void settle(struct rec *r, double settle_ms) {
  if (r->samples > 0 && r->last_ms - r->cur_since >= settle_ms) {
    r->settled = r->cur;
    r->has_settled = true;
  }
}

static void seen(struct rec *r, unsigned long long v, double t, double settle_ms) {
  if (v == (unsigned long long)NVML_VALUE_NOT_AVAILABLE) {
    r->unavailable = true;
    v = 0;
  }
  if (r->samples > 0 && v != r->cur) {
    settle(r, settle_ms);
    r->cur_since = t;
  }
  r->cur = v;
  r->peak = v > r->peak ? v : r->peak;
  r->last_ms = t;
  r->samples++;
}

static void on_signal(int sig) {
  stop_signal = sig;
}

static int run(int argc, char **argv) {
  long interval_us = 1000;
  double settle_ms = 100;
  const char *out = NULL;
  int i = 2;
  for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
    if (strcmp(argv[i], "-i") == 0 && i + 1 < argc) {
      interval_us = atol(argv[++i]);
    } else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) {
      settle_ms = atof(argv[++i]);
    } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      out = argv[++i];
    } else {
      die("unknown option %s", argv[i]);
    }
  }
  if (out == NULL || i + 1 >= argc || interval_us < 0) {
    die("usage: gpuwatch run [-i MICROSECONDS] [-s SETTLE_MS] -o FILE -- COMMAND");
  }
  char **cmd = argv + i + 1;
  unsigned long long rise[MAXDEV], base[MAXDEV], peak[MAXDEV] = {0}, total[MAXDEV] = {0};
  attach(rise);
  for (int d = 0; d < ndev; d++) {
    base[d] = cuda_used(d, &total[d]);
  }
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  fflush(NULL);
  double t0 = now_ms();
  child = fork();
  if (child < 0) {
    die("fork failed: %s", strerror(errno));
  }
  if (child == 0) {
    setpgid(0, 0);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    execvp(cmd[0], cmd);
    fprintf(stderr, "gpuwatch: error: cannot run %s: %s\n", cmd[0], strerror(errno));
    _exit(127);
  }
  setpgid(child, child);
  static nvmlProcessInfo_t list[MAXLIST];
  int status = 0, alive = 1, nvml_errors = 0, tree_max = 0;
  long samples = 0;
  double last = t0, max_gap = 0;
  while (alive) {
    double t = now_ms();
    int tree_now = 0;
    for (int d = 0; d < ndev; d++) {
      unsigned long long tt = 0, used = cuda_used(d, &tt);
      unsigned long long delta = used > base[d] ? used - base[d] : 0;
      peak[d] = delta > peak[d] ? delta : peak[d];
      int n = list_procs(d, list, MAXLIST);
      nvml_errors += n < 0;
      for (int k = 0; k < n; k++) {
        struct rec *r = rec_of((pid_t)list[k].pid, d, t);
        if (r != NULL) {
          seen(r, list[k].usedGpuMemory, t, settle_ms);
          tree_now += r->ours;
        }
      }
    }
    tree_max = tree_now > tree_max ? tree_now : tree_max;
    samples++;
    max_gap = t - last > max_gap ? t - last : max_gap;
    last = t;
    /* Reap: the command, and every orphan of its tree handed to this subreaper. */
    for (;;) {
      int st;
      pid_t p = waitpid(-1, &st, WNOHANG);
      if (p == child) {
        status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      } else if (p <= 0) {
        alive = !(p < 0 && errno == ECHILD);
        break;
      }
    }
    if (stop_signal) {
      kill(-child, SIGKILL);
      while (waitpid(-1, NULL, 0) > 0) {
      }
      status = WATCH_STOPPED;
      alive = 0;
    }
    if (alive && interval_us > 0) {
      struct timespec ts = {interval_us / 1000000, (interval_us % 1000000) * 1000};
      nanosleep(&ts, NULL);
    }
  }
  FILE *f = fopen(out, "w");
  if (f == NULL) {
    die("cannot write %s", out);
  }
  fprintf(f, "{\n  \"command\": ");
  json_string(f, cmd[0]);
  fprintf(f,
          ",\n  \"status\": %d,\n  \"stopped\": %s,\n  \"interval_us\": %ld,\n"
          "  \"settle_ms\": %.0f,\n  \"samples\": %ld,\n  \"max_gap_us\": %.0f,\n"
          "  \"duration_ms\": %.0f,\n  \"nvml_errors\": %d,\n  \"process_list\": \"%s\",\n"
          "  \"tree_max\": %d,\n  \"devices\": [\n",
          status, stop_signal ? "true" : "false", interval_us, settle_ms, samples, max_gap * 1e3,
          last - t0, nvml_errors, nv.procs_name, tree_max);
  for (int d = 0; d < ndev; d++) {
    fprintf(f,
            "    {\"ordinal\": %d, \"total_bytes\": %llu, \"baseline_used_bytes\": %llu, "
            "\"peak_delta_bytes\": %llu}%s\n",
            d, total[d], base[d], peak[d], d + 1 < ndev ? "," : "");
  }
  fprintf(f, "  ],\n  \"processes\": [\n");
  int listed = 0;
  for (int k = 0; k < nrec; k++) {
    struct rec *r = &recs[k];
    settle(r, settle_ms);
    const char *kind = r->pid == self ? "watcher" : r->ours ? "tree" : "foreign";
    fprintf(f,
            "%s    {\"pid\": %d, \"device\": %d, \"kind\": \"%s\", \"peak_bytes\": %llu, "
            "\"settled_bytes\": %lld, \"samples\": %ld, \"first_ms\": %.1f, \"last_ms\": %.1f, "
            "\"available\": %s}",
            listed++ ? ",\n" : "", (int)r->pid, r->dev, kind, r->peak,
            r->has_settled ? (long long)r->settled : -1LL, r->samples, r->first_ms - t0,
            r->last_ms - t0, r->unavailable ? "false" : "true");
  }
  fprintf(f, "%s  ]\n}\n", listed ? "\n" : "");
  if (fclose(f) != 0) {
    die("cannot write %s", out);
  }
  return status;
}

int main(int argc, char **argv) {
  self = getpid();
  if (argc >= 2 && strcmp(argv[1], "info") == 0) {
    load();
    return info();
  }
  if (argc >= 2 && strcmp(argv[1], "run") == 0) {
    load();
    return run(argc, argv);
  }
  fprintf(stderr, "usage: gpuwatch info | gpuwatch run [-i US] [-s MS] -o FILE -- COMMAND...\n");
  return 2;
}
