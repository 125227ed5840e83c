/* TAP test of the fake NVML on its own (no CUDA driver linked into the process): initialisation
 * and its reference count, error strings, the system queries, enumeration and handles, identity,
 * PCI, state and sensors, topology, fields, fabric and platform, memory with no driver loaded,
 * the catch-all, and (in child processes run with other settings) FAKECUDA_DEVICES=0, malformed
 * settings, FAKENVML_FAIL, FAKECUDA_TRACE, a failing cuDriverGetVersion and the A100 figures
 * below compute capability 9.0. Three devices of 1, 2 and 16 GiB. `test_fakenvml child MODE`
 * runs one child's part (test_nvml_lib.sh runs `child cudaversion` without a driver,
 * tests/fakecuda/test_machine.sh `child smi`: device 0's memory and compute processes).
 *
 * Linked with a DT_RPATH to build/fakecuda, which the loader also applies to the dlopen of
 * libcuda.so.1 made by nvmlSystemGetCudaDriverVersion: the fake driver is found there.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/fakecuda/nvml/nvmldefs.h"
#include "tests/tap.h"

#define GiB ((unsigned long long)1 << 30)
#define NV(call) TAP_EQ((call), NVML_SUCCESS, "%s", #call)

/* A catch-all entry point without semantics (declared here: not in our header). */
nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed);

static nvmlDevice_t dev[3];

static void before_init(void) {
  unsigned n;
  nvmlDevice_t d;
  char buf[96];
  TAP_EQ(nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED, "GetCount before nvmlInit");
  TAP_EQ(nvmlDeviceGetHandleByIndex_v2(0, &d), NVML_ERROR_UNINITIALIZED,
         "GetHandleByIndex before nvmlInit");
  TAP_EQ(nvmlSystemGetDriverVersion(buf, sizeof buf), NVML_ERROR_UNINITIALIZED,
         "SystemGetDriverVersion before nvmlInit");
  TAP_EQ(nvmlShutdown(), NVML_ERROR_UNINITIALIZED, "nvmlShutdown before nvmlInit");
  TAP_EQ(nvmlDeviceGetFanSpeed(NULL, &n), NVML_ERROR_UNINITIALIZED, "catch-all before nvmlInit");
  NV(nvmlSystemGetNVMLVersion(buf, sizeof buf));
  tap_ok(strcmp(buf, "13.580.65.06") == 0, "the NVML version works before nvmlInit: %s", buf);
  tap_ok(strcmp(nvmlErrorString(NVML_ERROR_UNINITIALIZED), "Uninitialized") == 0,
         "nvmlErrorString works before nvmlInit");
}

static void init_refcount(void) {
  unsigned n = 0;
  NV(nvmlInit_v2());
  NV(nvmlInit());
  NV(nvmlInitWithFlags(NVML_INIT_FLAG_NO_ATTACH | 0x100));
  NV(nvmlShutdown());
  NV(nvmlShutdown());
  NV(nvmlDeviceGetCount_v2(&n));
  TAP_EQ(n, 3, "still initialised after two of three shutdowns: 3 devices");
  NV(nvmlShutdown());
  TAP_EQ(nvmlDeviceGetCount_v2(&n), NVML_ERROR_UNINITIALIZED,
         "the third shutdown ends it: GetCount is UNINITIALIZED");
  TAP_EQ(nvmlShutdown(), NVML_ERROR_UNINITIALIZED, "one shutdown too many: UNINITIALIZED");
  NV(nvmlInit_v2());
  NV(nvmlDeviceGetCount_v2(&n));
  TAP_EQ(n, 3, "nvmlInit_v2 again: 3 devices");
}

