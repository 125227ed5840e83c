/* CUDA arrays and mipmapped arrays of the fake driver: creation with the checks cuda.h
 * documents, descriptors, mipmap levels, the memory requirements of deferred-mapping arrays, and
 * destruction (by the program, or with the owning context).
 *
 * Layout (the fake's own rule; a real driver's tiled layouts are opaque): a row of Width
 * elements (element size x NumChannels bytes) padded to FK_PITCH_ALIGN bytes, times the height,
 * times the depth or the layers (an extent of 0 counts as 1). A mipmapped array holds the sum of
 * its levels, each halving every extent but the layers (minimum 1). Arrays made with
 * CUDA_ARRAY3D_DEFERRED_MAPPING hold no memory (cuMemMapArrayAsync is not modelled). With
 * FAKECUDA_BACKING=1 an array's contents are host memory in that layout (fk_array_view), which
 * 2D and 3D copies read and write (fk_copy.c).
 *
 * Invariants: an array or mipmapped array belongs to the context current at its creation and
 * is destroyed with it; the levels of a mipmapped array belong to it and hold no memory of their
 * own. Structs are never freed before unload, so a destroyed handle is never reused and is
 * rejected with CUDA_ERROR_INVALID_HANDLE. Everything here runs under fk.lock.
 */
#include <stdlib.h>
#include <string.h>

#include "tests/fakecuda/fk.h"

#define KNOWN_FLAGS 0x1ffu /* every CUDA_ARRAY3D_* flag of CUDA 13.0 */
#define MAX_LEVELS 16      /* 1 + log2(FK_TEXTURE_MAX): the most a mipmapped array can have */
_Static_assert((1u << (MAX_LEVELS - 1)) == FK_TEXTURE_MAX, "MAX_LEVELS follows FK_TEXTURE_MAX");

struct CUarray_st {
  CUDA_ARRAY3D_DESCRIPTOR desc; /* as created; cuArrayCreate arrays: Depth 0, Flags 0 */
  struct CUctx_st *ctx;
  size_t size;                       /* bytes of its layout */
  struct CUmipmappedArray_st *owner; /* the mipmapped array it is a level of, or NULL */
  unsigned char *bytes;              /* its contents with FAKECUDA_BACKING=1, else NULL */
  int live;
};

struct CUmipmappedArray_st {
  CUDA_ARRAY3D_DESCRIPTOR desc;
  struct CUctx_st *ctx;
  size_t size; /* bytes of all its levels */
  unsigned nlevels;
  struct CUarray_st *levels[MAX_LEVELS];
  int live;
};

static struct CUarray_st **arrays; /* every array ever created, levels included */
static size_t narrays, caparrays;
static struct CUmipmappedArray_st **mipmaps; /* every mipmapped array ever created */
static size_t nmipmaps, capmipmaps;

static size_t round_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

/* Bytes of one channel of the formats the fake models; 0 for any other. */
static size_t channel_bytes(CUarray_format f) {
  switch (f) {
  case CU_AD_FORMAT_UNSIGNED_INT8:
  case CU_AD_FORMAT_SIGNED_INT8:
    return 1;
  case CU_AD_FORMAT_UNSIGNED_INT16:
  case CU_AD_FORMAT_SIGNED_INT16:
  case CU_AD_FORMAT_HALF:
    return 2;
  case CU_AD_FORMAT_UNSIGNED_INT32:
  case CU_AD_FORMAT_SIGNED_INT32:
  case CU_AD_FORMAT_FLOAT:
    return 4;
  default:
    return 0;
  }
}

/* The other formats cuda.h defines: normalized, block-compressed, YUV and packed. */
static int format_unmodelled(CUarray_format f) {
  return f == CU_AD_FORMAT_UNORM_INT_101010_2 ||
         (f >= CU_AD_FORMAT_BC1_UNORM && f <= CU_AD_FORMAT_P010) ||
         (f >= CU_AD_FORMAT_P016 && f <= CU_AD_FORMAT_Y410) ||
         (f >= CU_AD_FORMAT_NV12 && f <= CU_AD_FORMAT_YUV444_16bit_SemiPlanar) ||
         (f >= CU_AD_FORMAT_UNORM_INT8X1 && f <= CU_AD_FORMAT_SNORM_INT16X4);
}

