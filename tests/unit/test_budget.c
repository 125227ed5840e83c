/* Unit tests of the shared budget's file arithmetic (shim/accounting/budget.c) on a budget in
 * ordinary memory: headroom, guarantees, the request held back for its asker, the peak, and the
 * reclaiming of dead processes' slots (a pid that is gone, a reused pid, the process itself
 * before an exec). Liveness is real: this process and a child that has exited.
 */
#include "shim/accounting/budget.h"
#include "tests/tap.h"

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (UINT64_C(1) << 20)

static struct budget l;

/* A pid that is certainly gone: a child that has exited and been reaped. */
static pid_t dead_pid(void) {
  pid_t p = fork();
  if (p == 0) {
    _exit(0);
  }
  waitpid(p, NULL, 0);
  return p;
}

static void occupy(int slot, pid_t pid, uint64_t start, uint64_t used) {
  memset(&l.slot[slot], 0, sizeof l.slot[slot]);
  l.slot[slot].start = start;
  l.slot[slot].used[0] = used;
  l.slot[slot].pid = pid;
}

static void reset(uint64_t cap, uint64_t min) {
  memset(&l, 0, sizeof l);
  l.dev[0].cap = cap;
  l.dev[0].min = min;
  l.dev[0].want_slot = -1;
  strcpy(l.dev[0].uuid, "GPU-0");
}

int main(void) {
  pid_t me = getpid();
  uint64_t start = budget_start_of(me);
  tap_ok(start > 0, "this process's start time is read from /proc");
  pid_t gone = dead_pid();
  TAP_EQ(budget_start_of(gone), 0, "a reaped child has no start time: dead");

  /* Headroom: the cap less everyone's charges. */
  reset(100 * MiB, 0);
  occupy(0, me, start, 30 * MiB);
  occupy(1, me, start, 50 * MiB);
  TAP_EQ(budget_used(&l, 0), 80 * MiB, "the budget's use is the sum over occupied slots");
  TAP_EQ(budget_headroom(&l, 0, 0), 20 * MiB, "headroom = cap - use");
  tap_ok(!budget_admit(&l, 0, 0, 21 * MiB), "a charge beyond the headroom is refused");
  TAP_EQ(l.slot[0].used[0], 30 * MiB, "... and changes nothing");
  tap_ok(budget_admit(&l, 0, 0, 20 * MiB), "a charge up to the headroom is admitted");
  TAP_EQ(l.dev[0].peak, 100 * MiB, "... and the peak records the sum it reached");
  l.slot[1].pid = 0;
  TAP_EQ(budget_used(&l, 0), 50 * MiB, "a free slot (pid 0) counts nothing");

  /* Overuse (a forced charge past the cap) never underflows. */
  occupy(1, me, start, 200 * MiB);
  TAP_EQ(budget_headroom(&l, 0, 0), 0, "use above the cap: headroom 0, no unsigned underflow");

  /* Guarantees: what the others may still claim of theirs is held back. */
  reset(300 * MiB, 100 * MiB);
  occupy(0, me, start, 10 * MiB);
  occupy(1, me, start, 0);
  TAP_EQ(budget_reserved(&l, 0, 1), 90 * MiB, "A's unmet guarantee (100 - 10 MiB) is held back");
  TAP_EQ(budget_headroom(&l, 0, 1), 200 * MiB, "B may take 300 - 10 - 90 MiB");
  TAP_EQ(budget_headroom(&l, 0, 0), 190 * MiB, "A may take 300 - 10 - 100 (B's guarantee)");
  occupy(0, me, start, 150 * MiB);
  TAP_EQ(budget_reserved(&l, 0, 1), 0, "a guarantee already met holds nothing back");

  /* The request held back for its asker. */
  reset(400 * MiB, 0);
  occupy(0, me, start, 256 * MiB); /* A: idle pool memory */
  occupy(1, me, start, 0);         /* B: asks for 300 MiB */
  tap_ok(!budget_admit(&l, 0, 1, 300 * MiB), "B is refused 300 MiB");
  tap_ok(l.dev[0].want == 300 * MiB && l.dev[0].want_slot == 1, "... and its request recorded");
  l.slot[0].used[0] = 0; /* A gives its idle memory back */
  TAP_EQ(budget_headroom(&l, 0, 0), 100 * MiB, "A's growth may not take B's 300 MiB again");
  tap_ok(!budget_admit(&l, 0, 0, 200 * MiB), "A is refused 200 MiB meanwhile");
  TAP_EQ(l.dev[0].want_slot, 1, "... without taking B's place");
  tap_ok(budget_admit(&l, 0, 1, 300 * MiB), "B's retry is admitted");
  TAP_EQ(l.dev[0].want_slot, -1, "... and nothing is held back any more");
  tap_ok(!budget_admit(&l, 0, 0, 200 * MiB) && l.dev[0].want_slot == 0,
         "a later refusal of A records A's request");
  l.slot[0].pid = 0;
  TAP_EQ(budget_reserved(&l, 0, 1), 0, "a request of a process that is gone holds nothing back");
  occupy(0, me, start, 0);
  l.dev[0].want_slot = 0;
  l.dev[0].want_ns = 0;
  TAP_EQ(budget_reserved(&l, 0, 1), 0, "an expired request holds nothing back");

  /* Reclaiming: dead pids, reused pids, the process itself before an exec. */
  reset(100 * MiB, 0);
  occupy(0, me, start, 10 * MiB);
  occupy(1, gone, 12345, 20 * MiB);
  occupy(2, me, start + 1, 30 * MiB); /* the pid, reused by another process: another start */
  TAP_EQ(budget_reclaim(&l, 0, 0), 1, "reclaim leaves the one live process");
  tap_ok(l.slot[0].pid == me && l.slot[1].pid == 0 && l.slot[2].pid == 0,
         "... freeing a gone pid's slot and a reused pid's");
  TAP_EQ(l.reclaimed, 2, "... and counting both");
  TAP_EQ(budget_used(&l, 0), 10 * MiB, "their charges are back");
  TAP_EQ(budget_reclaim(&l, me, start), 0, "a joining process frees its own slot from before exec");

  /* Device entries are found by UUID. */
  TAP_EQ(budget_find(&l, "GPU-0"), 0, "a device entry is found by its UUID");
  TAP_EQ(budget_find(&l, "GPU-1"), -1, "an unknown UUID is not found");
  return tap_done();
}
