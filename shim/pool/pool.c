/* One context's pool over the driver (see shim/pool/pool.h): the device primitive that reserves and
 * releases regions under the cap, and the pool's making and dropping. Frees are deferred by the
 * context (shim/context/ctx.c), which decides when the device has finished the work issued before
 * them.
 */
#include "shim/pool/pool.h"

#include "shim/accounting/cap.h"
#include "shim/base/log.h"
#include "shim/base/real.h"
#include "shim/base/settings.h"
#include "shim/accounting/trace.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

/* The unit a driver holds device memory in, at the least: what it takes for an allocation
 * whose size is not a multiple of it (real drivers round large allocations further, to their
 * page size: see docs/design.md, "Rounding"). */
#define DRIVER_UNIT ((uint64_t)512)

bool pool_enabled(void) {
  return settings_valid() && settings_get()->pool != CFG_POOL_OFF;
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
  p->rounding += ask - bytes;
  trace_note(TRACE_RESERVE, p->dev, *base, bytes, bytes, -1);
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
  trace_fill(ticket, rc == CUDA_SUCCESS ? TRACE_RELEASE : TRACE_NONE, p->dev, base, bytes, bytes,
             -1);
  if (rc != CUDA_SUCCESS) {
    log_msg(LOG_WARN, "device %d: the driver refused to free a %llu-byte region (error %d)", p->dev,
            (unsigned long long)bytes, rc);
    return -EIO;
  }
  if (i < p->nshifted) {
    p->shifted[i] = p->shifted[--p->nshifted];
  }
  p->rounding -= driver_bytes(bytes, extra) - bytes;
  cap_credit(p->dev, driver_bytes(bytes, extra));
  return 0;
}

/* ---- the VMM backing: one reserved range, each unit its own physical allocation -------- */

static CUmemAllocationProp unit_prop(int dev, CUmemAllocationHandleType types) {
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = types;
  return prop;
}

/* A physical allocation of one unit; the driver's answer. A driver that refuses the shareable
 * handle type for other than want of memory gets the unit without it, and so does every later
 * unit of the pool (its blocks can then not be shared with another process). */
static CUresult create_unit(pool_t *p, CUmemGenericAllocationHandle *h) {
  CUmemAllocationProp prop = unit_prop(p->dev, p->handle_types);
  CUresult rc = real.cuMemCreate(h, p->unit, &prop, 0);
  if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_OUT_OF_MEMORY && p->handle_types != 0) {
    log_msg(LOG_DEBUG,
            "device %d: the driver refused a shareable pool unit (error %d); units are "
            "made unshareable",
            p->dev, rc);
    p->handle_types = CU_MEM_HANDLE_TYPE_NONE;
    prop = unit_prop(p->dev, p->handle_types);
    rc = real.cuMemCreate(h, p->unit, &prop, 0);
  }
  return rc;
}

/* Unmaps the units of [base, base + bytes) one by one, the way they were mapped (the driver
 * unmaps whole mappings only), each a `release` row of the trace when `traced` (its `reserve`
 * row was written); returns the bytes unmapped, up to the first unit the driver refuses to
 * unmap twice (*rc). */
static uint64_t unmap_units(pool_t *p, uint64_t base, uint64_t bytes, bool traced, CUresult *rc) {
  uint64_t done = 0;
  *rc = CUDA_SUCCESS;
  while (done < bytes) {
    uint64_t ticket = traced ? trace_ticket() : 0; /* before the addresses may go again */
    *rc = real.cuMemUnmap(base + done, p->unit);
    *rc = *rc == CUDA_SUCCESS ? *rc : real.cuMemUnmap(base + done, p->unit); /* asked twice */
    if (traced) {
      trace_fill(ticket, *rc == CUDA_SUCCESS ? TRACE_RELEASE : TRACE_NONE, p->dev, base + done,
                 p->unit, p->unit, -1);
    }
    if (*rc != CUDA_SUCCESS) {
      break;
    }
    done += p->unit;
    p->unmap_calls++;
  }
  return done;
}