static void errors(void) {
  static const struct {
    nvmlReturn_t r;
    const char *s;
  } known[] = {{NVML_SUCCESS, "Success"},
               {NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument"},
               {NVML_ERROR_NOT_SUPPORTED, "Not Supported"},
               {NVML_ERROR_NO_PERMISSION, "Insufficient Permissions"},
               {NVML_ERROR_NOT_FOUND, "Not Found"},
               {NVML_ERROR_INSUFFICIENT_SIZE, "Insufficient Size"},
               {NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"},
               {NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"},
               {NVML_ERROR_FUNCTION_NOT_FOUND, "Function Not Found"},
               {NVML_ERROR_GPU_IS_LOST, "GPU is lost"},
               {NVML_ERROR_GPU_NOT_FOUND, "No supported GPUs were found"},
               {NVML_ERROR_UNKNOWN, "Unknown Error"},
               {(nvmlReturn_t)12345, "Unknown Error"}};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
    const char *s = nvmlErrorString(known[i].r);
    tap_ok(s != NULL && strcmp(s, known[i].s) == 0, "nvmlErrorString(%d) = \"%s\"", (int)known[i].r,
           s ? s : "(null)");
  }
  int distinct = 1;
  for (int a = 0; a <= 30; a++) {
    for (int b = a + 1; b <= 30; b++) {
      distinct &= strcmp(nvmlErrorString((nvmlReturn_t)a), nvmlErrorString((nvmlReturn_t)b)) != 0;
    }
    distinct &= strcmp(nvmlErrorString((nvmlReturn_t)a), "Unknown Error") != 0;
  }
  tap_ok(distinct, "codes 0..30 have 31 distinct strings, none \"Unknown Error\"");
}

static void system_queries(void) {
  char buf[96];
  NV(nvmlSystemGetDriverVersion(buf, sizeof buf));
  tap_ok(strcmp(buf, "580.65.06") == 0, "driver version %s", buf);
  TAP_EQ(nvmlSystemGetDriverVersion(buf, 9), NVML_ERROR_INSUFFICIENT_SIZE,
         "driver version in 9 bytes: INSUFFICIENT_SIZE");
  NV(nvmlSystemGetDriverVersion(buf, 10));
  TAP_EQ(nvmlSystemGetDriverVersion(NULL, 80), NVML_ERROR_INVALID_ARGUMENT,
         "driver version into NULL");
  TAP_EQ(nvmlSystemGetNVMLVersion(buf, 12), NVML_ERROR_INSUFFICIENT_SIZE,
         "NVML version in 12 bytes: INSUFFICIENT_SIZE");
  TAP_EQ(nvmlSystemGetNVMLVersion(NULL, 80), NVML_ERROR_INVALID_ARGUMENT, "NVML version into NULL");

  /* The CUDA driver version comes from libcuda.so.1, which this process has not loaded: NVML
   * loads the fake driver (found through this program's DT_RPATH) and unloads it again. */
  tap_ok(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) == NULL, "no libcuda.so.1 loaded yet");
  int v = 0;
  NV(nvmlSystemGetCudaDriverVersion_v2(&v));
  TAP_EQ(v, 13000, "CUDA driver version (v2): the fake driver's cuDriverGetVersion");
  v = 0;
  NV(nvmlSystemGetCudaDriverVersion(&v));
  TAP_EQ(v, 13000, "CUDA driver version (v1)");
  tap_ok(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) == NULL,
         "... and the driver was unloaded again");
  TAP_EQ(nvmlSystemGetCudaDriverVersion_v2(NULL), NVML_ERROR_INVALID_ARGUMENT, "v2 into NULL");
  TAP_EQ(nvmlSystemGetCudaDriverVersion(NULL), NVML_ERROR_INVALID_ARGUMENT, "v1 into NULL");

  char name[256], want[256];
  NV(nvmlSystemGetProcessName((unsigned)getpid(), name, sizeof name));
  FILE *f = fopen("/proc/self/cmdline", "r");
  size_t n = f ? fread(want, 1, sizeof want - 1, f) : 0;
  want[n] = '\0';
  if (f) {
    fclose(f);
  }
  tap_ok(strcmp(name, want) == 0, "process name is argv[0]: %s", name);
  NV(nvmlSystemGetProcessName((unsigned)getpid(), name, 4));
  tap_ok(strlen(name) == 3 && strncmp(name, want, 3) == 0, "cropped to the length: %s", name);
  TAP_EQ(nvmlSystemGetProcessName((unsigned)getpid(), name, 0), NVML_ERROR_INVALID_ARGUMENT,
         "process name with length 0");
  TAP_EQ(nvmlSystemGetProcessName((unsigned)getpid(), NULL, 8), NVML_ERROR_INVALID_ARGUMENT,
         "process name into NULL");
  TAP_EQ(nvmlSystemGetProcessName(0x7ffffff0u, name, sizeof name), NVML_ERROR_NOT_FOUND,
         "process name of no process: NOT_FOUND");

  nvmlConfComputeSystemState_t st;
  memset(&st, 0xff, sizeof st);
  NV(nvmlSystemGetConfComputeState(&st));
  tap_ok(st.environment == NVML_CC_SYSTEM_ENVIRONMENT_UNAVAILABLE &&
             st.ccFeature == NVML_CC_SYSTEM_FEATURE_DISABLED &&
             st.devToolsMode == NVML_CC_SYSTEM_DEVTOOLS_MODE_OFF,
         "confidential computing off");
  TAP_EQ(nvmlSystemGetConfComputeState(NULL), NVML_ERROR_INVALID_ARGUMENT, "CC state into NULL");
  nvmlSystemConfComputeSettings_v2_t s2;
  memset(&s2, 0xff, sizeof s2);
  s2.version = nvmlSystemConfComputeSettings_v1;
  NV(nvmlSystemGetConfComputeSettings((nvmlSystemConfComputeSettings_t *)&s2));
  tap_ok(s2.ccFeature == NVML_CC_SYSTEM_FEATURE_DISABLED &&
             s2.multiGpuMode == NVML_CC_SYSTEM_MULTIGPU_NONE && s2.tdispState == 0xffffffffu,
         "CC settings v1: off, and nothing written past the v1 structure");
  s2.version = nvmlSystemConfComputeSettings_v2;
  TAP_EQ(nvmlSystemGetConfComputeSettings((nvmlSystemConfComputeSettings_t *)&s2),
         NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "CC settings (v1 entry point) with a v2 version");
  NV(nvmlSystemGetConfComputeSettings_v2(&s2));
  TAP_EQ(s2.tdispState, NVML_CC_SYSTEM_TDISP_STATE_DISABLED, "CC settings v2: TDISP disabled");
  s2.version = 0;
  TAP_EQ(nvmlSystemGetConfComputeSettings_v2(&s2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
         "CC settings with version 0");
  TAP_EQ(nvmlSystemGetConfComputeSettings(NULL), NVML_ERROR_INVALID_ARGUMENT,
         "CC settings into NULL");
}

static void enumeration(void) {
  unsigned n = 0;
  NV(nvmlDeviceGetCount(&n));
  TAP_EQ(n, 3, "GetCount (v1): 3");
  TAP_EQ(nvmlDeviceGetCount_v2(NULL), NVML_ERROR_INVALID_ARGUMENT, "GetCount_v2(NULL)");
  TAP_EQ(nvmlDeviceGetCount(NULL), NVML_ERROR_INVALID_ARGUMENT, "GetCount(NULL)");
  for (unsigned i = 0; i < 3; i++) {
    NV(nvmlDeviceGetHandleByIndex_v2(i, &dev[i]));
  }
  nvmlDevice_t d = NULL;
  NV(nvmlDeviceGetHandleByIndex(1, &d));
  tap_ok(d == dev[1], "v1 and v2 give the same handle");
  tap_ok(dev[0] != dev[1] && dev[1] != dev[2], "distinct handles");
  TAP_EQ(nvmlDeviceGetHandleByIndex_v2(3, &d), NVML_ERROR_INVALID_ARGUMENT, "index 3");
  TAP_EQ(nvmlDeviceGetHandleByIndex_v2(0, NULL), NVML_ERROR_INVALID_ARGUMENT, "handle into NULL");

  static const struct {
    const char *id;
    int want; /* device index, or -NVML code */
  } ids[] = {{"0000:02:00.0", 1},
             {"00000000:02:00.0", 1},
             {"0:2:0.0", 1},
             {"0000:03:00", 2},
             {"01:00.0", 0},
             {"00000000:0A:00.0", -6},
             {"0001:01:00.0", -6},
             {"0000:01:01.0", -6},
             {"0000:01:00.1", -6},
             {"0000:00:00.0", -6},
             {"", -2},
             {"01:00", -2},
             {"zz:00.0", -2},
             {"0000:01:00.0x", -2},
             {"000000000:01:00.0", -2},
             {"0000:01:00.0 ", -2}};
  for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
    d = NULL;
    nvmlReturn_t r = nvmlDeviceGetHandleByPciBusId_v2(ids[i].id, &d);
    if (ids[i].want >= 0) {
      tap_ok(r == NVML_SUCCESS && d == dev[ids[i].want], "by PCI bus id \"%s\": device %d",
             ids[i].id, ids[i].want);
    } else {
      TAP_EQ(r, -ids[i].want, "by PCI bus id \"%s\"", ids[i].id);
    }
  }
  NV(nvmlDeviceGetHandleByPciBusId("0000:01:00.0", &d));
  tap_ok(d == dev[0], "by PCI bus id (v1)");
  TAP_EQ(nvmlDeviceGetHandleByPciBusId_v2(NULL, &d), NVML_ERROR_INVALID_ARGUMENT,
         "by PCI bus id NULL");
  TAP_EQ(nvmlDeviceGetHandleByPciBusId_v2("01:00.0", NULL), NVML_ERROR_INVALID_ARGUMENT,
         "by PCI bus id into NULL");

  NV(nvmlDeviceGetHandleByUUID("GPU-fa4ec0da-0000-4000-8000-000000000002", &d));
  tap_ok(d == dev[2], "by UUID: device 2");
  NV(nvmlDeviceGetHandleByUUID("GPU-FA4EC0DA-0000-4000-8000-000000000001", &d));
  tap_ok(d == dev[1], "by UUID in capitals: device 1");
  TAP_EQ(nvmlDeviceGetHandleByUUID("GPU-fa4ec0da-0000-4000-8000-000000000003", &d),
         NVML_ERROR_NOT_FOUND, "by UUID of no device: NOT_FOUND");
  TAP_EQ(nvmlDeviceGetHandleByUUID("fa4ec0da-0000-4000-8000-000000000001", &d),
         NVML_ERROR_INVALID_ARGUMENT, "by UUID without GPU-: INVALID_ARGUMENT");
  TAP_EQ(nvmlDeviceGetHandleByUUID("GPU-fa4ec0da", &d), NVML_ERROR_INVALID_ARGUMENT,
         "by a truncated UUID: INVALID_ARGUMENT");
  TAP_EQ(nvmlDeviceGetHandleByUUID(NULL, &d), NVML_ERROR_INVALID_ARGUMENT, "by UUID NULL");

  NV(nvmlDeviceGetHandleBySerial("1652922000001", &d));
  tap_ok(d == dev[1], "by serial: device 1");
  TAP_EQ(nvmlDeviceGetHandleBySerial("1652922000009", &d), NVML_ERROR_NOT_FOUND,
         "by serial of no device: NOT_FOUND");
  TAP_EQ(nvmlDeviceGetHandleBySerial("", &d), NVML_ERROR_INVALID_ARGUMENT, "by empty serial");
  TAP_EQ(nvmlDeviceGetHandleBySerial("1652922000001", NULL), NVML_ERROR_INVALID_ARGUMENT,
         "by serial into NULL");
}

