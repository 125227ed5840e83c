/* What the shared object exports: the driver entry points gpucap hooks (shim/base/hooks.def),
 * dlsym, dlopen and the C library functions of shim/entry/libc.def. Every other symbol is hidden
 * (-fvisibility=hidden), and the linker version script generated from those lists keeps it so.
 */
#ifndef GPUCAP_SHIM_EXPORT_H
#define GPUCAP_SHIM_EXPORT_H

#define GPUCAP_EXPORT __attribute__((visibility("default")))

#endif
