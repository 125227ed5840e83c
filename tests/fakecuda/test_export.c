/* TAP test of the fake driver's private export tables (cuGetExportTable): the directory, the
 * tables' layouts, the runtime interface's primary-context slot, context-local storage with its
 * destructors (run on destroy, primary reset and last release, allowed to call the driver), the
 * tools-context table's stream look-ups (slots 51 and 39), the tools-module table's walk over a
 * module's functions (slot 7), the integrity handshake's fixed and computed answers, the
 * profiler table CUPTI needs at start-up (its slots unmodelled). That
 * NVIDIA's runtime accepts all of them is tests/integ/cudart.sh's and the real-program tests'
 * business.
 */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "shim/base/cudadefs.h"
#include "tests/fakecuda/fakedefs.h"
#include "tests/fakecuda/testlib.h"
#include "tests/tap.h"

static const unsigned char cudart[16] = {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
                                         0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9};
static const unsigned char tools_tls[16] = {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47,
                                            0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc};
static const unsigned char hooks[16] = {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74,
                                        0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66};
static const unsigned char cls[16] = {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11,
                                      0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93};
static const unsigned char checks[16] = {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43,
                                         0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e};
static const unsigned char tools_context[16] = {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48,
                                                0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2};
static const unsigned char tools_module[16] = {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d,
                                               0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e};
static const unsigned char integrity[16] = {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b,
                                            0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2};
static const unsigned char profiler[16] = {0x7c, 0xb6, 0x3f, 0x9b, 0x9c, 0xa4, 0x8e, 0x42,
                                           0xa4, 0x84, 0xbe, 0xb6, 0x6e, 0x6a, 0xed, 0x7f};

typedef CUresult (*primary_fn)(CUcontext *, CUdevice);
typedef CUresult (*cls_put_fn)(CUcontext, void *, void *, void (*)(CUcontext, void *, void *));
typedef CUresult (*cls_delete_fn)(CUcontext, void *);
typedef CUresult (*cls_get_fn)(void **, CUcontext, void *);
typedef void (*buffer_fn)(void **, size_t *);
typedef CUresult (*integrity_fn)(uint32_t, uint64_t, uint64_t out[2]);
typedef CUresult (*current_fn)(CUcontext *);
typedef CUresult (*ctx_device_fn)(CUcontext, CUdevice *);
typedef CUresult (*ctx_id_fn)(CUcontext, unsigned long long *);
typedef CUresult (*stream_object_fn)(CUcontext, CUstream, void **, int);
typedef CUresult (*stream_id_fn)(CUcontext, void *, unsigned long long *);
typedef void (*walk_cb)(void *, CUfunction, CUmodule);
typedef int (*walk_fn)(CUcontext, CUmodule, walk_cb, void *);
typedef CUresult (*unknown_fn)(void);

static const uintptr_t *table(const unsigned char bytes[16]) {
  CUuuid id;
  memcpy(id.bytes, bytes, 16);
  const void *t = NULL;
  CUresult rc = cuGetExportTable(&t, &id);
  return rc == CUDA_SUCCESS ? t : NULL;
}

#define SLOT(type, var, tab, i)                                                                    \
  type var;                                                                                        \
  memcpy(&var, &(tab)[i], sizeof var)

static int dtor_calls;
static void *dtor_key, *dtor_value;
static CUcontext dtor_ctx;
static CUresult dtor_inner = CUDA_ERROR_UNKNOWN;

static void dtor(CUcontext ctx, void *key, void *value) {
  dtor_calls++;
  dtor_ctx = ctx;
  dtor_key = key;
  dtor_value = value;
  CUdevice d;
  dtor_inner = cuCtxGetDevice(&d); /* a destructor may call back into the driver */
}

