/* gpucap's settings: the only code that reads the environment. cfg_load reads every option of
 * config/options.def once into a plain cfg_t; the rest of gpucap reads that struct.
 *
 * Fail closed: a bad value never means "no cap". cfg_load then marks the cfg_t invalid and
 * cfg_device_cap answers 0 for every device; a zero-filled cfg_t is invalid too. Nothing here
 * prints, exits or allocates: messages go to caller buffers. A loaded cfg_t is read-only and
 * may be shared by threads; cfg_load itself must not race setenv/putenv (glibc's rule).
 */
#ifndef GPUCAP_CONFIG_CFG_H
#define GPUCAP_CONFIG_CFG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/parse.h"

/* A buffer of this many bytes holds any message cfg_load writes, untruncated. */
#define CFG_MSG_MAX 1024

/* cfg_quote: input bytes quoted at most, and the buffer that always holds the result. */
#define CFG_QUOTE_IN 80
#define CFG_QUOTE_MAX (4 * CFG_QUOTE_IN + 4)

/* How an option's value is written and parsed. */
typedef enum cfg_type {
  CFG_TYPE_LIMIT,    /* cfg_devvals_t of bytes: a size or a per-device list (cfg_parse_devvals) */
  CFG_TYPE_FRACTION, /* cfg_devvals_t of fractions: one or a per-device list */
  CFG_TYPE_BOOL,     /* bool, shown as true/false (cfg_parse_bool) */
  CFG_TYPE_SWITCH,   /* bool, shown as on/off (cfg_parse_bool) */
  CFG_TYPE_POOL,     /* int cfg_pool_t: on/off (cfg_parse_bool), vmm or regions */
  CFG_TYPE_COVERS,   /* int cfg_covers_t: process or allocations */
  CFG_TYPE_LEVEL,    /* int within the option's [min, max] (cfg_parse_uint) */
  CFG_TYPE_ARENAS,   /* int: CFG_ARENAS_AUTO (auto), or a count within the option's [min, max] */
  CFG_TYPE_REPORT,   /* cfg_dest_t: stderr, off or a file path (cfg_parse_dest) */
  CFG_TYPE_PATH,     /* char[PATH_MAX]: a file path (cfg_parse_path), "" when unset or off */
  CFG_TYPE_NAME,     /* char[CFG_NAME_MAX]: a budget name (cfg_parse_name), "" when unset */
} cfg_type_t;

/* One constant per row of options.def, in its order: CFG_OPT_MEMORY_LIMIT, ... */
typedef enum cfg_opt {
#define CFG_OPT(id, ...) CFG_OPT_##id,
#include "config/options.def"
  CFG_OPT_COUNT
} cfg_opt_t;

/* GPUCAP_POOL: whether the pool serves allocations, and what backs it. */
typedef enum cfg_pool {
  CFG_POOL_OFF,     /* off: every allocation goes to the driver, capped */
  CFG_POOL_ON,      /* on: virtual memory management where the device has it, else regions */
  CFG_POOL_VMM,     /* vmm: the same, said explicitly */
  CFG_POOL_REGIONS, /* regions: driver allocations (cuMemAlloc) as regions, always */
} cfg_pool_t;

/* GPUCAP_CAP_COVERS: what the cap is on. */
typedef enum cfg_covers {
  CFG_COVERS_PROCESS,     /* everything the device holds for the process, driver memory included */
  CFG_COVERS_ALLOCATIONS, /* the program's allocations alone */
} cfg_covers_t;

/* GPUCAP_ARENAS=auto: arenas opened as threads contend (docs/design.md, "Arenas"). */
enum { CFG_ARENAS_AUTO = 0 };

/* Where an option's value came from. */
typedef enum cfg_source {
  CFG_SRC_DEFAULT, /* its variable was unset, empty or only white space */
  CFG_SRC_ENV,     /* its own GPUCAP_ variable */
  CFG_SRC_ALIAS,   /* its fallback variable (TF_FORCE_GPU_ALLOW_GROWTH) */
  CFG_SRC_INVALID, /* its own variable held a bad value; the default is kept */
} cfg_source_t;

/* The settings of one process. Fields follow options.def; paths are copied in, so a cfg_t
 * owns all it refers to and may be copied by value. */