/* Name (which 0), UUID (1) or serial (2) of d into buf of length len. */
static nvmlReturn_t id_query(int which, nvmlDevice_t d, char *buf, unsigned len) {
  return which == 0   ? nvmlDeviceGetName(d, buf, len)
         : which == 1 ? nvmlDeviceGetUUID(d, buf, len)
                      : nvmlDeviceGetSerial(d, buf, len);
}

static void identity(void) {
  static const struct {
    const char *what, *want; /* of device 1 */
  } ids[] = {{"name (as cuDeviceGetName)", "Fake CUDA Device 1"},
             {"UUID (as cuDeviceGetUuid's bytes)", "GPU-fa4ec0da-0000-4000-8000-000000000001"},
             {"serial", "1652922000001"}};
  char buf[96];
  unsigned u = 99;
  nvmlDevice_t bad = (nvmlDevice_t)(void *)buf;
  for (int i = 0; i < 3; i++) {
    unsigned len = (unsigned)strlen(ids[i].want) + 1;
    memset(buf, 0, sizeof buf);
    TAP_EQ(id_query(i, dev[1], buf, sizeof buf), NVML_SUCCESS, "%s", ids[i].what);
    tap_ok(strcmp(buf, ids[i].want) == 0, "... %s", buf);
    memset(buf, 0x5a, sizeof buf);
    TAP_EQ(id_query(i, dev[1], buf, len - 1), NVML_ERROR_INSUFFICIENT_SIZE,
           "%s in %u bytes: INSUFFICIENT_SIZE", ids[i].what, len - 1);
    tap_ok(buf[0] == 0x5a, "... nothing written");
    TAP_EQ(id_query(i, dev[1], buf, len), NVML_SUCCESS, "%s in %u bytes", ids[i].what, len);
    TAP_EQ(id_query(i, bad, buf, sizeof buf), NVML_ERROR_INVALID_ARGUMENT, "%s of a bad handle",
           ids[i].what);
    TAP_EQ(id_query(i, NULL, buf, sizeof buf), NVML_ERROR_INVALID_ARGUMENT, "%s of NULL",
           ids[i].what);
    TAP_EQ(id_query(i, dev[1], NULL, sizeof buf), NVML_ERROR_INVALID_ARGUMENT, "%s into NULL",
           ids[i].what);
  }
  NV(nvmlDeviceGetName(dev[2], buf, NVML_DEVICE_NAME_V2_BUFFER_SIZE));
  tap_ok(strcmp(buf, "Fake CUDA Device 2") == 0, "name of device 2: %s", buf);

  NV(nvmlDeviceGetIndex(dev[2], &u));
  TAP_EQ(u, 2, "index 2");
  TAP_EQ(nvmlDeviceGetIndex(bad, &u), NVML_ERROR_INVALID_ARGUMENT, "index of a bad handle");
  TAP_EQ(nvmlDeviceGetIndex(dev[2], NULL), NVML_ERROR_INVALID_ARGUMENT, "index into NULL");
  NV(nvmlDeviceGetMinorNumber(dev[1], &u));
  TAP_EQ(u, 1, "minor number 1 (/dev/nvidia1)");
  TAP_EQ(nvmlDeviceGetMinorNumber(dev[1], NULL), NVML_ERROR_INVALID_ARGUMENT, "minor into NULL");
  nvmlBrandType_t brand = NVML_BRAND_UNKNOWN;
  NV(nvmlDeviceGetBrand(dev[0], &brand));
  TAP_EQ(brand, NVML_BRAND_NVIDIA, "brand NVIDIA");
  TAP_EQ(nvmlDeviceGetBrand(bad, &brand), NVML_ERROR_INVALID_ARGUMENT, "brand of a bad handle");
  nvmlDeviceArchitecture_t arch = 0;
  NV(nvmlDeviceGetArchitecture(dev[0], &arch));
  TAP_EQ(arch, NVML_DEVICE_ARCH_HOPPER, "architecture Hopper (compute capability 9.0)");
  TAP_EQ(nvmlDeviceGetArchitecture(dev[0], NULL), NVML_ERROR_INVALID_ARGUMENT,
         "architecture into NULL");
  int major = 0, minor = -1;
  NV(nvmlDeviceGetCudaComputeCapability(dev[1], &major, &minor));
  tap_ok(major == 9 && minor == 0, "compute capability %d.%d", major, minor);
  TAP_EQ(nvmlDeviceGetCudaComputeCapability(dev[1], &major, NULL), NVML_ERROR_INVALID_ARGUMENT,
         "compute capability minor into NULL");
  TAP_EQ(nvmlDeviceGetCudaComputeCapability(bad, &major, &minor), NVML_ERROR_INVALID_ARGUMENT,
         "compute capability of a bad handle");
}

