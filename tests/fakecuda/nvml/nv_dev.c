/* Devices: enumeration, handles (by index, PCI bus id, UUID, serial), identity (name, UUID,
 * serial, index, minor number, brand, architecture, compute capability, PCI info) and the state a
 * monitoring view reads (PCIe link, utilisation, temperature, power, clocks, compute and MIG
 * modes), as an H100 PCIe board answers (an A100 below compute capability 9.0).
 *
 * Identity follows the fake CUDA driver (tests/fakecuda/fk_ctx.c), so the two APIs agree about
 * every device: name "Fake CUDA Device N", UUID bytes fa4ec0da-0000-4000-8000-0000000000NN, PCI
 * domain 0, bus N + 1, device 0, and the PCI device id of its attribute 139. All under nv.lock.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "tests/fakecuda/nvml/nv.h"

/* The fake CUDA driver's UUID of device 0; byte 15 is the ordinal (fk_ctx.c, device_uuid). */
static const unsigned char uuid_base[16] = {0xfa, 0x4e, 0xc0, 0xda, 0, 0, 0x40, 0,
                                            0x80, 0,    0,    0,    0, 0, 0,    0};

/* H100 PCIe and A100 figures. The PCI device id is the fake driver's attribute 139 (0x2330,
 * 0x20b0) and the subsystem its board's; clocks match its CLOCK_RATE and MEMORY_CLOCK_RATE
 * attributes; the rest are the boards' published numbers. */
static const struct nv_board hopper = {
    0x233010de,  0x16c110de, 1980, 2619, 1755,
    350000,      50000,      5,    16,   NVML_PCIE_LINK_MAX_SPEED_32000MBPS,
    128ULL << 30};
static const struct nv_board ampere = {
    0x20b010de, 0x134f10de, 1410, 1215, 1290,
    250000,     35000,      4,    16,   NVML_PCIE_LINK_MAX_SPEED_16000MBPS,
    64ULL << 30};

const struct nv_board *nv_board(void) {
  return nv.cfg.cc_major >= 9 ? &hopper : &ampere;
}

int nv_slot(nvmlDevice_t h) {
  for (int d = 0; d < FK_MAX_DEVICES; d++) {
    if (h == &nv.dev[d]) {
      return d;
    }
  }
  return -1;
}

int nv_dev(nvmlDevice_t h) {
  int d = nv_slot(h);
  return d < nv.cfg.ndev ? d : -1;
}

enum { ID_NAME, ID_UUID, ID_SERIAL };

/* Device dev's name, UUID ("GPU-" and the driver's UUID bytes in the 8-4-4-4-12 form) or board
 * serial number (13 digits, as on the boards' labels). */
static void id_string(int dev, int what, char out[48]) {
  unsigned char u[16];
  memcpy(u, uuid_base, sizeof u);
  u[15] = (unsigned char)dev;
  if (what == ID_NAME) {
    snprintf(out, 48, "Fake CUDA Device %d", dev);
  } else if (what == ID_UUID) {
    snprintf(out, 48, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
  } else {
    snprintf(out, 48, "1652922%06d", dev);
  }
}

void nv_pci_fill(int dev, nvmlPciInfo_t *pci, int legacy_only) {
  const struct nv_board *b = nv_board();
  unsigned bus = nv.cfg.pci_bus[dev];
  snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", 0, bus, 0);
  pci->domain = 0;
  pci->bus = bus;
  pci->device = 0;
  pci->pciDeviceId = b->pci_device_id;
  pci->pciSubSystemId = b->pci_subsystem_id;
  if (!legacy_only) {
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", 0, bus, 0);
  }
}

/* ---- Enumeration and handles. ---- */

static nvmlReturn_t device_count(unsigned *count) {
  if (count == NULL) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *count = (unsigned)nv.cfg.ndev;
  return NVML_SUCCESS;
}

/* v1 counts the devices the caller may use and v2 all of them: the fake's are all usable. */
NV_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) {
  NV_BODY(NV_NEED_INIT, device_count(deviceCount));
}

NV_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
  NV_BODY(NV_NEED_INIT, device_count(deviceCount));
}

static nvmlReturn_t handle_by_index(unsigned index, nvmlDevice_t *device) {
  if (device == NULL || index >= (unsigned)nv.cfg.ndev) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *device = &nv.dev[index];
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
  NV_BODY(NV_NEED_INIT, handle_by_index(index, device));
}

