/* The run's description for the exit report (see runinfo.h). Device facts are published per
 * device with a release store once written; the job identifiers once, under pthread_once.
 */
#include "shim/accounting/runinfo.h"

#include "config/job.h"
#include "core/limits.h"
#include "shim/base/real.h"
#include "shim/base/signals.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

static int64_t start_ns;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static cfg_job_t job;
static atomic_bool job_ready;

static struct device {
  atomic_int state; /* 0 unknown, 1 being learnt, 2 learnt */
  char name[REPORT_GPU_NAME_MAX];
  char uuid[REPORT_UUID_MAX];
} devices[GPUCAP_MAX_DEVICES];

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

__attribute__((constructor)) static void runinfo_start(void) {
  start_ns = now_ns();
}

static void first_use(void) {
  cfg_job_load(&job, NULL, NULL);
  atomic_store_explicit(&job_ready, true, memory_order_release);
  signals_arm();
}

void runinfo_format_uuid(const CUuuid *u, char *out, size_t cap) {
  const unsigned char *b = (const unsigned char *)u->bytes;
  snprintf(out, cap, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
           b[14], b[15]);
}

void runinfo_learn(int dev) {
  pthread_once(&once, first_use);
  if (dev < 0 || dev >= GPUCAP_MAX_DEVICES) {
    return;
  }
  struct device *d = &devices[dev];
  int expected = 0;
  if (!atomic_compare_exchange_strong(&d->state, &expected, 1)) {
    return;
  }
  CUuuid uuid;
  if (!real.cuDeviceGetName ||
      real.cuDeviceGetName(d->name, (int)sizeof d->name, (CUdevice)dev) != CUDA_SUCCESS) {
    d->name[0] = '\0';
  }
  d->name[sizeof d->name - 1] = '\0';
  if (real.cuDeviceGetUuid_v2 && real.cuDeviceGetUuid_v2(&uuid, (CUdevice)dev) == CUDA_SUCCESS) {
    runinfo_format_uuid(&uuid, d->uuid, sizeof d->uuid);
  }
  atomic_store_explicit(&d->state, 2, memory_order_release);
}

/* The command line, as the kernel keeps it. */
static size_t read_command(char *buf, size_t cap) {
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  size_t len = 0;
  ssize_t n;
  while (fd >= 0 && len < cap && (n = read(fd, buf + len, cap - len)) > 0) {
    len += (size_t)n;
  }
  if (fd >= 0) {
    close(fd);
  }
  if (len == cap) { /* cut: end on a whole argument's NUL */
    buf[cap - 1] = '\0';
  }
  return len;
}

void runinfo_fill(report_run_t *run, const char *ended_by) {
  struct utsname u;
  run->pid = (long)getpid();
  run->host[0] = '\0';
  if (uname(&u) == 0) {
    snprintf(run->host, sizeof run->host, "%s", u.nodename);
  }
  run->command_len = read_command(run->command, sizeof run->command);
  run->start_ns = start_ns;
  run->end_ns = now_ns();
  snprintf(run->ended_by, sizeof run->ended_by, "%s", ended_by);
  run->njob = 0;
  for (int i = 0; atomic_load_explicit(&job_ready, memory_order_acquire) && i < job.n &&
                  run->njob < REPORT_JOB_MAX;
       i++) {
    snprintf(run->job[run->njob].key, sizeof run->job[0].key, "%s", job.ids[i].key);
    snprintf(run->job[run->njob].value, sizeof run->job[0].value, "%s", job.ids[i].value);
    run->njob++;
  }
  run->ngpus = 0;
  for (int dev = 0; dev < GPUCAP_MAX_DEVICES && run->ngpus < GPUCAP_MAX_DEVICES; dev++) {
    const struct device *d = &devices[dev];
    if (atomic_load_explicit(&d->state, memory_order_acquire) != 2) {
      continue;
    }
    report_gpu_t *g = &run->gpus[run->ngpus++];
    g->device = dev;
    snprintf(g->name, sizeof g->name, "%s", d->name);
    snprintf(g->uuid, sizeof g->uuid, "%s", d->uuid);
  }
}
