/* CUDA arrays and mipmapped arrays under the cap. The driver offers no way to ask what a
 * (non-deferred) array holds, so gpucap asks what the same array would need with deferred
 * mapping (a twin created with CUDA_ARRAY3D_DEFERRED_MAPPING holds no memory and answers
 * cu*GetMemoryRequirements: R) and charges what the driver was seen to use. A lower bound E
 * computed from the descriptor, then max(E, R), is admitted against the cap before the driver
 * is asked (a refusal never reaches it); the driver's free memory is read before and after the
 * creation, and the measured drop D is charged instead when it is plausible: E <= D <= R (or,
 * when the twin could not be made, E <= D <= 2E + 2 MiB). Anything else means another
 * allocation or free of the process moved the figure: R is charged (E without a twin). If the
 * charge no longer fits under the cap the array is destroyed and refused. Deferred-mapping
 * arrays are charged nothing: their memory comes from cuMemCreate, charged there. The legacy
 * 32-bit ABIs (cuArrayCreate, cuArray3DCreate v1) are left alone.
 * Locking: the map of charged arrays (shim/charges) has its own mutex, never held across a
 * driver call.
 */
#include "shim/accounting/cap.h"
#include "shim/context/ctx.h"
#include "shim/entry/prologue.h"
#include "shim/base/log.h"
#include "shim/pool/passthru.h"
#include "shim/base/real.h"
#include "shim/accounting/share.h"

#include <stdbool.h>
#include <stdint.h>

#define SLACK ((uint64_t)2 << 20) /* one page of the driver's allocation granularity */

/* The creation and destruction entry points, by what they make. */
enum kind { ARRAY, ARRAY3D, MIPMAP };