static void pci(void) {
  nvmlPciInfo_t p;
  memset(&p, 0x5a, sizeof p);
  NV(nvmlDeviceGetPciInfo_v3(dev[1], &p));
  tap_ok(strcmp(p.busId, "00000000:02:00.0") == 0, "v3 busId %s", p.busId);
  tap_ok(strcmp(p.busIdLegacy, "0000:02:00.0") == 0, "v3 busIdLegacy %s", p.busIdLegacy);
  tap_ok(p.domain == 0 && p.bus == 2 && p.device == 0, "domain 0, bus 2, device 0");
  TAP_EQ(p.pciDeviceId, 0x233010de, "pciDeviceId: device 0x2330 (the fake driver's), vendor 10de");
  TAP_EQ(p.pciSubSystemId, 0x16c110de, "pciSubSystemId");
  nvmlDevice_t d = NULL;
  NV(nvmlDeviceGetHandleByPciBusId_v2(p.busId, &d));
  tap_ok(d == dev[1], "busId leads back to the device");
  memset(&p, 0x5a, sizeof p);
  NV(nvmlDeviceGetPciInfo(dev[2], &p));
  tap_ok(strcmp(p.busIdLegacy, "0000:03:00.0") == 0 && p.bus == 3, "v1 busIdLegacy %s",
         p.busIdLegacy);
  tap_ok(p.busId[0] == 0x5a && p.busId[31] == 0x5a, "v1 leaves busId[32] alone");
  memset(&p, 0x5a, sizeof p);
  NV(nvmlDeviceGetPciInfo_v2(dev[0], &p));
  tap_ok(strcmp(p.busIdLegacy, "0000:01:00.0") == 0 && p.busId[0] == 0x5a,
         "v2 as v1: busIdLegacy %s, busId untouched", p.busIdLegacy);
  TAP_EQ(nvmlDeviceGetPciInfo_v3(dev[0], NULL), NVML_ERROR_INVALID_ARGUMENT, "PCI info into NULL");
  TAP_EQ(nvmlDeviceGetPciInfo((nvmlDevice_t)(void *)&p, &p), NVML_ERROR_INVALID_ARGUMENT,
         "PCI info of a bad handle");

  nvmlPciInfoExt_t e;
  memset(&e, 0, sizeof e);
  e.version = nvmlPciInfoExt_v1;
  NV(nvmlDeviceGetPciInfoExt(dev[2], &e));
  tap_ok(strcmp(e.busId, "00000000:03:00.0") == 0 && e.bus == 3 && e.baseClass == 3 &&
             e.subClass == 2 && e.pciDeviceId == 0x233010de,
         "PciInfoExt: %s, class 03 02", e.busId);
  e.version = 1;
  TAP_EQ(nvmlDeviceGetPciInfoExt(dev[2], &e), NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
         "PciInfoExt with version 1 (not the version macro)");
  TAP_EQ(nvmlDeviceGetPciInfoExt(dev[2], NULL), NVML_ERROR_INVALID_ARGUMENT, "PciInfoExt NULL");

  unsigned u = 0;
  NV(nvmlDeviceGetCurrPcieLinkGeneration(dev[0], &u));
  TAP_EQ(u, 5, "current PCIe generation 5");
  NV(nvmlDeviceGetMaxPcieLinkGeneration(dev[0], &u));
  TAP_EQ(u, 5, "max PCIe generation 5");
  NV(nvmlDeviceGetCurrPcieLinkWidth(dev[0], &u));
  TAP_EQ(u, 16, "current PCIe width 16");
  NV(nvmlDeviceGetMaxPcieLinkWidth(dev[0], &u));
  TAP_EQ(u, 16, "max PCIe width 16");
  NV(nvmlDeviceGetPcieLinkMaxSpeed(dev[0], &u));
  TAP_EQ(u, NVML_PCIE_LINK_MAX_SPEED_32000MBPS, "PCIe max speed 32000 MB/s");
  TAP_EQ(nvmlDeviceGetCurrPcieLinkGeneration(dev[0], NULL), NVML_ERROR_INVALID_ARGUMENT,
         "PCIe generation into NULL");
  TAP_EQ(nvmlDeviceGetMaxPcieLinkWidth(NULL, &u), NVML_ERROR_INVALID_ARGUMENT,
         "PCIe width of NULL");
}

