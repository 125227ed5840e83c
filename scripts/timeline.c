/* timeline: per-device requested, held and reserved bytes over a trace (contracts in
 * timeline.h). Live blocks are kept in an address map (whether each lies in a pool region, so
 * that its free leaves `reserved` alone or not); regions in a sorted array per device.
 */
#include "scripts/timeline.h"

#include "core/addrmap.h"
#include "scripts/cli.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIMELINE_FILE_MAX ((size_t)4 << 30) /* tens of millions of events */

int tl_regions_add(tl_regions_t *s, uint64_t base, uint64_t size) {
  if (s->n == s->cap) {
    size_t ncap = s->cap ? 2 * s->cap : 16;
    tl_region_t *grown = realloc(s->r, ncap * sizeof *grown);
    if (grown == NULL) {
      return -ENOMEM;
    }
    s->r = grown;
    s->cap = ncap;
  }
  size_t i = s->n;
  while (i > 0 && s->r[i - 1].base > base) {
    s->r[i] = s->r[i - 1];
    i--;
  }
  s->r[i] = (tl_region_t){base, size};
  s->n++;
  return 0;
}

long tl_regions_find(const tl_regions_t *s, uint64_t addr) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->r[mid].base <= addr) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo > 0 && addr - s->r[lo - 1].base < s->r[lo - 1].size) {
    return (long)(lo - 1);
  }
  return -1;
}

bool tl_regions_remove(tl_regions_t *s, uint64_t base, uint64_t *size) {
  long i = tl_regions_find(s, base);
  if (i < 0 || s->r[i].base != base) {
    return false;
  }
  if (size != NULL) {
    *size = s->r[i].size;
  }
  memmove(&s->r[i], &s->r[i + 1], (s->n - (size_t)i - 1) * sizeof *s->r);
  s->n--;
  return true;
}

void tl_regions_free(tl_regions_t *s) {
  free(s->r);
  memset(s, 0, sizeof *s);
}

/* The slot of device dev in tl (created in ordinal order, -1 last), or NULL when full. */
static tl_device_t *device(timeline_t *tl, int dev) {
  int i = 0;
  while (i < tl->ndev && tl->dev[i].dev != dev &&
         (dev < 0 || (tl->dev[i].dev >= 0 && tl->dev[i].dev < dev))) {
    i++;
  }
  if (i < tl->ndev && tl->dev[i].dev == dev) {
    return &tl->dev[i];
  }
  if (tl->ndev == TIMELINE_MAX_DEVICES) {
    return NULL;
  }
  memmove(&tl->dev[i + 1], &tl->dev[i], (size_t)(tl->ndev - i) * sizeof tl->dev[0]);
  memset(&tl->dev[i], 0, sizeof tl->dev[i]);
  tl->dev[i].dev = dev;
  tl->ndev++;
  return &tl->dev[i];
}

static uint64_t add_sat(uint64_t a, uint64_t b) {
  return b > UINT64_MAX - a ? UINT64_MAX : a + b;
}

static uint64_t sub_floor(uint64_t a, uint64_t b) {
  return b < a ? a - b : 0;
}

/* A live block's record in the map: nonzero, with whether it lies in a region. */
#define LIVE_POOLED ((void *)(uintptr_t)3)
#define LIVE_OWN ((void *)(uintptr_t)1)

