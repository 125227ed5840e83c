/* One context's pool over the driver (see shim/pool.h): the device primitive that reserves and
 * releases regions under the cap, and the pool's making and dropping. Frees are deferred by the
 * context (shim/ctx.c), which decides when the device has finished the work issued before them.
 */
#include "shim/pool.h"

#include "shim/cap.h"
#include "shim/log.h"
#include "shim/real.h"
#include "shim/settings.h"
#include "shim/trace.h"

#include <errno.h>
#include <stdlib.h>

/* The unit a driver holds device memory in, at the least: what it takes for an allocation
 * whose size is not a multiple of it (real drivers round large allocations further, to their
 * page size: see docs/design.md, "Rounding"). */
#define DRIVER_UNIT ((uint64_t)512)

bool pool_enabled(void) {
  return settings_valid() && settings_get()->pool;
}

/* Records that the region at base lies in the driver's allocation at driver, extra bytes
 * larger; false when host memory ran out. Pool lock held. */
static bool note_shift(pool_t *p, uint64_t base, uint64_t driver, uint64_t extra) {
  if (p->nshifted == p->capshifted) {
    size_t want = p->capshifted ? 2 * p->capshifted : 8;
    struct pool_shift *bigger = realloc(p->shifted, want * sizeof *bigger);
    if (!bigger) {
      return false;
    }
    p->shifted = bigger;
    p->capshifted = want;
  }
  p->shifted[p->nshifted++] = (struct pool_shift){.base = base, .driver = driver, .extra = extra};
  return true;
}

/* What a region of `bytes` (regions are multiples of 256 bytes) asks the driver for: whole
 * driver units, `extra` bytes more when regions must be aligned inside their allocations. The
 * driver holds whole units whatever it is asked, so that is what is charged. */
static uint64_t driver_bytes(uint64_t bytes, uint64_t extra) {
  return (bytes + extra + DRIVER_UNIT - 1) / DRIVER_UNIT * DRIVER_UNIT;
}

/* The most a region may take now: the device's free memory as the driver reports it (not the
 * capped view the program sees), read before every growth, since other processes may have
 * taken memory since the pool began and a region must not take what they would be refused.
 * When it is less than `need`, notes what the others hold for the refusal's hint. */
static uint64_t room(void *arg, uint64_t need) {
  pool_t *p = arg;
  size_t free_b = 0, total_b = 0;
  if (real.cuMemGetInfo_v2(&free_b, &total_b) != CUDA_SUCCESS) {
    return UINT64_MAX; /* no answer: the driver's own refusal decides */
  }
  uint64_t extra = p->misaligns ? BFC_MIN_ALLOC : 0;
  uint64_t r = free_b > extra ? (free_b - extra) / DRIVER_UNIT * DRIVER_UNIT : 0;
  if (r < need) {
    uint64_t mine = cap_used(p->dev), held = total_b > free_b ? total_b - free_b : 0;
    p->driver_full = true;
    p->last_driver_rc = CUDA_ERROR_OUT_OF_MEMORY;
    p->others_hold = held > mine ? held - mine : 0;
  }
  return r;
}

static int reserve(void *arg, uint64_t bytes, uint64_t *base) {
  pool_t *p = arg;
  uint64_t extra = p->misaligns ? BFC_MIN_ALLOC : 0, ask = driver_bytes(bytes, extra);
  if (!cap_charge(p->dev, ask)) {
    return -ENOMEM;
  }
  CUdeviceptr d = 0;
  CUresult rc = real.cuMemAlloc_v2(&d, ask);
  if (rc != CUDA_SUCCESS) {
    cap_credit(p->dev, ask);
    p->last_driver_rc = rc;
    p->driver_full |= rc == CUDA_ERROR_OUT_OF_MEMORY;
    return rc == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
  }
  if (d % BFC_MIN_ALLOC != 0 && !p->misaligns) {
    /* Not what a driver hands out, but what an object between gpucap and the driver may:
     * from now on this pool asks for 256 bytes more and aligns its regions inside. */
    log_msg(LOG_DEBUG,
            "device %d: the driver answered %#llx, not 256-byte aligned; regions "
            "are aligned inside allocations 256 bytes larger",
            p->dev, (unsigned long long)d);
    real.cuMemFree_v2(d);
    cap_credit(p->dev, ask);
    p->misaligns = true;
    return reserve(arg, bytes, base);
  }
  *base = extra ? (d + BFC_MIN_ALLOC - 1) / BFC_MIN_ALLOC * BFC_MIN_ALLOC : d;
  if (extra && !note_shift(p, *base, d, extra)) {
    real.cuMemFree_v2(d);
    cap_credit(p->dev, ask);
    return -ENOMEM;
  }
  trace_note(TRACE_RESERVE, p->dev, *base, bytes, bytes);
  return 0;
}

