/* driver: the device count and each device's identity, through the driver API's entry points
 * (contracts in driver.h). Declared here with the driver's ABI (int status, int device, size_t
 * bytes) so that the command needs no CUDA header.
 */
#include "scripts/driver.h"

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NO_DEVICE 100

/* libcuda.so.1, loaded and initialised once, in *h: returns 0, 1 when cuInit answered
 * CUDA_ERROR_NO_DEVICE, -ENOENT when it cannot be loaded, -EIO when cuInit fails otherwise. */
static int driver(void **h) {
  static void *handle;
  static int state = 2; /* not tried yet */
  if (state == 2) {
    handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    int (*init)(unsigned) = NULL;
    if (handle != NULL) {
      *(void **)&init = dlsym(handle, "cuInit");
    }
    int rc = init != NULL ? init(0) : -1;
    state = handle == NULL               ? -ENOENT
            : rc == CUDA_SUCCESS         ? 0
            : rc == CUDA_ERROR_NO_DEVICE ? 1
                                         : -EIO;
  }
  *h = handle;
  return state;
}

int driver_device_count(int *count) {
  void *h = NULL;
  int state = driver(&h);
  if (state != 0) {
    *count = 0;
    return state == 1 ? 0 : state;
  }
  int (*get_count)(int *) = NULL;
  *(void **)&get_count = dlsym(h, "cuDeviceGetCount");
  int n = 0;
  if (get_count == NULL || get_count(&n) != CUDA_SUCCESS) {
    return -EIO;
  }
  *count = n;
  return 0;
}

int driver_device_info(int ordinal, char *pci, size_t pcilen, uint64_t *total) {
  void *h = NULL;
  int state = driver(&h);
  if (state != 0) {
    return state == -ENOENT ? -ENOENT : -EIO;
  }
  int (*get)(int *, int) = NULL;
  int (*bus_id)(char *, int, int) = NULL;
  int (*total_mem)(size_t *, int) = NULL;
  *(void **)&get = dlsym(h, "cuDeviceGet");
  *(void **)&bus_id = dlsym(h, "cuDeviceGetPCIBusId");
  *(void **)&total_mem = dlsym(h, "cuDeviceTotalMem_v2");
  int dev = 0;
  size_t bytes = 0;
  if (get == NULL || bus_id == NULL || total_mem == NULL || get(&dev, ordinal) != CUDA_SUCCESS ||
      (pci != NULL && bus_id(pci, (int)pcilen, dev) != CUDA_SUCCESS) ||
      total_mem(&bytes, dev) != CUDA_SUCCESS) {
    return -EIO;
  }
  *total = bytes;
  return 0;
}
