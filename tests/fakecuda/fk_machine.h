/* The machine ledger (fk_machine.c): what lets several processes share one fake device, as they
 * share a real GPU. With FAKECUDA_MACHINE=NAME the fake CUDA driver and the fake NVML of every
 * process naming NAME map one small POSIX shared-memory file, /dev/shm/fakecuda.UID.NAME, that
 * holds per device the total, the bytes each live process holds, and the peak of their sum.
 *
 * Invariants: a process's bytes are counted in its slot only, so the machine's use is always the
 * sum over the occupied slots (never a separate counter a dead process could leave wrong); an
 * allocation is admitted and its peak recorded under the ledger's lock, a process-shared robust
 * mutex (a holder killed inside it leaves nothing half-done that matters: its own slot is
 * reclaimed). A slot is occupied while its pid is non-zero; whoever looks reclaims the slots of
 * processes that are gone (pid absent, a zombie, or a different start time: the pid was reused).
 * Locking: the callers serialise their own threads (fk.lock, nv.lock); the ledger's lock is taken
 * inside, innermost, for a few microseconds, and never while calling out. Shared by both fake
 * libraries: it uses no `fk` or `nv` state and writes no message (errors come back as text).
 */
#ifndef GPUCAP_TESTS_FAKECUDA_FK_MACHINE_H
#define GPUCAP_TESTS_FAKECUDA_FK_MACHINE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tests/fakecuda/fk.h"

#define FK_MACHINE_MAGIC "fkMACHN" /* 8 bytes with its NUL */
#define FK_MACHINE_VERSION 1u
#define FK_MACHINE_SLOTS 128u
#define FK_MACHINE_DIR "/dev/shm"

/* The file's layout (documented in tests/fakecuda/README.md; a test forges slots through it). */
struct fk_machine_slot {
  int32_t pid; /* the process holding the slot; 0: free */
  uint32_t unused;
  uint64_t start;                    /* its start time: /proc/PID/stat field 22 */
  uint64_t used[FK_MAX_DEVICES];     /* device memory it holds, bytes (driver's own included) */
  uint32_t contexts[FK_MAX_DEVICES]; /* its live contexts */
};

struct fk_ledger {
  char magic[8];    /* FK_MACHINE_MAGIC */
  uint32_t version; /* FK_MACHINE_VERSION */
  uint32_t size;    /* sizeof(struct fk_ledger): the file's size */
  uint32_t uid;     /* the creator's effective uid (the file's owner) */
  uint32_t nslots;  /* FK_MACHINE_SLOTS */
  int32_t ndev;     /* FAKECUDA_DEVICES of the creator ... */
  int32_t cc_major; /* ... FAKECUDA_CC */
  int32_t cc_minor;
  uint32_t hi;                    /* slots [0, hi) have been occupied at some time */
  uint64_t total[FK_MAX_DEVICES]; /* ... FAKECUDA_MEMORY */
  uint64_t peak[FK_MAX_DEVICES];  /* the highest sum over the slots an allocation reached */
  uint64_t reclaimed;             /* slots of dead processes reclaimed */
  uint64_t recoveries;            /* times the lock was taken over from a holder that died */
  /* (peak, reclaimed and recoveries: since the machine was last idle, i.e. this run's) */
  pthread_mutex_t lock; /* process-shared, robust */
  struct fk_machine_slot slots[FK_MACHINE_SLOTS];
};

/* One process's (one library's) view of a ledger. */
struct fk_machine {
  struct fk_ledger *l; /* the mapping, or NULL: no machine */
  int slot;            /* this process's slot (the driver after fk_machine_join), else -1 */
  pid_t pid;           /* the process that mapped it */
  uint64_t start;      /* its start time */
  char path[128];
};

/* The ledger's path for machine `name` (FK_MACHINE_DIR/fakecuda.EUID.NAME) into buf. */
void fk_machine_path(const char *name, char *buf, size_t len);

/* Maps the ledger of machine `name` into *m, creating it when it does not exist (race-free:
 * written in full under no name, then linked in place; owner-only), and checks it on open: a
 * regular file owned by this user with mode 0600, of the expected size, magic, version and
 * layout, made for the devices cfg describes (count, compute capability, memory). Returns 0;
 * -EPROTO when the file is not such a ledger (malformed, foreign, other devices); another
 * negative errno when a system call failed. On failure a one-line reason (naming the path) is in
 * err and *m holds no mapping. O(1) system calls. */
int fk_machine_open(const char *name, const struct fk_config *cfg, struct fk_machine *m, char *err,
                    size_t errlen);

/* Gives this process a slot, after reclaiming the dead processes' slots (a slot already naming
 * this very process is from before an exec and is reclaimed too). When no live process is left,
 * the ledger is a previous run's: the peaks and the counters (reclaimed, recoveries) start again
 * from 0. Fails -ENOSPC when FK_MACHINE_SLOTS live processes hold them all. O(slots) + one /proc
 * read per occupied slot. */
int fk_machine_join(struct fk_machine *m);

/* Frees this process's slot (its bytes leave the machine), if it has one and is the process
 * that joined, and unmaps the ledger. No effect without a mapping. */
void fk_machine_close(struct fk_machine *m);

/* Admits bytes of device dev for this process (joined) iff the machine's use plus bytes fits in
 * the device's total, reclaiming dead processes' slots before refusing; records the peak. Returns
 * 0 or -ENOMEM (nothing changed). O(slots). */
int fk_machine_take(struct fk_machine *m, int dev, size_t bytes);

/* Returns bytes of device dev that this process held. O(1). */
void fk_machine_give(struct fk_machine *m, int dev, size_t bytes);

/* Publishes this process's number of live contexts on dev. O(1). */
void fk_machine_contexts(struct fk_machine *m, int dev, unsigned n);

/* The machine's figures for device dev, after reclaiming dead processes' slots. */
struct fk_machine_usage {
  uint64_t total, used, peak; /* used: sum over the live processes */
  unsigned processes;         /* live processes holding memory or a context on dev */
  uint64_t reclaimed, recoveries;
};
void fk_machine_usage(struct fk_machine *m, int dev, struct fk_machine_usage *u);

/* The live processes holding memory or a context on dev, after reclaiming: fills up to cap
 * entries (slot order) and returns how many there are. O(slots) + one /proc read per process. */
struct fk_machine_proc {
  pid_t pid;
  uint64_t used;
  unsigned contexts;
};
unsigned fk_machine_processes(struct fk_machine *m, int dev, struct fk_machine_proc *out,
                              unsigned cap);

#endif
