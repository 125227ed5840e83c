/* budgetlock: takes a shared budget's ledger lock and keeps it until killed, for
 * tests/integ/budget.sh (the process a test kills with kill -9 inside the lock). Links the
 * shim's ledger module (shim/budget.c) and nothing else. Not a TAP test itself.
 *
 *   budgetlock NAME   prints "locked" once it holds the lock of budget NAME, then waits
 */
#include "shim/budget.h"

#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
  struct budget *l;
  char err[512];
  if (argc != 2 || budget_open(argv[1], false, "", &l, err, sizeof err) != 0) {
    fprintf(stderr, "budgetlock: %s\n", argc == 2 ? err : "usage: budgetlock NAME");
    return 1;
  }
  if (budget_lock(l) != 0) {
    fprintf(stderr, "budgetlock: cannot lock\n");
    return 1;
  }
  printf("locked\n");
  fflush(stdout);
  for (;;) {
    pause();
  }
}
