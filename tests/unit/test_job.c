/* Tests for config/job: the job identifiers of the exit report, read through a lookup callback
 * (as cfg_load's tests do) and from the process environment. Prints TAP.
 */
#include "config/job.h"
#include "tests/tap.h"

#include <stdlib.h>
#include <string.h>

/* A fake environment: NAME=value strings, NULL-terminated. */
static const char *lookup(void *ctx, const char *name, bool secure) {
  const char *const *env = ctx;
  size_t n = strlen(name);
  tap_ok(!secure, "%s is read with plain getenv rules", name);
  for (; *env != NULL; env++) {
    if (strncmp(*env, name, n) == 0 && (*env)[n] == '=') {
      return *env + n + 1;
    }
  }
  return NULL;
}

int main(void) {
  cfg_job_t job;
  static char long_value[300];
  memset(long_value, 'x', sizeof long_value - 1);
  char long_var[320] = "POD_NAME=";
  strcat(long_var, long_value);
  const char *env[] = {"SLURM_JOB_ID=4711",
                       "SLURM_ARRAY_TASK_ID=3",
                       "SLURM_STEP_ID=",
                       "POD_NAMESPACE=ml",
                       long_var,
                       "SLURM_JOB_IDX=9",
                       NULL};
  cfg_job_load(&job, lookup, env);
  TAP_EQ(job.n, 4, "four identifiers set (an empty one and a near miss are not)");
  tap_ok(job.n == 4 && strcmp(job.ids[0].key, "slurm_job_id") == 0 &&
             strcmp(job.ids[0].value, "4711") == 0,
         "slurm_job_id first");
  tap_ok(job.n == 4 && strcmp(job.ids[1].key, "slurm_array_task_id") == 0 &&
             strcmp(job.ids[1].value, "3") == 0,
         "then slurm_array_task_id");
  tap_ok(job.n == 4 && strcmp(job.ids[2].key, "k8s_namespace") == 0 &&
             strcmp(job.ids[2].value, "ml") == 0,
         "then k8s_namespace");
  tap_ok(job.n == 4 && strcmp(job.ids[3].key, "k8s_pod_name") == 0 &&
             strlen(job.ids[3].value) == CFG_JOB_VALUE_MAX - 1,
         "k8s_pod_name, cut to %d bytes", CFG_JOB_VALUE_MAX - 1);
  const char *none[] = {NULL};
  cfg_job_load(&job, lookup, none);
  TAP_EQ(job.n, 0, "nothing set: no identifiers");
  setenv("SLURM_CLUSTER_NAME", "hpc", 1);
  unsetenv("SLURM_JOB_ID");
  cfg_job_load(&job, NULL, NULL);
  tap_ok(job.n >= 1 && strcmp(job.ids[0].key, "slurm_cluster_name") == 0 &&
             strcmp(job.ids[0].value, "hpc") == 0,
         "the process environment when no callback is given");
  return tap_done();
}