static void state(void) {
  unsigned u = 99, v = 99;
  nvmlUtilization_t ut = {7, 7};
  NV(nvmlDeviceGetUtilizationRates(dev[0], &ut));
  tap_ok(ut.gpu == 0 && ut.memory == 0, "utilisation 0 %% / 0 %%: no kernel ever runs");
  TAP_EQ(nvmlDeviceGetUtilizationRates(dev[0], NULL), NVML_ERROR_INVALID_ARGUMENT,
         "utilisation into NULL");
  NV(nvmlDeviceGetTemperature(dev[0], NVML_TEMPERATURE_GPU, &u));
  tap_ok(u > 20 && u < 90, "temperature %u C", u);
  NV(nvmlDeviceGetTemperature(dev[0], NVML_TEMPERATURE_GPU_MAX, &u));
  TAP_EQ(nvmlDeviceGetTemperature(dev[0], NVML_TEMPERATURE_COUNT, &u), NVML_ERROR_INVALID_ARGUMENT,
         "temperature of sensor 2");
  TAP_EQ(nvmlDeviceGetTemperature(dev[0], NVML_TEMPERATURE_GPU, NULL), NVML_ERROR_INVALID_ARGUMENT,
         "temperature into NULL");
  NV(nvmlDeviceGetPowerUsage(dev[0], &u));
  NV(nvmlDeviceGetPowerManagementLimit(dev[0], &v));
  tap_ok(u > 0 && u < v, "power draw %u mW below the limit", u);
  TAP_EQ(v, 350000, "power limit 350 W (H100 PCIe)");
  NV(nvmlDeviceGetEnforcedPowerLimit(dev[0], &u));
  TAP_EQ(u, 350000, "enforced power limit 350 W");
  TAP_EQ(nvmlDeviceGetPowerUsage(dev[0], NULL), NVML_ERROR_INVALID_ARGUMENT, "power into NULL");
  TAP_EQ(nvmlDeviceGetEnforcedPowerLimit(NULL, &u), NVML_ERROR_INVALID_ARGUMENT,
         "enforced limit of NULL");
  NV(nvmlDeviceGetClockInfo(dev[0], NVML_CLOCK_SM, &u));
  TAP_EQ(u, 1980, "SM clock 1980 MHz (the fake driver's CLOCK_RATE)");
  NV(nvmlDeviceGetMaxClockInfo(dev[0], NVML_CLOCK_MEM, &u));
  TAP_EQ(u, 2619, "max memory clock 2619 MHz (its MEMORY_CLOCK_RATE)");
  NV(nvmlDeviceGetClockInfo(dev[0], NVML_CLOCK_GRAPHICS, &u));
  NV(nvmlDeviceGetMaxClockInfo(dev[0], NVML_CLOCK_VIDEO, &u));
  TAP_EQ(nvmlDeviceGetClockInfo(dev[0], NVML_CLOCK_COUNT, &u), NVML_ERROR_INVALID_ARGUMENT,
         "clock of type 4");
  TAP_EQ(nvmlDeviceGetMaxClockInfo(dev[0], NVML_CLOCK_SM, NULL), NVML_ERROR_INVALID_ARGUMENT,
         "max clock into NULL");
  nvmlComputeMode_t mode = NVML_COMPUTEMODE_PROHIBITED;
  NV(nvmlDeviceGetComputeMode(dev[1], &mode));
  TAP_EQ(mode, NVML_COMPUTEMODE_DEFAULT, "compute mode default");
  TAP_EQ(nvmlDeviceGetComputeMode(dev[1], NULL), NVML_ERROR_INVALID_ARGUMENT, "mode into NULL");
  NV(nvmlDeviceGetMigMode(dev[1], &u, &v));
  tap_ok(u == NVML_DEVICE_MIG_DISABLE && v == NVML_DEVICE_MIG_DISABLE, "MIG off, none pending");
  TAP_EQ(nvmlDeviceGetMigMode(dev[1], &u, NULL), NVML_ERROR_INVALID_ARGUMENT,
         "MIG pending mode into NULL");
}

static void topology(void) {
  nvmlGpuP2PStatus_t s = NVML_P2P_STATUS_UNKNOWN;
  static const nvmlGpuP2PCapsIndex_t ok_caps[] = {
      NVML_P2P_CAPS_INDEX_READ, NVML_P2P_CAPS_INDEX_WRITE, NVML_P2P_CAPS_INDEX_ATOMICS,
      NVML_P2P_CAPS_INDEX_PCI};
  for (int i = 0; i < 4; i++) {
    s = NVML_P2P_STATUS_UNKNOWN;
    NV(nvmlDeviceGetP2PStatus(dev[0], dev[2], ok_caps[i], &s));
    TAP_EQ(s, NVML_P2P_STATUS_OK, "P2P status of caps index %d between devices 0 and 2: OK",
           (int)ok_caps[i]);
  }
  NV(nvmlDeviceGetP2PStatus(dev[1], dev[1], NVML_P2P_CAPS_INDEX_READ, &s));
  TAP_EQ(s, NVML_P2P_STATUS_OK, "P2P read of a device with itself: OK");
  NV(nvmlDeviceGetP2PStatus(dev[0], dev[1], NVML_P2P_CAPS_INDEX_NVLINK, &s));
  TAP_EQ(s, NVML_P2P_STATUS_NOT_SUPPORTED, "P2P over NVLink: NOT_SUPPORTED (PCIe only)");
  TAP_EQ(nvmlDeviceGetP2PStatus(dev[0], dev[1], NVML_P2P_CAPS_INDEX_UNKNOWN, &s),
         NVML_ERROR_INVALID_ARGUMENT, "P2P caps index 5: INVALID_ARGUMENT");
  TAP_EQ(nvmlDeviceGetP2PStatus(dev[0], NULL, NVML_P2P_CAPS_INDEX_READ, &s),
         NVML_ERROR_INVALID_ARGUMENT, "P2P with a NULL device");
  TAP_EQ(nvmlDeviceGetP2PStatus(dev[0], dev[1], NVML_P2P_CAPS_INDEX_READ, NULL),
         NVML_ERROR_INVALID_ARGUMENT, "P2P status into NULL");

  nvmlEnableState_t on = NVML_FEATURE_ENABLED;
  unsigned u = 7;
  nvmlPciInfo_t p;
  nvmlIntNvLinkDeviceType_t type;
  TAP_EQ(nvmlDeviceGetNvLinkState(dev[0], 0, &on), NVML_ERROR_NOT_SUPPORTED,
         "NvLink state of link 0: NOT_SUPPORTED");
  TAP_EQ(on, NVML_FEATURE_ENABLED, "... and nothing written");
  TAP_EQ(nvmlDeviceGetNvLinkState(dev[0], NVML_NVLINK_MAX_LINKS, &on), NVML_ERROR_INVALID_ARGUMENT,
         "NvLink state of link 36: INVALID_ARGUMENT");
  TAP_EQ(nvmlDeviceGetNvLinkState(dev[0], 0, NULL), NVML_ERROR_INVALID_ARGUMENT,
         "NvLink state into NULL");
  TAP_EQ(nvmlDeviceGetNvLinkVersion(dev[0], 3, &u), NVML_ERROR_NOT_SUPPORTED, "NvLink version");
  TAP_EQ(nvmlDeviceGetNvLinkCapability(dev[0], 0, NVML_NVLINK_CAP_P2P_SUPPORTED, &u),
         NVML_ERROR_NOT_SUPPORTED, "NvLink P2P capability: NOT_SUPPORTED");
  TAP_EQ(u, 7, "... and nothing written");
  TAP_EQ(nvmlDeviceGetNvLinkCapability(dev[0], 0, NVML_NVLINK_CAP_COUNT, &u),
         NVML_ERROR_INVALID_ARGUMENT, "NvLink capability 6: INVALID_ARGUMENT");
  TAP_EQ(nvmlDeviceGetNvLinkRemotePciInfo_v2(dev[0], 1, &p), NVML_ERROR_NOT_SUPPORTED,
         "NvLink remote PCI info (v2)");
  TAP_EQ(nvmlDeviceGetNvLinkRemotePciInfo(dev[0], 1, &p), NVML_ERROR_NOT_SUPPORTED,
         "NvLink remote PCI info (v1)");
  TAP_EQ(nvmlDeviceGetNvLinkRemotePciInfo_v2(NULL, 1, &p), NVML_ERROR_INVALID_ARGUMENT,
         "NvLink remote PCI info of NULL");
  TAP_EQ(nvmlDeviceGetNvLinkRemoteDeviceType(dev[0], 0, &type), NVML_ERROR_NOT_SUPPORTED,
         "NvLink remote device type");
}

