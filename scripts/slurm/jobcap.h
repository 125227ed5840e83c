/* jobcap: what the Slurm plug-in (gpucap_spank.c) works out for a job, without Slurm: the share
 * of each GPU a job that asked for shards gets, from its shard count and the node's shard
 * configuration. Pure functions, no I/O, no allocation; the plug-in does the talking to Slurm.
 */
#ifndef GPUCAP_SCRIPTS_SLURM_JOBCAP_H
#define GPUCAP_SCRIPTS_SLURM_JOBCAP_H

#include <stddef.h>
#include <stdint.h>

/* Reads a node's generic resources as Slurm lists them ("gpu:2,shard:16",
 * "gpu:a100:2(S:0-1),shard:a100:16(S:0-1)", typed entries of one name adding up) into the count
 * of GPUs and of shards (0 when the node has none). Fails iff an entry of either name has no
 * count (-EINVAL). O(strlen(gres)). */
int jobcap_node_gres(const char *gres, unsigned *gpus, unsigned *shards);

/* The fraction of each GPU's memory (units of 1/CFG_FRACTION_ONE) for `job_shards` shards over
 * `visible` GPUs of a node with `node_gpus` GPUs and `node_shards` shards: job_shards divided by
 * (the shards per GPU, rounded up when they do not divide evenly, so the share errs small) times
 * visible, at most 1. Fails iff any count is 0 or the node has no shards to give (-EINVAL, with
 * a reason in why[whylen]). O(1). */
int jobcap_shard_fraction(unsigned job_shards, unsigned visible, unsigned node_gpus,
                          unsigned node_shards, uint64_t *e18, char *why, size_t whylen);

/* The number of devices in a CUDA_VISIBLE_DEVICES value (comma-separated entries); 0 for NULL or
 * an empty value. O(strlen). */
unsigned jobcap_visible(const char *cuda_visible_devices);

#endif
