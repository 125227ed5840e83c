/* One context's device-memory pool: a core/bfc pool over a device primitive whose regions come
 * from the real cuMemAlloc_v2 in the calling thread's current context (the pool's), each charged
 * to the device cap before the driver is asked, so the cap counts bytes reserved from the
 * driver. A pool lives in its context object (shim/ctx.h), which decides when it is used,
 * settled and dropped. Not thread-safe: the owning context's lock guards every call and every
 * field; reserve and release call the driver with it held (growth and trims only).
 */
#ifndef GPUCAP_SHIM_POOL_H
#define GPUCAP_SHIM_POOL_H

#include "core/bfc.h"
#include "shim/cudadefs.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A region aligned inside a larger driver allocation. */
struct pool_shift {
  uint64_t base, driver, extra;
};

typedef struct pool {
  bfc_pool_t *bfc;         /* NULL when the context has none (dropped, or not made) */
  int dev;                 /* the device charged */
  size_t pitch_align;      /* the device's texture alignment: a pitched block's row */
  CUresult last_driver_rc; /* the driver's answer behind a failed reserve */
  bool driver_full;        /* the driver refused a region for want of memory (this request) */
  uint64_t others_hold;    /* this request: what other processes and the driver held when the
                            * device's free memory refused a region; 0 otherwise */
  bool gone;               /* the driver already freed the regions: release only credits */
  /* Regions aligned inside a larger driver allocation (an object between gpucap and the driver
   * answered addresses not 256-byte aligned): region base -> what the driver gave. */
  bool misaligns;
  struct pool_shift *shifted;
  size_t nshifted, capshifted;
} pool_t;

/* True iff pooling is on (GPUCAP_POOL, read at the first call). */
bool pool_enabled(void);

/* What a new pool of device dev starts with: its limit (the device cap, else what TensorFlow
 * would take: the whole card when growing, free memory minus its reserve when preallocating),
 * whether it grows, and the device's pitch alignment. A few driver queries; needs no lock. */
typedef struct pool_setup {
  uint64_t limit;
  bool growth;
  size_t pitch_align;
} pool_setup_t;
void pool_setup(int dev, pool_setup_t *s);

/* Makes p a new, empty pool for device dev (the calling thread's current context's) from s.
 * Returns 0, or -errno with one error logged (p->bfc stays NULL). A preallocating pool reserves
 * its one region now (a driver call). */
int pool_open(pool_t *p, int dev, const pool_setup_t *s);

/* The driver destroyed the pool's context and with it the regions: writes a `free` trace row
 * for each block the program still held, destroys the pool with no driver call (each region's
 * charge returns) and leaves p->bfc NULL. */
void pool_close(pool_t *p);

/* The largest single request p could serve now: its largest free chunk, or (bfc_alloc steps 3
 * and 5) its wholly free regions released plus the room under its limit, reserved as one
 * region. s: p's stats. O(chunks). */
uint64_t pool_largest_request(const pool_t *p, const bfc_stats_t *s);

#endif
