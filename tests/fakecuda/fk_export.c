/* cuGetExportTable: the driver's private tables that NVIDIA's runtime (libcudart) and the CUDA
 * libraries ask for, each slot doing what the real driver does as far as it is publicly known.
 * README.md ("Private export tables") lists every UUID, slot, meaning and source.
 *
 * A table is an array of pointers. Most start with their own size in bytes (slot 0); the
 * context-local-storage table starts directly with a function. A slot whose meaning is not
 * publicly known answers CUDA_ERROR_NOT_SUPPORTED and says once on stderr which table's
 * unmodelled slot the program used (never a NULL pointer to jump through). An unknown UUID is
 * refused with CUDA_ERROR_INVALID_VALUE and nothing is written.
 *
 * Locking: every slot that touches driver state runs under fk.lock through FK_BODY, like an
 * exported entry point (context-local-storage destructors run with it dropped, fk_ctx.c).
 */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "tests/fakecuda/fk.h"

#define SIZE_SLOT(n) ((uintptr_t)((n) * sizeof(void *)))
#define FN(f) ((uintptr_t)(f))

/* Slots whose meaning is not known: one function per (table, slot), which names both. */
static int unmodelled_said;

static CUresult unmodelled(const char *table, int slot) {
  if (!__atomic_exchange_n(&unmodelled_said, 1, __ATOMIC_RELAXED)) {
    fk_log("warning: the program called slot %d of the private table %s, which the fake does not "
           "model (answered CUDA_ERROR_NOT_SUPPORTED; FAKECUDA_TRACE=1 logs every such call)",
           slot, table);
  }
  fk_trace("unmodelled slot %s[%d] called", table, slot);
  return CUDA_ERROR_NOT_SUPPORTED;
}

#define STUB(t, n)                                                                                 \
  __attribute__((unused)) static CUresult stub_##t##_##n(void) {                                   \
    return unmodelled(#t, n);                                                                      \
  }