/* Maps [*base, *base + bytes) unit by unit: a physical allocation of one unit each
 * (cuMemCreate), mapped (cuMemMap) and its handle released at once, so that unmapping the
 * unit frees it; then read/write access for the device over the whole range. Charged first. */
static int map_units(void *arg, uint64_t bytes, uint64_t *base) {
  pool_t *p = arg;
  if (!cap_charge(p->dev, bytes)) {
    return -ENOMEM;
  }
  CUresult rc = CUDA_SUCCESS;
  uint64_t done = 0;
  while (done < bytes && rc == CUDA_SUCCESS) {
    CUmemGenericAllocationHandle h = 0;
    rc = create_unit(p, &h);
    if (rc == CUDA_SUCCESS) {
      p->create_calls++;
      rc = real.cuMemMap(*base + done, p->unit, 0, h, 0);
      /* The mapping keeps the memory until it is unmapped; a handle not released would keep
       * it after that: asked twice, and the unit given up when the driver refuses both. */
      CUresult rel = real.cuMemRelease(h);
      rel = rel == CUDA_SUCCESS ? rel : real.cuMemRelease(h);
      if (rel != CUDA_SUCCESS) {
        log_msg(LOG_WARN, "device %d: the driver refused to release a pool unit (error %d)", p->dev,
                rel);
        if (rc == CUDA_SUCCESS) {
          real.cuMemUnmap(*base + done, p->unit);
        }
        rc = rel;
      }
      done += rc == CUDA_SUCCESS ? p->unit : 0;
      p->map_calls += rc == CUDA_SUCCESS;
    }
  }
  if (rc == CUDA_SUCCESS) {
    rc = real.cuMemSetAccess(*base, bytes, p->access, (size_t)p->naccess);
  }
  if (rc != CUDA_SUCCESS) {
    CUresult urc;
    if (unmap_units(p, *base, done, false, &urc) != done) {
      log_msg(LOG_WARN, "device %d: the driver refused to unmap pool memory (error %d)", p->dev,
              urc);
    }
    cap_credit(p->dev, bytes);
    p->last_driver_rc = rc;
    p->driver_full |= rc == CUDA_ERROR_OUT_OF_MEMORY;
    return rc == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
  }
  for (uint64_t at = 0; at < bytes; at += p->unit) { /* a `reserve` row per unit mapped */
    trace_note(TRACE_RESERVE, p->dev, *base + at, p->unit, p->unit, -1);
  }
  return 0;
}

/* Unmaps whole units (their memory goes back to the driver) and returns their charge. A unit
 * the driver refuses to unmap stops the release; those unmapped before it are mapped again, so
 * the pool's view stays true. */
static int unmap_range(void *arg, uint64_t base, uint64_t bytes) {
  pool_t *p = arg;
  CUresult rc;
  uint64_t done = unmap_units(p, base, bytes, true, &rc);
  cap_credit(p->dev, done);
  if (done == bytes) {
    return 0;
  }
  log_msg(LOG_WARN, "device %d: the driver refused to unmap pool memory (error %d)", p->dev, rc);
  uint64_t again = base;
  if (done > 0 && map_units(p, done, &again) != 0) {
    log_msg(LOG_ERROR, "device %d: pool memory at %#llx could not be mapped again", p->dev,
            (unsigned long long)base);
  }
  return -EIO;
}

