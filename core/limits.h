/* Limits that every part of gpucap shares, defined once.
 *
 * GPUCAP_MAX_DEVICES: gpucap caps CUDA ordinals 0..GPUCAP_MAX_DEVICES-1 (as the process sees
 * them). A per-device setting can name no other (config/), the shim refuses an allocation on a
 * device beyond them rather than make it uncapped (shim/), and the exit report lists at most
 * that many devices (core/report.h). config/parse.c keeps one bit per ordinal in a uint64_t.
 */
#ifndef GPUCAP_CORE_LIMITS_H
#define GPUCAP_CORE_LIMITS_H

#define GPUCAP_MAX_DEVICES 64

#endif