NV_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
  NV_BODY(NV_NEED_INIT, handle_by_index(index, device));
}

/* One hexadecimal number of 1..8 digits at *s, then the separator sep (or the end for '\0'). */
static int hex_field(const char **s, char sep, unsigned *out) {
  unsigned v = 0;
  int n = 0;
  for (; n < 8; n++) {
    char c = (*s)[n];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) {
      break;
    }
    v = v * 16 + (unsigned)d;
  }
  if (n == 0 || (*s)[n] != sep) {
    return -1;
  }
  *s += n + (sep != '\0');
  *out = v;
  return 0;
}

/* nvml.h's three forms, all hexadecimal: domain:bus:device.function, domain:bus:device and
 * bus:device.function. */
static int parse_bus_id(const char *s, unsigned *domain, unsigned *bus, unsigned *device,
                        unsigned *function) {
  const char *p = s;
  unsigned a, b;
  if (hex_field(&p, ':', &a) != 0) {
    return -1;
  }
  const char *q = p;
  if (hex_field(&q, '.', &b) == 0 && hex_field(&q, '\0', function) == 0) {
    *domain = 0; /* bus:device.function */
    *bus = a;
    *device = b;
    return 0;
  }
  *domain = a;
  *function = 0;
  if (hex_field(&p, ':', bus) != 0) {
    return -1;
  }
  q = p;
  if (hex_field(&q, '\0', device) == 0) {
    return 0; /* domain:bus:device */
  }
  return hex_field(&p, '.', device) == 0 && hex_field(&p, '\0', function) == 0 ? 0 : -1;
}

static nvmlReturn_t handle_by_bus_id(const char *id, nvmlDevice_t *device) {
  unsigned domain, bus, dev, function;
  if (id == NULL || device == NULL || parse_bus_id(id, &domain, &bus, &dev, &function) != 0) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  for (int d = 0; d < nv.cfg.ndev && domain == 0 && dev == 0 && function == 0; d++) {
    if (nv.cfg.pci_bus[d] == bus) {
      *device = &nv.dev[d];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

NV_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device) {
  NV_BODY(NV_NEED_INIT, handle_by_bus_id(pciBusId, device));
}

NV_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
  NV_BODY(NV_NEED_INIT, handle_by_bus_id(pciBusId, device));
}

/* A UUID is "GPU-" and 8-4-4-4-12 hexadecimal digits; anything else is invalid. */
static int uuid_well_formed(const char *s) {
  static const char shape[] = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
  for (size_t i = 0; i < sizeof shape; i++) {
    int ok = shape[i] == 'x' ? (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f') ||
                                   (s[i] >= 'A' && s[i] <= 'F')
                             : s[i] == shape[i];
    if (!ok) {
      return 0;
    }
  }
  return 1;
}

/* A handle by UUID (case-insensitive) or board serial number. */
static nvmlReturn_t handle_by_id(int what, const char *id, nvmlDevice_t *device) {
  if (id == NULL || device == NULL || (what == ID_UUID ? !uuid_well_formed(id) : id[0] == '\0')) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  for (int d = 0; d < nv.cfg.ndev; d++) {
    char mine[48];
    id_string(d, what, mine);
    if (strcasecmp(id, mine) == 0) {
      *device = &nv.dev[d];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

NV_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
  NV_BODY(NV_NEED_INIT, handle_by_id(ID_UUID, uuid, device));
}

NV_API nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device) {
  NV_BODY(NV_NEED_INIT, handle_by_id(ID_SERIAL, serial, device));
}

/* ---- Identity. ---- */

static nvmlReturn_t identity(nvmlDevice_t device, int what, char *buf, unsigned length) {
  int d = nv_dev(device);
  if (d < 0) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  char s[48];
  id_string(d, what, s);
  return nv_string(buf, length, s);
}

NV_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
  NV_BODY(NV_NEED_INIT, identity(device, ID_NAME, name, length));
}

NV_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
  NV_BODY(NV_NEED_INIT, identity(device, ID_UUID, uuid, length));
}

NV_API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
  NV_BODY(NV_NEED_INIT, identity(device, ID_SERIAL, serial, length));
}

