/* cuGetExportTable: the driver's private tables that NVIDIA's runtime (libcudart) and the CUDA
 * libraries ask for, each slot doing what the real driver does as far as it is publicly known.
 * README.md ("Private export tables") lists every UUID, slot, meaning and source.
 *
 * A table is an array of pointers. Most start with their own size in bytes (slot 0); the
 * context-local-storage table starts directly with a function. Slots nobody is known to call
 * are NULL, as in the public reconstructions. An unknown UUID is refused with
 * CUDA_ERROR_INVALID_VALUE and nothing is written.
 *
 * Locking: every slot that touches driver state runs under fk.lock through FK_BODY, like an
 * exported entry point (the lock is recursive: context-local-storage destructors run under it
 * and may call back into the driver).
 */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "tests/fakecuda/fk.h"

#define SIZE_SLOT(n) ((uintptr_t)((n) * sizeof(void *)))
#define FN(f) ((uintptr_t)(f))

/* ---- Runtime interface (6bd5fb6c-5bf4-e74a-8987-d93912fd9df9). ---- */

/* Slot 2: the device's primary context, as the runtime's handle to it. Like the real driver it
 * neither retains nor activates the context; the runtime makes it active by retaining it. */
static CUresult primary_handle(CUcontext *pctx, CUdevice dev) {
  if (pctx == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dev < 0 || dev >= fk.ndev) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *pctx = fk.dev[dev].primary;
  return CUDA_SUCCESS;
}

static CUresult et_cudart_primary_ctx(CUcontext *pctx, CUdevice dev) {
  FK_BODY(FK_NEED_INIT, primary_handle(pctx, dev));
}

/* Slot 1: a module from a fatbin wrapper (__fatBinC_Wrapper_t) in the current context. */
static CUresult et_cudart_module_from_wrapper(CUmodule *mod, const void *wrapper) {
  FK_BODY(FK_NEED_INIT, fk_module_load(mod, wrapper, FK_IMAGE_WRAPPER));
}

/* Slot 6: the same with three further arguments, which the runtime passes as NULL, NULL, 0;
 * anything else is a use the fake does not know. */
static CUresult module_from_wrapper_ext(CUmodule *mod, const void *wrapper, void *a3, void *a4,
                                        unsigned a5) {
  if (a3 != NULL || a4 != NULL || a5 != 0) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return fk_module_load(mod, wrapper, FK_IMAGE_WRAPPER);
}

static CUresult et_cudart_module_from_wrapper_ext(CUmodule *mod, const void *wrapper, void *a3,
                                                  void *a4, unsigned a5) {
  FK_BODY(FK_NEED_INIT, module_from_wrapper_ext(mod, wrapper, a3, a4, a5));
}

/* Slot 8: a module from a fatbin header (argument order swapped), same extra arguments. */
static CUresult module_from_fatbin_ext(const void *fatbin, CUmodule *mod, void *a3, void *a4,
                                       unsigned a5) {
  if (a3 != NULL || a4 != NULL || a5 != 0) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return fk_module_load(mod, fatbin, FK_IMAGE_FATBIN);
}

static CUresult et_cudart_module_from_fatbin_ext(const void *fatbin, CUmodule *mod, void *a3,
                                                 void *a4, unsigned a5) {
  FK_BODY(FK_NEED_INIT, module_from_fatbin_ext(fatbin, mod, a3, a4, a5));
}

/* Slot 7: called by the runtime with one integer; no observable effect is known. */
static void et_cudart_slot7(uintptr_t arg) {
  (void)arg;
}

/* Slot 12: loads the driver's PTX compiler, libnvvm and tile IR on demand; the fake has them
 * all built in (it compiles nothing). */
static CUresult et_cudart_load_compilers(void) {
  FK_BODY(FK_ANYTIME, CUDA_SUCCESS);
}

static const uintptr_t cudart_interface[13] = {
    SIZE_SLOT(13),
    FN(et_cudart_module_from_wrapper),
    FN(et_cudart_primary_ctx),
    0,
    0,
    0,
    FN(et_cudart_module_from_wrapper_ext),
    FN(et_cudart_slot7),
    FN(et_cudart_module_from_fatbin_ext),
    0,
    0,
    0,
    FN(et_cudart_load_compilers),
};

/* ---- Tools thread-local storage (42d85a81-23f6-cb47-8298-f6e78a3aecdc). ---- */

/* Only its size is read unless a profiler is attached. */
static const uintptr_t tools_tls[4] = {SIZE_SLOT(4), 0, 0, 0};

/* ---- Runtime callback hooks (a094798c-2e74-2e74-93f2-0800200c0a66). ---- */

/* Two buffers the runtime fills with its callback hooks for tools; it checks their sizes
 * (more than 0x20a and more than 0xd entries). */
