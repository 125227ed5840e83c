/* The roster of the processes running with gpucap on this machine, for `gpucap top`: each
 * process that uses a device keeps one small file, /dev/shm/gpucap-proc.UID.PID (owner-only,
 * 0600), mapped while it runs, with its command, its shared budget's name and per device its
 * cap, what gpucap holds from the driver for it (its pool), the peak of that and its refusals.
 *
 * Life: the file is made at the process's first charge on a device (a process that never uses
 * CUDA makes none), complete before it is linked in place (O_TMPFILE), so a reader never sees
 * half of one; it is removed at exit (the exit path, also after SIGTERM or SIGINT) and before an
 * exec (the new program makes its own). A fork child makes its own at its first charge; a vfork
 * child (same memory, another pid) touches nothing. After SIGKILL or a crash the file stays: a
 * reader tells it dead by its pid and start time (/proc/PID/stat field 22, as budget.h does),
 * and the next process of the user that makes its entry removes it (so does `gpucap top
 * --clean`).
 *
 * Self-contained (libc and budget.h's /proc readers; no message printed), so the gpucap command
 * links it too. The figures are written with relaxed atomic stores and read with atomic loads:
 * a reader sees each figure whole, not all of them at one instant. Thread-safe.
 */
#ifndef GPUCAP_SHIM_ROSTER_H
#define GPUCAP_SHIM_ROSTER_H

#include "shim/accounting/budget.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define ROSTER_MAGIC "gpucapR" /* 8 bytes with its NUL */
#define ROSTER_VERSION 1u
#define ROSTER_DEVICES 16u /* device ordinals 0..15 are listed; the others are not */
#define ROSTER_COMMAND_MAX 96
#define ROSTER_NAME_MAX 64
#define ROSTER_DIR BUDGET_DIR /* budget_unnamed makes the entries there */
#define ROSTER_PREFIX "gpucap-proc."
#define ROSTER_NO_CAP UINT64_MAX

struct roster_device {
  uint64_t cap;     /* the process's cap on the device, ROSTER_NO_CAP for none */
  uint64_t pool;    /* what gpucap holds from the driver for it there (its charges) */
  uint64_t peak;    /* the most `pool` reached */
  uint64_t refused; /* allocations refused */
};

struct roster_entry {
  char magic[8];    /* ROSTER_MAGIC */
  uint32_t version; /* ROSTER_VERSION */
  uint32_t size;    /* sizeof(struct roster_entry): the file's size */
  uint32_t uid;     /* the process's effective uid (the file's owner) */
  int32_t pid;
  uint64_t start;                   /* the process's start time, /proc/PID/stat field 22 */
  uint64_t pidns;                   /* its pid namespace's inode (a pid means nothing outside it) */
  uint64_t present;                 /* bit d: device ordinal d has a figure */
  char command[ROSTER_COMMAND_MAX]; /* its command line, arguments joined by spaces, cut */
  char share[ROSTER_NAME_MAX];      /* its shared budget (GPUCAP_SHARE), "" for none */
  struct roster_device dev[ROSTER_DEVICES];
};

/* Records, in this process's entry (made first when there is none: `share` is then its budget's
 * name), device dev's cap and what gpucap now holds from the driver for it; raises the peak.
 * Devices from ROSTER_DEVICES up, and every call once making the entry failed, do nothing.
 * Lock-free once the entry exists (a few relaxed stores); making it takes a lock and a few
 * system calls. Never fails, prints nothing, errno unchanged. */
void roster_note(int dev, uint64_t cap, uint64_t pool, const char *share);

/* Counts a refusal on device dev in this process's entry, when it has one. Lock-free. */
void roster_refused(int dev);

/* Removes this process's entry file (at exit, before an exec); no new one is made after it
 * (a later roster_note does nothing), and the mapping stays for any thread still writing it.
 * Does nothing in a vfork child (another pid sharing the parent's memory). Async-signal-safe. */
void roster_leave(void);

/* The entry file of process pid of user uid, into buf. */
void roster_path(unsigned uid, pid_t pid, char *buf, size_t len);

/* Reads the entry file at path into *out (a copy, each figure loaded atomically). Returns 0; -1
 * when it is not an entry of this gpucap version owned by this user (or cannot be read). */
int roster_read(const char *path, struct roster_entry *out);

/* Whether the process an entry describes still runs: same pid namespace, and its pid alive
 * (not a zombie) with the same start time. */
bool roster_live(const struct roster_entry *e);

#endif