static uint64_t mul_sat(uint64_t a, uint64_t b) {
  return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

static uint64_t add_sat(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Bits of one element of format f, every channel included: the classic formats NumChannels
 * channels of their size (at most 4, the most any valid descriptor has), the normalized ones
 * the channels their name says, block-compressed and YUV formats their bits per texel (chroma
 * subsampled as the format's sampling says). A format gpucap does not know counts as 4 bits,
 * the fewest any format takes (BC1, BC4): the estimate must stay a lower bound. */
static uint64_t element_bits(CUarray_format f, unsigned int channels) {
  uint64_t ch = channels < 4 ? channels : 4;
  switch (f) {
  case CU_AD_FORMAT_UNSIGNED_INT8:
  case CU_AD_FORMAT_SIGNED_INT8:
    return 8 * ch;
  case CU_AD_FORMAT_UNSIGNED_INT16:
  case CU_AD_FORMAT_SIGNED_INT16:
  case CU_AD_FORMAT_HALF:
    return 16 * ch;
  case CU_AD_FORMAT_UNSIGNED_INT32:
  case CU_AD_FORMAT_SIGNED_INT32:
  case CU_AD_FORMAT_FLOAT:
    return 32 * ch;
  case CU_AD_FORMAT_UNORM_INT8X1:
  case CU_AD_FORMAT_SNORM_INT8X1:
    return 8;
  case CU_AD_FORMAT_UNORM_INT8X2:
  case CU_AD_FORMAT_SNORM_INT8X2:
  case CU_AD_FORMAT_UNORM_INT16X1:
  case CU_AD_FORMAT_SNORM_INT16X1:
  case CU_AD_FORMAT_NV16:
  case CU_AD_FORMAT_YUY2:
    return 16;
  case CU_AD_FORMAT_UNORM_INT8X4:
  case CU_AD_FORMAT_SNORM_INT8X4:
  case CU_AD_FORMAT_UNORM_INT16X2:
  case CU_AD_FORMAT_SNORM_INT16X2:
  case CU_AD_FORMAT_UNORM_INT_101010_2:
  case CU_AD_FORMAT_P210:
  case CU_AD_FORMAT_P216:
  case CU_AD_FORMAT_Y210:
  case CU_AD_FORMAT_Y216:
  case CU_AD_FORMAT_AYUV:
  case CU_AD_FORMAT_Y410:
    return 32;
  case CU_AD_FORMAT_UNORM_INT16X4:
  case CU_AD_FORMAT_SNORM_INT16X4:
  case CU_AD_FORMAT_Y416:
    return 64;
  case CU_AD_FORMAT_BC2_UNORM:
  case CU_AD_FORMAT_BC2_UNORM_SRGB:
  case CU_AD_FORMAT_BC3_UNORM:
  case CU_AD_FORMAT_BC3_UNORM_SRGB:
  case CU_AD_FORMAT_BC5_UNORM:
  case CU_AD_FORMAT_BC5_SNORM:
  case CU_AD_FORMAT_BC6H_UF16:
  case CU_AD_FORMAT_BC6H_SF16:
  case CU_AD_FORMAT_BC7_UNORM:
  case CU_AD_FORMAT_BC7_UNORM_SRGB:
    return 8;
  case CU_AD_FORMAT_NV12:
    return 12;
  case CU_AD_FORMAT_P010:
  case CU_AD_FORMAT_P016:
  case CU_AD_FORMAT_Y444_PLANAR8:
  case CU_AD_FORMAT_YUV444_8bit_SemiPlanar:
    return 24;
  case CU_AD_FORMAT_Y444_PLANAR10:
  case CU_AD_FORMAT_YUV444_16bit_SemiPlanar:
    return 48;
  default: /* BC1, BC4 and formats newer than gpucap */
    return 4;
  }
}

static uint64_t at_least_1(uint64_t extent) {
  return extent ? extent : 1;
}

/* Bytes of one level: w x h x depth elements (0 counts as 1), rounded up. */
static uint64_t level_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, uint64_t w, uint64_t h,
                            uint64_t depth) {
  uint64_t bits = mul_sat(
      mul_sat(mul_sat(element_bits(d->Format, d->NumChannels), at_least_1(w)), at_least_1(h)),
      at_least_1(depth));
  return bits / 8 + (bits % 8 != 0);
}

static uint64_t halve(uint64_t extent, unsigned int times) {
  return extent == 0 ? 0 : (extent >> times ? extent >> times : 1);
}

/* The lower bound E of what an array (levels 1) or a mipmapped array of numMipmapLevels
 * `levels` described by d holds: the sum over the levels the driver makes (as many as asked,
 * within [1, 1 + floor(log2(largest extent that shrinks))]), each halving every extent but the
 * layers and cubemap faces, minimum 1. Saturates. O(levels). */
static uint64_t estimate(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels) {
  bool fixed_depth = (d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
  uint64_t m = d->Width > d->Height ? d->Width : d->Height;
  if (!fixed_depth && d->Depth > m) {
    m = d->Depth;
  }
  unsigned int most = 1;
  while (m >>= 1) {
    most++;
  }
  unsigned int n = levels < 1 ? 1 : (levels > most ? most : levels);
  uint64_t sum = 0;
  for (unsigned int l = 0; l < n; l++) {
    sum = add_sat(sum, level_bytes(d, halve(d->Width, l), halve(d->Height, l),
                                   fixed_depth ? d->Depth : halve(d->Depth, l)));
  }
  return sum;
}

/* Whether a measured drop of the driver's free memory is this creation alone: at least the
 * lower bound, at most what the deferred twin needs (req), or without one twice the lower
 * bound plus one page. */
static bool plausible(uint64_t drop, uint64_t est, uint64_t req) {
  return drop >= est && (req ? drop <= req : drop - est <= add_sat(est, SLACK));
}

static CUresult driver_create(enum kind k, void *out, const void *desc, unsigned int levels) {
  switch (k) {
  case ARRAY:
    return real.cuArrayCreate_v2((CUarray *)out, desc);
  case ARRAY3D:
    return real.cuArray3DCreate_v2((CUarray *)out, desc);
  default:
    return real.cuMipmappedArrayCreate((CUmipmappedArray *)out, desc, levels);
  }
}

static CUresult driver_destroy(enum kind k, uint64_t handle) {
  if (k == MIPMAP) {
    return real.cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)handle);
  }
  return real.cuArrayDestroy((CUarray)(uintptr_t)handle);
}

/* R: the memory the array described by d would need with deferred mapping on dev, from a
 * twin that holds none; 0 when the driver cannot say (it refuses such a twin). */
static uint64_t requirement(enum kind k, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels,
                            int dev) {
  CUDA_ARRAY3D_DESCRIPTOR twin = *d;
  CUDA_ARRAY_MEMORY_REQUIREMENTS req = {0};
  CUresult rc;
  twin.Flags |= CUDA_ARRAY3D_DEFERRED_MAPPING;
  if (k == MIPMAP) {
    CUmipmappedArray m = NULL;
    if (!real.cuMipmappedArrayGetMemoryRequirements ||
        real.cuMipmappedArrayCreate(&m, &twin, levels) != CUDA_SUCCESS) {
      return 0;
    }
    rc = real.cuMipmappedArrayGetMemoryRequirements(&req, m, dev);
    real.cuMipmappedArrayDestroy(m);
  } else {
    CUarray a = NULL;
    if (!real.cuArray3DCreate_v2 || !real.cuArrayGetMemoryRequirements ||
        real.cuArray3DCreate_v2(&a, &twin) != CUDA_SUCCESS) {
      return 0;
    }
    rc = real.cuArrayGetMemoryRequirements(&req, a, dev);
    real.cuArrayDestroy(a);
  }
  return rc == CUDA_SUCCESS ? req.size : 0;
}

/* The handle a successful creation wrote to out, as a map key; NULL is written back on a
 * refusal. */
static uint64_t handle_of(enum kind k, const void *out) {
  return k == MIPMAP ? (uint64_t)(uintptr_t) * (const CUmipmappedArray *)out
                     : (uint64_t)(uintptr_t) * (const CUarray *)out;
}

static void handle_clear(enum kind k, void *out) {
  if (k == MIPMAP) {
    *(CUmipmappedArray *)out = NULL;
  } else {
    *(CUarray *)out = NULL;
  }
}

/* One creation. d is the descriptor in its 3D form (NULL when the program passed none). */
static CUresult create(enum kind k, void *out, const void *desc, const CUDA_ARRAY3D_DESCRIPTOR *d,
                       unsigned int levels) {
  int dev;
  CUresult rc;
  if (!out || !d) {
    return driver_create(k, out, desc, levels); /* the driver's own error */
  }
  if (d->Flags & CUDA_ARRAY3D_DEFERRED_MAPPING) {
    return driver_create(k, out, desc, levels); /* its memory comes from cuMemCreate */
  }
  if (!passthru_prepare(true, &dev, &rc)) {
    return rc == CUDA_SUCCESS ? driver_create(k, out, desc, levels) : rc;
  }
  uint64_t est = estimate(d, levels);
  if (!ctx_admit(dev, est)) {
    return passthru_refuse(dev, est); /* the driver is never asked, not even for a twin */
  }
  uint64_t req = requirement(k, d, levels, dev);
  uint64_t admitted = req > est ? req : est;
  if (admitted > est && !ctx_admit(dev, admitted - est)) {
    cap_credit(dev, est);
    return passthru_refuse(dev, admitted);
  }
  size_t before = 0, after = 0, total = 0;
  bool measured = real.cuMemGetInfo_v2 && real.cuMemGetInfo_v2(&before, &total) == CUDA_SUCCESS;
  rc = driver_create(k, out, desc, levels);
  if (ctx_retry(dev, rc)) { /* idle memory came back: measure again from here */
    measured = real.cuMemGetInfo_v2 && real.cuMemGetInfo_v2(&before, &total) == CUDA_SUCCESS;
    rc = driver_create(k, out, desc, levels);
  }
  if (rc != CUDA_SUCCESS) {
    cap_credit(dev, admitted);
    return rc;
  }
  uint64_t handle = handle_of(k, out);
  measured = measured && real.cuMemGetInfo_v2(&after, &total) == CUDA_SUCCESS;
  uint64_t drop = measured && before >= after ? before - after : 0;
  /* Under a shared budget the device's free memory moves with the other processes' frees too,
   * so a drop can be short of what the array took: the admitted bound is charged. */
  uint64_t charge = !share_active() && plausible(drop, est, req) ? drop : admitted;
  if (!ctx_recharge(dev, admitted, charge)) {
    driver_destroy(k, handle);
    handle_clear(k, out);
    return passthru_refuse(dev, charge);
  }
  log_msg(LOG_DEBUG,
          "device %d: array %#llx charged %llu bytes (estimate %llu, deferred twin %llu, free "
          "memory fell %llu)",
          dev, (unsigned long long)handle, (unsigned long long)charge, (unsigned long long)est,
          (unsigned long long)req, (unsigned long long)drop);
  if (!passthru_remember_array(handle, dev, charge)) {
    driver_destroy(k, handle);
    cap_credit(dev, charge);
    handle_clear(k, out);
    log_msg(LOG_ERROR, "out of host memory while recording an array");
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

/* One destruction: the charge returns only when the driver destroyed an array gpucap charged
 * (a failed destroy keeps array and charge; of two racing destroys, the one the driver lets
 * succeed returns it). */
static CUresult destroy_by_kind(uint64_t handle, void *k) {
  return driver_destroy(*(enum kind *)k, handle);
}

static CUresult destroy(enum kind k, uint64_t handle) {
  return passthru_destroy_array(handle, destroy_by_kind, &k);
}

GPUCAP_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle,
                                        const CUDA_ARRAY_DESCRIPTOR *pAllocateArray) {
  LEDGER_ENTER();
  HOOK_PROLOGUE(real.cuArrayCreate_v2 && real.cuArrayDestroy);
  CUDA_ARRAY3D_DESCRIPTOR d = {0};
  if (pAllocateArray) {
    d = (CUDA_ARRAY3D_DESCRIPTOR){.Width = pAllocateArray->Width,
                                  .Height = pAllocateArray->Height,
                                  .Format = pAllocateArray->Format,
                                  .NumChannels = pAllocateArray->NumChannels};
  }
  return create(ARRAY, pHandle, pAllocateArray, pAllocateArray ? &d : NULL, 1);
}

GPUCAP_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle,
                                          const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray) {
  LEDGER_ENTER();
  HOOK_PROLOGUE(real.cuArray3DCreate_v2 && real.cuArrayDestroy);
  return create(ARRAY3D, pHandle, pAllocateArray, pAllocateArray, 1);
}

GPUCAP_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                              const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                              unsigned int numMipmapLevels) {
  LEDGER_ENTER();
  HOOK_PROLOGUE(real.cuMipmappedArrayCreate && real.cuMipmappedArrayDestroy);
  return create(MIPMAP, pHandle, pMipmappedArrayDesc, pMipmappedArrayDesc, numMipmapLevels);
}

GPUCAP_EXPORT CUresult cuArrayDestroy(CUarray hArray) {
  HOOK_PROLOGUE(real.cuArrayDestroy);
  return destroy(ARRAY, (uint64_t)(uintptr_t)hArray);
}

GPUCAP_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  HOOK_PROLOGUE(real.cuMipmappedArrayDestroy);
  return destroy(MIPMAP, (uint64_t)(uintptr_t)hMipmappedArray);
}
