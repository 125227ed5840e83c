/* Tests for config/discover and config/cgroup: every source's accepted forms and rejections, the
 * message that names a bad source with its accepted form, the per-device arithmetic (smallest
 * wins, the margin under a limit, guarantees, PCI keys), and the cgroup walk over a directory
 * tree made here and named by GPUCAP_CGROUP_ROOT. Prints TAP.
 */
#include "config/cgroup.h"
#include "config/discover.h"
#include "tests/tap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

static cfg_found_t found;
static char msg[8192];

/* The first line of msg, for a check's description. */
static const char *line1(void) {
  static char l[sizeof msg];
  snprintf(l, sizeof l, "%.*s", (int)strcspn(msg, "\n"), msg);
  return l;
}

/* Adds one source to the (emptied) table; returns cfg_discover_add's answer. */
static int one(const char *name, const char *text) {
  cfg_found_clear(&found);
  msg[0] = '\0';
  return cfg_discover_add(&found, name, NULL, text, msg, sizeof msg);
}

/* The cap the table gives device ordinal at PCI bus `bus` (domain 0, device 0). */
static cfg_devcap_t dev(int ordinal, int bus) {
  cfg_pci_t pci = {0, (uint32_t)bus, 0, 0};
  cfg_devcap_t c;
  cfg_discover_device(&found, ordinal, bus >= 0 ? &pci : NULL, true, &c);
  return c;
}

static uint64_t capped(uint64_t line) {
  return line - cfg_discover_margin(line);
}

static void test_pci(void) {
  static const struct {
    const char *text;
    uint32_t domain, bus, device, function;
  } good[] = {
      {"0000:3b:00.0", 0, 0x3b, 0, 0},
      {"00000000:3B:00.0", 0, 0x3b, 0, 0},
      {"3b:00.0", 0, 0x3b, 0, 0},
      {"0001:86:1f.7", 1, 0x86, 0x1f, 7},
      {"ffffffff:ff:1f.7", 0xffffffff, 0xff, 0x1f, 7},
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    cfg_pci_t p;
    int rc = cfg_parse_pci(good[i].text, strlen(good[i].text), &p);
    tap_ok(rc == 0 && p.domain == good[i].domain && p.bus == good[i].bus &&
               p.device == good[i].device && p.function == good[i].function,
           "PCI bus id '%s'", good[i].text);
  }
  static const char *const bad[] = {"",
                                    "3b",
                                    "0000:3b:00",
                                    "0000:3b:20.0",
                                    "0000:3b:00.8",
                                    "0000:3bb:00.0",
                                    "g000:3b:00.0",
                                    "0:0:3b:00.0",
                                    "0000:3b:00.0 ",
                                    "000000000:3b:00.0",
                                    "0000:3b.00:0"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cfg_pci_t p = {9, 9, 9, 9};
    int rc = cfg_parse_pci(bad[i], strlen(bad[i]), &p);
    tap_ok(rc == -EINVAL && p.domain == 9, "'%s' is not a PCI bus id, and nothing is written",
           bad[i]);
  }
  char buf[32];
  cfg_pci_t p = {0, 0x3b, 0, 0};
  cfg_format_pci(&p, buf, sizeof buf);
  tap_ok(strcmp(buf, "0000:3b:00.0") == 0, "written as sysfs writes it: %s", buf);
}

