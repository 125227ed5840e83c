/* Topology as a PCIe-only system answers it: peer-to-peer between every pair of fake devices
 * over PCIe (reads, writes, atomics, as the fake CUDA driver's cuDeviceGetP2PAttribute says), no
 * NVLink (every NvLink query NVML_ERROR_NOT_SUPPORTED after its arguments are checked), no GPU
 * fabric and no platform (rack) information, and field values with a per-field status.
 * All under nv.lock.
 */
#include <string.h>
#include <sys/time.h>

#include "tests/fakecuda/nvml/nv.h"

/* ---- Peer to peer. ---- */

static nvmlReturn_t p2p_status(nvmlDevice_t a, nvmlDevice_t b, unsigned index,
                               nvmlGpuP2PStatus_t *status) {
  if (nv_dev(a) < 0 || nv_dev(b) < 0 || status == NULL || index >= NVML_P2P_CAPS_INDEX_UNKNOWN) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *status =
      index == NVML_P2P_CAPS_INDEX_NVLINK ? NVML_P2P_STATUS_NOT_SUPPORTED : NVML_P2P_STATUS_OK;
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                           nvmlGpuP2PCapsIndex_t p2pIndex,
                                           nvmlGpuP2PStatus_t *p2pStatus) {
  NV_BODY(NV_NEED_INIT, p2p_status(device1, device2, (unsigned)p2pIndex, p2pStatus));
}

/* ---- NVLink: the arguments are checked, then the device has none. ---- */

static nvmlReturn_t nvlink(nvmlDevice_t device, unsigned link, const void *out) {
  if (nv_dev(device) < 0 || out == NULL || link >= NVML_NVLINK_MAX_LINKS) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return NVML_ERROR_NOT_SUPPORTED;
}

NV_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                             nvmlEnableState_t *isActive) {
  NV_BODY(NV_NEED_INIT, nvlink(device, link, isActive));
}

NV_API nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link,
                                               unsigned int *version) {
  NV_BODY(NV_NEED_INIT, nvlink(device, link, version));
}

NV_API nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link,
                                                  nvmlNvLinkCapability_t capability,
                                                  unsigned int *capResult) {
  NV_BODY(NV_NEED_INIT, (unsigned)capability >= NVML_NVLINK_CAP_COUNT
                            ? NVML_ERROR_INVALID_ARGUMENT
                            : nvlink(device, link, capResult));
}

NV_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                                     nvmlPciInfo_t *pci) {
  NV_BODY(NV_NEED_INIT, nvlink(device, link, pci));
}

NV_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                        nvmlPciInfo_t *pci) {
  NV_BODY(NV_NEED_INIT, nvlink(device, link, pci));
}

NV_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                        nvmlIntNvLinkDeviceType_t *type) {
  NV_BODY(NV_NEED_INIT, nvlink(device, link, type));
}

/* ---- Field values: each value gets its own status. ECC mode is modelled (on, as the fake
 * driver's ECC_ENABLED attribute); every other field NVML defines (the NVLink and C2C ones
 * included: the board has neither) is NVML_ERROR_NOT_SUPPORTED; an id NVML does not define is
 * NVML_ERROR_INVALID_ARGUMENT. ---- */

static void field(nvmlFieldValue_t *v, long long now) {
  v->timestamp = now;
  v->latencyUsec = 0;
  if (v->fieldId == 0 || v->fieldId >= NVML_FI_MAX) {
    v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
    return;
  }
  if (v->fieldId == NVML_FI_DEV_ECC_CURRENT || v->fieldId == NVML_FI_DEV_ECC_PENDING) {
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v->value.uiVal = 1;
    v->nvmlReturn = NVML_SUCCESS;
    return;
  }
  v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
}

static nvmlReturn_t field_values(nvmlDevice_t device, int count, nvmlFieldValue_t *values) {
  if (nv_dev(device) < 0 || values == NULL || count < 0) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  struct timeval tv;
  gettimeofday(&tv, NULL);
  long long now = (long long)tv.tv_sec * 1000000 + tv.tv_usec;
  for (int i = 0; i < count; i++) {
    field(&values[i], now);
  }
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                             nvmlFieldValue_t *values) {
  NV_BODY(NV_NEED_INIT, field_values(device, valuesCount, values));
}

/* ---- GPU fabric (NVSwitch systems) and platform (rack) information: not on this board. The
 * versioned structures are checked first; nothing is written. ---- */

static nvmlReturn_t unsupported(nvmlDevice_t device, const void *out, int version_ok) {
  if (nv_dev(device) < 0 || out == NULL) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  return version_ok ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}

NV_API nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
  NV_BODY(NV_NEED_INIT, unsupported(device, info, 1));
}

static int fabric_version_ok(const nvmlGpuFabricInfoV_t *info) {
  return info != NULL &&
         (info->version == nvmlGpuFabricInfo_v2 || info->version == nvmlGpuFabricInfo_v3);
}

NV_API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *info) {
  NV_BODY(NV_NEED_INIT, unsupported(device, info, fabric_version_ok(info)));
}

static int platform_version_ok(const nvmlPlatformInfo_t *info) {
  return info != NULL &&
         (info->version == nvmlPlatformInfo_v1 || info->version == nvmlPlatformInfo_v2);
}

NV_API nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, nvmlPlatformInfo_t *info) {
  NV_BODY(NV_NEED_INIT, unsupported(device, info, platform_version_ok(info)));
}
