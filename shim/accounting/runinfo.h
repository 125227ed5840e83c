/* What the exit report says about the run besides its pools: host, command line, start and
 * end, job identifiers and the devices' names and UUIDs. Everything that needs the driver or
 * the environment is learnt while the program runs (the exit path makes no CUDA call and reads
 * no environment); the rest is read at exit with plain system calls.
 */
#ifndef GPUCAP_SHIM_RUNINFO_H
#define GPUCAP_SHIM_RUNINFO_H

#include "core/report.h"
#include "shim/base/cudadefs.h"

#include <stddef.h>

/* At a device's first use (shim/accounting/cap.c, when its cap is computed): learns the device's
 * name and UUID from the driver, and at the first call of all the job identifiers (config/job.h),
 * and arms gpucap's handlers of terminating signals (signals_arm). Thread-safe; idempotent; a
 * driver error leaves the name or UUID unknown. */
void runinfo_learn(int dev);

/* Writes "GPU-" and the UUID u in nvidia-smi's form (41 bytes with the NUL) into out[cap]. */
void runinfo_format_uuid(const CUuuid *u, char *out, size_t cap);

/* Fills run for the exit report: pid, host (uname), command (/proc/self/cmdline), start (when
 * gpucap was loaded) and end (now), ended_by, job and the devices learnt. Notes are left as
 * they are. No CUDA call, no malloc, no lock: async-signal-safe. */
void runinfo_fill(report_run_t *run, const char *ended_by);

#endif
