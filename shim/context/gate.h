/* gate: one owner and occasional visitors taking turns at a structure without a lock (the
 * per-thread fronts, shim/context/ctx_front.c, and the bench's model of them,
 * tests/bench/replay.c).
 *
 * Dekker's handshake on two flags, sequentially consistent: the owner raises busy, then reads
 * want; a visitor raises want, then reads busy. Either the visitor sees the owner inside (and
 * waits for it to leave) or the owner sees the visitor's request (and waits for it to end), so
 * the two are never inside together. The owner's way in is one atomic exchange on a line no
 * other thread writes while nobody visits. Visitors must be serialised by the caller (one at a
 * time per gate), and neither side may wait for anything the other holds while inside.
 * Header-only: no dependency but C11 atomics and sched_yield.
 */
#ifndef GPUCAP_SHIM_GATE_H
#define GPUCAP_SHIM_GATE_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

typedef struct gate {
  _Alignas(64) atomic_int busy; /* written by the owner alone, while it is inside */
  atomic_int want;              /* written by a visitor while it asks to see inside or is there */
} gate_t;

static inline void gate_init(gate_t *g) {
  atomic_init(&g->busy, 0);
  atomic_init(&g->want, 0);
}

/* The owner's way in: waits out a visitor there or asking. */
static inline void gate_enter(gate_t *g) {
  for (;;) {
    atomic_exchange_explicit(&g->busy, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&g->want, memory_order_seq_cst) == 0) {
      return;
    }
    atomic_store_explicit(&g->busy, 0, memory_order_release);
    while (atomic_load_explicit(&g->want, memory_order_acquire) != 0) {
      sched_yield();
    }
  }
}

static inline void gate_leave(gate_t *g) {
  atomic_store_explicit(&g->busy, 0, memory_order_release);
}

/* A way to wait between a visitor's looks: true to look again, false to give up. */
static inline bool gate_yield(void) {
  return sched_yield() == 0;
}

/* A visitor's way in: true once the owner is out; false, nothing asked any more, once `wait`
 * (called between looks while the owner is inside) gives up. */
static inline bool gate_visit(gate_t *g, bool (*wait)(void)) {
  atomic_store_explicit(&g->want, 1, memory_order_seq_cst);
  while (atomic_load_explicit(&g->busy, memory_order_seq_cst) != 0) {
    if (!wait()) {
      atomic_store_explicit(&g->want, 0, memory_order_release);
      return false;
    }
  }
  return true;
}

static inline void gate_unvisit(gate_t *g) {
  atomic_store_explicit(&g->want, 0, memory_order_release);
}

#endif