/* The per-device numbers: one checked accessor, the value picked by `what`. */
enum {
  NUM_INDEX,
  NUM_MINOR,
  NUM_BRAND,
  NUM_ARCH,
  NUM_PCIE_GEN,
  NUM_PCIE_WIDTH,
  NUM_PCIE_SPEED,
  NUM_POWER_DRAW,
  NUM_POWER_LIMIT,
  NUM_COMPUTE_MODE
};

static unsigned architecture(void) {
  int cc = nv.cfg.cc_major * 10 + nv.cfg.cc_minor;
  return cc < 70    ? NVML_DEVICE_ARCH_UNKNOWN
         : cc < 75  ? NVML_DEVICE_ARCH_VOLTA
         : cc < 80  ? NVML_DEVICE_ARCH_TURING
         : cc < 89  ? NVML_DEVICE_ARCH_AMPERE
         : cc < 90  ? NVML_DEVICE_ARCH_ADA
         : cc < 100 ? NVML_DEVICE_ARCH_HOPPER
         : cc < 130 ? NVML_DEVICE_ARCH_BLACKWELL
                    : NVML_DEVICE_ARCH_UNKNOWN;
}

static nvmlReturn_t number(nvmlDevice_t device, int what, unsigned *out) {
  int d = nv_dev(device);
  if (d < 0 || out == NULL) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const struct nv_board *b = nv_board();
  switch (what) {
  case NUM_INDEX:
    *out = (unsigned)d;
    break;
  case NUM_MINOR:
    *out = (unsigned)d;
    break; /* /dev/nvidiaN */
  case NUM_BRAND:
    *out = NVML_BRAND_NVIDIA;
    break;
  case NUM_ARCH:
    *out = architecture();
    break;
  case NUM_PCIE_GEN:
    *out = b->pcie_gen;
    break;
  case NUM_PCIE_WIDTH:
    *out = b->pcie_width;
    break;
  case NUM_PCIE_SPEED:
    *out = b->pcie_speed;
    break;
  case NUM_POWER_DRAW:
    *out = b->power_draw;
    break;
  case NUM_POWER_LIMIT:
    *out = b->power_limit;
    break;
  default:
    *out = NVML_COMPUTEMODE_DEFAULT;
    break; /* the fake driver's COMPUTE_MODE: 0 */
  }
  return NVML_SUCCESS;
}

static nvmlReturn_t compute_capability(nvmlDevice_t device, int *major, int *minor) {
  if (nv_dev(device) < 0 || major == NULL || minor == NULL) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *major = nv.cfg.cc_major;
  *minor = nv.cfg.cc_minor;
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major,
                                                       int *minor) {
  NV_BODY(NV_NEED_INIT, compute_capability(device, major, minor));
}

/* v1 and v2 predate busId[32]: they fill the part of nvmlPciInfo_t that older headers declared
 * (busIdLegacy and the five numbers) and leave the rest of the caller's structure alone. */
static nvmlReturn_t pci_info(nvmlDevice_t device, nvmlPciInfo_t *pci, int legacy_only) {
  int d = nv_dev(device);
  if (d < 0 || pci == NULL) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  nv_pci_fill(d, pci, legacy_only);
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) {
  NV_BODY(NV_NEED_INIT, pci_info(device, pci, 1));
}

NV_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
  NV_BODY(NV_NEED_INIT, pci_info(device, pci, 1));
}

NV_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
  NV_BODY(NV_NEED_INIT, pci_info(device, pci, 0));
}

static nvmlReturn_t pci_info_ext(nvmlDevice_t device, nvmlPciInfoExt_t *pci) {
  int d = nv_dev(device);
  if (d < 0 || pci == NULL) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (pci->version != nvmlPciInfoExt_v1) {
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  }
  nvmlPciInfo_t p;
  nv_pci_fill(d, &p, 0);
  pci->domain = p.domain;
  pci->bus = p.bus;
  pci->device = p.device;
  pci->pciDeviceId = p.pciDeviceId;
  pci->pciSubSystemId = p.pciSubSystemId;
  pci->baseClass = 0x03; /* display controller: 3D controller */
  pci->subClass = 0x02;
  memcpy(pci->busId, p.busId, sizeof pci->busId);
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci) {
  NV_BODY(NV_NEED_INIT, pci_info_ext(device, pci));
}

