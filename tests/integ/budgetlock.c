/* budgetlock: takes a shared budget's file lock and keeps it until killed, for
 * tests/integ/budget.sh (the process a test kills with kill -9 inside the lock). Links the
 * shim's budget module (shim/accounting/budget.c) and nothing else. Not a TAP test itself.
 *
 *   budgetlock NAME        prints "locked" once it holds the lock of budget NAME, then waits
 *   budgetlock NAME lose   the same, then at a line on its input frees the lock word without
 *                          waking its waiters, prints "lost" and waits: the state a holder killed
 *                          between its release's store and the wake that follows leaves when
 *                          another process takes and releases the lock in between
 */
#include "shim/accounting/budget.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  struct budget *l;
  char err[512];
  bool lose = argc == 3 && strcmp(argv[2], "lose") == 0;
  if ((argc != 2 && !lose) || budget_open(argv[1], false, "", &l, err, sizeof err) != 0) {
    fprintf(stderr, "budgetlock: %s\n", argc == 2 ? err : "usage: budgetlock NAME [lose]");
    return 1;
  }
  if (budget_lock(l) != 0) {
    fprintf(stderr, "budgetlock: cannot lock\n");
    return 1;
  }
  printf("locked\n");
  fflush(stdout);
  char line[16];
  if (lose && fgets(line, sizeof line, stdin)) {
    /* glibc's lock word: 0 is free; the waiters' flag goes with it, and nobody is woken */
    __atomic_store_n(&l->lock.__data.__lock, 0, __ATOMIC_RELEASE);
    printf("lost\n");
    fflush(stdout);
  }
  for (;;) {
    pause();
  }
}
