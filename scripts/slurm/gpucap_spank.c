/* gpucap_spank: a Slurm SPANK plug-in that puts every task of a GPU job under gpucap.
 *
 * srun and sbatch get --gpucap-limit=SIZE and --gpucap-fraction=F, judged at submission by the
 * parsers the library uses (config/parse.h): a bad value stops the job there, with the parser's
 * message. On the node, in each step (slurmstepd, before the tasks start), a job Slurm gave GPUs
 * or shards gets LD_PRELOAD with libgpucap.so (kept in front of the task's own preloads), its
 * cap (the options; a job with shards at most its share of each GPU, from its shard count and the
 * node's), and GPUCAP_SHARE=slurm-CLUSTER-JOBID, one budget for all its tasks and their
 * children (the cluster's name keeps two clusters' jobs of one id on a node apart). A job
 * without GPUs is left alone. At the job's end its budget's file is removed.
 *
 * The plug-in holds no lock and keeps only the options of the one job it runs for.
 */
#include "config/cfg.h"
#include "config/parse.h"
#include "scripts/preload.h"
#include "scripts/slurm/jobcap.h"
#include "shim/accounting/budget.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

SPANK_PLUGIN(gpucap, 1)

#define PRELOAD_MAX 65536
#define VALUE_MAX 64
#define JOB_BUDGET "slurm-"
#define CLUSTER_MAX 40 /* Slurm's own limit on a cluster's name */

static struct {
  bool limit_set, fraction_set;
  uint64_t limit;    /* bytes, for every device */
  uint64_t fraction; /* units of 1/CFG_FRACTION_ONE */
} opts;

/* `lib=PATH` in plugstack.conf, else libgpucap.so next to this plug-in. */
static char lib[PATH_MAX];

static int take_limit(int val, const char *arg, int remote);
static int take_fraction(int val, const char *arg, int remote);

static struct spank_option options[] = {
    {"gpucap-limit", "SIZE",
     "Cap the GPU memory of the job's tasks together, on each GPU (gpucap): 8GiB, 512MiB, bytes", 1,
     0, take_limit},
    {"gpucap-fraction", "F",
     "Cap the GPU memory of the job's tasks together at this share of each GPU (gpucap): 0.5, 50%",
     1, 0, take_fraction},
    SPANK_OPTIONS_TABLE_END,
};

/* The option's value, judged by the parser of GPUCAP_<id>'s values (one value, for every
 * device; a per-device list belongs in GPUCAP_<id> itself). */
static int take(const char *name, cfg_opt_t id, const char *arg, bool *set, uint64_t *out) {
  static const char *const accepted[] = {
      [CFG_OPT_MEMORY_LIMIT] = "a size, in bytes or with a binary unit (8GiB, 512MiB, 1.5GiB, "
                               "8Gi; K M G T alike)",
      [CFG_OPT_MEMORY_FRACTION] = "a fraction in (0, 1] (0.5, .25) or a percentage (50%)",
  };
  char why[CFG_WHY_MAX];
  int rc = arg == NULL                  ? -EINVAL
           : id == CFG_OPT_MEMORY_LIMIT ? cfg_parse_size(arg, out, why, sizeof why)
                                        : cfg_parse_fraction(arg, out, why, sizeof why);
  if (rc != 0) {
    char q[CFG_QUOTE_MAX];
    cfg_quote(arg != NULL ? arg : "", q, sizeof q);
    slurm_error("gpucap: --%s='%s': %s; accepted: %s", name, q, arg != NULL ? why : "no value",
                accepted[id]);
    return -1;
  }
  *set = true;
  return 0;
}

static int take_limit(int val, const char *arg, int remote) {
  (void)val;
  (void)remote;
  return take("gpucap-limit", CFG_OPT_MEMORY_LIMIT, arg, &opts.limit_set, &opts.limit);
}

static int take_fraction(int val, const char *arg, int remote) {
  (void)val;
  (void)remote;
  return take("gpucap-fraction", CFG_OPT_MEMORY_FRACTION, arg, &opts.fraction_set, &opts.fraction);
}