typedef struct cfg {
  bool valid;                          /* false: a value was bad (or nothing loaded); no memory */
  cfg_devvals_t limit;                 /* GPUCAP_MEMORY_LIMIT, bytes */
  cfg_devvals_t fraction;              /* GPUCAP_MEMORY_FRACTION, units of 1/CFG_FRACTION_ONE */
  char share[CFG_NAME_MAX];            /* GPUCAP_SHARE, "" = no shared budget */
  cfg_devvals_t share_min;             /* GPUCAP_SHARE_MIN, bytes */
  cfg_devvals_t share_max;             /* GPUCAP_SHARE_MAX, bytes */
  cfg_devvals_t oversubscribe;         /* GPUCAP_OVERSUBSCRIBE, bytes of host memory per device */
  bool spill;                          /* GPUCAP_SPILL: device allocations spill too */
  bool discover;                       /* GPUCAP_DISCOVER: read the cluster's caps (discover.h) */
  int cap_covers;                      /* GPUCAP_CAP_COVERS: a cfg_covers_t */
  bool allow_growth;                   /* GPUCAP_ALLOW_GROWTH, else TF_FORCE_GPU_ALLOW_GROWTH */
  int pool;                            /* GPUCAP_POOL: a cfg_pool_t */
  int arenas;                          /* GPUCAP_ARENAS: CFG_ARENAS_AUTO, or pools per context */
  cfg_dest_t report;                   /* GPUCAP_REPORT */
  cfg_dest_t oom_dump;                 /* GPUCAP_OOM_DUMP */
  char report_json[PATH_MAX];          /* GPUCAP_REPORT_JSON, "" = none */
  char trace[PATH_MAX];                /* GPUCAP_TRACE, "" = none */
  int verbose;                         /* GPUCAP_VERBOSE, 0..3 */
  char cgroup_root[PATH_MAX];          /* GPUCAP_CGROUP_ROOT, "" = from /proc/self/mountinfo */
  int release_after;                   /* GPUCAP_RELEASE_AFTER, milliseconds; 0 = never */
  unsigned char source[CFG_OPT_COUNT]; /* cfg_source_t of each option */
} cfg_t;

/* Static description of one option, straight from its options.def row. */
typedef struct cfg_optinfo {
  const char *name; /* "GPUCAP_MEMORY_LIMIT" */
  cfg_type_t type;
  const char *type_name; /* "size or per-device list", ... */
  const char *def;       /* default text, "" when the default is unset */
  uint64_t min, max;     /* range of CFG_TYPE_LEVEL and CFG_TYPE_ARENAS options; 0 otherwise */
  bool secure;           /* read with secure_getenv: the value names a file */
  const char *alias;     /* fallback variable, or NULL */
  const char *doc;       /* one sentence */
  const char *accepted;  /* the accepted forms, as error messages quote them */
} cfg_optinfo_t;

/* Looks up one environment variable: returns its value, or NULL when unset. `secure` asks for
 * secure_getenv semantics (NULL in set-user-ID and similar programs). `ctx` is cfg_load's. */
typedef const char *cfg_getenv_fn(void *ctx, const char *name, bool secure);

/* Fills *cfg with every option's default (parsed from options.def by the same parsers that
 * read the environment) and sets cfg->valid; every source becomes CFG_SRC_DEFAULT.
 * cfg->valid ends false only if a default in options.def is itself malformed (a unit test
 * rules that out). O(number of options); reentrant; errno unchanged. */
void cfg_defaults(cfg_t *cfg);

/* Reads every option from the environment into *cfg (defaults first; see cfg_defaults).
 * get: NULL for the process environment (getenv, or secure_getenv for options that name files);
 * tests pass their own, with `ctx` handed through to it.
 * msg: receives "" or exactly one line, without a trailing newline, when msg is not NULL and
 * msglen > 0 (truncated to fit; CFG_MSG_MAX always suffices):
 *   on failure  "gpucap: error: VAR='value': what is wrong; accepted: the accepted forms"
 *               for the first bad variable in options.def order;
 *   on success  "" or a "gpucap: warning: ..." (TF_FORCE_GPU_ALLOW_GROWTH not "true"/"false";
 *               GPUCAP_SPILL on without a spill budget; a spill budget without any cap).
 * A variable that is empty or only white space counts as unset (so an alias is then read).
 * Returns 0, or -EINVAL iff cfg is NULL, any variable holds a malformed or out-of-range
 * value, or the spill budgets do not fit in the host's memory (cfg_check_spill). On -EINVAL
 * cfg->valid is false (fail closed), bad options have source CFG_SRC_INVALID and keep their
 * defaults, and the rest hold what was read, so the report and log settings still work. O(total
 * length of the values); errno unchanged; reentrant, but must not race changes to the environment.
 */
int cfg_load(cfg_t *cfg, cfg_getenv_fn *get, void *ctx, char *msg, size_t msglen);

