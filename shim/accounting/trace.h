/* GPUCAP_TRACE: every allocation event, in RAPIDS RMM's CSV log format
 * (`Thread,Time,Action,Pointer,Size,Stream`) followed by gpucap's own columns
 * (`Device,Event,Held,Verdict,Library,Spilled`), so RMM's replay benchmark, gpucap-replay and the
 * gpucap command read it (docs/report.md describes the columns). The rows are in the order of the
 * operations: each event takes a place in one sequence (a ticket) where its outcome is decided
 * (under the pool's lock, or before the driver call that frees the memory), and the rows are
 * written in ticket order, whatever thread writes them. Events are kept in a ring in memory and
 * written in large appends (trace_poll, before an exec and at exit); the file only ever holds whole
 * lines. The first event of each device is followed by a `cap` row that gives the device's cap,
 * so that a trace read alone knows it. Thread-safe; a no-op when GPUCAP_TRACE is unset.
 */
#ifndef GPUCAP_SHIM_TRACE_H
#define GPUCAP_SHIM_TRACE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum trace_action {
  TRACE_ALLOC,         /* a block handed to the program */
  TRACE_ALLOC_FAILURE, /* a request refused */
  TRACE_FREE,          /* a block the program freed */
  TRACE_RESERVE,       /* a pool region reserved from the driver */
  TRACE_RELEASE,       /* a pool region returned to the driver */
  TRACE_CAP,           /* the device's cap, once, after its first event (written by trace.c) */
  TRACE_NONE,          /* a ticket given back unused: no row */
};

/* True iff events are being recorded (GPUCAP_TRACE set, the file not failed). Lock-free. */
bool trace_on(void);

/* A place in the order of the rows, or 0 when not tracing. The caller must fill it with
 * trace_fill before it takes another ticket (trace_note takes one): a ticket left unfilled
 * holds back every later row. O(1), lock-free: may be called under any lock. */
uint64_t trace_ticket(void);

/* Records one event at `ticket` (nothing when ticket is 0; no row for TRACE_NONE): its device
 * (-1 when not known), the block's or region's address (0 for a refusal), the bytes asked for
 * (for a free, those the block was asked with; for a region, its size), the bytes it holds
 * (chunk size; 0 for a refusal), and the ledger's library of the block (shim/accounting/ledger.h;
 * -1 for a region, which is gpucap's pool's). The stream is the one trace_stream set for this
 * thread. Writes no file; waits only when the ring is full of rows not yet written (then it writes
 * them itself). May be called under a pool lock. */
void trace_fill(uint64_t ticket, enum trace_action action, int dev, uint64_t ptr, uint64_t size,
                uint64_t held, int lib);

/* The trace's state (shim/accounting/trace.c), which the inline calls below test first:
 * TRACE_STATE_OFF once GPUCAP_TRACE was found unset, so that a program not tracing pays one load
 * per event; > 0 while events are recorded. */
#define TRACE_STATE_OFF (-1)
extern atomic_int trace_state;

/* trace_fill(trace_ticket(), ...): an event whose place in the order is now. */
void trace_note_now(enum trace_action action, int dev, uint64_t ptr, uint64_t size, uint64_t held,
                    int lib);
static inline void trace_note(enum trace_action action, int dev, uint64_t ptr, uint64_t size,
                              uint64_t held, int lib) {
  if (atomic_load_explicit(&trace_state, memory_order_relaxed) != TRACE_STATE_OFF) {
    trace_note_now(action, dev, ptr, size, held, lib);
  }
}

/* trace_note of a refusal of `size` bytes on dev asked by library lib, with its verdict (static
 * text, the Verdict column: oom_verdict_name's). */
void trace_refused(int dev, uint64_t size, const char *verdict, int lib);

/* Sets the stream recorded with this thread's next events (0: none, the legacy default
 * stream; 2: the per-thread default stream). Restore 0 after the call it is for. */
void trace_stream(uint64_t stream);

/* Sets the bytes recorded as spilled to host memory (the Spilled column) with this thread's next
 * events (0: none). Restore 0 after the call it is for. */
void trace_spilled(uint64_t bytes);

/* Writes out the recorded rows once enough are waiting. Call with no lock held. */
void trace_poll_rows(void);
static inline void trace_poll(void) {
  if (atomic_load_explicit(&trace_state, memory_order_relaxed) > 0) {
    trace_poll_rows();
  }
}

/* Writes out whatever is recorded, taking the lock with exit_lock (shim/base/exit.h). Returns false
 * iff the lock stayed busy (the rows are then left as they are). Async-signal-safe. */
bool trace_flush(void);

/* On the exit path: trace_flush, then an exit note for anything the trace lost (rows held back
 * by a lock that stayed busy or by an event still being recorded, or after a write failed). */
void trace_exit(void);

#endif