/* Each entry point that answers one number of a device: number() with the value it picks. */
#define NV_NUMBER(name, type, what)                                                                \
  NV_API nvmlReturn_t name(nvmlDevice_t device, type *out) {                                       \
    NV_BODY(NV_NEED_INIT, number(device, what, (unsigned *)out));                                  \
  }

NV_NUMBER(nvmlDeviceGetIndex, unsigned int, NUM_INDEX)
NV_NUMBER(nvmlDeviceGetMinorNumber, unsigned int, NUM_MINOR)
NV_NUMBER(nvmlDeviceGetBrand, nvmlBrandType_t, NUM_BRAND)
NV_NUMBER(nvmlDeviceGetArchitecture, nvmlDeviceArchitecture_t, NUM_ARCH)
NV_NUMBER(nvmlDeviceGetComputeMode, nvmlComputeMode_t, NUM_COMPUTE_MODE)
/* The PCIe link at its maximum, and an idle board's power. */
NV_NUMBER(nvmlDeviceGetCurrPcieLinkGeneration, unsigned int, NUM_PCIE_GEN)
NV_NUMBER(nvmlDeviceGetMaxPcieLinkGeneration, unsigned int, NUM_PCIE_GEN)
NV_NUMBER(nvmlDeviceGetCurrPcieLinkWidth, unsigned int, NUM_PCIE_WIDTH)
NV_NUMBER(nvmlDeviceGetMaxPcieLinkWidth, unsigned int, NUM_PCIE_WIDTH)
NV_NUMBER(nvmlDeviceGetPcieLinkMaxSpeed, unsigned int, NUM_PCIE_SPEED)
NV_NUMBER(nvmlDeviceGetPowerUsage, unsigned int, NUM_POWER_DRAW)
NV_NUMBER(nvmlDeviceGetPowerManagementLimit, unsigned int, NUM_POWER_LIMIT)
NV_NUMBER(nvmlDeviceGetEnforcedPowerLimit, unsigned int, NUM_POWER_LIMIT)

/* ---- State and sensors: an idle board (no kernel ever runs). ---- */

static nvmlReturn_t utilization(nvmlDevice_t device, nvmlUtilization_t *u) {
  if (nv_dev(device) < 0 || u == NULL) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  u->gpu = 0;
  u->memory = 0;
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *u) {
  NV_BODY(NV_NEED_INIT, utilization(device, u));
}

static nvmlReturn_t temperature(nvmlDevice_t device, unsigned sensor, unsigned *temp) {
  if (nv_dev(device) < 0 || temp == NULL || sensor >= NVML_TEMPERATURE_COUNT) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  *temp = 35; /* degrees C, an idle board */
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                             nvmlTemperatureSensors_t sensorType,
                                             unsigned int *temp) {
  NV_BODY(NV_NEED_INIT, temperature(device, (unsigned)sensorType, temp));
}

/* The fake runs at its maximum clocks: current and maximum are the same. */
static nvmlReturn_t clock_of(nvmlDevice_t device, unsigned type, unsigned *mhz) {
  if (nv_dev(device) < 0 || mhz == NULL || type >= NVML_CLOCK_COUNT) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  const struct nv_board *b = nv_board();
  *mhz = type == NVML_CLOCK_MEM     ? b->mem_clock
         : type == NVML_CLOCK_VIDEO ? b->video_clock
                                    : b->sm_clock;
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                           unsigned int *clock_mhz) {
  NV_BODY(NV_NEED_INIT, clock_of(device, (unsigned)type, clock_mhz));
}

NV_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                              unsigned int *clock_mhz) {
  NV_BODY(NV_NEED_INIT, clock_of(device, (unsigned)type, clock_mhz));
}

/* MIG is supported from compute capability 8.0 (A100, H100) and off. */
static nvmlReturn_t mig_mode(nvmlDevice_t device, unsigned *current, unsigned *pending) {
  if (nv_dev(device) < 0 || current == NULL || pending == NULL) {
    return NVML_ERROR_INVALID_ARGUMENT;
  }
  if (nv.cfg.cc_major < 8) {
    return NVML_ERROR_NOT_SUPPORTED;
  }
  *current = NVML_DEVICE_MIG_DISABLE;
  *pending = NVML_DEVICE_MIG_DISABLE;
  return NVML_SUCCESS;
}

NV_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                         unsigned int *pendingMode) {
  NV_BODY(NV_NEED_INIT, mig_mode(device, currentMode, pendingMode));
}
