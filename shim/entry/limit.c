/* cuCtxSetLimit. The stack, printf FIFO and heap limits size reservations of device memory the
 * driver makes for the context ("If these reservations fail, cuCtxSetLimit() will return
 * CUDA_ERROR_OUT_OF_MEMORY", cuda.h): its own memory for the process. When the cap covers the
 * process, gpucap predicts the growth before the driver is asked (the stack: per thread, for every
 * thread the device can hold at once, SMs x threads per SM; the FIFO and heap: their bytes),
 * admits it as a charge for the call and answers CUDA_ERROR_OUT_OF_MEMORY when it does not fit,
 * as the driver would: the limit stays as it was. After the call the driver's memory is measured
 * (shim/accounting/overhead.h), which replaces the prediction. No lock of its own.
 */
#include "shim/accounting/cap.h"
#include "shim/context/ctx.h"
#include "shim/entry/prologue.h"
#include "shim/base/log.h"
#include "shim/accounting/overhead.h"

#include <stdatomic.h>

#define STACK_ALIGN 16 /* the driver rounds the stack size up to this (cuCtxGetLimit says so) */

/* The device memory the driver would reserve beyond what it holds to set limit to value in the
 * current context of device dev; 0 when nothing grows or the driver cannot say. */
static uint64_t growth(int dev, CUlimit limit, size_t value) {
  size_t cur = 0;
  if (!real.cuCtxGetLimit || real.cuCtxGetLimit(&cur, limit) != CUDA_SUCCESS) {
    return 0;
  }
  if (limit == CU_LIMIT_PRINTF_FIFO_SIZE || limit == CU_LIMIT_MALLOC_HEAP_SIZE) {
    return value > cur ? value - cur : 0;
  }
  int sms = 0, per_sm = 0;
  if (limit != CU_LIMIT_STACK_SIZE || !real.cuDeviceGetAttribute ||
      real.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) !=
          CUDA_SUCCESS ||
      real.cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev) !=
          CUDA_SUCCESS ||
      sms <= 0 || per_sm <= 0) {
    return 0;
  }
  uint64_t stack = value > UINT64_MAX - STACK_ALIGN
                       ? UINT64_MAX
                       : ((uint64_t)value + STACK_ALIGN - 1) / STACK_ALIGN * STACK_ALIGN;
  uint64_t threads = (uint64_t)sms * (uint64_t)per_sm;
  if (stack <= cur) {
    return 0;
  }
  return stack - cur > UINT64_MAX / threads ? UINT64_MAX : (stack - cur) * threads;
}

static const char *limit_name(CUlimit limit) {
  return limit == CU_LIMIT_STACK_SIZE         ? "CU_LIMIT_STACK_SIZE"
         : limit == CU_LIMIT_PRINTF_FIFO_SIZE ? "CU_LIMIT_PRINTF_FIFO_SIZE"
                                              : "CU_LIMIT_MALLOC_HEAP_SIZE";
}

GPUCAP_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  static atomic_bool said;
  HOOK_PROLOGUE(real.cuCtxSetLimit);
  int dev = -1;
  if (cap_current_device(&dev) != CUDA_SUCCESS) {
    return real.cuCtxSetLimit(limit, value); /* the driver's own answer: no context */
  }
  uint64_t grow = cap_covers_process() ? growth(dev, limit, value) : 0;
  if (grow > 0 && !ctx_admit(dev, grow)) {
    if (!atomic_exchange(&said, true)) {
      log_msg(LOG_WARN,
              "device %d: cuCtxSetLimit(%s, %zu) refused with CUDA_ERROR_OUT_OF_MEMORY: the driver "
              "would reserve %llu bytes more for it, which do not fit under the cap",
              dev, limit_name(limit), value, (unsigned long long)grow);
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  struct overhead_call m;
  overhead_before(&m, dev, false);
  m.reserved = grow;
  CUresult rc = real.cuCtxSetLimit(limit, value);
  overhead_after(&m, OVERHEAD_LIMITS, "cuCtxSetLimit", rc);
  if (grow > 0) {
    cap_credit(dev, grow);
  }
  return rc;
}