static void layouts(void) {
  const uintptr_t *t = table(cudart);
  tap_ok(t != NULL && t[0] == 13 * sizeof(void *), "runtime interface: 13 slots, size first");
  t = table(tools_tls);
  tap_ok(t != NULL && t[0] == 4 * sizeof(void *), "tools TLS: 4 slots");
  t = table(hooks);
  tap_ok(t != NULL && t[0] == 7 * sizeof(void *), "callback hooks: 7 slots");
  if (t != NULL) {
    SLOT(buffer_fn, b1, t, 2);
    SLOT(buffer_fn, b2, t, 6);
    void *p = NULL;
    size_t n = 0;
    b1(&p, &n);
    tap_ok(p != NULL && n > 0x20a, "hooks buffer 1 holds more than 0x20a entries (%zu)", n);
    b2(&p, &n);
    tap_ok(p != NULL && n > 0xd, "hooks buffer 2 holds more than 0xd entries (%zu)", n);
  }
  t = table(cls);
  tap_ok(t != NULL && t[0] != 0 && t[0] > 4096, "context-local storage starts with a function");
  t = table(checks);
  tap_ok(t != NULL && t[0] == 4 * sizeof(void *), "context checks: 4 slots");
  t = table(integrity);
  tap_ok(t != NULL && t[0] == 3 * sizeof(void *), "integrity check: 3 slots");
  /* CUPTI reads up to slot 69 (byte 0x228) after checking the size. */
  t = table(profiler);
  tap_ok(t != NULL && t[0] == 70 * sizeof(void *), "profiler: 70 slots");
  if (t != NULL) {
    SLOT(unknown_fn, slot35, t, 35);
    SLOT(unknown_fn, slot69, t, 69);
    TAP_EQ(slot35(), CUDA_ERROR_NOT_SUPPORTED, "profiler slot 35: not supported");
    TAP_EQ(slot69(), CUDA_ERROR_NOT_SUPPORTED, "profiler slot 69: not supported");
  }
  CUuuid unknown, known;
  memcpy(unknown.bytes, integrity, 16);
  memcpy(known.bytes, cudart, 16);
  unknown.bytes[15] ^= 1;
  const void *out = &out;
  TAP_EQ(cuGetExportTable(&out, &unknown), CUDA_ERROR_INVALID_VALUE, "an unknown table");
  tap_ok(out == &out, "... leaves the pointer alone");
  TAP_EQ(cuGetExportTable(NULL, &known), CUDA_ERROR_INVALID_VALUE, "NULL table pointer");
  TAP_EQ(cuGetExportTable(&out, NULL), CUDA_ERROR_INVALID_VALUE, "NULL UUID");
}

static void primary_slot(void) {
  const uintptr_t *t = table(cudart);
  SLOT(primary_fn, primary, t, 2);
  CUcontext via_table = NULL, retained = NULL;
  CK(primary(&via_table, 0));
  unsigned flags;
  int active = -1;
  CK(cuDevicePrimaryCtxGetState(0, &flags, &active));
  TAP_EQ(active, 0, "the runtime's primary-context slot does not activate the context");
  CK(cuDevicePrimaryCtxRetain(&retained, 0));
  tap_ok(via_table != NULL && via_table == retained, "... and names the device's primary context");
  TAP_EQ(primary(&via_table, 1), CUDA_ERROR_INVALID_DEVICE, "device 1 does not exist");
  TAP_EQ(primary(NULL, 0), CUDA_ERROR_INVALID_VALUE, "NULL output");
  CK(cuDevicePrimaryCtxRelease(0));
}