/* Whether device dev's pool is backed by VMM, in units of what size, over what space. */
static void vmm_setup(int dev, pool_setup_t *s) {
  int mode = settings_get()->pool;
  int vmm = 0, fd = 0;
  size_t g = 0;
  CUmemAllocationProp prop = unit_prop(dev, CU_MEM_HANDLE_TYPE_NONE);
  s->vmm = false;
  s->handle_types = CU_MEM_HANDLE_TYPE_NONE;
  if (mode != CFG_POOL_ON && mode != CFG_POOL_VMM) {
    return;
  }
  if (!real.cuMemAddressReserve || !real.cuMemCreate || !real.cuMemMap || !real.cuMemUnmap ||
      !real.cuMemSetAccess || !real.cuMemGetAllocationGranularity ||
      real.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                dev) != CUDA_SUCCESS ||
      !vmm ||
      real.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
          CUDA_SUCCESS ||
      g < BFC_MIN_ALLOC || (g & (g - 1)) != 0 || s->limit < g) {
    log_msg(mode == CFG_POOL_VMM ? LOG_WARN : LOG_DEBUG,
            "device %d: no virtual memory management; the pool uses driver allocations", dev);
    return;
  }
  s->vmm = true;
  s->unit = g;
  if (real.cuDeviceGetAttribute(&fd,
                                CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                dev) == CUDA_SUCCESS &&
      fd) {
    s->handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  }
  /* Twice the pool limit: free memory is unmapped, but the blocks around it keep their
   * addresses, so a fragmented pool needs more address space than memory. */
  uint64_t whole = (s->limit + g - 1) / g * g;
  s->space_bytes = whole <= UINT64_MAX / 4 ? 2 * whole : whole;
}

/* The pool limit: the device cap, else (no cap) what TensorFlow would take: the whole card
 * when growing, free memory minus its MinSystemMemory reserve when preallocating. */