/* The checks cuArray3DCreate and cuMipmappedArrayCreate document for a descriptor, with every
 * extent limit the fake's attributes report (FK_TEXTURE_MAX). */
static CUresult desc_check(const CUDA_ARRAY3D_DESCRIPTOR *d) {
  unsigned flags = d->Flags;
  int layered = (flags & CUDA_ARRAY3D_LAYERED) != 0, cube = (flags & CUDA_ARRAY3D_CUBEMAP) != 0;
  if ((flags & ~KNOWN_FLAGS) != 0 ||
      (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (channel_bytes(d->Format) == 0) {
    return format_unmodelled(d->Format) ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
  }
  if (flags & CUDA_ARRAY3D_SPARSE) {
    return CUDA_ERROR_NOT_SUPPORTED; /* CU_DEVICE_ATTRIBUTE_SPARSE_CUDA_ARRAY_SUPPORTED is 0 */
  }
  if (d->Width == 0 || d->Width > FK_TEXTURE_MAX || d->Height > FK_TEXTURE_MAX ||
      d->Depth > FK_TEXTURE_MAX) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if ((d->Height == 0 && d->Depth != 0 && !layered) || (layered && d->Depth == 0)) {
    return CUDA_ERROR_INVALID_VALUE; /* neither 1D, 2D, 3D nor layered */
  }
  if (cube && (d->Height != d->Width || (layered ? d->Depth % 6 != 0 : d->Depth != 6))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if ((flags & CUDA_ARRAY3D_TEXTURE_GATHER) && (d->Height == 0 || d->Depth != 0)) {
    return CUDA_ERROR_INVALID_VALUE; /* texture gather: 2D arrays only */
  }
  return CUDA_SUCCESS;
}

/* Bytes of an array's layout. Cannot overflow: every extent is at most FK_TEXTURE_MAX. */
static size_t layout(const CUDA_ARRAY3D_DESCRIPTOR *d) {
  size_t row = round_up(d->Width * channel_bytes(d->Format) * d->NumChannels, FK_PITCH_ALIGN);
  return row * (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1);
}

static size_t halve(size_t extent, unsigned times) {
  return extent == 0 ? 0 : (extent >> times ? extent >> times : 1);
}

/* The descriptor of level l of a mipmapped array described by d: layers and cubemap faces
 * do not shrink. */
static CUDA_ARRAY3D_DESCRIPTOR level_desc(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned l) {
  CUDA_ARRAY3D_DESCRIPTOR out = *d;
  out.Width = halve(d->Width, l);
  out.Height = halve(d->Height, l);
  if (!(d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP))) {
    out.Depth = halve(d->Depth, l);
  }
  return out;
}

/* numMipmapLevels clamped to [1, 1 + floor(log2(largest extent that shrinks))]. */
static unsigned level_count(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned asked) {
  size_t m = d->Width > d->Height ? d->Width : d->Height;
  if (!(d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) && d->Depth > m) {
    m = d->Depth;
  }
  unsigned most = 1;
  while (m >>= 1) {
    most++;
  }
  return asked < 1 ? 1 : (asked > most ? most : asked);
}

static int deferred(const CUDA_ARRAY3D_DESCRIPTOR *d) {
  return (d->Flags & CUDA_ARRAY3D_DEFERRED_MAPPING) != 0;
}

/* Device memory an array holds: none for a mipmap level or a deferred-mapping array. */
static size_t array_held(const struct CUarray_st *a) {
  return a->owner == NULL && !deferred(&a->desc) ? a->size : 0;
}

static size_t mipmap_held(const struct CUmipmappedArray_st *m) {
  return deferred(&m->desc) ? 0 : m->size;
}

/* Takes bytes of device memory on dev for one creation. */
static CUresult memory_take(int dev, size_t bytes) {
  if (fk_mem_take(dev, bytes, 0) != CUDA_SUCCESS) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (bytes > 0) {
    fk.dev[dev].alloc_calls++;
  }
  return CUDA_SUCCESS;
}

static void memory_give(int dev, size_t bytes) {
  if (bytes > 0) {
    fk_mem_give(dev, bytes, 0);
    fk.dev[dev].free_calls++;
  }
}

static struct CUarray_st *array_new(const CUDA_ARRAY3D_DESCRIPTOR *d, struct CUctx_st *c,
                                    struct CUmipmappedArray_st *owner) {
  struct CUarray_st *a = calloc(1, sizeof *a);
  if (a == NULL) {
    fk_log("error: out of host memory");
    abort();
  }
  a->desc = *d;
  a->ctx = c;
  a->size = layout(d);
  a->owner = owner;
  a->live = 1;
  if (fk.cfg.backing && !deferred(d) && (a->bytes = calloc(1, a->size)) == NULL) {
    fk_log("error: out of host memory");
    abort();
  }
  fk_push((void ***)&arrays, &narrays, &caparrays, a);
  return a;
}

/* The live array h names, or NULL. O(arrays ever created). */
static struct CUarray_st *array_find(const struct CUarray_st *h) {
  for (size_t i = narrays; h != NULL && i-- > 0;) {
    if (arrays[i] == h) {
      return arrays[i]->live ? arrays[i] : NULL;
    }
  }
  return NULL;
}

static struct CUmipmappedArray_st *mipmap_find(const struct CUmipmappedArray_st *h) {
  for (size_t i = nmipmaps; h != NULL && i-- > 0;) {
    if (mipmaps[i] == h) {
      return mipmaps[i]->live ? mipmaps[i] : NULL;
    }
  }
  return NULL;
}

static void array_release(struct CUarray_st *a) {
  memory_give(a->ctx->dev, array_held(a));
  free(a->bytes);
  a->bytes = NULL;
  a->live = 0;
}

static void mipmap_release(struct CUmipmappedArray_st *m) {
  memory_give(m->ctx->dev, mipmap_held(m));
  for (unsigned l = 0; l < m->nlevels; l++) {
    free(m->levels[l]->bytes);
    m->levels[l]->bytes = NULL;
    m->levels[l]->live = 0;
  }
  m->live = 0;
}

/* ---- Creation. ---- */

/* The checks every creation makes, in the driver's order: a current context (in *c), the
 * out-pointer and descriptor, then the descriptor itself. */
static CUresult create_checks(const void *out, const CUDA_ARRAY3D_DESCRIPTOR *d,
                              struct CUctx_st **c) {
  CUresult rc = fk_ctx_current(c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (out == NULL || d == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return desc_check(d);
}

static CUresult array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d) {
  struct CUctx_st *c;
  CUresult rc = create_checks(out, d, &c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if ((rc = memory_take(c->dev, deferred(d) ? 0 : layout(d))) != CUDA_SUCCESS) {
    return rc;
  }
  *out = array_new(d, c, NULL);
  return CUDA_SUCCESS;
}

/* A cuArrayCreate descriptor in its 3D form: depth 0, no flags. */
static CUresult array_create_2d(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d) {
  CUDA_ARRAY3D_DESCRIPTOR d3 = {0};
  if (d != NULL) {
    d3.Width = d->Width;
    d3.Height = d->Height;
    d3.Format = d->Format;
    d3.NumChannels = d->NumChannels;
  }
  return array_create(out, d != NULL ? &d3 : NULL);
}

FK_API CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray) {
  FK_BODY(FK_NEED_INIT, array_create_2d(pHandle, pAllocateArray));
}

FK_API CUresult cuArray3DCreate_v2(CUarray *pHandle,
                                   const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray) {
  FK_BODY(FK_NEED_INIT, array_create(pHandle, pAllocateArray));
}

static CUresult mipmap_create(CUmipmappedArray *out, const CUDA_ARRAY3D_DESCRIPTOR *d,
                              unsigned asked) {
  struct CUctx_st *c;
  CUresult rc = create_checks(out, d, &c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  unsigned n = level_count(d, asked);
  size_t size = 0;
  for (unsigned l = 0; l < n; l++) {
    CUDA_ARRAY3D_DESCRIPTOR ld = level_desc(d, l);
    size += layout(&ld);
  }
  if ((rc = memory_take(c->dev, deferred(d) ? 0 : size)) != CUDA_SUCCESS) {
    return rc;
  }
  struct CUmipmappedArray_st *m = calloc(1, sizeof *m);
  if (m == NULL) {
    fk_log("error: out of host memory");
    abort();
  }
  m->desc = *d;
  m->ctx = c;
  m->size = size;
  m->nlevels = n;
  m->live = 1;
  for (unsigned l = 0; l < n; l++) {
    CUDA_ARRAY3D_DESCRIPTOR ld = level_desc(d, l);
    m->levels[l] = array_new(&ld, c, m);
  }
  fk_push((void ***)&mipmaps, &nmipmaps, &capmipmaps, m);
  *out = m;
  return CUDA_SUCCESS;
}

FK_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                       const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                       unsigned int numMipmapLevels) {
  FK_BODY(FK_NEED_INIT, mipmap_create(pHandle, pMipmappedArrayDesc, numMipmapLevels));
}

/* ---- Destruction. ---- */

static CUresult array_destroy(struct CUarray_st *h) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct CUarray_st *a = array_find(h);
  if (a == NULL || a->owner != NULL) {
    return CUDA_ERROR_INVALID_HANDLE; /* a level goes with its mipmapped array */
  }
  array_release(a);
  return CUDA_SUCCESS;
}

FK_API CUresult cuArrayDestroy(CUarray hArray) {
  FK_BODY(FK_NEED_INIT, array_destroy(hArray));
}

static CUresult mipmap_destroy(struct CUmipmappedArray_st *h) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  struct CUmipmappedArray_st *m = mipmap_find(h);
  if (m == NULL) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  mipmap_release(m);
  return CUDA_SUCCESS;
}

FK_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  FK_BODY(FK_NEED_INIT, mipmap_destroy(hMipmappedArray));
}

