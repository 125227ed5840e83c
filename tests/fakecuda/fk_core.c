/* The fake driver's spine: the global state and its lock, entry/exit of every entry point
 * (configuration, call counting, fault injection, the init check), fork handling, the
 * generated catch-all's body, and the statistics report written at exit.
 *
 * Locking: fk.lock guards everything in `fk`; fk_enter takes it, fk_leave drops it. The
 * configuration is parsed once (pthread_once) outside the lock. fork: the prepare handler takes
 * the lock so the child never inherits it mid-operation; a child of a process that had called
 * cuInit gets CUDA_ERROR_NOT_INITIALIZED from every entry point and never writes the report.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/fakecuda/fk.h"
#include "tests/fakecuda/fk_line.h"
#include "tests/fakecuda/fk_machine.h"

struct fk_global fk = {.lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP, .dev_fd = -1};

static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static int trace_fd = -1; /* FAKECUDA_TRACE: where each call is logged */
#define TRACE_DEPTH 8
static __thread const char *current_fn[TRACE_DEPTH]; /* entry points this thread is inside */
static __thread int trace_depth;
static __thread unsigned long long owed_ns; /* FAKECUDA_LATENCY this thread has yet to spend */

void fk_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fk_vline(2, "fakecuda: ", fmt, ap);
  va_end(ap);
}

void fk_push(void ***arr, size_t *n, size_t *cap, void *p) {
  if (*n == *cap) {
    size_t ncap = *cap ? *cap * 2 : 16;
    void **na = realloc(*arr, ncap * sizeof *na);
    if (na == NULL) {
      fk_log("error: out of host memory");
      abort();
    }
    *arr = na;
    *cap = ncap;
  }
  (*arr)[(*n)++] = p;
}

unsigned long long fk_new_id(void) {
  return ++fk.next_id;
}

static void parse_config(void) {
  char err[256];
  if (fk_export_count > FK_MAX_EXPORTS) {
    fk_log("error: %zu exports exceed FK_MAX_EXPORTS", fk_export_count);
    fk.cfg_error = 1;
    return;
  }
  if (fk_env_parse(&fk.cfg, fk_getenv, err, sizeof err) != 0) {
    fk_log("error: %s; every CUDA call will fail with CUDA_ERROR_INVALID_VALUE", err);
    fk.cfg_error = 1;
    return;
  }
  trace_fd = fk_trace_open(fk.cfg.trace_path, "fakecuda");
}

void fk_trace(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fk_vtrace(trace_fd, "fakecuda", fmt, ap);
  va_end(ap);
}

CUresult fk_enter(const char *fn, int need_init) {
  pthread_once(&cfg_once, parse_config);
  pthread_mutex_lock(&fk.lock);
  if (trace_depth < TRACE_DEPTH) {
    current_fn[trace_depth] = fn;
  }
  trace_depth++;
  int idx = fk_export_index(fn);
  unsigned long long n = idx >= 0 ? ++fk.calls[idx] : 0;
  if (fk.cfg_error) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (idx >= 0 && fk.cfg.latency_ns[idx] != 0) {
    fk.latency_ns[idx] += fk.cfg.latency_ns[idx];
    owed_ns += fk.cfg.latency_charge_only ? 0 : fk.cfg.latency_ns[idx];
  }
  if (fk.cfg.stub) {
    return CUDA_ERROR_STUB_LIBRARY; /* the stub answers 34 everywhere and writes nothing */
  }
  for (int i = 0; i < fk.cfg.nfail; i++) {
    if (fk.cfg.fail[i].export_index == idx && fk.cfg.fail[i].nth == n) {
      return (CUresult)fk.cfg.fail[i].code;
    }
  }
  if (fk.deinitialized) {
    return CUDA_ERROR_DEINITIALIZED;
  }
  if (fk.forked) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  if (need_init && !fk.initialized) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return CUDA_SUCCESS;
}

void fk_charge_migration(size_t pages) {
  unsigned long long ns = fk.cfg.migration_ns * pages;
  int idx = trace_depth > 0 && trace_depth <= TRACE_DEPTH
                ? fk_export_index(current_fn[trace_depth - 1])
                : -1;
  if (ns == 0) {
    return;
  }
  fk.migration_ns += ns;
  if (idx >= 0) {
    fk.latency_ns[idx] += ns;
  }
  owed_ns += fk.cfg.latency_charge_only ? 0 : ns;
}

/* Spends a call's FAKECUDA_LATENCY, without the lock: a real driver's calls overlap across
 * threads (each waits on its own ioctl). Short ones spin, as the driver's CPU work would keep
 * the thread busy and a sleep that short would oversleep by the kernel's timer slack; longer
 * ones sleep. */
