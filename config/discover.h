/* The caps the cluster already set for this process (GPUCAP_DISCOVER): every source that is
 * set, read once into a plain cfg_found_t, then each device's cap and guarantee from it.
 *
 * Sources, each a line per device in bytes (docs/configuration.md, "Caps the cluster set"):
 *   CUDA_MPS_PINNED_DEVICE_MEM_LIMIT   per CUDA ordinal (0=1G,1=512M)     limit, the MPS server's
 *   SLURM_SHARD_MEM_PER_GPU            per PCI bus id (0000:3b:00.0=2048M) limit, Slurm's dmem.max
 *   NVIDIA_GPU_MEMORY_LIMIT            every device, MiB                   limit, NVML's (dmem)
 *   NVIDIA_GPU_MEMORY_REQUEST          every device, MiB                   guarantee
 *   CUDA_DEVICE_MEMORY_LIMIT, _<i>     every device, or ordinal i          limit, HAMi-core's
 *   GPU_MEMORY_LIMIT                   every device, bytes                 limit, KAI's
 *   dmem.max, dmem.min                 per PCI bus id, from the process's cgroup and each ancestor
 *                                      ("drm/PCI/vram... BYTES|max")       limit / guarantee
 * Every limit is enforced by something below gpucap that counts what gpucap does not (the
 * context, module code): gpucap's cap stays cfg_discover_margin() under it, so that a refusal
 * is gpucap's. A guarantee is a soft line: above it, idle pool memory goes back first.
 *
 * Fail loudly, never silently: a source that cannot be parsed is kept as invalid (applying
 * nothing) and named, with its accepted form, in the message the caller prints. Nothing here
 * allocates, prints or keeps state; a loaded cfg_found_t is read-only and may be shared.
 */
#ifndef GPUCAP_CONFIG_DISCOVER_H
#define GPUCAP_CONFIG_DISCOVER_H

#include "config/cfg.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CFG_FOUND_SOURCES 112 /* the variables, HAMi's 64 per-device ones, cgroup levels */
#define CFG_FOUND_LINES 512
#define CFG_SOURCE_NAME_MAX 40
#define CFG_SOURCE_WHERE_MAX 192
#define CFG_SOURCE_VALUE_MAX 128

/* cfg_line_t.device for a line of every device, or one keyed by a PCI bus id. */
#define CFG_EVERY_DEVICE (-1)
#define CFG_BY_PCI (-2)

/* A PCI address: domain:bus:device.function. */
typedef struct cfg_pci {
  uint32_t domain, bus, device, function;
} cfg_pci_t;

typedef enum cfg_line_kind {
  CFG_LINE_LIMIT,     /* enforced below gpucap: the cap is the line less the margin */
  CFG_LINE_GUARANTEE, /* a soft line: above it gpucap gives idle pool memory back first */
} cfg_line_kind_t;

/* One source's line for one device (or every device). */
typedef struct cfg_line {
  int device;    /* a CUDA ordinal, CFG_EVERY_DEVICE or CFG_BY_PCI */
  cfg_pci_t pci; /* the device, with CFG_BY_PCI */
  uint64_t bytes;
} cfg_line_t;

/* One source that is set: a variable, or a cgroup file. */
typedef struct cfg_found_src {
  char name[CFG_SOURCE_NAME_MAX];   /* "SLURM_SHARD_MEM_PER_GPU", "dmem.max", ... */
  char where[CFG_SOURCE_WHERE_MAX]; /* a cgroup file's path ("..." in front when cut), or "" */
  char value[CFG_SOURCE_VALUE_MAX]; /* its text, cut ("..."), a file's lines joined by "; " */
  cfg_line_kind_t kind;
  const char *enforcer; /* who holds the line: "the MPS server", ... (static) */
  bool valid;           /* false: it could not be parsed, and applies nothing */
  int first, count;     /* its lines: cfg_found_t.line[first .. first + count) */
} cfg_found_src_t;

typedef struct cfg_found {
  int n;           /* sources */
  int nlines;      /* lines, of every source */
  bool overflowed; /* a source or line did not fit in the tables (the message says which) */
  cfg_found_src_t src[CFG_FOUND_SOURCES];
  cfg_line_t line[CFG_FOUND_LINES];
} cfg_found_t;

