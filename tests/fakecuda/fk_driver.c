/* The device memory the driver keeps for itself, so that a process costs the device what it
 * costs a real GPU (FAKECUDA_DRIVER_MEMORY, on by default; off: none of it). Per live context: the
 * context itself (FAKECUDA_CONTEXT_MEMORY), local memory for every thread the device can hold at
 * once (CU_LIMIT_STACK_SIZE x SMs x threads per SM, grown by cuCtxSetLimit and by launches of
 * kernels that need a deeper stack), the printf FIFO and the device malloc heap (their limits);
 * per module loaded into it, its code (FAKECUDA_MODULE_MEMORY percent of the image's size). The
 * page rounding of allocations is fk_mem.c's. tests/fakecuda/README.md gives the sources.
 *
 * Everything here is counted as the driver's (fk_mem_take with FK_MEM_DRIVER): it shows in
 * cuMemGetInfo, the fake NVML's per-process figure, the machine ledger and the device's peak.
 * Locking: fk.lock held (every caller is inside an entry point).
 */
#include "tests/fakecuda/fk.h"

#define STACK_ALIGN ((size_t)16) /* cuCtxSetLimit rounds the stack size to this */

/* Threads the device can hold at once: its SMs x the threads each SM holds. */
static size_t resident_threads(int dev) {
  return (size_t)fk_dev_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) *
         (size_t)fk_dev_attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev);
}

/* The local memory a stack of `stack` bytes per thread needs on dev; SIZE_MAX when it cannot
 * be counted (never fits). */
static size_t local_for(int dev, size_t stack) {
  size_t threads = resident_threads(dev);
  return threads != 0 && stack > SIZE_MAX / threads ? SIZE_MAX : stack * threads;
}

/* Resizes one reservation of c from *have to want bytes: takes the growth (failing with
 * CUDA_ERROR_OUT_OF_MEMORY, nothing changed) or gives the rest back. */
static CUresult resize(struct CUctx_st *c, size_t *have, size_t want) {
  if (want > *have) {
    CUresult rc = fk_mem_take(c->dev, want - *have, FK_MEM_DRIVER);
    if (rc != CUDA_SUCCESS) {
      return rc;
    }
  } else if (want < *have) {
    fk_mem_give(c->dev, *have - want, FK_MEM_DRIVER);
  }
  *have = want;
  return CUDA_SUCCESS;
}

CUresult fk_driver_ctx_open(struct CUctx_st *c) {
  if (!fk.cfg.driver_memory) {
    return CUDA_SUCCESS;
  }
  struct fk_ctx_memory m = {.base = fk.cfg.context_memory,
                            .local = local_for(c->dev, c->limits[CU_LIMIT_STACK_SIZE]),
                            .fifo = c->limits[CU_LIMIT_PRINTF_FIFO_SIZE],
                            .heap = c->limits[CU_LIMIT_MALLOC_HEAP_SIZE]};
  size_t total = m.base + m.local;
  if (total < m.base || total + m.fifo < total || total + m.fifo + m.heap < total + m.fifo) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  total += m.fifo + m.heap;
  CUresult rc = fk_mem_take(c->dev, total, FK_MEM_DRIVER);
  if (rc == CUDA_SUCCESS) {
    c->mem = m;
  }
  return rc;
}

void fk_driver_ctx_close(struct CUctx_st *c) {
  struct fk_ctx_memory *m = &c->mem;
  fk_mem_give(c->dev, m->base + m->local + m->fifo + m->heap, FK_MEM_DRIVER);
  m->base = m->local = m->fifo = m->heap = 0;
}

CUresult fk_driver_set_limit(struct CUctx_st *c, int limit, size_t value) {
  if (!fk.cfg.driver_memory) {
    return CUDA_SUCCESS;
  }
  switch (limit) {
  case CU_LIMIT_STACK_SIZE:
    return resize(c, &c->mem.local, local_for(c->dev, value));
  case CU_LIMIT_PRINTF_FIFO_SIZE:
    return resize(c, &c->mem.fifo, value);
  case CU_LIMIT_MALLOC_HEAP_SIZE:
    return resize(c, &c->mem.heap, value);
  default:
    return CUDA_SUCCESS;
  }
}

CUresult fk_driver_launch(struct CUctx_st *c, size_t local_bytes) {
  if (!fk.cfg.driver_memory || local_bytes <= c->limits[CU_LIMIT_STACK_SIZE]) {
    return CUDA_SUCCESS;
  }
  size_t stack = (local_bytes + STACK_ALIGN - 1) / STACK_ALIGN * STACK_ALIGN;
  CUresult rc = resize(c, &c->mem.local, local_for(c->dev, stack));
  if (rc == CUDA_SUCCESS) {
    c->limits[CU_LIMIT_STACK_SIZE] = stack; /* "isn't reset back to the original value" */
  }
  return rc;
}

CUresult fk_driver_image(struct CUctx_st *c, size_t code_bytes, size_t *taken) {
  *taken = 0;
  if (!fk.cfg.driver_memory) {
    return CUDA_SUCCESS;
  }
  /* The percentage first divides, so a large image cannot overflow the product. */
  size_t bytes = code_bytes / 100 * fk.cfg.module_pct + code_bytes % 100 * fk.cfg.module_pct / 100;
  bytes = (bytes + FK_ALLOC_ALIGN - 1) / FK_ALLOC_ALIGN * FK_ALLOC_ALIGN;
  CUresult rc = resize(c, &c->mem.images, c->mem.images + bytes);
  if (rc == CUDA_SUCCESS) {
    *taken = bytes;
  }
  return rc;
}

void fk_driver_image_release(struct CUctx_st *c, size_t taken) {
  (void)resize(c, &c->mem.images, c->mem.images - taken); /* a shrink never fails */
}

void fk_driver_usage(int dev, struct fk_ctx_memory *sum) {
  *sum = (struct fk_ctx_memory){0};
  for (size_t i = 0; i < fk.nctxs; i++) {
    const struct CUctx_st *c = fk.ctxs[i];
    if (c->dev == dev) {
      sum->base += c->mem.base;
      sum->local += c->mem.local;
      sum->fifo += c->mem.fifo;
      sum->heap += c->mem.heap;
      sum->images += c->mem.images;
    }
  }
}
