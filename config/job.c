/* The job identifiers of the exit report (contracts in job.h): one table, copied as found. */
#include "config/job.h"

#include <stdlib.h>
#include <string.h>

static const struct {
  const char *key, *var;
} table[CFG_JOB_MAX] = {
    {"slurm_cluster_name", "SLURM_CLUSTER_NAME"}, {"slurm_job_id", "SLURM_JOB_ID"},
    {"slurm_array_job_id", "SLURM_ARRAY_JOB_ID"}, {"slurm_array_task_id", "SLURM_ARRAY_TASK_ID"},
    {"slurm_step_id", "SLURM_STEP_ID"},           {"slurm_procid", "SLURM_PROCID"},
    {"k8s_namespace", "POD_NAMESPACE"},           {"k8s_pod_name", "POD_NAME"},
};

void cfg_job_load(cfg_job_t *job, cfg_getenv_fn *get, void *ctx) {
  job->n = 0;
  for (int i = 0; i < CFG_JOB_MAX; i++) {
    const char *v = get != NULL ? get(ctx, table[i].var, false) : getenv(table[i].var);
    if (v == NULL || v[0] == '\0') {
      continue;
    }
    size_t len = strnlen(v, CFG_JOB_VALUE_MAX - 1);
    job->ids[job->n].key = table[i].key;
    memcpy(job->ids[job->n].value, v, len);
    job->ids[job->n].value[len] = '\0';
    job->n++;
  }
}
