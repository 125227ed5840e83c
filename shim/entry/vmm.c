/* Device memory that does not come from cuMemAlloc: managed allocations and the virtual
 * memory management API. cuMemAllocManaged is charged to the current device for its size
 * (the driver may place it there) and credited by cuMemFree; beyond the cap, with a spill
 * budget (GPUCAP_OVERSUBSCRIBE), the rest is charged to that budget and kept on the host
 * (shim/pool/passthru.h, passthru_spill).
 *
 * VMM: cuMemCreate charges the device a physical allocation is placed on (device locations
 * only: host and host-NUMA locations are host memory and left alone). The driver frees that
 * memory only when the handle is released AND every mapping of it is unmapped (NVIDIA's
 * samples, PyTorch's expandable segments and NCCL release the handle right after mapping), and
 * cuMemRetainAllocationHandle adds a handle reference, and so does importing a process's own
 * export when the driver answers with the same handle. So gpucap keeps, per charged handle, the
 * references and mappings the driver holds, and credits the charge when the last of them goes.
 * A driver call that may add or drop one pins the record first, so a concurrent release or
 * unmap cannot credit memory that call is about to keep alive; a retain or import (which names
 * an address or a shareable handle, not a handle) holds every record that drops to nothing
 * meanwhile until it returns. Imported memory of another process is that process's charge.
 * Locking: one mutex over handles and mappings, never held across a driver call.
 */
#include "core/addrmap.h"
#include "shim/accounting/cap.h"
#include "shim/base/fork.h"
#include "shim/context/ctx.h"
#include "shim/entry/prologue.h"
#include "shim/accounting/ledger.h"
#include "shim/base/log.h"
#include "shim/pool/passthru.h"
#include "shim/base/real.h"
#include "shim/accounting/spill.h"

#include <pthread.h>
#include <stdlib.h>

/* A charged physical allocation. */
struct phys {
  uint64_t bytes;
  int dev;
  int lib;     /* the library charged in the ledger (shim/accounting/ledger.h) */
  int refs;    /* handle references: cuMemCreate, cuMemRetainAllocationHandle */
  int maps;    /* live mappings */
  int pins;    /* driver calls in flight that name this handle */
  bool stored; /* in `handles` (else credited and forgotten, freed once unpinned) */
};

/* A mapping of a charged handle. */
struct mapping {
  uint64_t va, size;
  uint64_t handle;
  int holds;   /* cuMemUnmap calls in flight over it */
  bool stored; /* in `mappings` */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static addrmap_t handles;  /* handle -> struct phys * */
static addrmap_t mappings; /* mapping address -> struct mapping * */
static int retains;        /* cuMemRetainAllocationHandle calls in flight */
static bool unswept;       /* a record dropped to nothing while a retain was in flight */

static CUresult free_managed(uint64_t ptr, void *arg) {
  (void)arg;
  return real.cuMemFree_v2(ptr);
}

GPUCAP_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
  LEDGER_ENTER();
  int dev;
  HOOK_PROLOGUE(real.cuMemAllocManaged);
  CUresult drc;
  if (!passthru_prepare(dptr && bytesize > 0, &dev, &drc)) {
    return drc == CUDA_SUCCESS ? real.cuMemAllocManaged(dptr, bytesize, flags) : drc;
  }
  if (!ctx_admit(dev, bytesize)) {
    /* Beyond the cap: under the spill budget, kept on the host (docs/design.md, "Beyond the
     * card"). */
    bool full = false;
    int lib = ledger_caller();
    if (dev < 0 || spill_budget(dev) == 0 || !spill_possible(dev)) {
      return passthru_refuse_as(dev, bytesize, lib);
    }
    CUresult rc = passthru_spill(dptr, dev, bytesize, flags, lib, &full);
    return full ? passthru_refuse_spill(dev, bytesize, lib) : rc;
  }
  CUresult rc = real.cuMemAllocManaged(dptr, bytesize, flags);
  if (ctx_retry(dev, rc)) {
    rc = real.cuMemAllocManaged(dptr, bytesize, flags);
  }
  return passthru_settle_managed(rc, rc == CUDA_SUCCESS ? *dptr : 0, dev, bytesize, free_managed);
}