void fk_array_free_ctx(struct CUctx_st *c) {
  for (size_t i = 0; i < narrays; i++) {
    if (arrays[i]->live && arrays[i]->owner == NULL && arrays[i]->ctx == c) {
      array_release(arrays[i]);
    }
  }
  for (size_t i = 0; i < nmipmaps; i++) {
    if (mipmaps[i]->live && mipmaps[i]->ctx == c) {
      mipmap_release(mipmaps[i]);
    }
  }
}

/* ---- Queries. ---- */

static CUresult get_descriptor(CUDA_ARRAY_DESCRIPTOR *d2, CUDA_ARRAY3D_DESCRIPTOR *d3,
                               struct CUarray_st *h) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (d2 == NULL && d3 == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUarray_st *a = array_find(h);
  if (a == NULL) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (d3 != NULL) {
    *d3 = a->desc;
  } else {
    d2->Width = a->desc.Width;
    d2->Height = a->desc.Height;
    d2->Format = a->desc.Format;
    d2->NumChannels = a->desc.NumChannels;
  }
  return CUDA_SUCCESS;
}

FK_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *pArrayDescriptor, CUarray hArray) {
  FK_BODY(FK_NEED_INIT, get_descriptor(pArrayDescriptor, NULL, hArray));
}

FK_API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *pArrayDescriptor,
                                          CUarray hArray) {
  FK_BODY(FK_NEED_INIT, get_descriptor(NULL, pArrayDescriptor, hArray));
}