/* The library next to this plug-in's own file ($PREFIX/lib/gpucap/). */
static void default_lib(void) {
  Dl_info info;
  if (dladdr(&opts, &info) == 0 || info.dli_fname == NULL) {
    return;
  }
  const char *slash = strrchr(info.dli_fname, '/');
  int dir = slash != NULL ? (int)(slash - info.dli_fname) : 1;
  (void)snprintf(lib, sizeof lib, "%.*s/libgpucap.so", dir, slash != NULL ? info.dli_fname : ".");
}

int slurm_spank_init(spank_t sp, int ac, char **av) {
  for (struct spank_option *o = options; o->name != NULL; o++) {
    if (spank_option_register(sp, o) != ESPANK_SUCCESS) {
      slurm_error("gpucap: cannot register --%s", o->name);
      return -1;
    }
  }
  lib[0] = '\0';
  for (int i = 0; i < ac; i++) {
    if (strncmp(av[i], "lib=", 4) == 0 && av[i][4] == '/') {
      (void)snprintf(lib, sizeof lib, "%s", av[i] + 4);
    } else {
      slurm_error("gpucap: plugstack.conf: unknown argument '%s' (accepted: lib=/ABSOLUTE/PATH)",
                  av[i]);
      return -1;
    }
  }
  if (lib[0] == '\0') {
    default_lib();
  }
  return 0;
}

/* The job's variable `name` into buf; false when unset or empty. */
static bool job_env(spank_t sp, const char *name, char *buf, int len) {
  return spank_getenv(sp, name, buf, len) == ESPANK_SUCCESS && buf[0] != '\0';
}

/* The node's GPU and shard counts, asked of slurmctld. The node's name is in slurmstepd's own
 * environment (slurmd sets SLURMD_NODENAME for its children), not yet in the job's. */
static int node_gres(unsigned *gpus, unsigned *shards) {
  char *node = getenv("SLURMD_NODENAME");
  node_info_msg_t *msg = NULL;
  if (node == NULL || slurm_load_node_single(&msg, node, SHOW_ALL) != SLURM_SUCCESS ||
      msg == NULL || msg->record_count < 1) {
    if (msg != NULL) {
      slurm_free_node_info_msg(msg);
    }
    return -EIO;
  }
  int rc = jobcap_node_gres(msg->node_array[0].gres, gpus, shards);
  slurm_free_node_info_msg(msg);
  return rc;
}

/* The job's share of each GPU from its shards on this node: 0, 1 when it has none, -1 after an
 * error for the job's output. */
static int shard_share(spank_t sp, uint64_t *e18) {
  char v[256];
  if (!job_env(sp, "SLURM_SHARDS_ON_NODE", v, sizeof v)) {
    return 1;
  }
  uint64_t shards = 0;
  char why[256];
  unsigned node_gpus = 0, node_shards = 0;
  if (cfg_parse_uint(v, 1, UINT32_MAX, &shards, why, sizeof why) != 0) {
    slurm_error("gpucap: SLURM_SHARDS_ON_NODE='%s': %s", v, why);
    return -1;
  }
  if (node_gres(&node_gpus, &node_shards) != 0) {
    slurm_error("gpucap: the job has %llu shard(s), but this node's shard configuration cannot "
                "be read from slurmctld; nothing is started (give --gpucap-limit or "
                "--gpucap-fraction to cap it without)",
                (unsigned long long)shards);
    return -1;
  }
  char visible[4096] = "";
  (void)job_env(sp, "CUDA_VISIBLE_DEVICES", visible, sizeof visible);
  unsigned n = jobcap_visible(visible);
  if (jobcap_shard_fraction((unsigned)shards, n > 0 ? n : 1, node_gpus, node_shards, e18, why,
                            sizeof why) != 0) {
    slurm_error("gpucap: %s", why);
    return -1;
  }
  return 0;
}

/* Whether Slurm gave the job GPUs (or shards of one) on this node. */
static bool has_gpus(spank_t sp) {
  static const char *const vars[] = {"SLURM_GPUS_ON_NODE", "SLURM_SHARDS_ON_NODE",
                                     "SLURM_STEP_GPUS", "SLURM_JOB_GPUS"};
  char v[256];
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    if (job_env(sp, vars[i], v, sizeof v) && strcmp(v, "0") != 0) {
      return true;
    }
  }
  return false;
}