#define STUB10(t, d)                                                                               \
  STUB(t, d##0)                                                                                    \
  STUB(t, d##1)                                                                                    \
  STUB(t, d##2)                                                                                    \
  STUB(t, d##3) STUB(t, d##4) STUB(t, d##5) STUB(t, d##6) STUB(t, d##7) STUB(t, d##8) STUB(t, d##9)
#define REF(t, n) FN(stub_##t##_##n)
#define REF10(t, d)                                                                                \
  REF(t, d##0), REF(t, d##1), REF(t, d##2), REF(t, d##3), REF(t, d##4), REF(t, d##5),              \
      REF(t, d##6), REF(t, d##7), REF(t, d##8), REF(t, d##9)
/* stubs_T[i] is table T's stub for slot i, 0 < i < 100. */
/* clang-format off */
#define STUBS(t)                                                                                   \
  STUB(t, 1) STUB(t, 2) STUB(t, 3) STUB(t, 4) STUB(t, 5) STUB(t, 6) STUB(t, 7) STUB(t, 8)          \
  STUB(t, 9) STUB10(t, 1) STUB10(t, 2) STUB10(t, 3) STUB10(t, 4) STUB10(t, 5) STUB10(t, 6)         \
  STUB10(t, 7) STUB10(t, 8) STUB10(t, 9)                                                           \
  static const uintptr_t stubs_##t[100] = {                                                        \
      0,           REF(t, 1),   REF(t, 2),   REF(t, 3),   REF(t, 4),   REF(t, 5),   REF(t, 6),     \
      REF(t, 7),   REF(t, 8),   REF(t, 9),   REF10(t, 1), REF10(t, 2), REF10(t, 3), REF10(t, 4),   \
      REF10(t, 5), REF10(t, 6), REF10(t, 7), REF10(t, 8), REF10(t, 9)};
/* clang-format on */

STUBS(cudart_interface)
STUBS(tools_tls)
STUBS(callback_hooks)
STUBS(context_local_storage)
STUBS(context_checks)
STUBS(integrity_check)
STUBS(tools_context)
STUBS(tools_module)
STUBS(profiler)

static uintptr_t cudart_interface[13], tools_tls[4], callback_hooks[7], context_local_storage[4],
    context_checks[4], integrity_check[3], tools_context[95], tools_module[64], profiler[70];

/* Fills table[0..n) with stubs, and slot 0 with the table's size when sized. */
static void stub_table(uintptr_t *table, size_t n, const uintptr_t *stubs, int sized) {
  for (size_t i = 0; i < n; i++) {
    table[i] = sized ? (i == 0 ? SIZE_SLOT(n) : stubs[i]) : stubs[i + 1];
  }
}

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

/* ---- Tools thread-local storage (42d85a81-23f6-cb47-8298-f6e78a3aecdc). ---- */

/* Slot 2: the calling thread's current context, as cuCtxGetCurrent (cuBLASLt asks). */
static CUresult et_tools_current_ctx(CUcontext *out) {
  FK_BODY(FK_NEED_INIT, fk_ctx_get_current(out));
}

/* ---- Tools context (21318c60-9714-3248-8ca6-41ff7324c8f2): 95 slots, size first. ---- */

/* Slot 3: a context's device; slot 4: its unique id, as cuCtxGetId (cuFFT asks; the CUDA
 * 13.4 runtime too). NULL means the current context. */
static CUresult et_tools_ctx_device(CUcontext ctx, CUdevice *dev) {
  FK_BODY(FK_NEED_INIT, fk_ctx_device_of(ctx, dev));
}

static CUresult et_tools_ctx_id(CUcontext ctx, unsigned long long *id) {
  FK_BODY(FK_NEED_INIT, fk_ctx_id_of(ctx, id));
}

/* Slot 51: the driver's object for a stream handle in a context, (context, stream, out,
 * per_thread): NULL and CU_STREAM_LEGACY name the context's legacy stream, CU_STREAM_PER_THREAD
 * (or NULL when per_thread is set) the calling thread's per-thread stream; an unknown handle is
 * CUDA_ERROR_INVALID_HANDLE. Slot 39: (context, that object, out) writes the stream's unique id.
 * cuBLAS calls both before a GEMM with its own workspace and keys its per-stream workspaces on
 * the id (libcublas 13.0: it passes the stream it then waits on with cudaStreamWaitEvent). */
static CUresult et_tools_stream_object(CUcontext ctx, CUstream h, struct CUstream_st **out,
                                       int per_thread) {
  FK_BODY(FK_NEED_INIT, fk_stream_object(ctx, h, per_thread, out));
}

static CUresult et_tools_stream_id(CUcontext ctx, const struct CUstream_st *s,
                                   unsigned long long *id) {
  (void)ctx;
  FK_BODY(FK_NEED_INIT, fk_stream_object_id(s, id));
}

/* ---- Tools module (6e163fbe-b958-444d-835c-e182aff1991e): 64 slots, size first. ---- */

/* Slot 7: (context, module, fn, user) calls fn(user, function, module) for each function of the
 * module and returns how many it visited, not a CUresult. cuFFT loads each of its kernels as a
 * one-kernel module, gets the function this way (its callback stores the second argument) and
 * requires the answer 1; it then uses the function through the public API only. The context is
 * not checked. */
static int et_module_walk(CUcontext ctx, CUmodule m, fk_walk_fn fn, void *user) {
  (void)ctx;
  CUresult rc = fk_enter(__func__, FK_NEED_INIT);
  int n = rc == CUDA_SUCCESS ? fk_module_walk(m, fn, user) : 0;
  fk_trace("module %p: %d functions walked", (void *)m, n);
  fk_leave(rc); /* the failure of the call itself (uninitialised), not of the walk */
  return n;
}

/* ---- Profiler (7cb63f9b-9ca4-8e42-a484-beb66e6aed7f): 70 slots, size first. ---- */

/* CUPTI asks for this table when it starts (cuptiGetVersion fails without it) and checks the
 * size before it calls a slot; its profiling paths call slots 35, 67 and 69 (libcupti 13.5).
 * None is modelled: each answers CUDA_ERROR_NOT_SUPPORTED, so profiling fails where a driver
 * with a profiler would serve it, and start-up succeeds. */

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

/* ---- Integrity check (d4082055-bde6-704b-8d34-ba123c66e1f2). ---- */

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

/* ---- The tables, built once. ---- */

static void build_tables(void) {
  stub_table(cudart_interface, 13, stubs_cudart_interface, 1);
  cudart_interface[1] = FN(et_cudart_module_from_wrapper);
  cudart_interface[2] = FN(et_cudart_primary_ctx);
  cudart_interface[6] = FN(et_cudart_module_from_wrapper_ext);
  cudart_interface[7] = FN(et_cudart_slot7);
  cudart_interface[8] = FN(et_cudart_module_from_fatbin_ext);
  cudart_interface[12] = FN(et_cudart_load_compilers);
  stub_table(tools_tls, 4, stubs_tools_tls, 1);
  tools_tls[2] = FN(et_tools_current_ctx);
  stub_table(callback_hooks, 7, stubs_callback_hooks, 1);
  callback_hooks[2] = FN(et_hooks_buffer1);
  callback_hooks[6] = FN(et_hooks_buffer2);
  stub_table(context_local_storage, 4, stubs_context_local_storage, 0);
  context_local_storage[0] = FN(et_cls_put);
  context_local_storage[1] = FN(et_cls_delete);
  context_local_storage[2] = FN(et_cls_get);
  stub_table(context_checks, 4, stubs_context_checks, 1);
  context_checks[2] = FN(et_context_check);
  context_checks[3] = FN(et_context_check3);
  stub_table(integrity_check, 3, stubs_integrity_check, 1);
  integrity_check[1] = FN(et_integrity_check);
  stub_table(tools_context, 95, stubs_tools_context, 1);
  tools_context[3] = FN(et_tools_ctx_device);
  tools_context[4] = FN(et_tools_ctx_id);
  tools_context[39] = FN(et_tools_stream_id);
  tools_context[51] = FN(et_tools_stream_object);
  stub_table(tools_module, 64, stubs_tools_module, 1);
  tools_module[7] = FN(et_module_walk);
  stub_table(profiler, 70, stubs_profiler, 1);
}

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* ---- The directory. ---- */

static const struct {
  unsigned char uuid[16];
  const char *name;
  const void *table;
} directory[] = {
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
    {{0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8,
      0xf2},
     "tools_context",
     tools_context},
    {{0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99,
      0x1e},
     "tools_module",
     tools_module},
    {{0x7c, 0xb6, 0x3f, 0x9b, 0x9c, 0xa4, 0x8e, 0x42, 0xa4, 0x84, 0xbe, 0xb6, 0x6e, 0x6a, 0xed,
      0x7f},
     "profiler",
     profiler},
};

static CUresult export_table(const void **out, const CUuuid *id) {
  pthread_once(&tables_once, build_tables);
  if (out == NULL || id == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < sizeof directory / sizeof directory[0]; i++) {
    if (memcmp(directory[i].uuid, id->bytes, 16) == 0) {
      fk_trace("export table %s", directory[i].name);
      *out = directory[i].table;
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