int timeline_build(const tracecsv_event_t *ev, size_t n, timeline_t *tl) {
  memset(tl, 0, sizeof *tl);
  tl_regions_t regions[TIMELINE_MAX_DEVICES];
  memset(regions, 0, sizeof regions);
  /* The devices first, so that their slots (and regions[], indexed alike) stay put. */
  for (size_t i = 0; i < n; i++) {
    if (device(tl, ev[i].dev) == NULL) {
      memset(tl, 0, sizeof *tl);
      return -E2BIG;
    }
  }
  addrmap_t live;
  int rc = addrmap_init(&live, 1024);
  for (size_t i = 0; i < n && rc == 0; i++) {
    const tracecsv_event_t *e = &ev[i];
    tl_device_t *d = device(tl, e->dev);
    tl_regions_t *reg = &regions[d - tl->dev];
    tl_point_t p = d->npts > 0 ? d->pts[d->npts - 1] : (tl_point_t){0};
    p.ns = e->ns;
    p.refused = 0;
    p.verdict[0] = '\0';
    p.event = i;
    switch (e->action) {
    case TRACECSV_ALLOC: {
      bool pooled = tl_regions_find(reg, e->ptr) >= 0;
      if (e->ptr == ADDRMAP_EMPTY || addrmap_get(&live, e->ptr) != NULL) {
        break; /* allocated twice without a free: the trace is not whole; counted once */
      }
      if (addrmap_reserve(&live, 1) != 0) {
        rc = -ENOMEM;
        break;
      }
      addrmap_put(&live, e->ptr, pooled ? LIVE_POOLED : LIVE_OWN);
      p.requested = add_sat(p.requested, e->size);
      p.held = add_sat(p.held, e->held);
      /* A block spilled to host memory holds that part outside the device (and the cap). */
      p.reserved = pooled ? p.reserved : add_sat(p.reserved, e->held - e->spilled);
      d->allocs++;
      break;
    }
    case TRACECSV_FREE: {
      void *v = e->ptr == ADDRMAP_EMPTY ? NULL : addrmap_take(&live, e->ptr);
      if (v == NULL) {
        tl->unmatched_frees++;
        break;
      }
      p.requested = sub_floor(p.requested, e->size);
      p.held = sub_floor(p.held, e->held);
      p.reserved = v == LIVE_POOLED ? p.reserved : sub_floor(p.reserved, e->held - e->spilled);
      d->frees++;
      break;
    }
    case TRACECSV_FAILURE:
      p.refused = e->size > 0 ? e->size : 1;
      memcpy(p.verdict, e->verdict, sizeof p.verdict);
      d->refusals++;
      d->fail_hi = add_sat(p.held, e->size) > d->fail_hi ? add_sat(p.held, e->size) : d->fail_hi;
      break;
    case TRACECSV_RESERVE:
      if (tl_regions_add(reg, e->ptr, e->size) != 0) {
        rc = -ENOMEM;
        break;
      }
      p.reserved = add_sat(p.reserved, e->size);
      d->reserves++;
      break;
    case TRACECSV_RELEASE: {
      uint64_t size = 0;
      if (!tl_regions_remove(reg, e->ptr, &size)) {
        tl->unmatched_regions++;
        break;
      }
      p.reserved = sub_floor(p.reserved, size);
      d->releases++;
      break;
    }
    case TRACECSV_CAP: /* tracecsv keeps caps in its info, never as events */
      break;
    }
    if (rc != 0) {
      break;
    }
    if (d->npts % 1024 == 0) {
      tl_point_t *grown = realloc(d->pts, (d->npts + 1024) * sizeof *grown);
      if (grown == NULL) {
        rc = -ENOMEM;
        break;
      }
      d->pts = grown;
    }
    d->pts[d->npts++] = p;
    if (p.held > d->peak_held) {
      d->peak_held = p.held;
      d->peak_held_ns = p.ns;
    }
    d->peak_requested = p.requested > d->peak_requested ? p.requested : d->peak_requested;
    d->peak_reserved = p.reserved > d->peak_reserved ? p.reserved : d->peak_reserved;
    tl->end_ns = e->ns;
  }
  addrmap_fini(&live);
  for (int i = 0; i < TIMELINE_MAX_DEVICES; i++) {
    tl_regions_free(&regions[i]);
  }
  if (rc != 0) {
    timeline_free(tl);
  }
  return rc;
}

void timeline_free(timeline_t *tl) {
  for (int i = 0; i < tl->ndev; i++) {
    free(tl->dev[i].pts);
  }
  memset(tl, 0, sizeof *tl);
}

int timeline_load(const char *cmd, const char *path, tracecsv_event_t **ev, size_t *n,
                  tracecsv_info_t *info) {
  char *text = NULL;
  size_t len = 0;
  if (cli_read_file(cmd, path, TIMELINE_FILE_MAX, &text, &len) != 0) {
    return -1;
  }
  char err[512];
  int rc = tracecsv_parse(text, len, ev, n, info, err, sizeof err);
  free(text);
  if (rc != 0) {
    cli_error("%s: %s: %s", cmd, path, err);
    return -1;
  }
  if (info->cut > 0) {
    cli_warn("%s: %s: line %zu ends without a newline (the trace was cut while it was "
             "written): left out",
             cmd, path, info->cut);
  }
  return 0;
}