/* GPU fabric (which 0) or platform (which 1) information into buf, whose first word is the
 * structure's version. */
static nvmlReturn_t versioned_query(int which, nvmlDevice_t d, void *buf) {
  return which == 0 ? nvmlDeviceGetGpuFabricInfoV(d, buf) : nvmlDeviceGetPlatformInfo(d, buf);
}

/* A versioned query the board does not support: both versions it takes answer NOT_SUPPORTED and
 * write nothing; another version is ARGUMENT_VERSION_MISMATCH; NULL is INVALID_ARGUMENT. */
static void unsupported_versions(const char *what, int which, unsigned va, unsigned vb) {
  unsigned char buf[128];
  unsigned versions[3] = {va, vb, 2};
  nvmlReturn_t want[3] = {NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NOT_SUPPORTED,
                          NVML_ERROR_ARGUMENT_VERSION_MISMATCH};
  for (int i = 0; i < 3; i++) {
    memset(buf, 0x33, sizeof buf);
    memcpy(buf, &versions[i], sizeof versions[i]);
    TAP_EQ(versioned_query(which, dev[0], buf), want[i], "%s, version 0x%x", what, versions[i]);
    tap_ok(buf[4] == 0x33 && buf[sizeof buf - 1] == 0x33, "... and nothing written");
  }
  TAP_EQ(versioned_query(which, dev[0], NULL), NVML_ERROR_INVALID_ARGUMENT, "%s into NULL", what);
  TAP_EQ(versioned_query(which, NULL, buf), NVML_ERROR_INVALID_ARGUMENT, "%s of NULL", what);
}

static void fields(void) {
  nvmlFieldValue_t f[5];
  memset(f, 0, sizeof f);
  f[0].fieldId = NVML_FI_DEV_ECC_CURRENT;
  f[1].fieldId = NVML_FI_DEV_NVLINK_GET_STATE;
  f[1].scopeId = 0;
  f[2].fieldId = NVML_FI_DEV_C2C_LINK_COUNT;
  f[3].fieldId = NVML_FI_MAX;
  f[4].fieldId = NVML_FI_DEV_ECC_PENDING;
  NV(nvmlDeviceGetFieldValues(dev[0], 5, f));
  tap_ok(f[0].nvmlReturn == NVML_SUCCESS && f[0].valueType == NVML_VALUE_TYPE_UNSIGNED_INT &&
             f[0].value.uiVal == 1 && f[0].timestamp > 1600000000000000LL,
         "ECC current: 1, with a timestamp in microseconds");
  TAP_EQ(f[1].nvmlReturn, NVML_ERROR_NOT_SUPPORTED, "NVLink state field: NOT_SUPPORTED");
  TAP_EQ(f[2].nvmlReturn, NVML_ERROR_NOT_SUPPORTED, "C2C link count field: NOT_SUPPORTED");
  TAP_EQ(f[3].nvmlReturn, NVML_ERROR_INVALID_ARGUMENT, "field 310 (NVML_FI_MAX): INVALID_ARGUMENT");
  tap_ok(f[4].nvmlReturn == NVML_SUCCESS && f[4].value.uiVal == 1, "ECC pending: 1");
  NV(nvmlDeviceGetFieldValues(dev[0], 0, f));
  TAP_EQ(nvmlDeviceGetFieldValues(dev[0], 1, NULL), NVML_ERROR_INVALID_ARGUMENT,
         "field values into NULL");
  TAP_EQ(nvmlDeviceGetFieldValues(NULL, 1, f), NVML_ERROR_INVALID_ARGUMENT, "field values of NULL");
  TAP_EQ(nvmlDeviceGetFieldValues(dev[0], -1, f), NVML_ERROR_INVALID_ARGUMENT,
         "field values, count -1");

  nvmlGpuFabricInfo_t f0;
  TAP_EQ(nvmlDeviceGetGpuFabricInfo(dev[0], &f0), NVML_ERROR_NOT_SUPPORTED,
         "GPU fabric info (unversioned): NOT_SUPPORTED");
  TAP_EQ(nvmlDeviceGetGpuFabricInfo(NULL, &f0), NVML_ERROR_INVALID_ARGUMENT,
         "GPU fabric info of NULL");
  unsupported_versions("GPU fabric info", 0, nvmlGpuFabricInfo_v2, nvmlGpuFabricInfo_v3);
  unsupported_versions("platform info", 1, nvmlPlatformInfo_v1, nvmlPlatformInfo_v2);
}

