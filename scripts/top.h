/* top: `gpucap top`, a live view of the shared budgets of this user on this machine (see
 * top.c), read from their budget files (shim/accounting/budget.h); no CUDA.
 */
#ifndef GPUCAP_SCRIPTS_TOP_H
#define GPUCAP_SCRIPTS_TOP_H

/* `gpucap top [--once] [--json] [--interval S] [-n N] [--budget NAME]`; argv[0] is "top".
 * Returns the exit status: 0, or CLI_USAGE on a usage error. */
int top_main(int argc, char **argv);

#endif