static void spend(unsigned long long ns) {
  struct timespec now, until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += (time_t)(ns / 1000000000ULL);
  until.tv_nsec += (long)(ns % 1000000000ULL);
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  if (ns > 100000) {
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
    }
    return;
  }
  do {
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while (now.tv_sec < until.tv_sec ||
           (now.tv_sec == until.tv_sec && now.tv_nsec < until.tv_nsec));
}

CUresult fk_leave(CUresult rc) {
  trace_depth--;
  const char *fn = trace_depth < TRACE_DEPTH ? current_fn[trace_depth] : "?";
  fk_trace("%s = %d", fn, (int)rc);
  fk_log_failure(fn, rc);
  pthread_mutex_unlock(&fk.lock);
  if (trace_depth == 0 && owed_ns != 0) {
    unsigned long long ns = owed_ns;
    owed_ns = 0;
    spend(ns);
  }
  return rc;
}

int fk_callout_begin(void) {
  if (trace_depth != 1) {
    return 0;
  }
  pthread_mutex_unlock(&fk.lock);
  return 1;
}

void fk_callout_end(int dropped) {
  if (dropped) {
    pthread_mutex_lock(&fk.lock);
  }
}

int fk_catchall(const char *name) {
  CUresult rc = fk_enter(name, FK_NEED_INIT);
  return (int)fk_leave(rc == CUDA_SUCCESS ? CUDA_ERROR_NOT_SUPPORTED : rc);
}

/* ---- Init and version. ---- */

FK_API CUresult cuInit(unsigned int Flags) {
  CUresult rc = fk_enter(__func__, FK_ANYTIME);
  if (rc == CUDA_SUCCESS && Flags != 0) {
    rc = CUDA_ERROR_INVALID_VALUE;
  }
  if (rc == CUDA_SUCCESS && !fk.initialized) {
    rc = fk_devices_init();
    if (rc == CUDA_SUCCESS) {
      fk.initialized = 1;
    }
  }
  return fk_leave(rc);
}