/* Makes room for one more entry in map (created on first use); false when host memory ran out.
 * Lock held. */
static bool room(addrmap_t *map) {
  return (map->slots || addrmap_init(map, 64) == 0) && addrmap_reserve(map, 1) == 0;
}

static struct phys *find(uint64_t handle) {
  return handles.slots ? addrmap_get(&handles, handle) : NULL;
}

/* Forgets p once nothing keeps its memory: returns the bytes to credit (0 when it lives on).
 * While a retain is in flight a record that dropped to nothing stays (the retain may be
 * reviving it). Frees p once forgotten and unpinned. Lock held. */
static uint64_t settle(struct phys *p, uint64_t handle) {
  uint64_t credit = 0;
  if (p->stored && p->refs <= 0 && p->maps <= 0 && p->pins == 0) {
    if (retains > 0) {
      unswept = true;
      return 0;
    }
    addrmap_take(&handles, handle);
    p->stored = false;
    credit = p->bytes;
  }
  if (!p->stored && p->pins == 0) {
    free(p);
  }
  return credit;
}

/* Credits what settle() released. Lock not held. */
static void credit(int dev, int lib, uint64_t bytes) {
  if (bytes) {
    ledger_sub(dev, lib, bytes);
    cap_credit(dev, bytes);
    log_msg(LOG_TRACE, "device %d: %llu bytes of VMM memory freed", dev, (unsigned long long)bytes);
  }
}

/* Pins handle's record across a driver call; NULL when gpucap does not charge it. */
static struct phys *pin(uint64_t handle) {
  pthread_mutex_lock(&lock);
  struct phys *p = find(handle);
  if (p) {
    p->pins++;
  }
  pthread_mutex_unlock(&lock);
  return p;
}

/* Ends a pin: applies delta_refs / delta_maps to the handle's record (if the driver's call
 * succeeded, to the record stored under handle now) and credits it if nothing keeps it. */
static void unpin(struct phys *p, uint64_t handle, bool done, int delta_refs, int delta_maps) {
  if (!p) {
    return;
  }
  int dev = p->dev, lib = p->lib, dev2 = 0, lib2 = 0;
  uint64_t bytes = 0, bytes2 = 0;
  pthread_mutex_lock(&lock);
  p->pins--;
  struct phys *now = done ? find(handle) : NULL;
  if (now) {
    now->refs += delta_refs;
    now->maps += delta_maps;
    if (now != p) {
      dev2 = now->dev;
      lib2 = now->lib;
      bytes2 = settle(now, handle);
    }
  }
  bytes = settle(p, handle);
  pthread_mutex_unlock(&lock);
  credit(dev, lib, bytes);
  credit(dev2, lib2, bytes2);
}