static CUresult get_level(CUarray *out, struct CUmipmappedArray_st *h, unsigned level) {
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  if (out == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUmipmappedArray_st *m = mipmap_find(h);
  if (m == NULL) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (level >= m->nlevels) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *out = m->levels[level];
  return CUDA_SUCCESS;
}

FK_API CUresult cuMipmappedArrayGetLevel(CUarray *pLevelArray, CUmipmappedArray hMipmappedArray,
                                         unsigned int level) {
  FK_BODY(FK_NEED_INIT, get_level(pLevelArray, hMipmappedArray, level));
}

/* What cuMemMapArrayAsync would need: the layout's bytes rounded up to the mapping granularity,
 * aligned to it. Only for deferred-mapping arrays, as cuda.h documents. */
static CUresult requirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *r, const CUDA_ARRAY3D_DESCRIPTOR *d,
                             size_t size, CUdevice dev) {
  if (r == NULL || d == NULL || !deferred(d) || dev < 0 || dev >= fk.ndev) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  memset(r, 0, sizeof *r);
  r->size = round_up(size, FK_GRANULARITY);
  r->alignment = FK_GRANULARITY;
  return CUDA_SUCCESS;
}

static CUresult array_requirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *r, struct CUarray_st *h,
                                   CUdevice dev) {
  struct CUarray_st *a = array_find(h);
  /* A level's requirements are its mipmapped array's. */
  return requirements(r, a != NULL && a->owner == NULL ? &a->desc : NULL, a ? a->size : 0, dev);
}

