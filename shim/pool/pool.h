/* One context's device-memory pool: a core/bfc pool over a device primitive whose regions come
 * from the real cuMemAlloc_v2 in the calling thread's current context (the pool's), each charged
 * to the device cap before the driver is asked, so the cap counts bytes reserved from the
 * driver. A pool lives in its context object (shim/context/ctx.h), which decides when it is used,
 * settled and dropped. Not thread-safe: the owning context's lock guards every call and every
 * field; reserve and release call the driver with it held (growth and trims only).
 */
#ifndef GPUCAP_SHIM_POOL_H
#define GPUCAP_SHIM_POOL_H

#include "core/bfc.h"
#include "core/limits.h"
#include "shim/base/cudadefs.h"

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
  uint64_t rounding;       /* charged for the regions beyond their bytes (whole driver units,
                            * alignment slack): given back with them */
  /* Regions aligned inside a larger driver allocation (an object between gpucap and the driver
   * answered addresses not 256-byte aligned): region base -> what the driver gave. */
  bool misaligns;
  struct pool_shift *shifted;
  size_t nshifted, capshifted;
  /* VMM backing (docs/design.md, "The VMM-backed pool"): one reserved address range of
   * space_bytes at space, mapped and unmapped in units of `unit` bytes (the device's
   * allocation granularity), each unit its own physical allocation. */
  bool vmm;
  CUdeviceptr space;
  uint64_t space_bytes, unit;
  /* The shareable handle types each unit is made with: a POSIX file descriptor where the
   * device supports it, so that a block can be shared with another process (shim/entry/ipc.h);
   * none once the driver refused to make a unit with it. */
  CUmemAllocationHandleType handle_types;
  /* Read/write access for the device and every device that can access its memory (memory
   * from cuMemAlloc can be reached by peers; mapped units only by the devices named here). */
  CUmemAccessDesc access[GPUCAP_MAX_DEVICES];
  int naccess;
  uint64_t map_calls, unmap_calls; /* cuMemMap / cuMemUnmap calls that succeeded */
  uint64_t create_calls;           /* cuMemCreate calls that succeeded (each released at once) */
  /* The idle release (GPUCAP_RELEASE_AFTER, read when the pool opens): its window in ns (0:
   * never, and always for a region pool), when the current window began, and the most bytes in
   * use in it. */
  uint64_t window_ns, window_start_ns, window_peak;
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
  bool vmm;                               /* back the pool with virtual memory management */
  uint64_t unit;                          /* ... in units of the device's allocation granularity */
  uint64_t space_bytes;                   /* ... over this much address space */
  CUmemAllocationHandleType handle_types; /* ... each unit shareable as these */
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

/* The idle release, lock held, after each allocation (allocated: notes the bytes in use; a free
 * only lowers them) and free. While the device's charges are above its guarantee from the
 * cluster (cap_guarantee: dmem.min), any pool returns true with *keep set so that its idle
 * memory goes back down to the guarantee (never below its bytes in use). Otherwise, once a
 * VMM-backed pool's window of GPUCAP_RELEASE_AFTER has passed, returns true with *keep set to
 * the most bytes in use during it (what the pool keeps mapped) and starts a new window; false
 * for a region pool, with the setting 0, or when more than one unit above *keep is not mapped.
 * A clock read and two atomic loads; no driver call. */
bool pool_idle_due(pool_t *p, bool allocated, uint64_t *keep);

/* Unmaps p's whole free units while more than keep bytes are mapped (driver calls, lock held);
 * returns the bytes given back. */
uint64_t pool_trim_to(pool_t *p, uint64_t keep);

/* p's figures for the exit report (lock held): its counters, its largest request, and for a
 * VMM-backed pool what backs it. For such a pool driver_alloc_calls and driver_free_calls
 * count its cuMemCreate calls and the cuMemRelease right after each (the driver's own
 * counting); its map and unmap calls are apart. */
typedef struct pool_backing {
  bool vmm;             /* backed by virtual memory management: then the figures below */
  bfc_mapped_t mapped;  /* its address space, bytes mapped and released */
  uint64_t map_calls;   /* its driver calls cuMemMap */
  uint64_t unmap_calls; /* ... and cuMemUnmap */
} pool_backing_t;
void pool_report(const pool_t *p, bfc_stats_t *stats, uint64_t *largest, pool_backing_t *b);

/* What a VMM-backed pool of device dev grants its units: read/write for dev and for every
 * device that can access dev's memory (as memory from cuMemAlloc can be reached by peers).
 * Fills out (GPUCAP_MAX_DEVICES entries at most) and returns how many, at least 1. A few
 * driver queries; needs no lock. */
int pool_access_of(int dev, CUmemAccessDesc *out);

/* The largest single request p could serve now: its largest free chunk, or (bfc_alloc steps 3
 * and 5) its wholly free regions released plus the room under its limit, reserved as one
 * region. s: p's stats. O(chunks). */
uint64_t pool_largest_request(const pool_t *p, const bfc_stats_t *s);

#endif