/* No CUDA driver in this process: every device is idle and unused. */
static void memory_without_driver(void) {
  static const unsigned long long totals[] = {1 * GiB, 2 * GiB, 16 * GiB};
  for (int i = 0; i < 3; i++) {
    nvmlMemory_t m;
    NV(nvmlDeviceGetMemoryInfo(dev[i], &m));
    tap_ok(m.total == totals[i] && m.used == 0 && m.free == totals[i],
           "device %d: total %llu (FAKECUDA_MEMORY), used 0, free = total", i, m.total);
  }
  nvmlMemory_v2_t m2;
  memset(&m2, 0, sizeof m2);
  m2.version = nvmlMemory_v2;
  NV(nvmlDeviceGetMemoryInfo_v2(dev[1], &m2));
  tap_ok(m2.total == 2 * GiB && m2.reserved == 0 && m2.used == 0 && m2.free == 2 * GiB,
         "v2: total 2 GiB, reserved 0, used 0, free 2 GiB");
  m2.version = 2;
  TAP_EQ(nvmlDeviceGetMemoryInfo_v2(dev[1], &m2), NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
         "v2 with version 2 (not nvmlMemory_v2)");
  TAP_EQ(nvmlDeviceGetMemoryInfo_v2(dev[1], NULL), NVML_ERROR_INVALID_ARGUMENT, "v2 into NULL");
  TAP_EQ(nvmlDeviceGetMemoryInfo(NULL, &(nvmlMemory_t){0}), NVML_ERROR_INVALID_ARGUMENT,
         "v1 of NULL");
  nvmlBAR1Memory_t b;
  NV(nvmlDeviceGetBAR1MemoryInfo(dev[0], &b));
  tap_ok(b.bar1Total == 128 * GiB && b.bar1Used == 0 && b.bar1Free == b.bar1Total,
         "BAR1: 128 GiB, none used");
  TAP_EQ(nvmlDeviceGetBAR1MemoryInfo(dev[0], NULL), NVML_ERROR_INVALID_ARGUMENT, "BAR1 NULL");
  unsigned n = 5;
  nvmlProcessInfo_t p[2];
  NV(nvmlDeviceGetComputeRunningProcesses_v3(dev[0], &n, p));
  TAP_EQ(n, 0, "no compute process");
  n = 0;
  NV(nvmlDeviceGetComputeRunningProcesses_v3(dev[0], &n, NULL));
  TAP_EQ(n, 0, "... asked with NULL and 0: SUCCESS, 0");
}

static void catchall(void) {
  unsigned speed;
  TAP_EQ(nvmlDeviceGetFanSpeed(dev[0], &speed), NVML_ERROR_NOT_SUPPORTED,
         "a catch-all after nvmlInit: NOT_SUPPORTED");
}

static void after_fork(void) {
  pid_t pid = fork();
  if (pid == 0) {
    unsigned n = 0;
    _exit(nvmlDeviceGetCount_v2(&n) == NVML_SUCCESS && n == 3 ? 0 : 1);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  tap_ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
         "a forked child keeps the parent's initialisation");
}

/* ---- Other settings, each in a child process (settings are read once per process). ---- */

static void say(const char *what, nvmlReturn_t r) {
  printf("%s %d\n", what, (int)r);
}

/* The child's side: prints "WHAT RESULT" lines. */
static int child(const char *mode) {
  unsigned n = 99, u = 0, v = 0;
  nvmlDevice_t d;
  if (strcmp(mode, "nodev") == 0) {
    say("init", nvmlInit_v2());
    say("noattach", nvmlInitWithFlags(NVML_INIT_FLAG_NO_ATTACH));
    say("nogpus", nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS));
    say("count", nvmlDeviceGetCount_v2(&n));
    printf("n %u\n", n);
    say("index0", nvmlDeviceGetHandleByIndex_v2(0, &d));
  } else if (strcmp(mode, "calls") == 0) {
    say("init", nvmlInit_v2());
    for (int i = 1; i <= 3; i++) {
      printf("count%d %d\n", i, (int)nvmlDeviceGetCount_v2(&n));
    }
    say("shutdown", nvmlShutdown());
    printf("string %s\n", nvmlErrorString(NVML_SUCCESS));
  } else if (strcmp(mode, "board") == 0) {
    say("init", nvmlInit_v2());
    nvmlDeviceGetHandleByIndex_v2(0, &d);
    nvmlPciInfo_t p;
    nvmlDeviceGetPciInfo_v3(d, &p);
    nvmlDeviceArchitecture_t arch = 0;
    nvmlDeviceGetArchitecture(d, &arch);
    nvmlDeviceGetMaxClockInfo(d, NVML_CLOCK_SM, &u);
    printf("pci %08x arch %u sm %u\n", p.pciDeviceId, arch, u);
    nvmlDeviceGetPcieLinkMaxSpeed(d, &u);
    nvmlDeviceGetPowerManagementLimit(d, &v);
    printf("pcie %u limit %u\n", u, v);
    nvmlBAR1Memory_t b;
    nvmlDeviceGetBAR1MemoryInfo(d, &b);
    printf("bar1 %llu\n", b.bar1Total >> 30);
    say("mig", nvmlDeviceGetMigMode(d, &u, &v));
  } else if (strcmp(mode, "pci") == 0) {
    /* Device 0's PCI identity with FAKECUDA_PCI_BUS, and the look-up by it. */
    say("init", nvmlInit_v2());
    nvmlDeviceGetHandleByIndex_v2(0, &d);
    nvmlPciInfo_t p;
    nvmlDeviceGetPciInfo_v3(d, &p);
    nvmlDevice_t by = NULL;
    nvmlReturn_t r = nvmlDeviceGetHandleByPciBusId_v2("0000:3b:00.0", &by);
    printf("bus %u %s %s lookup %d %d\n", p.bus, p.busId, p.busIdLegacy, r, by == d);
  } else if (strcmp(mode, "smi") == 0) {
    /* What an nvidia-smi-like tool sees of device 0 (test_machine.sh: a machine's processes). */
    nvmlReturn_t r = nvmlInit_v2();
    say("init", r);
    if (r != NVML_SUCCESS) {
      return 0;
    }
    nvmlDeviceGetHandleByIndex_v2(0, &d);
    nvmlMemory_t m;
    say("memory", nvmlDeviceGetMemoryInfo(d, &m));
    printf("used %llu free %llu total %llu\n", m.used, m.free, m.total);
    nvmlProcessInfo_t procs[16];
    n = 0;
    say("processes", nvmlDeviceGetComputeRunningProcesses_v3(d, &n, NULL));
    say("listed", nvmlDeviceGetComputeRunningProcesses_v3(d, &n, procs));
    for (unsigned i = 0; i < n && i < 16; i++) {
      printf("proc %u %llu\n", procs[i].pid, procs[i].usedGpuMemory);
    }
    say("shutdown", nvmlShutdown());
  } else if (strcmp(mode, "cudaversion") == 0) {
    int v1 = 0, v2 = 0;
    nvmlReturn_t r2 = nvmlSystemGetCudaDriverVersion_v2(&v2);
    nvmlReturn_t r1 = nvmlSystemGetCudaDriverVersion(&v1);
    printf("v2 %d %d v1 %d %d\n", (int)r2, v2, (int)r1, v1);
  }
  fflush(stdout);
  return 0;
}