/* What the sources say of one device. */
typedef struct cfg_devcap {
  uint64_t cap;  /* the smallest limit less its margin; UINT64_MAX when none applies */
  int limit_src; /* the source of that limit (index into src), or -1 */
  uint64_t line; /* that source's line, before the margin */
  uint64_t soft; /* the smallest guarantee; UINT64_MAX when none applies or one is 0 */
  int soft_src;  /* its source, or -1 (also when the smallest guarantee is 0) */
} cfg_devcap_t;

/* Empties *f. O(1). */
void cfg_found_clear(cfg_found_t *f);

/* Reads every source that is set into *f (emptied first): the variables through `get` (NULL
 * for the process environment; cfg_load's kind of callback), then, unless cfg->cgroup_root
 * names no cgroup v2 of this process, the dmem.max and dmem.min files of the process's cgroup
 * and of each ancestor that has them (config/cgroup.h). With cfg->discover false (or cfg NULL
 * or invalid) *f stays empty.
 * msg: receives "" or one line per source that could not be parsed (or did not fit), each
 * ending in a newline: "NAME='value': what is wrong; accepted: the accepted form" (for a file
 * "dmem.max (PATH)='...'"), truncated to msglen, NUL-terminated when msglen > 0.
 * Returns 0, or -EINVAL iff some source could not be parsed or did not fit (those are kept,
 * invalid). O(total length of the values and files); errno unchanged; must not race changes to
 * the environment. */
int cfg_discover(cfg_found_t *f, const cfg_t *cfg, cfg_getenv_fn *get, void *ctx, char *msg,
                 size_t msglen);

/* Adds one source to *f from its text: `name` is a variable of the table above (including
 * CUDA_DEVICE_MEMORY_LIMIT_0 .. _63) or "dmem.max" / "dmem.min" (then `where` is the file's
 * path, else NULL). A message line as cfg_discover's is appended to msg (which holds
 * NUL-terminated text, "" at first) for a source that cannot be parsed.
 * Returns 0; -EINVAL iff text cannot be parsed (the source is kept, invalid); -ENOSPC iff the
 * tables are full (then nothing is kept); -ENOENT iff name is not a source. O(strlen(text)). */
int cfg_discover_add(cfg_found_t *f, const char *name, const char *where, const char *text,
                     char *msg, size_t msglen);

/* Adds the dmem.max and dmem.min files of the cgroup directory `dir` and of each ancestor that
 * has them, up to and including dir[0..rootlen) (cfg_cgroup_dir's answer), nearest first, as
 * sources named by their paths. A file that cannot be read becomes an invalid source. Returns 0,
 * or -EINVAL iff some file was invalid or did not fit (msg as cfg_discover's). */
int cfg_discover_cgroup(cfg_found_t *f, const char *dir, size_t rootlen, char *msg, size_t msglen);

/* What the valid sources of f say of the device of CUDA ordinal `ordinal` at PCI address `pci`
 * (NULL when unknown: then lines keyed by PCI bus id do not apply). `margin`: the cap stays
 * cfg_discover_margin() under each limit, for a cap on allocations alone (the line's enforcer
 * counts the driver's own memory too); without it the cap is the line itself, for a cap that
 * covers the process (GPUCAP_CAP_COVERS=process counts that memory, measured). Ties go to the
 * earlier source. O(lines); never fails. */
void cfg_discover_device(const cfg_found_t *f, int ordinal, const cfg_pci_t *pci, bool margin,
                         cfg_devcap_t *out);

/* The margin kept under a limit of `line` bytes: 512 MiB (what a CUDA context and its module
 * code take on a current GPU, which the enforcer counts and gpucap does not), or a quarter of
 * the line when that is less. O(1). */
uint64_t cfg_discover_margin(uint64_t line);

/* Parses a PCI address into *out: [DOMAIN:]BUS:DEVICE.FUNCTION in hexadecimal, any case, the
 * domain of up to 8 digits (0000:3b:00.0, 00000000:3B:00.0, 3b:00.0), bus and device of 1 or 2,
 * function 0..7; s[0..len) with nothing around it. Fails iff anything else (-EINVAL). O(len). */
int cfg_parse_pci(const char *s, size_t len, cfg_pci_t *out);

/* Writes p as sysfs writes it, "0000:3b:00.0", into buf (snprintf's contract). */
size_t cfg_format_pci(const cfg_pci_t *p, char *buf, size_t len);

#endif
