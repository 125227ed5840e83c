/* driver: how many CUDA devices the command will see, asked of the CUDA driver from the gpucap
 * command itself, so that a per-device cap naming a device that does not exist is caught before
 * the program starts. The driver is loaded only when a per-device list is given (cuInit can take
 * a while on a real machine); a machine without a driver, or a driver that fails to start, is
 * not an error here: the question is then left unanswered. The devices' sizes are asked too, so
 * that a cap above a device's memory is warned about before the program starts.
 */
#ifndef GPUCAP_SCRIPTS_DRIVER_H
#define GPUCAP_SCRIPTS_DRIVER_H

#include <stdint.h>

/* Stores in *count the devices the CUDA driver (libcuda.so.1, found as the program would find
 * it: the same environment, CUDA_VISIBLE_DEVICES included) reports after cuInit(0): 0 when
 * cuInit answers CUDA_ERROR_NO_DEVICE. Fails iff the driver cannot be loaded (-ENOENT) or
 * cuInit or cuDeviceGetCount fails otherwise (-EIO). Leaves the driver loaded (the process
 * is about to exec). Cost: a dlopen and cuInit. */
int driver_device_count(int *count);

/* Stores in *bytes the total memory of device `ordinal` (cuDeviceTotalMem_v2), after a
 * successful driver_device_count. Fails iff the driver cannot answer (-EIO). */
int driver_device_total(int ordinal, uint64_t *bytes);

#endif