/* Runs this program as `child MODE` with the FAKE* settings replaced by settings ("VAR=VALUE"
 * words separated by spaces; stderr into the output too) and returns its output in out. */
static void run(const char *mode, const char *settings, char *out, size_t cap) {
  int fd[2];
  out[0] = '\0';
  if (pipe(fd) != 0) {
    return;
  }
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 1);
    dup2(fd[1], 2);
    close(fd[0]);
    unsetenv("FAKECUDA_DEVICES");
    unsetenv("FAKECUDA_MEMORY");
    char words[512];
    snprintf(words, sizeof words, "%s", settings);
    for (char *save, *w = strtok_r(words, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
      putenv(w);
    }
    execl("/proc/self/exe", "test_fakenvml", "child", mode, (char *)NULL);
    _exit(127);
  }
  close(fd[1]);
  size_t len = 0;
  ssize_t r;
  while (len + 1 < cap && (r = read(fd[0], out + len, cap - 1 - len)) > 0) {
    len += (size_t)r;
  }
  out[len] = '\0';
  close(fd[0]);
  waitpid(pid, NULL, 0);
}

static void has(const char *out, const char *want, const char *what) {
  if (!tap_ok(strstr(out, want) != NULL, "%s", what)) {
    tap_diag("  want \"%s\" in:\n%s", want, out);
  }
}

/* Each case runs `child MODE` with its settings, or (mode NULL) checks the previous run again. */
static const struct {
  const char *mode, *settings, *want, *what;
} cases[] = {
    {"nodev", "FAKECUDA_DEVICES=0", "init 28\n",
     "FAKECUDA_DEVICES=0: nvmlInit_v2 answers GPU_NOT_FOUND"},
    {NULL, NULL, "noattach 28\n", "... and so does nvmlInitWithFlags(NO_ATTACH)"},
    {NULL, NULL, "nogpus 0\ncount 0\nn 0\nindex0 2\n",
     "nvmlInitWithFlags(NO_GPUS) succeeds with 0 devices; index 0 is INVALID_ARGUMENT"},
    {"calls", "FAKECUDA_DEVICES=two", "fakenvml: error: FAKECUDA_DEVICES='two': must be 0..64",
     "a malformed setting is said"},
    {NULL, NULL, "init 999\ncount1 999\n", "... and every call answers NVML_ERROR_UNKNOWN"},
    {NULL, NULL, "string Success\n", "... but nvmlErrorString still works"},
    {"calls", "FAKENVML_FAIL=nvmlDeviceGetCount_v2:2:15 FAKECUDA_FAIL=cuInit:1:3",
     "init 0\ncount1 0\ncount2 15\ncount3 0\nshutdown 0\n",
     "FAKENVML_FAIL fails the 2nd GetCount_v2 with code 15; FAKECUDA_FAIL is the driver's"},
    {"calls", "FAKECUDA_LATENCY=cuMemCreate:1us", "init 0\ncount1 0\n",
     "FAKECUDA_LATENCY names the driver's exports: NVML answers as without it"},
    {"calls", "FAKENVML_FAIL=nvmlBogus:1",
     "fakenvml: error: FAKENVML_FAIL='nvmlBogus:1': not an exported entry point",
     "FAKENVML_FAIL naming no export is said, under its own name"},
    {NULL, NULL, "init 999\n", "... and every call fails"},
    {"cudaversion", "FAKECUDA_STUB=1", "v2 999 0 v1 0 13000\n",
     "a libcuda.so.1 whose cuDriverGetVersion fails (FAKECUDA_STUB=1): v2 UNKNOWN, v1 13000"},
    {"board", "FAKECUDA_CC=8.0", "pci 20b010de arch 7 sm 1410\n",
     "compute capability 8.0: an A100 (Ampere, 1410 MHz)"},
    {NULL, NULL, "pcie 4 limit 250000\n", "... PCIe 16000 MB/s, 250 W"},
    {NULL, NULL, "bar1 64\nmig 0\n", "... 64 GiB BAR1, MIG supported"},
    {"board", "FAKECUDA_CC=7.5", "arch 6 ", "compute capability 7.5: Turing"},
    {NULL, NULL, "mig 3\n", "... no MIG: NOT_SUPPORTED"},
    {"pci", "FAKECUDA_DEVICES=2 FAKECUDA_PCI_BUS=0:3b",
     "bus 59 00000000:3B:00.0 0000:3B:00.0 lookup 0 1\n",
     "FAKECUDA_PCI_BUS=0:3b: NVML's bus ids are the driver's, and find the device"},
};

static void settings(void) {
  char out[8192];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (cases[i].mode != NULL) {
      run(cases[i].mode, cases[i].settings, out, sizeof out);
    }
    has(out, cases[i].want, cases[i].what);
  }

  char trace[64] = "/tmp/test_fakenvml.XXXXXX";
  int tfd = mkstemp(trace);
  char tset[96];
  snprintf(tset, sizeof tset, "FAKECUDA_TRACE=%s", trace);
  run("calls", tset, out, sizeof out);
  char tbuf[4096] = "";
  ssize_t tn = tfd >= 0 ? read(tfd, tbuf, sizeof tbuf - 1) : -1;
  tbuf[tn > 0 ? tn : 0] = '\0';
  if (tfd >= 0) {
    close(tfd);
    unlink(trace);
  }
  has(tbuf, "] nvmlInit_v2 = 0\n", "FAKECUDA_TRACE logs each call and its result");
  has(tbuf, "] nvmlDeviceGetCount_v2 = 0\n", "... GetCount too");
  tap_ok(strncmp(tbuf, "fakenvml: trace: [", 18) == 0, "... as \"fakenvml: trace: [tid] \"");
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "child") == 0) {
    return child(argv[2]);
  }
  setenv("FAKECUDA_DEVICES", "3", 1);
  setenv("FAKECUDA_MEMORY", "0:1GiB,1:2GiB", 1);
  before_init();
  init_refcount();
  errors();
  system_queries();
  enumeration();
  identity();
  pci();
  state();
  topology();
  fields();
  memory_without_driver();
  catchall();
  after_fork();
  settings();
  NV(nvmlShutdown());
  return tap_done();
}