static uint32_t hooks_buffer1[1024];
static uint32_t hooks_buffer2[14];

static void et_hooks_buffer1(void **buf, size_t *size) {
  *buf = hooks_buffer1;
  *size = sizeof hooks_buffer1 / sizeof hooks_buffer1[0];
}

static void et_hooks_buffer2(void **buf, size_t *size) {
  *buf = hooks_buffer2;
  *size = sizeof hooks_buffer2 / sizeof hooks_buffer2[0];
}

static const uintptr_t callback_hooks[7] = {
    SIZE_SLOT(7), 0, FN(et_hooks_buffer1), 0, 0, 0, FN(et_hooks_buffer2),
};

/* ---- Context-local storage (c693336e-1121-df11-a8c3-68f355d89593): no size slot. ---- */

static CUresult et_cls_put(CUcontext ctx, void *key, void *value, fk_cls_dtor dtor) {
  FK_BODY(FK_NEED_INIT, fk_cls_put(ctx, key, value, dtor));
}

static CUresult et_cls_delete(CUcontext ctx, void *key) {
  FK_BODY(FK_NEED_INIT, fk_cls_delete(ctx, key));
}

static CUresult et_cls_get(void **value, CUcontext ctx, void *key) {
  FK_BODY(FK_NEED_INIT, fk_cls_get(value, ctx, key));
}

static const uintptr_t context_local_storage[4] = {
    FN(et_cls_put),
    FN(et_cls_delete),
    FN(et_cls_get),
    0,
};

/* ---- Context checks (263e8860-7cd2-6143-92f6-bbd5006dfa7e). ---- */

/* Slot 2 reports flags of a context that are never seen set; slot 3 answers 0. */
static CUresult et_context_check(CUcontext ctx, uint32_t *result, const void **out) {
  (void)ctx;
  (void)out;
  if (result != NULL) {
    *result = 0;
  }
  return CUDA_SUCCESS;
}

static uint32_t et_context_check3(void) {
  return 0;
}

static const uintptr_t context_checks[4] = {
    SIZE_SLOT(4),
    0,
    FN(et_context_check),
    FN(et_context_check3),
};

/* ---- Integrity check (d4082055-bde6-704b-8d34-ba123c66e1f2). ---- */

static CUresult et_integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t out[2]);

static const uintptr_t integrity_check[3] = {SIZE_SLOT(3), FN(et_integrity_check), 0};

static CUresult integrity(uint32_t version, uint64_t unix_seconds, uint64_t out[2]) {
  if (out == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct fk_integrity_device devs[FK_MAX_DEVICES];
  for (int d = 0; d < fk.ndev; d++) {
    fk_dev_uuid(d, &devs[d].uuid);
    devs[d].pci_domain = fk_dev_attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d);
    devs[d].pci_bus = fk_dev_attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d);
    devs[d].pci_device = fk_dev_attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d);
  }
  struct fk_integrity_input in = {
      .driver_version = FK_DRIVER_VERSION,
      .version = version,
      .pid = (uint32_t)getpid(),
      .thread = (uint32_t)(uintptr_t)pthread_self(),
      .cudart_table = cudart_interface,
      .integrity_table = integrity_check,
      .fn = (const void *)integrity_check[1],
      .unix_seconds = unix_seconds,
  };
  fk_integrity_hash(&in, devs, fk.ndev, out);
  return CUDA_SUCCESS;
}

static CUresult et_integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t out[2]) {
  FK_BODY(FK_NEED_INIT, integrity(version, unix_seconds, out));
}

/* ---- The directory. ---- */

static const struct {
  unsigned char uuid[16];
  const char *name;
  const void *table;
} tables[] = {
    {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d,
      0xf9},
     "cudart_interface",
     cudart_interface},
    {{0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec,
      0xdc},
     "tools_tls",
     tools_tls},
    {{0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a,
      0x66},
     "callback_hooks",
     callback_hooks},
    {{0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95,
      0x93},
     "context_local_storage",
     context_local_storage},
    {{0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa,
      0x7e},
     "context_checks",
     context_checks},
    {{0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1,
      0xf2},
     "integrity_check",
     integrity_check},
};

static CUresult export_table(const void **out, const CUuuid *id) {
  if (out == NULL || id == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
    if (memcmp(tables[i].uuid, id->bytes, 16) == 0) {
      fk_trace("export table %s", tables[i].name);
      *out = tables[i].table;
      return CUDA_SUCCESS;
    }
  }
  const unsigned char *b = (const unsigned char *)id->bytes;
  fk_trace("export table %02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x "
           "unknown",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
           b[14], b[15]);
  return CUDA_ERROR_INVALID_VALUE;
}

FK_API CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId) {
  FK_BODY(FK_ANYTIME, export_table(ppExportTable, pExportTableId));
}
