/* driver: how many CUDA devices the command will see and what each is, asked of the CUDA
 * driver from the gpucap command itself, so that a per-device cap naming a device that does not
 * exist, or a cap above a device's memory, is caught before the program starts, and `gpucap env`
 * can say which cap each device gets. The driver is loaded (once) only when a question needs it
 * (cuInit can take a while on a real machine); a machine without a driver, or a driver that
 * fails to start, is not an error here: the question is then left unanswered.
 */
#ifndef GPUCAP_SCRIPTS_DRIVER_H
#define GPUCAP_SCRIPTS_DRIVER_H

#include <stddef.h>
#include <stdint.h>

/* Stores in *count the devices the CUDA driver (libcuda.so.1, found as the program would find
 * it: the same environment, CUDA_VISIBLE_DEVICES included) reports after cuInit(0): 0 when
 * cuInit answers CUDA_ERROR_NO_DEVICE. Fails iff the driver cannot be loaded (-ENOENT) or
 * cuInit or cuDeviceGetCount fails otherwise (-EIO). Leaves the driver loaded (the process
 * is about to exec). Cost: a dlopen and cuInit. */
int driver_device_count(int *count);

/* For the device of CUDA ordinal `ordinal`: its PCI bus id as the driver writes it into
 * pci[pcilen] ("0000:3B:00.0"; not asked when pci is NULL) and its total memory in *total.
 * Fails iff the driver cannot be loaded (-ENOENT) or a query fails (-EIO). Cost: the driver's
 * load at the first question. */
int driver_device_info(int ordinal, char *pci, size_t pcilen, uint64_t *total);

#endif