/* Finds GPUCAP_ variables in env (a NULL-terminated "NAME=value" array; NULL for the process
 * environment) that are neither settings nor GPUCAP_LIB (the gpucap command's), so a
 * misspelling does not silently leave a program uncapped. Writes one line per such name,
 * each ending in a newline, "gpucap: warning: NAME is not a gpucap setting and is ignored
 * (did you mean SETTING?)" (the suggestion when a setting is a near miss), into msg
 * (truncated to msglen, NUL-terminated when msglen > 0; msg may be NULL). Returns how many
 * names it found. O(variables x settings); errno unchanged; must not race setenv/putenv. */
int cfg_unknown(const char *const *env, char *msg, size_t msglen);

/* cfg_unknown, or with `refuse` the same lines as errors, for a caller that stops on them (the
 * gpucap command: the library it preloads would ignore the variable, so the program would run
 * without the setting its user meant): "gpucap: error: NAME is not a gpucap setting (did you
 * mean SETTING?)". Same contract otherwise. */
int cfg_unknown_check(const char *const *env, bool refuse, char *msg, size_t msglen);

/* Writes v quoted for a one-line message into out[outlen] (CFG_QUOTE_MAX bytes always suffice):
 * printable ASCII as is, `'` and `\` and every other byte as \xNN, at most CFG_QUOTE_IN input
 * bytes then "...". O(CFG_QUOTE_IN); never fails. */
void cfg_quote(const char *v, char *out, size_t outlen);

/* Returns the cap for device `ordinal` whose total memory is `device_total_bytes`:
 * min(the GPUCAP_MEMORY_LIMIT bytes, floor(GPUCAP_MEMORY_FRACTION * device_total_bytes)) over
 * whichever apply to that device, or UINT64_MAX when neither does. Returns 0 (no memory) when
 * cfg is NULL or invalid or ordinal < 0: fail closed. A limit above the device's total is
 * returned as is. O(1); thread-safe on a loaded cfg_t; never fails. */
uint64_t cfg_device_cap(const cfg_t *cfg, int ordinal, uint64_t device_total_bytes);

/* Returns device `ordinal`'s spill budget (GPUCAP_OVERSUBSCRIBE): bytes of host memory that
 * managed memory (and with GPUCAP_SPILL device allocations) may take beyond the device's cap, or
 * 0 (none) when unset, 0, or cfg is NULL or invalid. O(1); thread-safe on a loaded cfg_t. */
uint64_t cfg_spill_budget(const cfg_t *cfg, int ordinal);

/* Whether the spill budgets in cfg fit in a host of `host_bytes` of memory: every device's
 * budget, and the sum of those a per-device list names, at most host_bytes. Returns 0, or
 * -EINVAL with one line in msg (msglen > 0; the format of cfg_load's errors, naming the device,
 * its budget and the host's memory). cfg_load applies it with the host's physical memory
 * (sysinfo), so a budget the machine cannot hold fails closed like a malformed value.
 * O(devices); reentrant; errno unchanged. */
int cfg_check_spill(const cfg_t *cfg, uint64_t host_bytes, char *msg, size_t msglen);

/* Returns the description of option `id`, or NULL iff id is not below CFG_OPT_COUNT.
 * Static storage; O(1); thread-safe. */
const cfg_optinfo_t *cfg_option(cfg_opt_t id);

/* Returns where option `id`'s value came from; CFG_SRC_DEFAULT for a NULL cfg or a bad id.
 * O(1); thread-safe on a loaded cfg_t. */
cfg_source_t cfg_option_source(const cfg_t *cfg, cfg_opt_t id);

/* Writes option `id`'s value in cfg as canonical text that its parser reads back ("4GiB",
 * "0:0.5,1:0.25", "true", "on", "stderr", a path), or "" when unset or id is bad; truncated to
 * len, NUL-terminated when len > 0. Returns the length the whole text needs (as snprintf).
 * O(length); never fails; errno unchanged; thread-safe on a loaded cfg_t. */
size_t cfg_option_value(const cfg_t *cfg, cfg_opt_t id, char *buf, size_t len);

/* Writes the option listing into buf (truncated to len, NUL-terminated when len > 0) and
 * returns the length the whole listing needs, as snprintf does.
 *   cfg == NULL: help text, per option "NAME  (type; default: X)" then indented doc and
 *                accepted-forms lines: what `gpucap --help` shows.
 *   cfg != NULL: one line per option "NAME  value  source": the value as cfg_option_value
 *                writes it, "(unset)" or "(invalid)"; the source "environment", the alias's
 *                name or "default": what `gpucap env` shows.
 * O(size of the listing); never fails; errno unchanged; thread-safe on a loaded cfg_t. */
size_t cfg_describe(const cfg_t *cfg, char *buf, size_t len);

#endif