/* The budget of job `job` of cluster `cluster` (NULL or "" when unknown): "slurm-CLUSTER-JOB",
 * bytes a budget's name cannot hold in the cluster's name written as '_'. */
static void budget_name(const char *cluster, uint32_t job, char out[CFG_NAME_MAX]) {
  char c[CLUSTER_MAX + 2] = "";
  size_t n = 0;
  for (; cluster != NULL && cluster[n] != '\0' && n < CLUSTER_MAX; n++) {
    char ch = cluster[n];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-';
    c[n] = ok ? ch : '_';
  }
  c[n] = '\0';
  (void)snprintf(out, CFG_NAME_MAX, JOB_BUDGET "%s%s%u", c, n > 0 ? "-" : "", job);
}

static int set(spank_t sp, const char *name, const char *value) {
  if (spank_setenv(sp, name, value, 1) != ESPANK_SUCCESS) {
    slurm_error("gpucap: cannot set %s in the job's environment", name);
    return -1;
  }
  return 0;
}

/* In each step on each node, before its tasks start: the job's environment. */
int slurm_spank_user_init(spank_t sp, int ac, char **av) {
  (void)ac;
  (void)av;
  uint32_t job = 0;
  if (spank_remote(sp) != 1 || spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS) {
    return 0;
  }
  if (!has_gpus(sp)) {
    if (opts.limit_set || opts.fraction_set) {
      slurm_spank_log("gpucap: warning: job %u has no GPU on this node: --gpucap-limit and "
                      "--gpucap-fraction cap nothing there",
                      job);
    }
    return 0;
  }
  uint64_t share = CFG_FRACTION_ONE;
  int shards = shard_share(sp, &share);
  if (shards < 0) {
    return -1;
  }
  static char preload[PRELOAD_MAX], old[PRELOAD_MAX];
  if (!job_env(sp, "LD_PRELOAD", old, sizeof old)) {
    old[0] = '\0';
  }
  if (preload_compose(lib, old, preload, sizeof preload) != 0) {
    slurm_error("gpucap: job %u: %s", job, preload);
    return -1;
  }
  char value[VALUE_MAX], name[CFG_NAME_MAX];
  int bad = set(sp, "LD_PRELOAD", preload);
  if (opts.limit_set) {
    cfg_format_size(opts.limit, value, sizeof value);
    bad |= set(sp, cfg_option(CFG_OPT_MEMORY_LIMIT)->name, value);
  }
  uint64_t fraction = opts.fraction_set && opts.fraction < share ? opts.fraction : share;
  if (opts.fraction_set || shards == 0) {
    cfg_format_fraction(fraction, value, sizeof value);
    bad |= set(sp, cfg_option(CFG_OPT_MEMORY_FRACTION)->name, value);
  }
  char cluster[256];
  budget_name(job_env(sp, "SLURM_CLUSTER_NAME", cluster, sizeof cluster) ? cluster : NULL, job,
              name);
  bad |= set(sp, cfg_option(CFG_OPT_SHARE)->name, name);
  slurm_verbose("gpucap: job %u: LD_PRELOAD=%s, GPUCAP_SHARE=%s", job, preload, name);
  return bad ? -1 : 0;
}

/* At the job's end on each node (slurmd, as root; the epilog's environment names the cluster):
 * its budget's file goes. */
int slurm_spank_job_epilog(spank_t sp, int ac, char **av) {
  (void)ac;
  (void)av;
  uint32_t job = 0;
  uid_t uid = 0;
  if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
    return 0;
  }
  char name[CFG_NAME_MAX], path[PATH_MAX];
  budget_name(getenv("SLURM_CLUSTER_NAME"), job, name);
  budget_path(name, (unsigned)uid, path, sizeof path);
  if (unlink(path) != 0 && errno != ENOENT) {
    slurm_error("gpucap: job %u: cannot remove %s: %s", job, path, strerror(errno));
  }
  return 0;
}
