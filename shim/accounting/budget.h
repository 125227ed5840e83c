/* The shared budget's file: one small POSIX shared-memory file per budget and user,
 * /dev/shm/gpucap-budget.UID.NAME (owner-only, 0600), which every process naming the budget maps.
 * It holds the budget's settings (fixed by its creator), per device (by UUID) the cap, the
 * guarantee and the peak, and per live process its pid, start time and charged bytes.
 *
 * Invariants: a process's bytes are counted in its own slot only, so the budget's use is always
 * the sum over the occupied slots (never a separate counter a dead process could leave wrong);
 * every figure is read or changed under the file's lock, a process-shared robust mutex (a
 * holder killed inside it leaves at most its own slot half-written, and that slot is reclaimed).
 * A slot is occupied while its pid is non-zero; it is claimed by filling it before the pid is
 * set and freed by clearing the pid. Whoever looks reclaims the slots of processes that are gone
 * (no such pid, a zombie, or another start time: the pid was reused).
 *
 * Self-contained (libc only, no other shim module, no message printed: errors come back as
 * text), so the gpucap command links it too (`gpucap top`). Not thread-safe by itself: the
 * callers serialise their own threads around a mapping; the file's lock is innermost.
 */
#ifndef GPUCAP_SHIM_BUDGET_H
#define GPUCAP_SHIM_BUDGET_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define BUDGET_MAGIC "gpucapB" /* 8 bytes with its NUL */
#define BUDGET_VERSION 2u
#define BUDGET_SLOTS 64u   /* live processes per budget */
#define BUDGET_DEVICES 16u /* devices per budget */
#define BUDGET_UUID_MAX 48
#define BUDGET_NAME_MAX 64
#define BUDGET_SETTINGS_MAX 512
#define BUDGET_DIR "/dev/shm"
#define BUDGET_PREFIX "gpucap-budget."

struct budget_device {
  char uuid[BUDGET_UUID_MAX]; /* "GPU-..." as nvidia-smi writes it; "" = unused entry */
  uint64_t cap;               /* the budget's cap on the device, bytes */
  uint64_t min;               /* each process's guarantee on it, bytes */
  uint64_t peak;              /* the highest sum over the slots an admission reached */
  uint64_t asks;              /* give-back requests so far (a generation count) */
  uint64_t refused;           /* allocations the budget refused (every process, dead ones too) */
  uint64_t want;              /* the last refused request, held back for its asker ... */
  int64_t want_ns;            /* ... until this CLOCK_MONOTONIC time */
  int32_t want_slot;          /* ... the asker's slot, -1: none */
  uint32_t unused;
};

struct budget_slot {
  int32_t pid; /* the process holding the slot; 0: free */
  uint32_t unused;
  uint64_t start;                   /* its start time: /proc/PID/stat field 22 */
  uint64_t present;                 /* a bit per device entry it has used */
  uint64_t used[BUDGET_DEVICES];    /* bytes charged, the driver's own memory for it included */
  uint64_t idle[BUDGET_DEVICES];    /* of those, what its pools hold unused (as last published) */
  uint64_t refused[BUDGET_DEVICES]; /* allocations the budget refused it */
  uint64_t driver[BUDGET_DEVICES];  /* of `used`, the driver's own memory for it (as measured) */
};

struct budget {
  char magic[8];     /* BUDGET_MAGIC */
  uint32_t version;  /* BUDGET_VERSION */
  uint32_t size;     /* sizeof(struct budget): the file's size */
  uint32_t uid;      /* the creator's effective uid (the file's owner) */
  uint32_t nslots;   /* BUDGET_SLOTS */
  uint32_t ndevices; /* BUDGET_DEVICES */
  uint32_t removed;  /* 1: `gpucap top --clean` unlinked the file (no process of it was live):
                      * a process that mapped it before must open the budget again */
  uint64_t pidns;    /* the pid namespace's inode (pids mean nothing outside) */
  char name[BUDGET_NAME_MAX];         /* the budget's name */
  char settings[BUDGET_SETTINGS_MAX]; /* the budget's settings, canonical text */
  uint64_t reclaimed;                 /* slots of dead processes reclaimed */
  uint64_t recoveries;                /* times the lock was taken over from a dead holder */
  pthread_mutex_t lock;               /* process-shared, robust */
  struct budget_device dev[BUDGET_DEVICES];
  struct budget_slot slot[BUDGET_SLOTS];
};

/* The file's path for budget `name` of effective user uid into buf. */
void budget_path(const char *name, unsigned uid, char *buf, size_t len);

/* Maps budget `name`'s file (read-write) into *out. With `create`, a missing file is made
 * (race-free: written in full under no name, then linked in place) with `settings` as its
 * settings; without, a missing one fails -ENOENT. The file is checked: a regular file owned by
 * this user, mode 0600, of the file's size, magic, version and layout. Returns 0; -EPROTO
 * when the file is not a budget file of this version (reason in err, naming the path); -ENOENT;
 * another negative errno when a system call failed (reason in err). errno unchanged. */
int budget_open(const char *name, bool create, const char *settings, struct budget **out, char *err,
                size_t errlen);

/* An unnamed file of `size` bytes in BUDGET_DIR (O_TMPFILE, owner-only), mapped shared into
 * *map, for a file that is written whole before it is linked in place (a budget file, and the
 * entries of shim/accounting/roster.h), so that no reader ever sees half of one. Returns its
 * descriptor (close-on-exec), or -1 with errno set. */
int budget_unnamed(size_t size, void **map);

/* Unmaps a file from budget_open. */
void budget_close(struct budget *l);

/* Takes the file's lock. A holder that died leaves it to the caller, who counts a recovery
 * and makes it consistent; a wake lost to a holder's death costs a waiter at most 50 ms.
 * Returns 0, or -ENOTRECOVERABLE. */
int budget_lock(struct budget *l);
void budget_unlock(struct budget *l);

/* The start time of process pid (/proc/PID/stat field 22), or 0 when it is gone or a zombie. */
uint64_t budget_start_of(pid_t pid);

/* This process's pid namespace (the inode of /proc/self/ns/pid), 0 when unknown. */
uint64_t budget_pidns(void);

/* Locked. Frees the slots of processes that are gone (and, with self_pid non-zero, a slot
 * naming self_pid and self_start: this very process before an exec). Returns the live slots
 * left. O(slots) + one /proc read per occupied slot. */
unsigned budget_reclaim(struct budget *l, pid_t self_pid, uint64_t self_start);

/* Locked. The sum over the occupied slots of device d's bytes. */
uint64_t budget_used(const struct budget *l, unsigned d);

#define BUDGET_WANT_NS 2000000000LL /* how long a refused request is held back for its asker */

/* Locked. What the other occupied slots' guarantees still hold back on device d: the sum over
 * the slots but `slot` of max(0, min - used), plus the last refused request of another live
 * slot for BUDGET_WANT_NS after it (the memory the others give back goes to the asker). */
uint64_t budget_reserved(const struct budget *l, unsigned d, int slot);

/* Locked. What slot `slot` may still be charged on device d: cap - used - reserved, 0 when
 * that is negative. */
uint64_t budget_headroom(const struct budget *l, unsigned d, int slot);

/* Locked. Charges `bytes` of device d to `slot` iff they fit in budget_headroom; records the
 * peak. Returns true iff charged; a refusal is recorded as the device's wanted request. */
bool budget_admit(struct budget *l, unsigned d, int slot, uint64_t bytes);

/* Locked. The index of device uuid's entry, or -1 when none. */
int budget_find(const struct budget *l, const char *uuid);

#endif
