/* Per-context settings: resource limits (cuCtxGetLimit/SetLimit), the preferred cache and
 * shared-memory bank configuration, peer access between devices, and the API version.
 *
 * Their values and error codes are the driver's, because the runtime and the CUDA libraries
 * read them at start (cuBLAS asks for the stack size; NCCL enables peer access); the stack, printf
 * FIFO and heap limits also size the driver's reservations of device memory (fk_driver.c), so
 * raising one can fail with CUDA_ERROR_OUT_OF_MEMORY. All run under fk.lock.
 */
#include "tests/fakecuda/fk.h"

#define PERSISTING_L2_MAX (hopper() ? 82313216 : 31457280) /* MAX_PERSISTING_L2_CACHE_SIZE */

static int hopper(void) {
  return fk.cfg.cc_major >= 9;
}

void fk_ctx_settings_init(struct CUctx_st *c) {
  c->limits[CU_LIMIT_STACK_SIZE] = 1024;
  c->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
  c->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
  c->limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
  c->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
  c->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 32;
  c->limits[CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0;
  c->limits[CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED] = 1;
  c->cache_config = CU_FUNC_CACHE_PREFER_NONE;
  c->smem_config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
}

/* A limit this device does not have: the device-runtime sync depth exists below 9.0 only, the
 * CIG shared-memory size only in CIG contexts (which the fake does not make). */
static int unsupported(int limit) {
  return (limit == CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH && hopper()) || limit == CU_LIMIT_SHMEM_SIZE;
}

static CUresult get_limit(size_t *value, int limit) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (value == NULL || limit < 0 || limit > CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (unsupported(limit)) {
    return CUDA_ERROR_UNSUPPORTED_LIMIT;
  }
  *value = c->limits[limit];
  return CUDA_SUCCESS;
}

FK_API CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit) {
  FK_BODY(FK_NEED_INIT, get_limit(pvalue, (int)limit));
}

static CUresult set_limit(int limit, size_t value) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (limit < 0 || limit > CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED || limit == CU_LIMIT_CIG_ENABLED) {
    return CUDA_ERROR_INVALID_VALUE; /* unknown, or query-only */
  }
  if (unsupported(limit)) {
    return CUDA_ERROR_UNSUPPORTED_LIMIT;
  }
  switch (limit) {
  case CU_LIMIT_STACK_SIZE:
    value = (value + 15) & ~(size_t)15; /* "rounding up to nearest element size" */
    break;
  case CU_LIMIT_MAX_L2_FETCH_GRANULARITY:
    value = value > 128 ? 128 : value; /* a hint, clamped */
    break;
  case CU_LIMIT_PERSISTING_L2_CACHE_SIZE:
    value = value > (size_t)PERSISTING_L2_MAX ? (size_t)PERSISTING_L2_MAX : value;
    break;
  case CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED:
    value = value != 0;
    break;
  default:
    break;
  }
  rc = fk_driver_set_limit(c, limit, value); /* the reservation behind the limit, if any */
  if (rc == CUDA_SUCCESS) {
    c->limits[limit] = value;
  }
  return rc;
}

FK_API CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  FK_BODY(FK_NEED_INIT, set_limit((int)limit, value));
}

static CUresult get_cache(CUfunc_cache *config) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc == CUDA_SUCCESS && config == NULL) {
    rc = CUDA_ERROR_INVALID_VALUE;
  }
  if (rc == CUDA_SUCCESS) {
    *config = (CUfunc_cache)c->cache_config;
  }
  return rc;
}

FK_API CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig) {
  FK_BODY(FK_NEED_INIT, get_cache(pconfig));
}

static CUresult set_cache(int config) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc == CUDA_SUCCESS &&
      (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL)) {
    rc = CUDA_ERROR_INVALID_VALUE;
  }
  if (rc == CUDA_SUCCESS) {
    c->cache_config = config;
  }
  return rc;
}

FK_API CUresult cuCtxSetCacheConfig(CUfunc_cache config) {
  FK_BODY(FK_NEED_INIT, set_cache((int)config));
}

static CUresult get_smem_config(CUsharedconfig *config) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc == CUDA_SUCCESS && config == NULL) {
    rc = CUDA_ERROR_INVALID_VALUE;
  }
  if (rc == CUDA_SUCCESS) {
    *config = (CUsharedconfig)c->smem_config;
  }
  return rc;
}

FK_API CUresult cuCtxGetSharedMemConfig(CUsharedconfig *pConfig) {
  FK_BODY(FK_NEED_INIT, get_smem_config(pConfig));
}

static CUresult set_smem_config(int config) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc == CUDA_SUCCESS && (config < 0 || config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)) {
    rc = CUDA_ERROR_INVALID_VALUE;
  }
  /* The bank size is fixed on these architectures: the setting is accepted and ignored. */
  return rc;
}

FK_API CUresult cuCtxSetSharedMemConfig(CUsharedconfig config) {
  FK_BODY(FK_NEED_INIT, set_smem_config((int)config));
}

static CUresult api_version(CUcontext h, unsigned *version) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_or_current(h, &c);
  if (rc == CUDA_SUCCESS && version == NULL) {
    rc = CUDA_ERROR_INVALID_VALUE;
  }
  if (rc == CUDA_SUCCESS) {
    *version = 3020; /* what the real driver answers for every context */
  }
  return rc;
}

FK_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version) {
  FK_BODY(FK_NEED_INIT, api_version(ctx, version));
}

/* ---- Peer access: every pair of distinct fake devices is peer-capable (NVLink-style). ---- */

static CUresult can_access_peer(int *can, CUdevice dev, CUdevice peer) {
  if (can == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev < 0 || dev >= fk.ndev || peer < 0 || peer >= fk.ndev) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *can = dev != peer;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev) {
  FK_BODY(FK_NEED_INIT, can_access_peer(canAccessPeer, dev, peerDev));
}

static CUresult p2p_attribute(int *value, int attrib, CUdevice src, CUdevice dst) {
  if (value == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (src < 0 || src >= fk.ndev || dst < 0 || dst >= fk.ndev || src == dst) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  switch (attrib) {
  case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
    *value = 0;
    break;
  case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
  case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
  case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
    *value = 1;
    break;
  case CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED:
    *value = 0;
    break;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib,
                                        CUdevice srcDevice, CUdevice dstDevice) {
  FK_BODY(FK_NEED_INIT, p2p_attribute(value, (int)attrib, srcDevice, dstDevice));
}

static CUresult enable_peer(CUcontext peer, unsigned flags, int enable) {
  struct CUctx_st *c, *p;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (peer == NULL || fk_ctx_or_current(peer, &p) != CUDA_SUCCESS) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (enable && flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (p->dev == c->dev) {
    return CUDA_ERROR_INVALID_DEVICE; /* "not a peer": the same device */
  }
  uint64_t bit = (uint64_t)1 << p->dev;
  if (enable && (c->peers & bit)) {
    return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  }
  if (!enable && !(c->peers & bit)) {
    return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  }
  c->peers = enable ? c->peers | bit : c->peers & ~bit;
  return CUDA_SUCCESS;
}

FK_API CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  FK_BODY(FK_NEED_INIT, enable_peer(peerContext, Flags, 1));
}

FK_API CUresult cuCtxDisablePeerAccess(CUcontext peerContext) {
  FK_BODY(FK_NEED_INIT, enable_peer(peerContext, 0, 0));
}
