/* Device code images: which binary of a fat binary the device runs, and what it holds.
 *
 * A fat binary (magic 0xba55ed50) is a list of entries, each an ELF cubin for one SM or PTX for
 * one virtual architecture, optionally compressed (LZ4 or zstd, decompressed through the
 * system's liblz4.so.1 / libzstd.so.1). The device runs the best cubin of its own major
 * version and a minor not above its own (an arch-specific sm_XYa cubin only on exactly XY),
 * else PTX of a virtual architecture not above its own, which the driver would compile;
 * otherwise the module is refused with CUDA_ERROR_NO_BINARY_FOR_GPU, as the real driver does.
 * From the chosen cubin the fake reads the kernels (entry functions: STO_CUDA_ENTRY), their
 * register count, frame and static shared sizes, parameter layout and launch bounds (the
 * .nv.info attributes), and the global and constant variables; from PTX the .entry and
 * .global/.const declarations. No code is ever executed.
 *
 * Pure functions over caller-owned memory; no lock, no driver state.
 */
#include <dlfcn.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fakecuda/fk.h"

#define WRAPPER_MAGIC 0x466243b1u
#define FATBIN_MAGIC 0xba55ed50u
#define ENTRY_PTX 1
#define ENTRY_ELF 2
#define ENTRY_FLAG_LZ4 0x2000ull
#define ENTRY_FLAG_ZSTD 0x8000ull
#define ENTRY_FLAG_ARCH_SPECIFIC 0x100000ull
#define STO_CUDA_ENTRY 0x10

/* .nv.info attributes (EIATTR_*) the fake reads. */
enum {
  EIATTR_MAX_THREADS = 0x05,
  EIATTR_REQNTID = 0x10,
  EIATTR_FRAME_SIZE = 0x11,
  EIATTR_KPARAM_INFO = 0x17,
  EIATTR_CBANK_PARAM_SIZE = 0x19,
  EIATTR_REGCOUNT = 0x2f,
};
enum { EIFMT_NVAL = 1, EIFMT_BVAL = 2, EIFMT_HVAL = 3, EIFMT_SVAL = 4 };

struct fatbin_entry { /* the fixed part of an entry header */
  uint16_t kind, version;
  uint32_t header_size;
  uint64_t payload_size;
  uint32_t compressed_size, reserved0;
  uint16_t minor, major;
  uint32_t sm;
  uint32_t name_offset, name_size;
  uint64_t flags;
  uint64_t reserved1;
  uint64_t uncompressed_size;
};

static void set_err(char *err, size_t errlen, const char *msg) {
  if (err != NULL && errlen > 0) {
    snprintf(err, errlen, "%s", msg);
  }
}

/* ---- Decompression through the system libraries. ---- */

/* Looks name up in the system library lib (kept loaded); writes it to *fn, NULL if absent. */
static void sym_from(const char *lib, const char *name, void *fn) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  void *p = h != NULL ? dlsym(h, name) : NULL;
  memcpy(fn, &p, sizeof p); /* POSIX: a data pointer from dlsym names a function */
}

static int decompress(uint64_t flags, const void *src, size_t n, void *dst, size_t cap) {
  if (flags & ENTRY_FLAG_ZSTD) {
    size_t (*zstd)(void *, size_t, const void *, size_t);
    unsigned (*is_error)(size_t);
    sym_from("libzstd.so.1", "ZSTD_decompress", &zstd);
    sym_from("libzstd.so.1", "ZSTD_isError", &is_error);
    if (zstd == NULL || is_error == NULL) {
      fk_log("error: a zstd-compressed fat binary needs libzstd.so.1 (apt-get install libzstd1)");
      return -1;
    }
    size_t got = zstd(dst, cap, src, n);
    return (is_error(got) || got != cap) ? -1 : 0;
  }
  int (*lz4)(const char *, char *, int, int);
  sym_from("liblz4.so.1", "LZ4_decompress_safe", &lz4);
  if (lz4 == NULL) {
    fk_log("error: an LZ4-compressed fat binary needs liblz4.so.1 (apt-get install liblz4-1)");
    return -1;
  }
  if (n > 0x7fffffff || cap > 0x7fffffff) {
    return -1;
  }
  int got = lz4(src, dst, (int)n, (int)cap);
  return (got < 0 || (size_t)got != cap) ? -1 : 0;
}