static CUresult driver_version(int *v) {
  if (v == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *v = FK_DRIVER_VERSION;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDriverGetVersion(int *driverVersion) {
  FK_BODY(FK_ANYTIME, driver_version(driverVersion));
}

/* ---- Statistics. ---- */

FK_API unsigned long long fakecudaHazards(void) {
  pthread_mutex_lock(&fk.lock);
  unsigned long long h = fk.hazards;
  pthread_mutex_unlock(&fk.lock);
  return h;
}

FK_API unsigned long long fakecudaPeakBytes(int dev, int restart) {
  unsigned long long peak = 0;
  pthread_mutex_lock(&fk.lock);
  if (fk.initialized && dev >= 0 && dev < fk.ndev) {
    peak = fk.dev[dev].peak;
    if (restart) {
      fk.dev[dev].peak = fk.cfg.driver_memory ? fk_mem_held(dev) : fk.dev[dev].used;
    }
  }
  pthread_mutex_unlock(&fk.lock);
  return peak;
}

FK_API unsigned long long fakecudaCalls(const char *name) {
  int idx = name ? fk_export_index(name) : -1;
  if (idx < 0) {
    return 0;
  }
  pthread_mutex_lock(&fk.lock);
  unsigned long long n = fk.calls[idx];
  pthread_mutex_unlock(&fk.lock);
  return n;
}

static CUresult device_usage(int dev, size_t *used, int *contexts) {
  if (fk.deinitialized) {
    return CUDA_ERROR_DEINITIALIZED;
  }
  if (fk.cfg_error || fk.forked || !fk.initialized) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  if (dev < 0 || dev >= fk.ndev) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  if (used == NULL || contexts == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *used = fk_mem_held(dev); /* this process's, with or without a machine */
  *contexts = fk_ctx_live(dev);
  return CUDA_SUCCESS;
}

FK_API CUresult fakecudaDeviceUsage(int dev, size_t *used, int *contexts) {
  pthread_once(&cfg_once, parse_config);
  pthread_mutex_lock(&fk.lock);
  CUresult rc = device_usage(dev, used, contexts);
  pthread_mutex_unlock(&fk.lock);
  return rc;
}

/* A write(2)-backed buffered writer: the report allocates nothing. */
struct out {
  int fd;
  size_t len;
  char buf[4096];
};

static void out_flush(struct out *o) {
  size_t off = 0;
  while (off < o->len) {
    ssize_t w = write(o->fd, o->buf + off, o->len - off);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) {
        continue;
      }
      break;
    }
    off += (size_t)w;
  }
  o->len = 0;
}

__attribute__((format(printf, 2, 3))) static void out_printf(struct out *o, const char *fmt, ...) {
  char tmp[1024]; /* one device's line of the report, the machine's figures included */
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) {
    return;
  }
  size_t len = (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1;
  if (o->len + len > sizeof o->buf) {
    out_flush(o);
  }
  memcpy(o->buf + o->len, tmp, len);
  o->len += len;
}

/* Expands %p in the configured path to the process id. */
static void stats_path(char *dst, size_t cap) {
  const char *s = fk.cfg.stats_path;
  size_t j = 0;
  for (size_t i = 0; s[i] != '\0' && j + 24 < cap; i++) {
    if (s[i] == '%' && s[i + 1] == 'p') {
      j += (size_t)snprintf(dst + j, cap - j, "%ld", (long)getpid());
      i++;
    } else {
      dst[j++] = s[i];
    }
  }
  dst[j] = '\0';
}

static void write_stats(void) {
  char path[1100];
  stats_path(path, sizeof path);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    fk_log("warning: cannot write FAKECUDA_STATS file %s: %s", path, strerror(errno));
    return;
  }
  static struct out o; /* under fk.lock; static keeps 4 KiB off a destructor's stack */
  o.fd = fd;
  o.len = 0;
  out_printf(&o, "{\n\"driver_version\": %d,\n\"initialized\": %d,\n\"hazards\": %llu,\n",
             FK_DRIVER_VERSION, fk.initialized, fk.hazards);
  out_printf(&o, "\"stale_work\": %llu,\n\"pending_work\": %d,\n", fk.stale_work,
             fk_work_pending());
  struct fk_machine_usage mu;
  if (fk.ndev > 0 && fk_mem_machine_usage(0, &mu) == 0) {
    out_printf(&o, "\"machine\": \"%s\",\n\"machine_reclaimed\": %llu,\n", fk.cfg.machine,
               (unsigned long long)mu.reclaimed);
    out_printf(&o, "\"machine_lock_recoveries\": %llu,\n", (unsigned long long)mu.recoveries);
  }
  out_printf(&o, "\"proc_address_queries\": %llu,\n\"proc_address_callers\": {", fk.gpa_queries);
  for (int i = 0; i < FK_MAX_CALLERS && fk.callers[i].name[0] != '\0'; i++) {
    out_printf(&o, "%s\n  \"%s\": %llu", i ? "," : "", fk.callers[i].name, fk.callers[i].count);
  }
  out_printf(&o, "\n},\n\"devices\": [");
  for (int d = 0; d < fk.ndev; d++) {
    struct fk_device *dv = &fk.dev[d];
    /* Leaked: never freed by the program (a pending cuMemFreeAsync counts as freed). */
    unsigned long long leaked = 0;
    size_t leaked_bytes = 0;
    for (size_t i = 0; i < fk_nallocs; i++) {
      const struct fk_alloc *a = fk_allocs[i];
      if ((a->kind == FK_K_DEVICE || a->kind == FK_K_ASYNC) && a->dev == d && !a->freeing) {
        leaked++; /* its bytes, not the pages that hold them (rounding_bytes) */
        leaked_bytes += a->kind == FK_K_DEVICE
                            ? (a->size + FK_ALLOC_ALIGN - 1) / FK_ALLOC_ALIGN * FK_ALLOC_ALIGN
                            : a->span;
      }
    }
    fk_vmm_leaked(d, &leaked, &leaked_bytes);
    fk_array_leaked(d, &leaked, &leaked_bytes);
    char machine[160] = "";
    if (fk_mem_machine_usage(d, &mu) == 0) {
      (void)snprintf(machine, sizeof machine,
                     ", \"machine_used_bytes\": %llu, \"machine_peak_bytes\": %llu, "
                     "\"machine_processes\": %u",
                     (unsigned long long)mu.used, (unsigned long long)mu.peak, mu.processes);
    }
    struct fk_ctx_memory cm;
    fk_driver_usage(d, &cm);
    size_t variables = dv->driver - cm.base - cm.local - cm.fifo - cm.heap - cm.images;
    out_printf(&o,
               "%s\n  {\"ordinal\": %d, \"total_bytes\": %zu, \"alloc_calls\": %llu, "
               "\"free_calls\": %llu, \"live_bytes\": %zu, \"peak_bytes\": %zu, "
               "\"leaked_allocations\": %llu, \"leaked_bytes\": %zu, \"driver_bytes\": %zu, "
               "\"managed_bytes\": %zu, \"managed_peak_bytes\": %zu, "
               "\"migrated_to_device_bytes\": %llu, \"migrated_to_host_bytes\": %llu, ",
               d ? "," : "", d, dv->total, dv->alloc_calls, dv->free_calls, dv->used, dv->peak,
               leaked, leaked_bytes, dv->driver, dv->managed, dv->managed_peak, dv->migrated_in,
               dv->migrated_out);
    out_printf(&o,
               "\"held_bytes\": %zu, \"rounding_bytes\": %zu, \"context_bytes\": %zu, "
               "\"local_bytes\": %zu, \"fifo_heap_bytes\": %zu, \"module_bytes\": %zu%s}",
               fk_mem_held(d), dv->rounding, cm.base, cm.local, cm.fifo + cm.heap,
               cm.images + variables, machine);
  }
  out_printf(&o, "\n],\n\"calls\": {");
  int first = 1;
  unsigned long long driver_ns = 0;
  for (size_t i = 0; i < fk_export_count; i++) {
    if (fk.calls[i] != 0) {
      out_printf(&o, "%s\n  \"%s\": %llu", first ? "" : ",", fk_exports[i].name, fk.calls[i]);
      first = 0;
    }
    driver_ns += fk.latency_ns[i];
  }
  out_printf(&o, "\n},\n\"driver_time_ns\": %llu,\n\"migration_ns\": %llu,\n\"latency_ns\": {",
             driver_ns, fk.migration_ns);
  first = 1;
  for (size_t i = 0; i < fk_export_count; i++) {
    if (fk.latency_ns[i] != 0) {
      out_printf(&o, "%s\n  \"%s\": %llu", first ? "" : ",", fk_exports[i].name, fk.latency_ns[i]);
      first = 0;
    }
  }
  out_printf(&o, "\n}\n}\n");
  out_flush(&o);
  close(fd);
}

