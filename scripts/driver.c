/* driver: the device count, through the driver API's two entry points (contract in driver.h).
 * Declared here with the driver's ABI (int status, int device count) so that the command needs
 * no CUDA header.
 */
#include "scripts/driver.h"

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NO_DEVICE 100

int driver_device_count(int *count) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    return -ENOENT;
  }
  int (*init)(unsigned) = NULL;
  int (*get_count)(int *) = NULL;
  *(void **)&init = dlsym(h, "cuInit");
  *(void **)&get_count = dlsym(h, "cuDeviceGetCount");
  if (init == NULL || get_count == NULL) {
    return -EIO;
  }
  int rc = init(0);
  if (rc == CUDA_ERROR_NO_DEVICE) {
    *count = 0;
    return 0;
  }
  int n = 0;
  if (rc != CUDA_SUCCESS || get_count(&n) != CUDA_SUCCESS) {
    return -EIO;
  }
  *count = n;
  return 0;
}

int driver_device_total(int ordinal, uint64_t *bytes) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == NULL) {
    return -EIO;
  }
  int (*get)(int *, int) = NULL;
  int (*total)(size_t *, int) = NULL;
  *(void **)&get = dlsym(h, "cuDeviceGet");
  *(void **)&total = dlsym(h, "cuDeviceTotalMem_v2");
  int dev = 0;
  size_t n = 0;
  int rc = get == NULL || total == NULL || get(&dev, ordinal) != CUDA_SUCCESS ||
                   total(&n, dev) != CUDA_SUCCESS
               ? -EIO
               : 0;
  dlclose(h); /* the reference RTLD_NOLOAD took; driver_device_count's stays */
  if (rc == 0) {
    *bytes = n;
  }
  return rc;
}