static void test_mps(void) {
  tap_ok(one("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G,1=512M") == 0 && msg[0] == '\0',
         "MPS: 0=1G,1=512M");
  TAP_EQ(dev(0, 1).cap, capped(GiB), "  device 0: 1 GiB less the margin");
  TAP_EQ(dev(0, 1).line, GiB, "  its line is 1 GiB");
  TAP_EQ(dev(1, 2).cap, capped(512 * MiB), "  device 1: 512 MiB less the margin");
  TAP_EQ(dev(2, 3).cap, UINT64_MAX, "  device 2: not named, no cap");
  tap_ok(one("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1GB, 1 = 512mb") == 0 &&
             dev(1, 2).line == 512 * MiB && dev(0, 1).line == GiB,
         "MPS: NVIDIA's MB and GB are binary units");
  tap_ok(one("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "1G") == -EINVAL && !found.src[0].valid &&
             dev(0, 1).cap == UINT64_MAX,
         "MPS: a bare size names no device: invalid, and it caps nothing");
  tap_ok(strstr(msg, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT='1G': names no device; accepted: "
                     "ORDINAL=SIZE") == msg,
         "  the message names the variable, its value and the accepted form: %s", line1());
  tap_ok(one("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1G,0=2G") == -EINVAL,
         "MPS: a device given twice");
  tap_ok(one("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=0") == -EINVAL, "MPS: a zero limit");
  tap_ok(one("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1X") == -EINVAL, "MPS: a unit it lacks");
}

static void test_slurm(void) {
  tap_ok(one("SLURM_SHARD_MEM_PER_GPU", "0000:3b:00.0=20480M,0000:86:00.0=1024M") == 0,
         "Slurm: two PCI bus ids");
  TAP_EQ(dev(0, 0x3b).line, 20480 * MiB, "  the device at 3b, whatever its ordinal");
  TAP_EQ(dev(0, 0x86).line, 1024 * MiB, "  the device at 86");
  TAP_EQ(dev(1, 0x3b).line, 20480 * MiB, "  the same device under another ordinal");
  TAP_EQ(dev(0, 0x01).cap, UINT64_MAX, "  a device it does not name: no cap");
  TAP_EQ(dev(0, -1).cap, UINT64_MAX, "  a device whose PCI bus id is unknown: no cap from it");
  tap_ok(one("SLURM_SHARD_MEM_PER_GPU", "00000000:3B:00.0=4096M") == 0 &&
             dev(5, 0x3b).line == 4096 * MiB,
         "Slurm: nvidia-smi's form of the PCI bus id");
  tap_ok(one("SLURM_SHARD_MEM_PER_GPU", "0000:3b:00.0=1M,0000:3B:00.0=2M") == -EINVAL &&
             strstr(msg, "given twice") != NULL,
         "Slurm: a device given twice");
  tap_ok(one("SLURM_SHARD_MEM_PER_GPU", "gpu0=1024M") == -EINVAL &&
             strstr(msg, "PCI bus id") != NULL && strstr(msg, "accepted: PCI_BUS_ID=SIZE") != NULL,
         "Slurm: an item that is not a PCI bus id: %s", line1());
  tap_ok(one("SLURM_SHARD_MEM_PER_GPU", "0000:3b:00.0=1024M,") == -EINVAL, "Slurm: an empty item");
  tap_ok(one("SLURM_SHARD_MEM_PER_GPU", "0000:3b:00.0") == -EINVAL, "Slurm: no size");
}

static void test_toolkit(void) {
  tap_ok(one("NVIDIA_GPU_MEMORY_LIMIT", "16384") == 0 && dev(3, 9).line == 16 * GiB &&
             found.src[0].kind == CFG_LINE_LIMIT,
         "container toolkit: a limit in MiB, for every device");
  tap_ok(one("NVIDIA_GPU_MEMORY_LIMIT", "16GiB") == -EINVAL &&
             strstr(msg, "accepted: a whole number of MiB") != NULL,
         "  a size with a unit is not what the toolkit reads");
  tap_ok(one("NVIDIA_GPU_MEMORY_LIMIT", "0") == -EINVAL, "  a limit of 0 is refused");
  tap_ok(one("NVIDIA_GPU_MEMORY_REQUEST", "4096") == 0 && dev(0, 1).soft == 4 * GiB &&
             dev(0, 1).cap == UINT64_MAX && dev(0, 1).soft_src == 0,
         "container toolkit: a request is a guarantee, not a cap");
  tap_ok(one("NVIDIA_GPU_MEMORY_REQUEST", "0") == 0 && dev(0, 1).soft == UINT64_MAX,
         "  a request of 0 is no guarantee");
}

static void test_hami_kai(void) {
  tap_ok(one("CUDA_DEVICE_MEMORY_LIMIT", "4096m") == 0 && dev(7, 1).line == 4 * GiB,
         "HAMi: 4096m for every device");
  tap_ok(one("CUDA_DEVICE_MEMORY_LIMIT_3", "2g") == 0 && dev(3, 1).line == 2 * GiB &&
             dev(2, 1).cap == UINT64_MAX &&
             strcmp(found.src[0].name, "CUDA_DEVICE_MEMORY_LIMIT_3") == 0,
         "HAMi: CUDA_DEVICE_MEMORY_LIMIT_3 caps ordinal 3 only");
  tap_ok(one("CUDA_DEVICE_MEMORY_LIMIT", "1GB") == 0 && dev(0, 1).line == GiB,
         "HAMi: 1GB is 1 GiB, never 1 byte");
  tap_ok(one("CUDA_DEVICE_MEMORY_LIMIT_64", "2g") == -ENOENT, "HAMi: no ordinal 64");
  tap_ok(one("CUDA_DEVICE_MEMORY_LIMIT", "lots") == -EINVAL &&
             strstr(msg, "CUDA_DEVICE_MEMORY_LIMIT='lots'") == msg,
         "HAMi: a value that is no size");
  tap_ok(one("GPU_MEMORY_LIMIT", "17179869184") == 0 && dev(0, 1).line == 16 * GiB, "KAI: bytes");
  tap_ok(one("GPU_MEMORY_LIMIT", "-1") == -EINVAL, "KAI: a negative number");
  tap_ok(one("NOT_A_SOURCE", "1") == -ENOENT && found.n == 0, "an unknown name is no source");
}

static void test_dmem(void) {
  const char *text = "drm/0000:3b:00.0/vram0 1073741824\n"
                     "drm/0000:3b:00.0/stolen max\n"
                     "drm/0000:86:00.0/vram0 max\n"
                     "drm/soc/vram 4096\n"
                     "\n";
  tap_ok(one("dmem.max", text) == 0 && found.nlines == 1, "dmem.max: one device limited");
  TAP_EQ(dev(0, 0x3b).line, GiB, "  its vram0 region");
  TAP_EQ(dev(0, 0x86).cap, UINT64_MAX, "  a device at max: no cap");
  size_t shown = strlen(found.src[0].value);
  tap_ok(strncmp(found.src[0].value, "drm/0000:3b:00.0/vram0 1073741824; drm/0000:3b:00.0/", 52) ==
                 0 &&
             shown == CFG_QUOTE_IN + 3 && strcmp(found.src[0].value + shown - 3, "...") == 0,
         "  shown on one line, cut: %s", found.src[0].value);
  tap_ok(one("dmem.max", "drm/0000:3b:00.0/vram0 1073741824\ndrm/0000:3b:00.0/vram1 1073741824") ==
                 0 &&
             dev(0, 0x3b).line == 2 * GiB,
         "dmem.max: two video memory regions of one device add up");
  tap_ok(one("dmem.max", "drm/0000:3b:00.0/vram0 0") == 0 && dev(0, 0x3b).cap == 0,
         "dmem.max: 0 leaves nothing, as the driver would");
  tap_ok(one("dmem.max", "drm/0000:3b:00.0/vram0 1G") == -EINVAL &&
             strstr(msg, "accepted: lines 'drm/PCI_BUS_ID/REGION BYTES'") != NULL,
         "dmem.max: a value the kernel never writes");
  tap_ok(one("dmem.max", "drm/0000:3b:00.0/vram0") == -EINVAL, "dmem.max: a line without value");
  tap_ok(one("dmem.min", "drm/0000:3b:00.0/vram0 536870912") == 0 &&
             dev(0, 0x3b).soft == 512 * MiB && dev(0, 0x3b).cap == UINT64_MAX,
         "dmem.min: a guarantee");
  tap_ok(one("dmem.min", "drm/0000:3b:00.0/vram0 0") == 0 && dev(0, 0x3b).soft == UINT64_MAX,
         "dmem.min: 0 (the default) is no guarantee");
  cfg_found_clear(&found);
  msg[0] = '\0';
  cfg_discover_add(&found, "dmem.max", "/cg/a/b/dmem.max", "", msg, sizeof msg);
  tap_ok(found.n == 1 && found.src[0].valid && found.nlines == 0 &&
             strcmp(found.src[0].where, "/cg/a/b/dmem.max") == 0,
         "an empty file: a source that caps nothing, with its path");
}

static void test_device(void) {
  cfg_found_clear(&found);
  msg[0] = '\0';
  cfg_discover_add(&found, "NVIDIA_GPU_MEMORY_LIMIT", NULL, "8192", msg, sizeof msg);
  cfg_discover_add(&found, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", NULL, "0=4G,1=16G", msg, sizeof msg);
  cfg_discover_add(&found, "dmem.max", "/x", "drm/0000:02:00.0/vram0 6442450944", msg, sizeof msg);
  cfg_discover_add(&found, "dmem.min", "/x", "drm/0000:01:00.0/vram0 1073741824", msg, sizeof msg);
  cfg_discover_add(&found, "NVIDIA_GPU_MEMORY_REQUEST", NULL, "2048", msg, sizeof msg);
  cfg_discover_add(&found, "GPU_MEMORY_LIMIT", NULL, "junk", msg, sizeof msg);
  cfg_devcap_t d0 = dev(0, 1), d1 = dev(1, 2);
  tap_ok(d0.cap == capped(4 * GiB) && d0.limit_src == 1, "device 0: MPS's 4 GiB is the smallest");
  tap_ok(d1.cap == capped(6 * GiB) && d1.limit_src == 2, "device 1: dmem.max's 6 GiB");
  tap_ok(d0.soft == GiB && d0.soft_src == 3 && d1.soft == 2 * GiB && d1.soft_src == 4,
         "guarantees: the smallest that applies");
  tap_ok(dev(2, 3).cap == capped(8 * GiB) && dev(2, 3).limit_src == 0,
         "device 2: only the toolkit's limit for every device");
  tap_ok(!found.src[5].valid && strstr(msg, "GPU_MEMORY_LIMIT='junk'") != NULL,
         "the invalid source is kept, named, and applies nothing");
  TAP_EQ(cfg_discover_margin(16 * GiB), 512 * MiB, "the margin under a large line: 512 MiB");
  TAP_EQ(cfg_discover_margin(GiB), 256 * MiB, "under a 1 GiB line: a quarter");
  TAP_EQ(cfg_discover_margin(0), 0, "under nothing: nothing");
  one("CUDA_DEVICE_MEMORY_LIMIT", "4g");
  cfg_devcap_t whole;
  cfg_discover_device(&found, 0, NULL, false, &whole);
  tap_ok(whole.cap == 4 * GiB && whole.line == 4 * GiB && dev(0, -1).cap == 4 * GiB - 512 * MiB,
         "a cap that covers the process is the line itself; one on allocations, the line less "
         "the margin");
  cfg_found_clear(&found);
  cfg_discover_add(&found, "CUDA_DEVICE_MEMORY_LIMIT", NULL, "4g", msg, sizeof msg);
  cfg_discover_add(&found, "GPU_MEMORY_LIMIT", NULL, "4294967296", msg, sizeof msg);
  tap_ok(dev(0, 1).limit_src == 0, "a tie goes to the earlier source");
  cfg_found_clear(&found);
  int rc = 0, n = 0;
  for (; rc == 0 && n < CFG_FOUND_SOURCES + 5; n++) {
    rc = cfg_discover_add(&found, "dmem.max", "/x", "drm/0000:01:00.0/vram0 1", NULL, 0);
  }
  tap_ok(rc == -ENOSPC && n == CFG_FOUND_SOURCES + 1 && found.overflowed,
         "the %d-th source does not fit, and says so", CFG_FOUND_SOURCES + 1);
}

/* A fake environment: NAME=value strings, NULL-terminated. */
static const char *lookup(void *ctx, const char *name, bool secure) {
  const char *const *env = ctx;
  size_t n = strlen(name);
  (void)secure;
  for (; *env != NULL; env++) {
    if (strncmp(*env, name, n) == 0 && (*env)[n] == '=') {
      return *env + n + 1;
    }
  }
  return NULL;
}

static void put_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (f != NULL) {
    fputs(text, f);
    fclose(f);
  }
}

/* The "0::" path of this process, or "" without one. */
static void own_cgroup(char *out, size_t len) {
  char line[4096];
  FILE *f = fopen("/proc/self/cgroup", "r");
  out[0] = '\0';
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "0::", 3) == 0) {
      line[strcspn(line, "\n")] = '\0';
      snprintf(out, len, "%s", line + 3);
    }
  }
  if (f != NULL) {
    fclose(f);
  }
}

