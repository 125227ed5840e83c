/* The pthread_atfork handlers (see shim/fork.h). Registered from a constructor, which makes
 * no CUDA call and allocates nothing; lock order: pools, live blocks, VMM handles, arrays, IPC,
 * trace.
 */
#include "shim/fork.h"

#include "shim/array.h"
#include "shim/cap.h"
#include "shim/context.h"
#include "shim/ipc.h"
#include "shim/memory.h"
#include "shim/pending.h"
#include "shim/pool.h"
#include "shim/trace.h"

#include <pthread.h>

static void prepare(void) {
  pool_fork_prepare();
  memory_fork_prepare();
  vmm_fork_prepare();
  pending_fork_prepare();
  array_fork_prepare();
  ipc_fork_prepare();
  trace_fork_prepare();
}

static void parent(void) {
  trace_fork_parent();
  ipc_fork_parent();
  array_fork_parent();
  pending_fork_parent();
  vmm_fork_parent();
  memory_fork_parent();
  pool_fork_parent();
}

static void child(void) {
  pool_fork_child();
  memory_fork_child();
  vmm_fork_child();
  pending_fork_child();
  async_fork_child();
  array_fork_child();
  ipc_fork_child();
  trace_fork_child();
  cap_fork_child();
  context_fork_child();
  exit_fork_child();
}

__attribute__((constructor)) static void fork_init(void) {
  pthread_atfork(prepare, parent, child);
}