FK_API CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *memoryRequirements,
                                             CUarray array, CUdevice device) {
  FK_BODY(FK_NEED_INIT, array_requirements(memoryRequirements, array, device));
}

static CUresult mipmap_requirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *r,
                                    struct CUmipmappedArray_st *h, CUdevice dev) {
  struct CUmipmappedArray_st *m = mipmap_find(h);
  return requirements(r, m ? &m->desc : NULL, m ? m->size : 0, dev);
}

FK_API CUresult cuMipmappedArrayGetMemoryRequirements(
    CUDA_ARRAY_MEMORY_REQUIREMENTS *memoryRequirements, CUmipmappedArray mipmap, CUdevice device) {
  FK_BODY(FK_NEED_INIT, mipmap_requirements(memoryRequirements, mipmap, device));
}

CUresult fk_array_view(CUarray h, struct fk_array_view *v) {
  struct CUarray_st *a = array_find(h);
  if (a == NULL) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (deferred(&a->desc)) {
    return CUDA_ERROR_INVALID_VALUE; /* its memory would come from cuMemMapArrayAsync */
  }
  v->bytes = a->bytes;
  v->elem = channel_bytes(a->desc.Format) * a->desc.NumChannels;
  v->width = a->desc.Width * v->elem;
  v->pitch = round_up(v->width, FK_PITCH_ALIGN);
  v->height = a->desc.Height ? a->desc.Height : 1;
  v->depth = a->desc.Depth ? a->desc.Depth : 1;
  v->dev = a->ctx->dev;
  return CUDA_SUCCESS;
}

/* ---- Statistics and unload. ---- */

void fk_array_leaked(int dev, unsigned long long *count, size_t *bytes) {
  for (size_t i = 0; i < narrays; i++) {
    if (arrays[i]->live && arrays[i]->ctx->dev == dev && array_held(arrays[i]) > 0) {
      ++*count;
      *bytes += array_held(arrays[i]);
    }
  }
  for (size_t i = 0; i < nmipmaps; i++) {
    if (mipmaps[i]->live && mipmaps[i]->ctx->dev == dev && mipmap_held(mipmaps[i]) > 0) {
      ++*count;
      *bytes += mipmap_held(mipmaps[i]);
    }
  }
}

void fk_array_teardown(void) {
  for (size_t i = 0; i < narrays; i++) {
    free(arrays[i]->bytes);
    free(arrays[i]);
  }
  for (size_t i = 0; i < nmipmaps; i++) {
    free(mipmaps[i]);
  }
  free(arrays);
  free(mipmaps);
  arrays = NULL;
  mipmaps = NULL;
  narrays = caparrays = nmipmaps = capmipmaps = 0;
}