static uint64_t pool_limit(int dev, bool growth) {
  uint64_t cap = cap_limit(dev);
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

void pool_report(const pool_t *p, bfc_stats_t *stats, uint64_t *largest, pool_backing_t *b) {
  bfc_stats(p->bfc, stats);
  *largest = pool_largest_request(p, stats);
  b->vmm = p->vmm;
  bfc_mapped_stats(p->bfc, &b->mapped);
  b->map_calls = p->map_calls;
  b->unmap_calls = p->unmap_calls;
  if (p->vmm) {
    stats->driver_alloc_calls = p->create_calls;
    stats->driver_free_calls = p->create_calls;
  }
}

/* A block the driver freed with its context: its `free` row in the trace. */
static int trace_dropped(void *arg, const bfc_chunk_info_t *c) {
  const pool_t *p = arg;
  if (c->state == BFC_IN_USE) {
    trace_note(TRACE_FREE, p->dev, c->addr, c->requested, c->size, (int)c->tag);
  }
  return 0;
}

void pool_setup(int dev, pool_setup_t *s) {
  s->growth = settings_get()->allow_growth;
  cap_bind(dev, 0); /* the device's first use: its cap, and a shared budget joined for it */
  s->limit = pool_limit(dev, s->growth);
  int align = 0;
  real.cuDeviceGetAttribute(&align, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, dev);
  s->pitch_align = align > 0 ? (size_t)align : 512;
  vmm_setup(dev, s);
}

int pool_access_of(int dev, CUmemAccessDesc *out) {
  int n = 0, naccess = 0;
  if (!real.cuDeviceGetCount || real.cuDeviceGetCount(&n) != CUDA_SUCCESS) {
    n = 0;
  }
  for (int d = 0; d < n && d < GPUCAP_MAX_DEVICES; d++) {
    int can = d == dev;
    if (!can && real.cuDeviceCanAccessPeer &&
        real.cuDeviceCanAccessPeer(&can, d, dev) != CUDA_SUCCESS) {
      can = 0;
    }
    if (can) {
      out[naccess++] =
          (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, d}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    }
  }
  if (naccess == 0) {
    out[naccess++] =
        (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  }
  return naccess;
}

/* Reserves the address space of a VMM-backed pool: twice its limit, else once; false when
 * the driver has not even that (the pool then uses driver allocations). */
static bool reserve_space(pool_t *p, const pool_setup_t *s) {
  uint64_t sizes[2] = {s->space_bytes, (s->limit + s->unit - 1) / s->unit * s->unit};
  for (int i = 0; i < 2; i++) {
    CUdeviceptr at = 0;
    if (real.cuMemAddressReserve(&at, sizes[i], s->unit, 0, 0) == CUDA_SUCCESS) {
      p->space = at;
      p->space_bytes = sizes[i];
      return true;
    }
  }
  log_msg(LOG_DEBUG, "device %d: no address space for a VMM-backed pool; driver allocations",
          p->dev);
  return false;
}

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Above the device's guarantee (cap_guarantee): the pool keeps its bytes in use and only as
 * much idle memory as still fits under the guarantee; true with *keep set when it holds more. */
static bool over_guarantee(pool_t *p, uint64_t *keep) {
  uint64_t guarantee = cap_guarantee(p->dev), used = cap_used(p->dev);
  if (guarantee == CAP_NONE || used <= guarantee) {
    return false;
  }
  uint64_t in_use = 0, reserved = 0;
  bfc_usage(p->bfc, &in_use, NULL, NULL, &reserved);
  uint64_t idle = reserved > in_use ? reserved - in_use : 0, over = used - guarantee;
  uint64_t give = over < idle ? over : idle;
  *keep = reserved - give;
  return give > 0 && give >= p->unit; /* a VMM-backed pool unmaps whole units only */
}

bool pool_idle_due(pool_t *p, bool allocated, uint64_t *keep) {
  uint64_t in_use = 0, reserved = 0;
  if (!p->bfc) {
    return false;
  }
  if (over_guarantee(p, keep)) {
    return true;
  }
  if (p->window_ns == 0) {
    return false;
  }
  if (allocated) {
    bfc_usage(p->bfc, &in_use, NULL, NULL, NULL);
    p->window_peak = in_use > p->window_peak ? in_use : p->window_peak;
  }
  uint64_t now = now_ns();
  if (now - p->window_start_ns < p->window_ns) {
    return false;
  }
  bfc_usage(p->bfc, &in_use, NULL, NULL, &reserved);
  *keep = in_use > p->window_peak ? in_use : p->window_peak;
  p->window_start_ns = now;
  p->window_peak = in_use;
  return reserved > *keep + p->unit;
}

uint64_t pool_trim_to(pool_t *p, uint64_t keep) {
  uint64_t released = 0;
  if (p->bfc) {
    bfc_trim_to(p->bfc, keep, &released);
  }
  return released;
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
  p->vmm = false;
  p->handle_types = CU_MEM_HANDLE_TYPE_NONE;
  p->unit = 0;
  p->map_calls = p->unmap_calls = p->create_calls = 0;
  p->window_ns = 0;
  p->window_start_ns = now_ns();
  p->window_peak = 0;
  if (s->vmm && opts.limit != 0 && reserve_space(p, s)) {
    p->vmm = true;
    p->naccess = pool_access_of(dev, p->access);
    p->unit = s->unit;
    p->handle_types = s->handle_types;
    opts.unit = s->unit;
    opts.space_base = p->space;
    opts.space_bytes = p->space_bytes;
    prim = (bfc_prim_t){.ctx = p, .reserve = map_units, .release = unmap_range, .room = room};
  }
  int made = opts.limit == 0 ? -EINVAL : bfc_create(&opts, &prim, &p->bfc);
  if (made != 0) {
    p->bfc = NULL;
    if (p->vmm) {
      real.cuMemAddressFree(p->space, p->space_bytes);
      p->vmm = false;
    }
    log_msg(LOG_ERROR, "device %d: cannot create a pool (limit %llu bytes)", dev,
            (unsigned long long)opts.limit);
  } else if (p->vmm) {
    p->window_ns = (uint64_t)settings_get()->release_after * 1000000u;
  }
  return made;
}

void pool_close(pool_t *p) {
  if (p->bfc) {
    bfc_walk(p->bfc, trace_dropped, p);
    /* The regions went with the context: release() only returns charges. VMM memory belongs
     * to no context: the units are unmapped (freed) here, and the address space given back. */
    p->gone = !p->vmm;
    bfc_destroy(p->bfc);
    p->bfc = NULL;
    if (p->vmm && real.cuMemAddressFree(p->space, p->space_bytes) != CUDA_SUCCESS) {
      log_msg(LOG_DEBUG, "device %d: the pool's address space could not be freed", p->dev);
    }
    p->vmm = false;
  }
}
