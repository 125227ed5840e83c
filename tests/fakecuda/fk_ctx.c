/* Devices (enumeration, name, UUID, memory size, attributes, PCI ids) and contexts: one primary
 * context per device with its retain count, created contexts, and the per-thread stack of
 * current contexts.
 *
 * Invariants: a context struct is never freed, so a destroyed handle stays recognisable; the
 * primary context of a device is created (inactive) by cuInit and is active exactly while it is
 * retained and not reset. Deactivating a context completes its work, frees its allocations and
 * arrays, and kills its streams and events. The thread-local stack needs no lock; the contexts it
 * points to are read under fk.lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tests/fakecuda/fk.h"

#define STACK_MAX 64
#define ATTR_MAX 148 /* CU_DEVICE_ATTRIBUTE_MAX in CUDA 13.0 */

static _Thread_local struct CUctx_st *stack[STACK_MAX];
static _Thread_local int depth;

static CUresult dev_check(CUdevice dev) {
  return (dev < 0 || dev >= fk.ndev) ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

static struct CUctx_st *ctx_new(int dev, int primary, unsigned flags) {
  struct CUctx_st *c = calloc(1, sizeof *c);
  if (c == NULL) {
    fk_log("error: out of host memory");
    abort();
  }
  c->dev = dev;
  c->primary = primary;
  c->flags = flags;
  c->id = fk_new_id();
  c->legacy = fk_stream_new(c, FK_S_LEGACY, 0, 0);
  fk_ctx_settings_init(c);
  fk_push((void ***)&fk.ctxs, &fk.nctxs, &fk.capctxs, c);
  return c;
}

void fk_ctx_add_stream(struct CUctx_st *c, struct CUstream_st *s) {
  fk_push((void ***)&c->streams, &c->nstreams, &c->capstreams, s);
}

static int ctx_known(const struct CUctx_st *c) {
  for (size_t i = 0; i < fk.nctxs; i++) {
    if (fk.ctxs[i] == c) {
      return 1;
    }
  }
  return 0;
}

int fk_ctx_live(int dev) {
  int n = 0;
  for (size_t i = 0; i < fk.nctxs; i++) {
    n += fk.ctxs[i]->dev == dev && fk.ctxs[i]->active;
  }
  return n;
}

/* Activates or deactivates c, telling the machine (the fake NVML lists this process on c's
 * device while it has a live context there). */
static void set_active(struct CUctx_st *c, int on) {
  c->active = on;
  fk_mem_machine_contexts(c->dev, fk_ctx_live(c->dev));
}

/* A handle a caller may make current: known, and not a destroyed created context. */
static int ctx_usable(const struct CUctx_st *c) {
  return c != NULL && ctx_known(c) && (c->active || c->primary);
}

CUresult fk_ctx_current(struct CUctx_st **out) {
  if (depth == 0) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  struct CUctx_st *c = stack[depth - 1];
  if (!c->active) {
    return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  *out = c;
  return CUDA_SUCCESS;
}

/* Runs and drops the context-local storage destructors, first, while the context is still
 * usable (they release the runtime's objects in it). Each runs without the lock (when this
 * thread holds it once, fk_callout_begin): a destructor takes the runtime's own locks and calls
 * the driver, and other threads that hold those locks call the driver meanwhile, so holding the
 * driver's lock across it inverts the lock order. A destructor may put or delete entries; the
 * entries put by any thread meanwhile run too. c->dying marks the window. Returns with the lock
 * held and no entries left. */
static void cls_destroy(struct CUctx_st *c) {
  c->dying = 1;
  while (c->ncls > 0) {
    struct fk_cls e = c->cls[--c->ncls];
    if (e.dtor != NULL) {
      int dropped = fk_callout_begin();
      e.dtor(c, e.key, e.value);
      fk_callout_end(dropped);
    }
  }
  c->dying = 0;
}

/* Destroys c's resources after its destructors. release: a primary context's last release,
 * abandoned when another thread retained the context while the destructors ran. */
static void deactivate(struct CUctx_st *c, int release) {
  cls_destroy(c);
  if (release && c->refs > 0) {
    return;
  }
  fk_graph_free_ctx(c);
  fk_sync_ctx(c);
  fk_module_free_ctx(c);
  fk_mem_free_ctx(c, c->primary);
  fk_array_free_ctx(c);
  fk_stream_kill_ctx(c);
  fk_driver_ctx_close(c);
  set_active(c, 0);
}

CUresult fk_devices_init(void) {
  if (fk.cfg.ndev == 0) {
    return CUDA_ERROR_NO_DEVICE;
  }
  CUresult rc = fk_mem_machine_join();
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  fk.ndev = fk.cfg.ndev;
  for (int d = 0; d < fk.ndev; d++) {
    fk.dev[d].total = fk.cfg.mem[d];
    fk_pool_init_device(d);
  }
  rc = fk_mem_init();
  if (rc != CUDA_SUCCESS) {
    fk.ndev = 0;
    fk_mem_machine_leave();
    return rc;
  }
  for (int d = 0; d < fk.ndev; d++) {
    fk.dev[d].primary = ctx_new(d, 1, 0);
  }
  return CUDA_SUCCESS;
}

/* ---- Context-local storage. ---- */

static CUresult cls_ctx(CUcontext ctx, struct CUctx_st **out) {
  if (ctx == NULL) {
    return fk_ctx_current(out);
  }
  if (!ctx_known(ctx) || !ctx->active) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  *out = ctx;
  return CUDA_SUCCESS;
}

static struct fk_cls *cls_find(struct CUctx_st *c, void *key) {
  for (size_t i = 0; i < c->ncls; i++) {
    if (c->cls[i].key == key) {
      return &c->cls[i];
    }
  }
  return NULL;
}

CUresult fk_cls_put(CUcontext ctx, void *key, void *value, fk_cls_dtor dtor) {
  struct CUctx_st *c;
  CUresult rc = cls_ctx(ctx, &c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct fk_cls *e = cls_find(c, key);
  if (e == NULL) {
    if (c->ncls == c->capcls) {
      size_t ncap = c->capcls ? c->capcls * 2 : 8;
      struct fk_cls *n = realloc(c->cls, ncap * sizeof *n);
      if (n == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      c->cls = n;
      c->capcls = ncap;
    }
    e = &c->cls[c->ncls++];
    e->key = key;
  }
  e->value = value;
  e->dtor = dtor;
  return CUDA_SUCCESS;
}

CUresult fk_cls_delete(CUcontext ctx, void *key) {
  struct CUctx_st *c;
  CUresult rc = cls_ctx(ctx, &c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct fk_cls *e = cls_find(c, key);
  if (e != NULL) {
    *e = c->cls[--c->ncls];
  }
  return CUDA_SUCCESS;
}

CUresult fk_cls_get(void **value, CUcontext ctx, void *key) {
  if (value == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUctx_st *c;
  CUresult rc = cls_ctx(ctx, &c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct fk_cls *e = cls_find(c, key);
  if (e == NULL) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *value = e->value;
  return CUDA_SUCCESS;
}

/* ---- Devices. ---- */

static CUresult device_get(CUdevice *device, int ordinal) {
  if (device == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev_check(ordinal) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *device = ordinal;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  FK_BODY(FK_NEED_INIT, device_get(device, ordinal));
}

static CUresult device_count(int *count) {
  if (count == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *count = fk.ndev;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGetCount(int *count) {
  FK_BODY(FK_NEED_INIT, device_count(count));
}

static CUresult device_name(char *name, int len, CUdevice dev) {
  if (name == NULL || len <= 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev_check(dev) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  snprintf(name, (size_t)len, "Fake CUDA Device %d", dev);
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, device_name(name, len, dev));
}

static CUresult device_uuid(CUuuid *uuid, CUdevice dev) {
  if (uuid == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev_check(dev) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  /* GPU-fa4ec0da-0000-4000-8000-0000000000NN: stable, distinct per ordinal, RFC 4122 v4. */
  static const unsigned char base[16] = {0xfa, 0x4e, 0xc0, 0xda, 0, 0, 0x40, 0,
                                         0x80, 0,    0,    0,    0, 0, 0,    0};
  memcpy(uuid->bytes, base, sizeof base);
  uuid->bytes[15] = (char)dev;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, device_uuid(uuid, dev));
}

FK_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, device_uuid(uuid, dev));
}

static CUresult total_mem(size_t *bytes, unsigned *bytes32, CUdevice dev) {
  if (bytes == NULL && bytes32 == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev_check(dev) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  size_t t = fk.dev[dev].total;
  if (bytes != NULL) {
    *bytes = t;
  } else {
    /* The 32-bit ABI cannot hold more than 4 GiB - 1: clamp (an inferred behaviour). */
    *bytes32 = t > 0xffffffffu ? 0xffffffffu : (unsigned)t;
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, total_mem(bytes, NULL, dev));
}

FK_API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, total_mem(NULL, bytes, dev));
}

/* Attribute values of an H100 SXM (compute capability 9.0) or, for FAKECUDA_CC below 9, an
 * A100; attributes the fake does not model (RDMA, sparse arrays...) read 0. */
static int attr_value(int attr, int dev) {
  int hopper = fk.cfg.cc_major >= 9;
  /* clang-format off */
  switch (attr) {
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
  case 2: case 3: return 1024;        /* MAX_BLOCK_DIM_X, _Y */
  case 4: return 64;                  /* MAX_BLOCK_DIM_Z */
  case 5: return 2147483647;          /* MAX_GRID_DIM_X */
  case 6: case 7: return 65535;       /* MAX_GRID_DIM_Y, _Z */
  case 8: return 49152;               /* MAX_SHARED_MEMORY_PER_BLOCK */
  case 9: return 65536;               /* TOTAL_CONSTANT_MEMORY */
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
  case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
  case 12: return 65536;              /* MAX_REGISTERS_PER_BLOCK */
  case 13: return hopper ? 1980000 : 1410000; /* CLOCK_RATE, kHz */
  case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
  case 15: return 1;                  /* GPU_OVERLAP */
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return hopper ? 132 : 108;
  case 17: return 0;                  /* KERNEL_EXEC_TIMEOUT */
  case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
  case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
  case 20: return 0;                  /* COMPUTE_MODE: default */
  case 30: return 512;                /* SURFACE_ALIGNMENT */
  case 31: return 1;                  /* CONCURRENT_KERNELS */
  case 32: return 1;                  /* ECC_ENABLED */
  case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return (int)fk.cfg.pci_bus[dev];
  case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
  case 35: return 0;                  /* TCC_DRIVER */
  case 36: return hopper ? 2619000 : 1215000; /* MEMORY_CLOCK_RATE, kHz */
  case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
  case 38: return hopper ? 52428800 : 41943040; /* L2_CACHE_SIZE */
  case 39: return 2048;               /* MAX_THREADS_PER_MULTIPROCESSOR */
  case 40: return 2;                  /* ASYNC_ENGINE_COUNT */
  case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
  case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
  case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return fk.cfg.cc_major;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return fk.cfg.cc_minor;
  case 78: return 1;                  /* STREAM_PRIORITIES_SUPPORTED */
  case 79: case 80: return 1;         /* GLOBAL_L1_CACHE / LOCAL_L1_CACHE_SUPPORTED */
  case 81: return hopper ? 233472 : 167936; /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
  case 82: return 65536;              /* MAX_REGISTERS_PER_MULTIPROCESSOR */
  case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 1;
  case 84: return 0;                  /* MULTI_GPU_BOARD */
  case 85: return dev;                /* MULTI_GPU_BOARD_GROUP_ID */
  case 87: return 2;                  /* SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO */
  case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
  case 90: return 1;                  /* COMPUTE_PREEMPTION_SUPPORTED */
  case 95: return 1;                  /* COOPERATIVE_LAUNCH */
  case 97: return hopper ? 232448 : 166912; /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
  case 99: return 1;                  /* HOST_REGISTER_SUPPORTED */
  case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
  case 106: return 32;                /* MAX_BLOCKS_PER_MULTIPROCESSOR */
  case 109: return 134213632;         /* MAX_ACCESS_POLICY_WINDOW_SIZE */
  case 111: return 1024;              /* RESERVED_SHARED_MEMORY_PER_BLOCK */
  case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: return 1;
  case 120: return hopper;            /* CLUSTER_LAUNCH */
  case 125: return 1;                 /* IPC_EVENT_SUPPORTED (fk_ipcevent.c) */
  case 126: return hopper ? 4 : 1;    /* MEM_SYNC_DOMAIN_COUNT */
  case 127: return hopper;            /* TENSOR_MAP_ACCESS_SUPPORTED */
  case 131: case 134: return -1;      /* NUMA_ID, HOST_NUMA_ID */
  case 139: return hopper ? 0x233010de : 0x20b010de; /* GPU_PCI_DEVICE_ID */
  default: break;
  }
  /* clang-format on */
  if (attr >= 21 && attr <= 77) { /* texture and surface limits */
    return FK_TEXTURE_MAX;
  }
  return 0;
}

void fk_dev_uuid(int dev, CUuuid *out) {
  device_uuid(out, dev);
}

int fk_dev_attr(int attr, int dev) {
  return attr_value(attr, dev);
}

static CUresult device_attribute(int *pi, int attrib, CUdevice dev) {
  if (pi == NULL || attrib <= 0 || attrib >= ATTR_MAX) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev_check(dev) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *pi = attr_value(attrib, dev);
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, device_attribute(pi, (int)attrib, dev));
}

static CUresult compute_capability(int *major, int *minor, CUdevice dev) {
  if (major == NULL || minor == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev_check(dev) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *major = fk.cfg.cc_major;
  *minor = fk.cfg.cc_minor;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, compute_capability(major, minor, dev));
}

static CUresult pci_bus_id(char *id, int len, CUdevice dev) {
  if (id == NULL || len <= 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev_check(dev) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  /* The driver writes hex in capitals (software that matches sysfs lowers it first). */
  snprintf(id, (size_t)len, "0000:%02X:00.0", fk.cfg.pci_bus[dev]);
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, pci_bus_id(pciBusId, len, dev));
}

static CUresult by_pci_bus_id(CUdevice *dev, const char *id) {
  if (dev == NULL || id == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (int d = 0; d < fk.ndev; d++) {
    char mine[32], shortform[32];
    snprintf(mine, sizeof mine, "0000:%02x:00.0", fk.cfg.pci_bus[d]);
    snprintf(shortform, sizeof shortform, "%02x:00.0", fk.cfg.pci_bus[d]);
    if (strcasecmp(id, mine) == 0 || strcasecmp(id, shortform) == 0) {
      *dev = d;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

FK_API CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId) {
  FK_BODY(FK_NEED_INIT, by_pci_bus_id(dev, pciBusId));
}

/* ---- Primary contexts. ---- */

static CUresult primary_retain(CUcontext *pctx, CUdevice dev) {
  if (pctx == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev_check(dev) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  struct CUctx_st *c = fk.dev[dev].primary;
  if (!c->active) {
    /* Activation creates the context: the driver's memory for it, or "failed call to
     * cuDevicePrimaryCtxRetain: CUDA_ERROR_OUT_OF_MEMORY" as a full device answers. */
    CUresult rc = fk_driver_ctx_open(c);
    if (rc != CUDA_SUCCESS) {
      return rc;
    }
  }
  c->refs++;
  set_active(c, 1);
  *pctx = c;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, primary_retain(pctx, dev));
}

static CUresult primary_release(CUdevice dev) {
  if (dev_check(dev) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  struct CUctx_st *c = fk.dev[dev].primary;
  if (c->refs == 0) {
    return CUDA_ERROR_INVALID_CONTEXT; /* documented in cuda.h */
  }
  if (--c->refs == 0 && c->active && !c->dying) {
    deactivate(c, 1);
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  FK_BODY(FK_NEED_INIT, primary_release(dev));
}

FK_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  FK_BODY(FK_NEED_INIT, primary_release(dev));
}

static CUresult primary_reset(CUdevice dev) {
  if (dev_check(dev) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  struct CUctx_st *c = fk.dev[dev].primary;
  if (c->active && !c->dying) { /* dying: another call is resetting it */
    deactivate(c, 0);           /* "does not release it": the retain count stays */
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  FK_BODY(FK_NEED_INIT, primary_reset(dev));
}

FK_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  FK_BODY(FK_NEED_INIT, primary_reset(dev));
}

static CUresult primary_state(CUdevice dev, unsigned *flags, int *active) {
  if (flags == NULL || active == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev_check(dev) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *flags = fk.dev[dev].primary->flags;
  *active = fk.dev[dev].primary->active;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
  FK_BODY(FK_NEED_INIT, primary_state(dev, flags, active));
}

static int ctx_flags_ok(unsigned flags) {
  unsigned sched = flags & CU_CTX_SCHED_MASK;
  return (flags & ~(unsigned)CU_CTX_FLAGS_MASK) == 0 &&
         (sched == 0 || sched == CU_CTX_SCHED_SPIN || sched == CU_CTX_SCHED_YIELD ||
          sched == CU_CTX_SCHED_BLOCKING_SYNC);
}

static CUresult primary_set_flags(CUdevice dev, unsigned flags, int v1) {
  if (dev_check(dev) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  if (!ctx_flags_ok(flags)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUctx_st *c = fk.dev[dev].primary;
  if (v1 && c->active) {
    return CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE; /* the 7000 ABI; _v2 (11000) lifted it */
  }
  c->flags = flags;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  FK_BODY(FK_NEED_INIT, primary_set_flags(dev, flags, 1));
}

FK_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  FK_BODY(FK_NEED_INIT, primary_set_flags(dev, flags, 0));
}

/* ---- Created contexts and the current-context stack. ---- */

static CUresult affinity_ok(const CUexecAffinityParam *params, int n) {
  if (n < 0 || (n > 0 && params == NULL)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (int i = 0; i < n; i++) {
    if (params[i].type != CU_EXEC_AFFINITY_TYPE_SM_COUNT || params[i].param.smCount.val == 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev) {
  if (pctx == NULL || !ctx_flags_ok(flags)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev_check(dev) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  if (depth == STACK_MAX) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  struct CUctx_st *c = ctx_new(dev, 0, flags);
  CUresult rc = fk_driver_ctx_open(c);
  if (rc != CUDA_SUCCESS) {
    return rc; /* the object stays, never active: a handle nobody was given */
  }
  set_active(c, 1);
  stack[depth++] = c;
  *pctx = c;
  return CUDA_SUCCESS;
}

FK_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, ctx_create(pctx, flags, dev));
}

static CUresult ctx_create_v3(CUcontext *pctx, CUexecAffinityParam *params, int n, unsigned flags,
                              CUdevice dev) {
  CUresult rc = affinity_ok(params, n);
  return rc != CUDA_SUCCESS ? rc : ctx_create(pctx, flags, dev);
}

FK_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                               unsigned int flags, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, ctx_create_v3(pctx, paramsArray, numParams, flags, dev));
}

static CUresult ctx_create_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned flags, CUdevice dev) {
  if (p != NULL) {
    /* "Exactly one of execAffinityParams and cigParams must be non-NULL." */
    if ((p->execAffinityParams == NULL) == (p->cigParams == NULL)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (p->cigParams != NULL) {
      return CUDA_ERROR_NOT_SUPPORTED; /* no D3D12/Vulkan interop here */
    }
    CUresult rc = affinity_ok(p->execAffinityParams, p->numExecAffinityParams);
    if (rc != CUDA_SUCCESS) {
      return rc;
    }
  }
  return ctx_create(pctx, flags, dev);
}

FK_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                               unsigned int flags, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, ctx_create_v4(pctx, ctxCreateParams, flags, dev));
}

static CUresult ctx_destroy(struct CUctx_st *c) {
  if (c == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!ctx_known(c) || !c->active || c->dying || c->primary) {
    return CUDA_ERROR_INVALID_CONTEXT; /* dying: another call is destroying it */
  }
  deactivate(c, 0);
  if (depth > 0 && stack[depth - 1] == c) {
    depth--;
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
  FK_BODY(FK_NEED_INIT, ctx_destroy(ctx));
}

static CUresult ctx_set_current(struct CUctx_st *c) {
  if (c == NULL) {
    if (depth > 0) {
      depth--;
    }
    return CUDA_SUCCESS;
  }
  if (!ctx_usable(c)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (depth == 0) {
    depth = 1;
  }
  stack[depth - 1] = c;
  return CUDA_SUCCESS;
}

FK_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  FK_BODY(FK_NEED_INIT, ctx_set_current(ctx));
}

static CUresult ctx_get_current(CUcontext *pctx) {
  if (pctx == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pctx = depth > 0 ? stack[depth - 1] : NULL;
  return CUDA_SUCCESS;
}

CUresult fk_ctx_get_current(CUcontext *out) {
  return ctx_get_current(out);
}

FK_API CUresult cuCtxGetCurrent(CUcontext *pctx) {
  FK_BODY(FK_NEED_INIT, ctx_get_current(pctx));
}

static CUresult ctx_push(struct CUctx_st *c) {
  if (!ctx_usable(c)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (depth == STACK_MAX) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  stack[depth++] = c;
  return CUDA_SUCCESS;
}

FK_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  FK_BODY(FK_NEED_INIT, ctx_push(ctx));
}

static CUresult ctx_pop(CUcontext *pctx) {
  if (depth == 0) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  struct CUctx_st *c = stack[--depth];
  if (pctx != NULL) {
    *pctx = c;
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
  FK_BODY(FK_NEED_INIT, ctx_pop(pctx));
}

CUresult fk_ctx_or_current(struct CUctx_st *c, struct CUctx_st **out) {
  if (c == NULL) {
    return fk_ctx_current(out);
  }
  if (!ctx_known(c)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (!c->active) {
    return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  *out = c;
  return CUDA_SUCCESS;
}

static CUresult ctx_get_device(CUdevice *device, struct CUctx_st *h) {
  if (device == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUctx_st *c;
  CUresult rc = fk_ctx_or_current(h, &c);
  if (rc == CUDA_SUCCESS) {
    *device = c->dev;
  }
  return rc;
}

CUresult fk_ctx_device_of(CUcontext ctx, CUdevice *dev) {
  return ctx_get_device(dev, ctx);
}

FK_API CUresult cuCtxGetDevice(CUdevice *device) {
  FK_BODY(FK_NEED_INIT, ctx_get_device(device, NULL));
}

FK_API CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
  FK_BODY(FK_NEED_INIT, ctx_get_device(device, ctx));
}

static CUresult ctx_synchronize(struct CUctx_st *h) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_or_current(h, &c);
  if (rc == CUDA_SUCCESS) {
    rc = fk_capture_unsafe();
  }
  for (size_t i = 0; rc == CUDA_SUCCESS && i < c->nstreams; i++) {
    rc = fk_capture_sync_check(c->streams[i]); /* it would wait for a capturing stream */
  }
  if (rc == CUDA_SUCCESS) {
    fk_sync_ctx(c);
  }
  return rc;
}

FK_API CUresult cuCtxSynchronize(void) {
  FK_BODY(FK_NEED_INIT, ctx_synchronize(NULL));
}

FK_API CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  FK_BODY(FK_NEED_INIT, ctx_synchronize(ctx));
}

static CUresult ctx_get_flags(unsigned *flags) {
  if (flags == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc == CUDA_SUCCESS) {
    *flags = c->flags;
  }
  return rc;
}

FK_API CUresult cuCtxGetFlags(unsigned int *flags) {
  FK_BODY(FK_NEED_INIT, ctx_get_flags(flags));
}

static CUresult ctx_get_id(struct CUctx_st *h, unsigned long long *id) {
  if (id == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUctx_st *c;
  CUresult rc = fk_ctx_or_current(h, &c);
  if (rc == CUDA_SUCCESS) {
    *id = c->id;
  }
  return rc;
}

CUresult fk_ctx_id_of(CUcontext ctx, unsigned long long *id) {
  return ctx_get_id(ctx, id);
}

FK_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId) {
  FK_BODY(FK_NEED_INIT, ctx_get_id(ctx, ctxId));
}

static CUresult priority_range(int *least, int *greatest) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (least != NULL) {
    *least = 0;
  }
  if (greatest != NULL) {
    *greatest = -5;
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority) {
  FK_BODY(FK_NEED_INIT, priority_range(leastPriority, greatestPriority));
}