/* ---- Process life. ---- */

static void atfork_prepare(void) {
  pthread_mutex_lock(&fk.lock);
}

static void atfork_parent(void) {
  pthread_mutex_unlock(&fk.lock);
}

static void atfork_child(void) {
  /* As with a real driver, CUDA state does not survive fork: a child of an initialised
   * process gets CUDA_ERROR_NOT_INITIALIZED everywhere (see README). The lock is recursive,
   * owned by the parent's thread id: the child starts a fresh one instead of unlocking. */
  if (fk.initialized) {
    fk.forked = 1;
  }
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&fk.lock, &attr);
  pthread_mutexattr_destroy(&attr);
}

__attribute__((constructor)) static void fk_load(void) {
  fk.pid = getpid();
  pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

__attribute__((destructor)) static void fk_unload(void) {
  if (getpid() != fk.pid) {
    /* A child forked before cuInit that initialised on its own gives its machine slot back. */
    pthread_mutex_lock(&fk.lock);
    fk_mem_machine_leave();
    pthread_mutex_unlock(&fk.lock);
    return;
  }
  pthread_once(&cfg_once, parse_config);
  int idle = fk_host_stop();
  pthread_mutex_lock(&fk.lock);
  if (!fk.cfg_error && fk.cfg.stats_path[0] != '\0') {
    write_stats();
  }
  /* Like a real driver at exit: release everything; later calls get DEINITIALIZED. This also
   * lets a dlclose()d fake leave nothing behind. A host function still running keeps them. */
  if (idle) {
    fk_graph_teardown();
    fk_logs_teardown();
    fk_module_teardown(); /* before the contexts go: a module gives its image back to one */
    fk_stream_teardown();
    fk_vmm_teardown();
    fk_mem_teardown();
    fk_array_teardown();
  }
  fk.deinitialized = 1;
  pthread_mutex_unlock(&fk.lock);
}

/* Records the shared object that called cuGetProcAddress*: basename of dladdr(ret). Called
 * without the lock held (dladdr takes the loader's lock). */
void fk_note_caller(void *ret) {
  char name[64] = "?";
  Dl_info info;
  if (ret != NULL && dladdr(ret, &info) != 0 && info.dli_fname != NULL) {
    const char *f = info.dli_fname;
    char exe[512];
    if (f[0] == '\0') {
      ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
      exe[n > 0 ? n : 0] = '\0';
      f = exe;
    }
    const char *slash = strrchr(f, '/');
    const char *base = slash ? slash + 1 : f;
    size_t len = strnlen(base, sizeof name - 1);
    memcpy(name, base, len);
    name[len] = '\0';
    for (char *c = name; *c; c++) {
      if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) {
        *c = '_';
      }
    }
  }
  pthread_mutex_lock(&fk.lock);
  fk.gpa_queries++;
  int i = 0;
  while (i < FK_MAX_CALLERS - 1 && fk.callers[i].name[0] != '\0' &&
         strcmp(fk.callers[i].name, name) != 0) {
    i++;
  }
  if (fk.callers[i].name[0] == '\0') {
    snprintf(fk.callers[i].name, sizeof fk.callers[i].name, "%s",
             i == FK_MAX_CALLERS - 1 ? "(other)" : name);
  }
  fk.callers[i].count++;
  pthread_mutex_unlock(&fk.lock);
}
