/* Tests for scripts/slurm/jobcap: a node's GPU and shard counts from Slurm's Gres string, and a
 * shard job's share of each GPU. Prints TAP.
 */
#include "config/parse.h"
#include "scripts/slurm/jobcap.h"
#include "tests/tap.h"

#include <errno.h>
#include <string.h>

#define ONE CFG_FRACTION_ONE

static void gres(const char *text, int want_rc, unsigned want_gpus, unsigned want_shards) {
  unsigned g = 99, s = 99;
  int rc = jobcap_node_gres(text, &g, &s);
  tap_ok(rc == want_rc && (rc != 0 || (g == want_gpus && s == want_shards)),
         "Gres '%s': rc %d, %u GPU(s), %u shard(s)", text, rc, g, s);
}

int main(void) {
  gres("gpu:2,shard:16", 0, 2, 16);
  gres("gpu:a100:2(S:0-1),shard:a100:16(S:0-1)", 0, 2, 16);
  gres("gpu:a100:1(S:0,1),gpu:v100:1,shard:8,nic:1", 0, 2, 8);
  gres("gpu:4", 0, 4, 0);
  gres("", 0, 0, 0);
  gres("(null)", 0, 0, 0);
  gres("mps:100,gpu:1", 0, 1, 0);
  gres("gpu:", -EINVAL, 0, 0);
  gres("shard:lots", -EINVAL, 0, 0);
  gres("gpu:99999999999", -EINVAL, 0, 0);

  uint64_t f = 0;
  char why[256] = "";
  tap_ok(jobcap_shard_fraction(2, 1, 1, 8, &f, why, sizeof why) == 0 && f == ONE / 4,
         "2 of a GPU's 8 shards: a quarter");
  tap_ok(jobcap_shard_fraction(3, 1, 2, 16, &f, why, sizeof why) == 0 && f == 3 * ONE / 8,
         "3 shards on a node of 2 GPUs and 16 shards: 3/8");
  tap_ok(jobcap_shard_fraction(1, 1, 2, 15, &f, why, sizeof why) == 0 && f == ONE / 8,
         "15 shards over 2 GPUs: counted as 8 a GPU, so the share errs small");
  tap_ok(jobcap_shard_fraction(4, 2, 2, 16, &f, why, sizeof why) == 0 && f == ONE / 4,
         "4 shards over 2 visible GPUs: a quarter of each");
  tap_ok(jobcap_shard_fraction(1, 1, 1, 3, &f, why, sizeof why) == 0 &&
             f == UINT64_C(333333333333333333),
         "a third, rounded down");
  tap_ok(jobcap_shard_fraction(9, 1, 1, 8, &f, why, sizeof why) == 0 && f == ONE,
         "more shards than a GPU has: the whole GPU, no more");
  tap_ok(jobcap_shard_fraction(2, 1, 1, 0, &f, why, sizeof why) == -EINVAL &&
             strstr(why, "cannot share out shards") != NULL,
         "a node without shards: an error that says so (%s)", why);
  tap_ok(jobcap_shard_fraction(2, 1, 0, 8, &f, why, sizeof why) == -EINVAL, "no GPUs: an error");

  tap_ok(jobcap_visible(NULL) == 0 && jobcap_visible("") == 0 && jobcap_visible("0") == 1 &&
             jobcap_visible("0,1,3") == 3 && jobcap_visible("GPU-aa,GPU-bb") == 2,
         "CUDA_VISIBLE_DEVICES: entries counted");
  return tap_done();
}