static void test_discover(void) {
  const char *env[] = {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2G",
                       "SLURM_SHARD_MEM_PER_GPU=   ", "CUDA_DEVICE_MEMORY_LIMIT_1=3g",
                       "NVIDIA_GPU_MEMORY_LIMIT=1GiB", NULL};
  static cfg_t cfg;
  cfg_defaults(&cfg);
  snprintf(cfg.cgroup_root, sizeof cfg.cgroup_root, "/nonexistent-gpucap-cgroup");
  int rc = cfg_discover(&found, &cfg, lookup, (void *)env, msg, sizeof msg);
  tap_ok(rc == -EINVAL && found.n == 3, "cfg_discover: three sources set (a blank one is not)");
  tap_ok(found.n == 3 && strcmp(found.src[0].name, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT") == 0 &&
             strcmp(found.src[1].name, "NVIDIA_GPU_MEMORY_LIMIT") == 0 && !found.src[1].valid &&
             strcmp(found.src[2].name, "CUDA_DEVICE_MEMORY_LIMIT_1") == 0,
         "  in the table's order, the bad one kept as invalid");
  tap_ok(strncmp(msg, "NVIDIA_GPU_MEMORY_LIMIT='1GiB': ", 32) == 0 &&
             strstr(msg, "; accepted: a whole number of MiB (16384)") != NULL &&
             strchr(msg, '\n') == msg + strlen(msg) - 1,
         "  one line names it: %s", line1());
  cfg.discover = false;
  tap_ok(cfg_discover(&found, &cfg, lookup, (void *)env, msg, sizeof msg) == 0 && found.n == 0 &&
             msg[0] == '\0',
         "GPUCAP_DISCOVER=off: nothing is read");

  char own[4096], root[] = "/tmp/gpucap-discover.XXXXXX", dir[8192], path[8300];
  own_cgroup(own, sizeof own);
  if (own[0] == '\0' || mkdtemp(root) == NULL) {
    tap_skip("the cgroup walk", "this process has no cgroup v2 path (a cgroup v1 system)");
    return;
  }
  // The process's cgroup under a root of our own: its file and its parent's.
  snprintf(dir, sizeof dir, "%s%s", root, own);
  char cmd[8400];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s/child'", dir);
  tap_ok(system(cmd) == 0, "a cgroup tree under %s", root);
  size_t rootlen = 0;
  char got[8192];
  cfg.discover = true;
  snprintf(cfg.cgroup_root, sizeof cfg.cgroup_root, "%s", root);
  tap_ok(cfg_cgroup_dir(root, got, sizeof got, &rootlen) == 0 &&
             strncmp(got, root, strlen(root)) == 0 && rootlen == strlen(root),
         "cfg_cgroup_dir: the process's cgroup under GPUCAP_CGROUP_ROOT: %s", got);
  snprintf(path, sizeof path, "%s/dmem.max", got);
  put_file(path, "drm/0000:01:00.0/vram0 4294967296\n");
  snprintf(path, sizeof path, "%s/dmem.min", got);
  put_file(path, "drm/0000:01:00.0/vram0 1073741824\n");
  bool nested = strcmp(got, root) != 0;
  if (nested) { /* an ancestor with a smaller limit bounds it */
    char parent[8192];
    snprintf(parent, sizeof parent, "%s", got);
    *strrchr(parent, '/') = '\0';
    snprintf(path, sizeof path, "%s/dmem.max", parent);
    put_file(path, "drm/0000:01:00.0/vram0 3221225472\n");
  }
  const char *none[] = {NULL};
  rc = cfg_discover(&found, &cfg, lookup, (void *)none, msg, sizeof msg);
  cfg_devcap_t c = dev(0, 1);
  tap_ok(rc == 0 && found.n >= 2 && strcmp(found.src[0].name, "dmem.max") == 0 &&
             strstr(found.src[0].where, "/dmem.max") != NULL,
         "the cgroup's dmem files are sources, with their paths (%d)", found.n);
  TAP_EQ(c.line, nested ? 3 * GiB : 4 * GiB,
         nested ? "  the parent's smaller dmem.max wins" : "  dmem.max caps the device");
  TAP_EQ(c.soft, GiB, "  dmem.min is its guarantee");
  snprintf(path, sizeof path, "%s/dmem.min", got);
  put_file(path, "drm/0000:01:00.0/vram0 lots\n");
  rc = cfg_discover(&found, &cfg, lookup, (void *)none, msg, sizeof msg);
  tap_ok(rc == -EINVAL && strstr(msg, "dmem.min (") == msg && strstr(msg, "/dmem.min)='") != NULL,
         "a bad dmem file is named with its path: %s", line1());
  // The walk up, over a deeper tree under ROOT/walk: job/step/task, with files of their own.
  snprintf(dir, sizeof dir, "%s/walk/job/step/task", root);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
  tap_ok(system(cmd) == 0, "a job/step/task tree");
  snprintf(path, sizeof path, "%s/walk/job/dmem.max", root);
  put_file(path, "drm/0000:01:00.0/vram0 8589934592\ndrm/0000:02:00.0/vram0 1073741824\n");
  snprintf(path, sizeof path, "%s/walk/job/step/dmem.max", root);
  put_file(path, "drm/0000:01:00.0/vram0 4294967296\ndrm/0000:02:00.0/vram0 max\n");
  snprintf(path, sizeof path, "%s/walk/job/step/dmem.min", root);
  put_file(path, "drm/0000:01:00.0/vram0 2147483648\n");
  snprintf(path, sizeof path, "%s/walk/job/dmem.min", root);
  put_file(path, "drm/0000:01:00.0/vram0 0\n");
  cfg_found_clear(&found);
  rc = cfg_discover_cgroup(&found, dir, strlen(root) + 5, msg, sizeof msg);
  tap_ok(rc == 0 && found.n == 4 && strstr(found.src[0].where, "/job/step/dmem.max") != NULL &&
             strstr(found.src[2].where, "/job/dmem.max") != NULL,
         "the walk up: the step's files, then the job's (the task has none)");
  TAP_EQ(dev(0, 1).line, 4 * GiB, "  device 1: the step's 4 GiB under the job's 8 GiB");
  TAP_EQ(dev(0, 2).line, GiB, "  device 2: the job's 1 GiB over the step's max");
  TAP_EQ(dev(0, 1).soft, UINT64_MAX,
         "  the job's dmem.min of 0 leaves the step no guarantee (the kernel's rule)");
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  tap_ok(system(cmd) == 0, "the tree is removed");
}

int main(void) {
  test_pci();
  test_mps();
  test_slurm();
  test_toolkit();
  test_hami_kai();
  test_dmem();
  test_device();
  test_discover();
  return tap_done();
}
