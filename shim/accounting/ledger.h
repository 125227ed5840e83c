/* The per-library ledger: every allocation gpucap charges is attributed to the library that
 * asked for it (the first caller outside the CUDA runtime and gpucap: libtorch_cuda, libcublas,
 * libnccl, the program itself), and the ledger keeps, per device and library, the bytes held
 * now and at their peak, plus the device's total now and at its peak (docs/design.md, "The
 * per-library ledger").
 *
 * Cost: a hook records its return address in a thread-local (LEDGER_ENTER, in every hook's
 * prologue); the allocation path maps it to a library through a lock-free cache of call sites
 * (one atomic load on a hit), filled by dladdr outside every pool lock. Only when that caller is
 * the dynamic CUDA runtime (libcudart.so) or gpucap itself is the stack walked one level
 * further, with glibc's backtrace(). The counters are relaxed atomics.
 */
#ifndef GPUCAP_SHIM_LEDGER_H
#define GPUCAP_SHIM_LEDGER_H

#include "core/limits.h"

#include <stdbool.h>
#include <stdint.h>

/* Libraries the ledger names (index 0: "unknown", a caller it could not name; index 1: "CUDA
 * graphs", the memory the device's graph pool holds for CUDA graphs' allocation nodes, which is
 * mapped by the driver at a launch for whichever graph and reused by all, so no one caller's);
 * callers beyond the last are counted under "other libraries" (LEDGER_OTHER). */
#define LEDGER_LIBS 48
#define LEDGER_UNKNOWN 0
#define LEDGER_GRAPHS 1
#define LEDGER_OTHER (LEDGER_LIBS - 1)
#define LEDGER_NAME_MAX 64

/* The calling thread's: the return address of the hook it is in (set by LEDGER_ENTER) and its
 * lookups since it last looked for unloaded libraries. Not initial-exec: `gpucap run` dlopens
 * the library to check that it loads, and the static TLS block may have no room left then. */
struct ledger_thread {
  const void *ret;      /* the hook's return address */
  const char *cfa;      /* the hook's canonical frame address (its caller's stack pointer) */
  const char *stack_hi; /* the end of the thread's stack, once known */
  unsigned lookups;
};
extern _Thread_local struct ledger_thread ledger_thread;

/* The first step of a hook that may charge an allocation, in the exported function itself:
 * remembers who called it. A build with
 * GPUCAP_NO_LEDGER (`make bench` measures the ledger's cost against one) keeps no ledger. */
#ifdef GPUCAP_NO_LEDGER
#define LEDGER_ENTER() ((void)0)
#else
#define LEDGER_ENTER()                                                                             \
  (ledger_thread.ret = __builtin_return_address(0), ledger_thread.cfa = __builtin_dwarf_cfa())
#endif

/* The library that called the current hook (0..LEDGER_LIBS-1), once per LEDGER_ENTER (then
 * "unknown" until the next). Never takes a lock on the steady-state path; the first call from a
 * new call site runs dladdr (and, for the CUDA runtime's call sites, backtrace). The caller
 * holds no pool lock. */
int ledger_caller(void);

/* The name of library lib as the ledger shows it ("libcublas", the program's own name), or NULL
 * for an index out of range or not yet given a name. Lock-free; the text never changes. */
const char *ledger_name(int lib);

/* Adds (held by the program) or removes (freed) `bytes` of library lib on device dev. */
void ledger_add(int dev, int lib, uint64_t bytes);
void ledger_sub(int dev, int lib, uint64_t bytes);

/* One library's line on one device. */
struct ledger_line {
  int dev;
  const char *name; /* "libcublas", the program's own name, "unknown" */
  bool program;     /* the main executable */
  uint64_t current, peak;
};

/* Calls fn for every (device, library) that ever held bytes, in device then library order.
 * No lock, no malloc: reads the counters as they are. */
void ledger_each(void (*fn)(void *arg, const struct ledger_line *l), void *arg);

/* Device dev's total held by the program now and at its peak (the peak of the sum). */
void ledger_total(int dev, uint64_t *current, uint64_t *peak);

/* Warms backtrace() (glibc loads libgcc_s on its first call), outside every hook's locks. */
void ledger_init(void);

#endif