static int release(void *arg, uint64_t base, uint64_t bytes) {
  pool_t *p = arg;
  uint64_t driver = base, extra = 0;
  size_t i = 0;
  while (i < p->nshifted && p->shifted[i].base != base) {
    i++;
  }
  if (i < p->nshifted) {
    driver = p->shifted[i].driver;
    extra = p->shifted[i].extra;
  }
  uint64_t ticket = trace_ticket(); /* before the driver may hand the addresses out again */
  CUresult rc = p->gone ? CUDA_SUCCESS : real.cuMemFree_v2(driver);
  trace_fill(ticket, rc == CUDA_SUCCESS ? TRACE_RELEASE : TRACE_NONE, p->dev, base, bytes, bytes);
  if (rc != CUDA_SUCCESS) {
    log_msg(LOG_WARN, "device %d: the driver refused to free a %llu-byte region (error %d)", p->dev,
            (unsigned long long)bytes, rc);
    return -EIO;
  }
  if (i < p->nshifted) {
    p->shifted[i] = p->shifted[--p->nshifted];
  }
  cap_credit(p->dev, driver_bytes(bytes, extra));
  return 0;
}

/* The pool limit: the device cap, else (no cap) what TensorFlow would take: the whole card
 * when growing, free memory minus its MinSystemMemory reserve when preallocating. */
static uint64_t pool_limit(int dev, bool growth) {
  uint64_t cap = cap_limit(dev, 0);
  if (cap != CAP_NONE) {
    return cap;
  }
  size_t free_b = 0, total_b = 0;
  if (real.cuMemGetInfo_v2(&free_b, &total_b) != CUDA_SUCCESS) {
    return 0;
  }
  if (growth) {
    return total_b;
  }
  int cc = 0;
  real.cuDeviceGetAttribute(&cc, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  uint64_t keep = bfc_min_system_memory(free_b, cc);
  return free_b > keep ? free_b - keep : 0;
}

/* Sums the bytes of the regions whose chunks are all free (bfc_walk visitor). */
struct free_regions {
  uint64_t total;  /* bytes of wholly free regions so far */
  uint64_t region; /* free bytes of the current region */
  int clean;       /* the current region has no chunk in use or deferred */
};

static int add_chunk(void *ctx, const bfc_chunk_info_t *c) {
  struct free_regions *w = ctx;
  if (c->region_start) {
    w->total += w->clean ? w->region : 0;
    w->region = 0;
    w->clean = 1;
  }
  w->region += c->state == BFC_FREE ? c->size : 0;
  w->clean &= c->state == BFC_FREE;
  return 0;
}

uint64_t pool_largest_request(const pool_t *p, const bfc_stats_t *s) {
  struct free_regions w = {0, 0, 0};
  bfc_walk(p->bfc, add_chunk, &w);
  w.total += w.clean ? w.region : 0;
  uint64_t room = s->bytes_limit > s->pool_bytes ? s->bytes_limit - s->pool_bytes : 0;
  uint64_t grown = w.total > UINT64_MAX - room ? UINT64_MAX : w.total + room;
  return grown > s->largest_free_block_bytes ? grown : s->largest_free_block_bytes;
}

/* A block the driver freed with its context: its `free` row in the trace. */
static int trace_dropped(void *arg, const bfc_chunk_info_t *c) {
  const pool_t *p = arg;
  if (c->state == BFC_IN_USE) {
    trace_note(TRACE_FREE, p->dev, c->addr, c->requested, c->size);
  }
  return 0;
}

void pool_setup(int dev, pool_setup_t *s) {
  s->growth = settings_get()->allow_growth;
  s->limit = pool_limit(dev, s->growth);
  int align = 0;
  real.cuDeviceGetAttribute(&align, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, dev);
  s->pitch_align = align > 0 ? (size_t)align : 512;
}

int pool_open(pool_t *p, int dev, const pool_setup_t *s) {
  bfc_options_t opts = {.limit = s->limit, .allow_growth = s->growth};
  bfc_prim_t prim = {.ctx = p, .reserve = reserve, .release = release, .room = room};
  p->dev = dev;
  p->gone = false;
  p->misaligns = false;
  p->nshifted = 0;
  p->pitch_align = s->pitch_align;
  p->bfc = NULL;
  int made = opts.limit == 0 ? -EINVAL : bfc_create(&opts, &prim, &p->bfc);
  if (made != 0) {
    p->bfc = NULL;
    log_msg(LOG_ERROR, "device %d: cannot create a pool (limit %llu bytes)", dev,
            (unsigned long long)opts.limit);
  }
  return made;
}

void pool_close(pool_t *p) {
  if (p->bfc) {
    bfc_walk(p->bfc, trace_dropped, p);
    p->gone = true; /* the regions went with the context: release() only returns charges */
    bfc_destroy(p->bfc);
    p->bfc = NULL;
  }
}