GPUCAP_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                   const CUmemAllocationProp *prop, unsigned long long flags) {
  LEDGER_ENTER();
  HOOK_PROLOGUE(real.cuMemCreate);
  bool on_device = handle && prop && size > 0 && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
  int dev = on_device ? prop->location.id : -1;
  if (!on_device || dev < 0 || dev >= GPUCAP_MAX_DEVICES) {
    return real.cuMemCreate(handle, size, prop,
                            flags); /* not device memory, or the driver's error */
  }
  if (!ctx_admit(dev, size)) {
    /* Before cuInit the driver refuses everything: answer as it would (asking it, not calling
     * cuMemCreate, which would allocate uncapped should another thread initialise meanwhile). */
    CUcontext ctx = NULL;
    CUresult q = real.cuCtxGetCurrent ? real.cuCtxGetCurrent(&ctx) : CUDA_SUCCESS;
    bool uninit = q == CUDA_ERROR_NOT_INITIALIZED || q == CUDA_ERROR_DEINITIALIZED;
    return uninit ? q : passthru_refuse(dev, size);
  }
  CUresult rc = real.cuMemCreate(handle, size, prop, flags);
  if (ctx_retry(dev, rc)) {
    rc = real.cuMemCreate(handle, size, prop, flags);
  }
  if (rc != CUDA_SUCCESS) {
    cap_credit(dev, size);
    return rc;
  }
  int lib = ledger_caller();
  struct phys *p = malloc(sizeof *p);
  int old_dev = 0, old_lib = 0;
  uint64_t old_bytes = 0;
  pthread_mutex_lock(&lock);
  bool ok = p && room(&handles);
  if (ok) {
    struct phys *old = find(*handle);
    if (old) {
      /* The driver handed the handle out again: the memory it named is gone. */
      addrmap_take(&handles, *handle);
      old->stored = false;
      old_dev = old->dev;
      old_lib = old->lib;
      old_bytes = old->bytes;
      if (old->pins == 0) {
        free(old);
      }
    }
    *p = (struct phys){.bytes = size, .dev = dev, .lib = lib, .refs = 1, .stored = true};
    addrmap_put(&handles, *handle, p);
    ledger_add(dev, lib, size);
  }
  pthread_mutex_unlock(&lock);
  credit(old_dev, old_lib, old_bytes);
  if (!ok) {
    free(p);
    real.cuMemRelease(*handle);
    cap_credit(dev, size);
    log_msg(LOG_ERROR, "out of host memory while recording a VMM allocation");
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

GPUCAP_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  HOOK_PROLOGUE(real.cuMemRelease);
  struct phys *p = pin(handle);
  CUresult rc = real.cuMemRelease(handle);
  unpin(p, handle, rc == CUDA_SUCCESS, -1, 0);
  return rc;
}

/* Before a driver call that may add a reference to a handle it does not name (a retain names
 * an address, an import a shareable handle): from now until adopt(), a record that drops to
 * nothing stays. */
static void adopt_begin(void) {
  pthread_mutex_lock(&lock);
  retains++;
  pthread_mutex_unlock(&lock);
}

/* After it: the reference the driver added (rc, *handle) goes to the record gpucap charges for
 * that handle, if any; then the records that dropped to nothing meanwhile are credited (at most
 * a few per call). */
static void adopt(CUresult rc, const CUmemGenericAllocationHandle *handle) {
  int devs[16], libs[16];
  uint64_t bytes[16];
  int n = 0;
  pthread_mutex_lock(&lock);
  retains--;
  struct phys *p = rc == CUDA_SUCCESS && handle ? find(*handle) : NULL;
  if (p) {
    p->refs++;
  }
  for (uint64_t i = 0; retains == 0 && unswept && handles.slots && i <= handles.mask; i++) {
    addrmap_slot_t *s = &handles.slots[i];
    struct phys *q = s->key == ADDRMAP_EMPTY ? NULL : s->val;
    if (q && q->refs <= 0 && q->maps <= 0 && q->pins == 0) {
      if (n == 16) {
        break; /* the rest at the next retain; they stay charged meanwhile */
      }
      devs[n] = q->dev;
      libs[n] = q->lib;
      bytes[n++] = settle(q, s->key);
      i--; /* addrmap_take shifted a later entry into this slot */
    }
  }
  if (retains == 0) {
    unswept = unswept && n == 16;
  }
  pthread_mutex_unlock(&lock);
  for (int k = 0; k < n; k++) {
    credit(devs[k], libs[k], bytes[k]);
  }
}

GPUCAP_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle,
                                                   void *addr) {
  HOOK_PROLOGUE(real.cuMemRetainAllocationHandle);
  adopt_begin();
  CUresult rc = real.cuMemRetainAllocationHandle(handle, addr);
  adopt(rc, handle);
  return rc;
}

/* Memory another process exported stays charged to that process (as legacy IPC memory does):
 * an imported handle gpucap never saw created is not charged here. A process that imports its
 * own export may get its own handle back with one more reference, which gpucap counts. */
GPUCAP_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                      void *osHandle,
                                                      CUmemAllocationHandleType shHandleType) {
  HOOK_PROLOGUE(real.cuMemImportFromShareableHandle);
  adopt_begin();
  CUresult rc = real.cuMemImportFromShareableHandle(handle, osHandle, shHandleType);
  adopt(rc, handle);
  return rc;
}

