/* The pthread_atfork child handler (see shim/fork.h). It takes no lock and waits for nothing:
 * every module forgets what the parent held, with fresh locks, without reading state another
 * thread of the parent may have been changing when fork() was called. Registered from a
 * constructor, which makes no CUDA call and allocates nothing.
 */
#include "shim/fork.h"

#include "shim/array.h"
#include "shim/capture.h"
#include "shim/cap.h"
#include "shim/context.h"
#include "shim/graph.h"
#include "shim/ipc.h"
#include "shim/memory.h"
#include "shim/pending.h"
#include "shim/pool.h"
#include "shim/trace.h"

#include <pthread.h>

static void child(void) {
  pool_fork_child();
  memory_fork_child();
  vmm_fork_child();
  pending_fork_child();
  async_fork_child();
  graph_fork_child();
  capture_fork_child();
  array_fork_child();
  ipc_fork_child();
  trace_fork_child();
  cap_fork_child();
  context_fork_child();
  exit_fork_child();
}

__attribute__((constructor)) static void fork_init(void) {
  pthread_atfork(NULL, NULL, child);
}