/* ---- Choosing the entry. ---- */

/* Rank of an entry for a device of sm dev_sm: 0 = unusable, higher = better. */
static int entry_rank(const struct fatbin_entry *e, int dev_sm) {
  int sm = (int)e->sm;
  int arch_specific = (e->flags & ENTRY_FLAG_ARCH_SPECIFIC) != 0;
  if (e->kind == ENTRY_ELF) {
    if (sm / 10 != dev_sm / 10 || sm > dev_sm || (arch_specific && sm != dev_sm)) {
      return 0;
    }
    return 2000 + sm * 2 + arch_specific;
  }
  if (e->kind == ENTRY_PTX) {
    if (sm > dev_sm || (arch_specific && sm != dev_sm)) {
      return 0;
    }
    return 1000 + sm * 2 + arch_specific;
  }
  return 0;
}

/* Copies (decompressing) the payload of e at p into a new buffer, NUL-terminated. */
static unsigned char *entry_payload(const struct fatbin_entry *e, const unsigned char *p,
                                    size_t *len) {
  int compressed = (e->flags & (ENTRY_FLAG_LZ4 | ENTRY_FLAG_ZSTD)) != 0;
  size_t out_len = compressed ? (size_t)e->uncompressed_size : (size_t)e->payload_size;
  if (out_len == 0 || out_len > ((size_t)1 << 31)) {
    return NULL;
  }
  unsigned char *buf = malloc(out_len + 1);
  if (buf == NULL) {
    return NULL;
  }
  if (compressed) {
    size_t n = e->compressed_size != 0 ? e->compressed_size : (size_t)e->payload_size;
    if (n > e->payload_size || decompress(e->flags, p, n, buf, out_len) != 0) {
      free(buf);
      return NULL;
    }
  } else {
    memcpy(buf, p, out_len);
  }
  buf[out_len] = '\0';
  *len = out_len;
  return buf;
}

