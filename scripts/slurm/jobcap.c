/* jobcap: a job's share of each GPU from its shards (contracts in jobcap.h). */
#include "scripts/slurm/jobcap.h"

#include "config/parse.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* 128-bit arithmetic for the fraction, as config/parse.c does it (GCC and Clang, 64-bit). */
__extension__ typedef unsigned __int128 u128;

/* The count of one entry "name[:type]:count[(...)]" of length n: the digits after its last ':'
 * before any '('. */
static int entry_count(const char *e, size_t n, unsigned long long *count) {
  const char *paren = memchr(e, '(', n);
  size_t len = paren != NULL ? (size_t)(paren - e) : n;
  size_t colon = len;
  while (colon > 0 && e[colon - 1] != ':') {
    colon--;
  }
  if (colon == 0 || colon == len) {
    return -EINVAL;
  }
  unsigned long long v = 0;
  for (size_t i = colon; i < len; i++) {
    if (e[i] < '0' || e[i] > '9' || v > (UINT32_MAX - 9) / 10) {
      return -EINVAL;
    }
    v = v * 10 + (unsigned)(e[i] - '0');
  }
  *count = v;
  return 0;
}

int jobcap_node_gres(const char *gres, unsigned *gpus, unsigned *shards) {
  unsigned long long g = 0, s = 0;
  for (const char *e = gres != NULL ? gres : ""; *e != '\0';) {
    size_t n = 0;
    int depth = 0;
    while (e[n] != '\0' && (e[n] != ',' || depth > 0)) { /* commas inside (S:0,1) stay */
      depth += e[n] == '(' ? 1 : e[n] == ')' ? -1 : 0;
      n++;
    }
    bool is_gpu = n >= 4 && strncmp(e, "gpu:", 4) == 0;
    bool is_shard = n >= 6 && strncmp(e, "shard:", 6) == 0;
    unsigned long long c = 0;
    if ((is_gpu || is_shard) && entry_count(e, n, &c) != 0) {
      return -EINVAL;
    }
    g += is_gpu ? c : 0;
    s += is_shard ? c : 0;
    e += n + (e[n] == ',');
  }
  if (g > UINT32_MAX || s > UINT32_MAX) {
    return -EINVAL;
  }
  *gpus = (unsigned)g;
  *shards = (unsigned)s;
  return 0;
}

int jobcap_shard_fraction(unsigned job_shards, unsigned visible, unsigned node_gpus,
                          unsigned node_shards, uint64_t *e18, char *why, size_t whylen) {
  if (job_shards == 0 || visible == 0 || node_gpus == 0 || node_shards == 0) {
    (void)snprintf(why, whylen,
                   "cannot share out shards: the job has %u shard(s) over %u GPU(s), the node "
                   "%u shard(s) over %u GPU(s)",
                   job_shards, visible, node_gpus == 0 ? 0 : node_shards, node_gpus);
    return -EINVAL;
  }
  uint64_t per_gpu = (node_shards + node_gpus - 1) / node_gpus;
  u128 whole = (u128)per_gpu * visible;
  u128 f = (u128)job_shards * CFG_FRACTION_ONE / whole;
  *e18 = f > CFG_FRACTION_ONE ? CFG_FRACTION_ONE : (uint64_t)f;
  return 0;
}

unsigned jobcap_visible(const char *v) {
  if (v == NULL || v[0] == '\0') {
    return 0;
  }
  unsigned n = 1;
  for (; *v != '\0'; v++) {
    n += *v == ',';
  }
  return n;
}