static void local_storage(void) {
  const uintptr_t *t = table(cls);
  SLOT(cls_put_fn, put, t, 0);
  SLOT(cls_delete_fn, del, t, 1);
  SLOT(cls_get_fn, get, t, 2);
  int key1, key2, v1, v2;
  void *v = NULL;
  CUcontext c;
  CK(cuCtxCreate_v2(&c, 0, 0));
  CK(put(c, &key1, &v1, dtor));
  CK(get(&v, c, &key1));
  tap_ok(v == &v1, "get returns what put stored");
  CK(put(NULL, &key1, &v2, dtor));
  CK(get(&v, NULL, &key1));
  tap_ok(v == &v2, "put replaces; NULL means the current context");
  TAP_EQ(get(&v, c, &key2), CUDA_ERROR_INVALID_HANDLE, "get of a missing key: INVALID_HANDLE");
  CK(put(c, &key2, &v1, dtor));
  CK(del(c, &key2));
  TAP_EQ(get(&v, c, &key2), CUDA_ERROR_INVALID_HANDLE, "a deleted key is gone");
  CK(del(c, &key2));
  TAP_EQ(get(NULL, c, &key1), CUDA_ERROR_INVALID_VALUE, "NULL output");

  CK(cuCtxDestroy_v2(c));
  TAP_EQ(dtor_calls, 1, "destroying the context runs the destructor once");
  tap_ok(dtor_ctx == c && dtor_key == &key1 && dtor_value == &v2,
         "... with the context, the key and the value");
  TAP_EQ(dtor_inner, CUDA_SUCCESS, "... which may call the driver on the context");
  TAP_EQ(get(&v, c, &key1), CUDA_ERROR_INVALID_CONTEXT, "a destroyed context has no storage");

  CUcontext p;
  dtor_calls = 0;
  CK(cuDevicePrimaryCtxRetain(&p, 0));
  CK(cuCtxSetCurrent(p));
  CK(put(p, &key1, &v1, dtor));
  CK(cuDevicePrimaryCtxReset(0));
  TAP_EQ(dtor_calls, 1, "resetting the primary context runs its destructors");
  CK(cuDevicePrimaryCtxRetain(&p, 0));
  CK(put(p, &key2, &v2, dtor));
  CK(cuDevicePrimaryCtxRelease(0));
  TAP_EQ(dtor_calls, 1, "a release that leaves a reference runs none");
  CK(cuDevicePrimaryCtxRelease(0));
  TAP_EQ(dtor_calls, 2, "the last release runs them");
  tap_ok(dtor_key == &key2, "... for the entries put since the reset");
}

/* Slots 51 and 39 of the tools-context table: a stream handle's object, and its id. */
static void streams(const uintptr_t *t, CUcontext c) {
  SLOT(stream_object_fn, object, t, 51);
  SLOT(stream_id_fn, id, t, 39);
  CUstream s;
  CK(cuStreamCreate(&s, 0));
  void *legacy = NULL, *legacy2 = NULL, *per_thread = NULL, *per_thread2 = NULL, *user = NULL;
  CK(object(c, NULL, &legacy, 0));
  CK(object(NULL, CU_STREAM_LEGACY, &legacy2, 0));
  tap_ok(legacy != NULL && legacy == legacy2, "slot 51: NULL and CU_STREAM_LEGACY are one stream");
  CK(object(c, CU_STREAM_PER_THREAD, &per_thread, 1));
  CK(object(c, NULL, &per_thread2, 1));
  tap_ok(per_thread != NULL && per_thread == per_thread2 && per_thread != legacy,
         "... CU_STREAM_PER_THREAD (or NULL with the per-thread flag) another");
  CK(object(c, s, &user, 0));
  tap_ok(user != NULL && user != legacy && user != per_thread, "... a created stream its own");
  unsigned long long a = 0, b = 1, l = 0, p = 0;
  CK(id(c, user, &a));
  CK(cuStreamGetId(s, &b));
  tap_ok(a == b, "slot 39: a stream object's id is cuStreamGetId's");
  CK(id(c, legacy, &l));
  CK(cuStreamGetId(NULL, &b));
  CK(id(c, per_thread, &p));
  tap_ok(l == b && p != l && p != a, "... for the default streams too, each its own");
  void *out = &out;
  TAP_EQ(object(c, (CUstream)(uintptr_t)UINT64_MAX, &out, 0), CUDA_ERROR_INVALID_HANDLE,
         "slot 51: an unknown handle is INVALID_HANDLE");
  tap_ok(out == &out, "... and nothing is written");
  TAP_EQ(object(c, NULL, NULL, 0), CUDA_ERROR_INVALID_VALUE, "... NULL output: INVALID_VALUE");
  CK(cuStreamDestroy_v2(s));
  TAP_EQ(object(c, s, &out, 0), CUDA_ERROR_INVALID_HANDLE, "... a destroyed stream too");
  TAP_EQ(id(c, user, &a), CUDA_ERROR_INVALID_HANDLE, "slot 39: a destroyed stream's object");
  TAP_EQ(id(c, &a, &a), CUDA_ERROR_INVALID_HANDLE, "... or anything else: INVALID_HANDLE");
}