static CUresult fatbin_select(const unsigned char *fb, int dev_sm, unsigned char **out, size_t *len,
                              int *is_ptx, int *sm, char *err, size_t errlen) {
  uint32_t magic;
  uint16_t version, header_size;
  uint64_t files_size;
  memcpy(&magic, fb, 4);
  memcpy(&version, fb + 4, 2);
  memcpy(&header_size, fb + 6, 2);
  memcpy(&files_size, fb + 8, 8);
  if (magic != FATBIN_MAGIC || version != 1 || header_size < 16) {
    set_err(err, errlen, "not a fat binary");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  const unsigned char *p = fb + header_size, *end = p + files_size;
  const unsigned char *best = NULL;
  struct fatbin_entry best_e;
  int best_rank = 0, entries = 0;
  while (p + sizeof(struct fatbin_entry) <= end) {
    struct fatbin_entry e;
    memcpy(&e, p, sizeof e);
    if (e.header_size < 64 || e.payload_size > (uint64_t)(end - p) - e.header_size) {
      set_err(err, errlen, "malformed fat binary entry");
      return CUDA_ERROR_INVALID_IMAGE;
    }
    entries++;
    int r = entry_rank(&e, dev_sm);
    if (r > best_rank) {
      best_rank = r;
      best = p;
      best_e = e;
    }
    p += e.header_size + e.payload_size;
  }
  if (entries == 0) {
    set_err(err, errlen, "empty fat binary");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  if (best == NULL) {
    set_err(err, errlen, "no cubin or PTX for this device's architecture");
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  *out = entry_payload(&best_e, best + best_e.header_size, len);
  if (*out == NULL) {
    set_err(err, errlen, "fat binary entry could not be read or decompressed");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  *is_ptx = best_e.kind == ENTRY_PTX;
  *sm = (int)best_e.sm;
  return CUDA_SUCCESS;
}

/* ---- ELF cubins. ---- */

static int elf_size(const unsigned char *p, size_t *len) {
  Elf64_Ehdr h;
  memcpy(&h, p, sizeof h);
  if (h.e_ident[EI_CLASS] != ELFCLASS64 || h.e_shentsize != sizeof(Elf64_Shdr)) {
    return -1;
  }
  *len = (size_t)h.e_shoff + (size_t)h.e_shnum * sizeof(Elf64_Shdr);
  return 0;
}

struct elf {
  const unsigned char *p;
  size_t len;
  const Elf64_Shdr *sh;
  size_t nsh;
  const char *shstr;
  const Elf64_Sym *sym;
  size_t nsym;
  const char *str;
};

static const char *sec_name(const struct elf *e, size_t i) {
  return e->shstr + e->sh[i].sh_name;
}

static int elf_open(struct elf *e, const unsigned char *p, size_t len) {
  Elf64_Ehdr h;
  if (len < sizeof h) {
    return -1;
  }
  memcpy(&h, p, sizeof h);
  if (memcmp(h.e_ident, ELFMAG, SELFMAG) != 0 || h.e_ident[EI_CLASS] != ELFCLASS64 ||
      h.e_shoff > len || h.e_shnum > (len - h.e_shoff) / sizeof(Elf64_Shdr) ||
      h.e_shstrndx >= h.e_shnum || ((uintptr_t)p + h.e_shoff) % 8 != 0) {
    return -1;
  }
  e->p = p;
  e->len = len;
  e->sh = (const Elf64_Shdr *)(p + h.e_shoff);
  e->nsh = h.e_shnum;
  for (size_t i = 0; i < e->nsh; i++) {
    if (e->sh[i].sh_type != SHT_NOBITS &&
        (e->sh[i].sh_offset > len || e->sh[i].sh_size > len - e->sh[i].sh_offset)) {
      return -1;
    }
  }
  e->shstr = (const char *)p + e->sh[h.e_shstrndx].sh_offset;
  e->sym = NULL;
  e->nsym = 0;
  for (size_t i = 0; i < e->nsh; i++) {
    if (e->sh[i].sh_type == SHT_SYMTAB && e->sh[i].sh_link < e->nsh) {
      e->sym = (const Elf64_Sym *)(p + e->sh[i].sh_offset);
      e->nsym = e->sh[i].sh_size / sizeof(Elf64_Sym);
      e->str = (const char *)p + e->sh[e->sh[i].sh_link].sh_offset;
    }
  }
  return 0;
}

static struct fk_ksym *kernel_by_sym(struct fk_image *img, size_t symidx) {
  for (size_t i = 0; i < img->nkernels; i++) {
    if (img->kernels[i].symidx == symidx) {
      return &img->kernels[i];
    }
  }
  return NULL;
}

/* Walks one .nv.info section; kernel is NULL for the module-wide one. */
static void read_nv_info(struct fk_image *img, const unsigned char *p, size_t n,
                         struct fk_ksym *kernel) {
  size_t off = 0;
  while (off + 2 <= n) {
    unsigned fmt = p[off], attr = p[off + 1];
    size_t vlen = 0;
    const unsigned char *v = p + off + 2;
    if (fmt == EIFMT_NVAL) {
      off += 2;
    } else if (fmt == EIFMT_BVAL || fmt == EIFMT_HVAL) {
      vlen = 2;
      off += 4;
    } else if (fmt == EIFMT_SVAL && off + 4 <= n) {
      uint16_t sz;
      memcpy(&sz, p + off + 2, 2);
      v = p + off + 4;
      vlen = sz;
      off += 4 + (size_t)sz;
    } else {
      return;
    }
    if (off > n) {
      return;
    }
    uint32_t w[3] = {0, 0, 0};
    memcpy(w, v, vlen < sizeof w ? vlen : sizeof w);
    if (kernel == NULL) {
      struct fk_ksym *k = (attr == EIATTR_REGCOUNT || attr == EIATTR_FRAME_SIZE) && vlen >= 8
                              ? kernel_by_sym(img, w[0])
                              : NULL;
      if (k != NULL && attr == EIATTR_REGCOUNT) {
        k->regs = (int)w[1];
      } else if (k != NULL) {
        k->local_bytes = (int)w[1];
      }
      continue;
    }
    if (attr == EIATTR_CBANK_PARAM_SIZE && fmt == EIFMT_HVAL) {
      uint16_t h;
      memcpy(&h, v, 2);
      kernel->param_bytes = h;
    } else if ((attr == EIATTR_MAX_THREADS || attr == EIATTR_REQNTID) && vlen >= 12) {
      kernel->max_threads = (int)((w[0] ? w[0] : 1) * (w[1] ? w[1] : 1) * (w[2] ? w[2] : 1));
    } else if (attr == EIATTR_KPARAM_INFO && vlen >= 12) {
      /* index (u32), ordinal (u16), offset (u16), then size in bits 18..31 of the last word */
      unsigned ordinal = w[1] & 0xffff, offset = w[1] >> 16, size = (w[2] >> 18) & 0x3fff;
      if (ordinal < FK_MAX_PARAMS) {
        kernel->params[ordinal].offset = offset;
        kernel->params[ordinal].size = size;
        if ((int)ordinal + 1 > kernel->nparams) {
          kernel->nparams = (int)ordinal + 1;
        }
      }
    }
  }
}

static int add_global(struct fk_image *img, const char *name, size_t size, const void *init,
                      int constant) {
  struct fk_gsym *n = realloc(img->globals, (img->nglobals + 1) * sizeof *n);
  if (n == NULL) {
    return -1;
  }
  img->globals = n;
  struct fk_gsym *g = &n[img->nglobals++];
  memset(g, 0, sizeof *g);
  g->name = strdup(name);
  if (g->name == NULL) {
    img->nglobals--;
    return -1;
  }
  g->size = size;
  g->init = init;
  g->constant = constant;
  return 0;
}

static struct fk_ksym *add_kernel(struct fk_image *img, const char *name) {
  struct fk_ksym *n = realloc(img->kernels, (img->nkernels + 1) * sizeof *n);
  if (n == NULL) {
    return NULL;
  }
  img->kernels = n;
  struct fk_ksym *k = &n[img->nkernels++];
  memset(k, 0, sizeof *k);
  k->name = strdup(name);
  if (k->name == NULL) {
    img->nkernels--;
    return NULL;
  }
  k->max_threads = 1024;
  return k;
}

static CUresult elf_parse(struct fk_image *img, char *err, size_t errlen) {
  struct elf e;
  if (elf_open(&e, img->code, img->len) != 0 || e.sym == NULL) {
    set_err(err, errlen, "malformed cubin");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  /* A cubin laid out around the device's reserved shared memory names its symbols
   * (.nv.reservedSmem.offset0, .nv.reservedSmem.cap): each kernel's shared section then starts
   * with that reserved area, which is the driver's and not the kernel's static size. */
  int reserved_layout = 0;
  for (size_t i = 0; i < e.nsym; i++) {
    const Elf64_Sym *s = &e.sym[i];
    const char *name = e.str + s->st_name;
    if (strncmp(name, ".nv.reservedSmem.", 17) == 0) {
      reserved_layout = 1;
    }
    if (s->st_shndx == SHN_UNDEF || s->st_shndx >= e.nsh) {
      continue;
    }
    const char *sec = sec_name(&e, s->st_shndx);
    if (ELF64_ST_TYPE(s->st_info) == STT_FUNC && (s->st_other & STO_CUDA_ENTRY)) {
      struct fk_ksym *k = add_kernel(img, name);
      if (k == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      k->symidx = i;
    } else if (ELF64_ST_TYPE(s->st_info) == STT_OBJECT && s->st_size > 0 &&
               (strncmp(sec, ".nv.global", 10) == 0 || (strncmp(sec, ".nv.constant", 12) == 0 &&
                                                        strncmp(sec, ".nv.constant0", 13) != 0))) {
      const Elf64_Shdr *sh = &e.sh[s->st_shndx];
      const void *init = NULL;
      if (sh->sh_type != SHT_NOBITS && s->st_value + s->st_size <= sh->sh_size) {
        init = img->code + sh->sh_offset + s->st_value;
      }
      if (add_global(img, name, s->st_size, init, sec[4] == 'c') != 0) {
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
    }
  }
  /* .nv.info first: a kernel's shared-memory size depends on its attributes. */
  for (size_t i = 0; i < e.nsh; i++) {
    const char *sec = sec_name(&e, i);
    const unsigned char *p = img->code + e.sh[i].sh_offset;
    if (strcmp(sec, ".nv.info") == 0) {
      read_nv_info(img, p, e.sh[i].sh_size, NULL);
    } else if (strncmp(sec, ".nv.info.", 9) == 0) {
      struct fk_ksym *k = fk_image_kernel(img, sec + 9);
      if (k != NULL) {
        read_nv_info(img, p, e.sh[i].sh_size, k);
      }
    }
  }
  for (size_t i = 0; i < e.nsh; i++) {
    const char *sec = sec_name(&e, i);
    if (strncmp(sec, ".nv.shared.", 11) == 0) {
      struct fk_ksym *k = fk_image_kernel(img, sec + 11);
      if (k != NULL) {
        /* The reserved shared memory (RESERVED_SHARED_MEMORY_PER_BLOCK) is the driver's, not
         * part of the function's static size. */
        int reserved = reserved_layout ? fk_dev_attr(111, 0) : 0;
        int size = (int)e.sh[i].sh_size;
        k->static_shared = size >= reserved ? size - reserved : size;
      }
    } else if (strncmp(sec, ".nv.constant0.", 14) == 0) {
      struct fk_ksym *k = fk_image_kernel(img, sec + 14);
      if (k != NULL) {
        k->const_bytes = (int)e.sh[i].sh_size;
      }
    }
  }
  return CUDA_SUCCESS;
}

/* ---- PTX text. ---- */

/* Reads an identifier at p into name; returns its end. */
static const char *ptx_ident(const char *p, char *name, size_t cap) {
  size_t n = 0;
  while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
         *p == '_' || *p == '$' || *p == '.') {
    if (n + 1 < cap) {
      name[n++] = *p;
    }
    p++;
  }
  name[n] = '\0';
  return p;
}

static size_t ptx_type_size(const char *t) {
  static const struct {
    const char *name;
    size_t size;
  } types[] = {{".b8", 1},  {".u8", 1},  {".s8", 1},  {".b16", 2}, {".u16", 2},
               {".s16", 2}, {".f16", 2}, {".b32", 4}, {".u32", 4}, {".s32", 4},
               {".f32", 4}, {".b64", 8}, {".u64", 8}, {".s64", 8}, {".f64", 8}};
  for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
    if (strcmp(t, types[i].name) == 0) {
      return types[i].size;
    }
  }
  return 0;
}

static CUresult ptx_parse(struct fk_image *img, char *err, size_t errlen) {
  const char *p = (const char *)img->code;
  if (strstr(p, ".version") == NULL || strstr(p, ".target") == NULL) {
    set_err(err, errlen, "PTX without .version/.target");
    return CUDA_ERROR_INVALID_PTX;
  }
  char word[64], name[4096];
  while (*p != '\0') {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') {
      p++;
    }
    if (*p == '\0') {
      break;
    }
    if (p[0] == '/' && p[1] == '/') {
      while (*p != '\0' && *p != '\n') {
        p++;
      }
      continue;
    }
    const char *next = ptx_ident(p, word, sizeof word);
    if (next == p) {
      p++;
      continue;
    }
    p = next;
    if (strcmp(word, ".entry") == 0) {
      while (*p == ' ' || *p == '\t') {
        p++;
      }
      p = ptx_ident(p, name, sizeof name);
      struct fk_ksym *k = add_kernel(img, name);
      if (k == NULL) {
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      /* .param .TYPE name: parameters in order, each aligned to its size */
      const char *close = strchr(p, ')');
      unsigned off = 0;
      while (close != NULL && k->nparams < FK_MAX_PARAMS) {
        const char *q = strstr(p, ".param");
        if (q == NULL || q > close) {
          break;
        }
        q += 6;
        while (*q == ' ') {
          q++;
        }
        char type[16];
        ptx_ident(q, type, sizeof type);
        size_t sz = ptx_type_size(type);
        sz = sz ? sz : 8;
        off = (unsigned)((off + sz - 1) / sz * sz);
        k->params[k->nparams].offset = off;
        k->params[k->nparams].size = (unsigned)sz;
        k->nparams++;
        off += (unsigned)sz;
        p = q;
      }
      k->param_bytes = (int)off;
    } else if (strcmp(word, ".global") == 0 || strcmp(word, ".const") == 0) {
      int constant = word[1] == 'c';
      /* [.align N] .TYPE name[N]...; */
      size_t elem = 0, count = 1;
      for (;;) {
        while (*p == ' ' || *p == '\t') {
          p++;
        }
        const char *q = ptx_ident(p, name, sizeof name);
        if (q == p) {
          break;
        }
        p = q;
        if (strcmp(name, ".align") == 0) {
          while (*p == ' ') {
            p++;
          }
          while (*p >= '0' && *p <= '9') {
            p++;
          }
        } else if (ptx_type_size(name) != 0) {
          elem = ptx_type_size(name);
        } else if (name[0] != '.') {
          break;
        }
      }
      if (elem != 0 && name[0] != '\0' && name[0] != '.') {
        while (*p == '[') {
          count *= strtoul(p + 1, (char **)&p, 10);
          p = strchr(p, ']') ? strchr(p, ']') + 1 : p;
        }
        if (add_global(img, name, elem * (count ? count : 1), NULL, constant) != 0) {
          return CUDA_ERROR_OUT_OF_MEMORY;
        }
      }
    }
  }
  return CUDA_SUCCESS;
}

/* ---- The interface. ---- */

struct fk_ksym *fk_image_kernel(struct fk_image *img, const char *name) {
  for (size_t i = 0; i < img->nkernels; i++) {
    if (strcmp(img->kernels[i].name, name) == 0) {
      return &img->kernels[i];
    }
  }
  return NULL;
}

struct fk_gsym *fk_image_global(struct fk_image *img, const char *name) {
  for (size_t i = 0; i < img->nglobals; i++) {
    if (strcmp(img->globals[i].name, name) == 0) {
      return &img->globals[i];
    }
  }
  return NULL;
}

void fk_image_free(struct fk_image *img) {
  for (size_t i = 0; i < img->nkernels; i++) {
    free(img->kernels[i].name);
  }
  for (size_t i = 0; i < img->nglobals; i++) {
    free(img->globals[i].name);
  }
  free(img->code);
  free(img->kernels);
  free(img->globals);
  memset(img, 0, sizeof *img);
}

CUresult fk_image_load(const void *image, int kind, int dev_sm, struct fk_image *img, char *err,
                       size_t errlen) {
  memset(img, 0, sizeof *img);
  const unsigned char *p = image;
  if (p == NULL) {
    set_err(err, errlen, "no image");
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint32_t magic;
  memcpy(&magic, p, 4);
  if (kind == FK_IMAGE_WRAPPER || (kind == FK_IMAGE_ANY && magic == WRAPPER_MAGIC)) {
    const void *data;
    if (magic != WRAPPER_MAGIC) {
      set_err(err, errlen, "not a fat binary wrapper");
      return CUDA_ERROR_INVALID_IMAGE;
    }
    memcpy(&data, p + 8, sizeof data);
    if (data == NULL) {
      set_err(err, errlen, "fat binary wrapper without data");
      return CUDA_ERROR_INVALID_IMAGE;
    }
    p = data;
    memcpy(&magic, p, 4);
  }
  CUresult rc;
  if (magic == FATBIN_MAGIC) {
    rc = fatbin_select(p, dev_sm, &img->code, &img->len, &img->is_ptx, &img->sm, err, errlen);
  } else if (kind != FK_IMAGE_ANY) {
    set_err(err, errlen, "not a fat binary");
    rc = CUDA_ERROR_INVALID_IMAGE;
  } else if (memcmp(p, ELFMAG, SELFMAG) == 0) {
    size_t len;
    if (elf_size(p, &len) != 0) {
      set_err(err, errlen, "malformed cubin");
      return CUDA_ERROR_INVALID_IMAGE;
    }
    Elf64_Ehdr h;
    memcpy(&h, p, sizeof h);
    /* The cubin's SM (EF_CUDA_SM): bits 8..15 of e_flags in the CUDA ELF ABI version 8 that
     * CUDA 12.8+ writes, the low byte before. */
    int sm =
        h.e_ident[EI_ABIVERSION] >= 8 ? (int)((h.e_flags >> 8) & 0xff) : (int)(h.e_flags & 0xff);
    if (sm == 0 || sm / 10 != dev_sm / 10 || sm > dev_sm) {
      set_err(err, errlen, "cubin for another architecture");
      return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    img->code = malloc(len + 1);
    if (img->code == NULL) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(img->code, p, len);
    img->code[len] = '\0';
    img->len = len;
    img->sm = sm;
    rc = CUDA_SUCCESS;
  } else {
    size_t len = strlen((const char *)p);
    img->code = malloc(len + 1);
    if (img->code == NULL) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(img->code, p, len + 1);
    img->len = len;
    img->is_ptx = 1;
    img->sm = dev_sm;
    rc = CUDA_SUCCESS;
  }
  if (rc == CUDA_SUCCESS) {
    rc = img->is_ptx ? ptx_parse(img, err, errlen) : elf_parse(img, err, errlen);
  }
  if (rc != CUDA_SUCCESS) {
    fk_image_free(img);
  }
  return rc;
}