GPUCAP_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                CUmemGenericAllocationHandle handle, unsigned long long flags) {
  HOOK_PROLOGUE(real.cuMemMap);
  struct phys *p = pin(handle);
  struct mapping *m = p ? malloc(sizeof *m) : NULL;
  CUresult rc = real.cuMemMap(ptr, size, offset, handle, flags);
  if (!p) {
    return rc;
  }
  bool tracked = false;
  int stale_dev = 0, stale_lib = 0;
  uint64_t stale_bytes = 0;
  if (rc == CUDA_SUCCESS) {
    pthread_mutex_lock(&lock);
    if (m && room(&mappings)) {
      /* A mapping recorded at ptr is one whose unmap gpucap did not see (the driver maps only
       * unmapped addresses): its handle no longer has it. */
      struct mapping *stale = addrmap_take(&mappings, ptr);
      if (stale) {
        stale->stored = false;
        struct phys *q = find(stale->handle);
        if (q) {
          q->maps--;
          stale_dev = q->dev;
          stale_lib = q->lib;
          stale_bytes = settle(q, stale->handle);
        }
        if (stale->holds == 0) {
          free(stale);
        }
      }
      *m = (struct mapping){.va = ptr, .size = size, .handle = handle, .stored = true};
      addrmap_put(&mappings, ptr, m);
      tracked = true;
    }
    pthread_mutex_unlock(&lock);
    credit(stale_dev, stale_lib, stale_bytes);
  }
  if (!tracked) {
    free(m);
  }
  if (rc == CUDA_SUCCESS && !tracked) {
    log_msg(LOG_ERROR, "out of host memory: a VMM mapping is not tracked; its memory stays "
                       "charged until the process ends");
  }
  unpin(p, handle, rc == CUDA_SUCCESS, 0, 1); /* an untracked mapping is never dropped */
  return rc;
}

GPUCAP_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  HOOK_PROLOGUE(real.cuMemUnmap);
  /* Hold the mappings that tile the range (the driver unmaps whole mappings only). */
  struct mapping *held[64], **list = held;
  size_t n = 0, cap = 64;
  pthread_mutex_lock(&lock);
  for (uint64_t cur = ptr; mappings.slots && cur - ptr < size;) {
    struct mapping *m = addrmap_get(&mappings, cur);
    if (!m || m->size == 0) {
      break;
    }
    if (n == cap) {
      struct mapping **bigger = malloc(2 * cap * sizeof *bigger);
      if (!bigger) {
        break; /* the rest stay recorded: their memory stays charged */
      }
      for (size_t i = 0; i < n; i++) {
        bigger[i] = list[i];
      }
      if (list != held) {
        free(list);
      }
      list = bigger;
      cap *= 2;
    }
    m->holds++;
    list[n++] = m;
    cur += m->size;
  }
  pthread_mutex_unlock(&lock);
  CUresult rc = real.cuMemUnmap(ptr, size);
  for (size_t i = 0; i < n; i++) {
    struct mapping *m = list[i];
    struct phys *p = NULL;
    pthread_mutex_lock(&lock);
    m->holds--;
    bool mine = rc == CUDA_SUCCESS && m->stored && addrmap_get(&mappings, m->va) == m;
    if (mine) {
      addrmap_take(&mappings, m->va);
      m->stored = false;
      p = find(m->handle);
      if (p) {
        p->pins++;
      }
    }
    uint64_t h = m->handle;
    if (!m->stored && m->holds == 0) {
      free(m);
    }
    pthread_mutex_unlock(&lock);
    unpin(p, h, true, 0, -1);
  }
  if (list != held) {
    free(list);
  }
  return rc;
}

/* A fork child's maps as the parent left them: kept, not freed (volatile, so the stores stay),
 * so that leak checkers see them reachable. */
static volatile addrmap_t inherited[2];

/* In a fork child: forget every VMM allocation and mapping (the parent's memory). */
static void fork_child(void) {
  pthread_mutex_init(&lock, NULL);
  /* Nothing was held across fork: another thread may have been changing the maps, so they are
   * abandoned unread (the parent's memory is not the child's). */
  inherited[0] = handles;
  inherited[1] = mappings;
  handles = (addrmap_t){0};
  mappings = (addrmap_t){0};
  retains = 0;
  unswept = false;
}
FORK_CHILD(fork_child)
