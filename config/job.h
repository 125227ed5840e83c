/* The identifiers of the job a process runs in, for the exit report: Slurm's job, array and
 * step, and the Kubernetes pod (from POD_NAME / POD_NAMESPACE, which a pod spec sets from the
 * downward API). Read from the environment, so here in config/, with cfg_load's lookup
 * callback; nothing is parsed or judged, only copied. No state, no allocation.
 */
#ifndef GPUCAP_CONFIG_JOB_H
#define GPUCAP_CONFIG_JOB_H

#include "config/cfg.h"

#define CFG_JOB_MAX 8         /* identifiers read (the rows of job.c's table) */
#define CFG_JOB_VALUE_MAX 128 /* bytes kept of a value, NUL included */

typedef struct cfg_job {
  int n; /* identifiers found, in table order */
  struct {
    const char *key;               /* "slurm_job_id", ... (static) */
    char value[CFG_JOB_VALUE_MAX]; /* the variable's value, cut to fit */
  } ids[CFG_JOB_MAX];
} cfg_job_t;

/* Fills *job with every identifier whose variable is set and not empty, in this order:
 * slurm_cluster_name (SLURM_CLUSTER_NAME), slurm_job_id (SLURM_JOB_ID), slurm_array_job_id
 * (SLURM_ARRAY_JOB_ID), slurm_array_task_id (SLURM_ARRAY_TASK_ID), slurm_step_id
 * (SLURM_STEP_ID), slurm_procid (SLURM_PROCID), k8s_namespace (POD_NAMESPACE), k8s_pod_name
 * (POD_NAME). get: NULL for the process environment (getenv), or cfg_load's kind of callback.
 * Values longer than CFG_JOB_VALUE_MAX - 1 bytes are cut. Never fails; O(total length); must
 * not race setenv/putenv. */
void cfg_job_load(cfg_job_t *job, cfg_getenv_fn *get, void *ctx);

#endif