static void tools(void) {
  const uintptr_t *t = table(tools_tls);
  SLOT(current_fn, current, t, 2);
  CUcontext c, seen = NULL;
  CK(cuCtxCreate_v2(&c, 0, 0));
  CK(current(&seen));
  tap_ok(seen == c, "tools TLS slot 2 is the current context");
  t = table(tools_context);
  tap_ok(t != NULL && t[0] == 95 * sizeof(void *), "tools context: 95 slots");
  SLOT(ctx_device_fn, device, t, 3);
  SLOT(ctx_id_fn, id, t, 4);
  CUdevice d = -1;
  unsigned long long a = 0, b = 1;
  CK(device(c, &d));
  TAP_EQ(d, 0, "tools context slot 3: the context's device");
  CK(id(NULL, &a));
  CK(cuCtxGetId(c, &b));
  tap_ok(a == b && a != 0, "tools context slot 4: cuCtxGetId of the current context");
  streams(t, c);
  SLOT(unknown_fn, unknown, t, 50);
  TAP_EQ(unknown(), CUDA_ERROR_NOT_SUPPORTED, "an unmodelled slot answers NOT_SUPPORTED");
  CK(cuCtxDestroy_v2(c));
  TAP_EQ(device(c, &d), CUDA_ERROR_CONTEXT_IS_DESTROYED, "... of a destroyed context");
}

/* Slot 7 of the tools-module table: a walk over a module's functions. */
struct walked {
  int n;
  CUfunction f[4];
  CUmodule m[4];
};

static void walk_one(void *user, CUfunction f, CUmodule m) {
  struct walked *w = user;
  if (w->n < 4) {
    w->f[w->n] = f;
    w->m[w->n] = m;
  }
  w->n++;
}

static void module_walk(void) {
  static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                            ".visible .entry first(.param .u64 p) { ret; }\n"
                            ".visible .entry second() { ret; }\n";
  const uintptr_t *t = table(tools_module);
  tap_ok(t != NULL && t[0] == 64 * sizeof(void *), "tools module: 64 slots");
  SLOT(walk_fn, walk, t, 7);
  CUcontext c;
  CUmodule m;
  CK(cuCtxCreate_v2(&c, 0, 0));
  CK(cuModuleLoadData(&m, ptx));
  struct walked w = {0};
  TAP_EQ(walk(c, m, walk_one, &w), 2, "tools module slot 7: answers the number of functions");
  TAP_EQ(w.n, 2, "... having called back once for each");
  CUfunction first = NULL, second = NULL;
  CK(cuModuleGetFunction(&first, m, "first"));
  CK(cuModuleGetFunction(&second, m, "second"));
  tap_ok(w.f[0] == first && w.f[1] == second && w.m[0] == m && w.m[1] == m,
         "... with the functions cuModuleGetFunction names, in order, and the module");
  CK(cuModuleUnload(m));
  w.n = 0;
  TAP_EQ(walk(c, m, walk_one, &w), 0, "an unloaded module: none");
  TAP_EQ(w.n, 0, "... and no call");
  CK(cuCtxDestroy_v2(c));
}

static void handshake(void) {
  const uintptr_t *t = table(integrity);
  SLOT(integrity_fn, check, t, 1);
  uint64_t a[2] = {0, 0}, b[2] = {0, 0};
  CK(check(13000, (uint64_t)time(NULL), a));
  tap_ok(a[0] == 0x3341181C03CB675CULL && a[1] == 0x8ED383AA1F4CD1E8ULL,
         "versions ending in 0 have the fixed answer");
  CK(check(12081, 5, a));
  tap_ok(a[0] == 0x1841181C03CB675CULL && a[1] == 0x8ED383AA1F4CD1E8ULL,
         "versions ending in 1 have the other fixed answer");
  CK(check(13002, 1700000000, a));
  CK(check(13002, 1700000000, b));
  tap_ok(a[0] == b[0] && a[1] == b[1], "a computed answer depends only on its inputs");
  CK(check(13002, 1700000001, b));
  tap_ok(a[0] != b[0] || a[1] != b[1], "... and changes with the time");
  TAP_EQ(check(13002, 1, NULL), CUDA_ERROR_INVALID_VALUE, "NULL output");
}

int main(void) {
  CK(cuInit(0));
  layouts();
  primary_slot();
  local_storage();
  tools();
  module_walk();
  handshake();
  return tap_done();
}
