/* Interprocess events: cuIpcGetEventHandle, cuIpcOpenEventHandle, and the state an event made
 * with CU_EVENT_INTERPROCESS shares with every process that opened it.
 *
 * Each such event owns a slot of its process's event table: a memfd of FK_IPC_SLOTS slots, made
 * at the first interprocess event and mapped shared. An opened event maps the page of the
 * exporter's table that holds its slot (through /proc/PID/fd, same user, as legacy IPC memory
 * does), so a record made in either process is seen by both. A slot holds the event's id (0:
 * free) and a state word: how many times it was recorded, shifted left once, with bit 0 set
 * when the last record had work to complete.
 * Schedule: the fake has no engine that runs device work by itself, and a process must be able
 * to wait for another's event while the recorder does something else (blocked on a pipe, say),
 * so recording an interprocess event completes, in the recording process and at once, the work
 * the event follows: a legal schedule (the device was fast). Queries, in any process, still
 * answer NOT_READY on the first poll of a record that had work to complete and SUCCESS from the
 * FK_POLLS_TO_COMPLETE-th, as a local event does; synchronising and stream waits find the work
 * done. Slots are words updated with atomics (shared by processes); the rest runs under fk.lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/fakecuda/fk.h"

#define FK_IPC_SLOTS 16384u
#define HANDLE_MAGIC "fkIPCev"

struct slot {
  _Atomic uint64_t id;    /* the event's id while it lives; 0: free */
  _Atomic uint64_t state; /* records << 1 | (the last record had work to complete) */
};

/* The bytes of a CUipcEventHandle as the fake lays them out. */
struct handle {
  char magic[8];
  int32_t pid;   /* the process whose table holds the slot */
  int32_t fd;    /* the table's memfd in that process */
  uint32_t slot; /* index in the table */
  int32_t dev;   /* the device of the event's context */
  uint64_t id;   /* the event's id */
};
_Static_assert(sizeof(struct handle) <= CU_IPC_HANDLE_SIZE, "the handle must fit");

/* An interprocess event's link to its slot (the exporter's own, or an opened one). */
struct fk_ipc_event {
  struct slot *slot;
  void *map;         /* opened: the mapping of the exporter's page, else NULL */
  size_t maplen;     /* ... and its length */
  struct handle who; /* what cuIpcGetEventHandle hands out */
  uint64_t seen;     /* records this handle has seen complete */
  int polls;         /* queries of the record after `seen` */
};

static int table_fd = -1;
static struct slot *table;
static uint32_t next_slot;

/* The process's table, made on first use; NULL when the host refuses. */
static struct slot *own_table(void) {
  if (table != NULL) {
    return table;
  }
  size_t len = FK_IPC_SLOTS * sizeof *table;
  int fd = memfd_create("fakecuda-ipc-events", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
    if (fd >= 0) {
      close(fd);
    }
    return NULL;
  }
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return NULL;
  }
  table_fd = fd;
  table = p;
  return table;
}

CUresult fk_ipc_event_new(struct CUevent_st *e) {
  struct slot *t = own_table();
  struct fk_ipc_event *x = calloc(1, sizeof *x);
  if (t == NULL || x == NULL) {
    free(x);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (uint32_t n = 0; n < FK_IPC_SLOTS; n++) {
    uint32_t i = (next_slot + n) % FK_IPC_SLOTS;
    if (atomic_load(&t[i].id) == 0) {
      next_slot = i + 1;
      uint64_t id = fk_new_id();
      atomic_store(&t[i].state, 0);
      atomic_store(&t[i].id, id);
      x->slot = &t[i];
      x->who = (struct handle){
          .pid = (int32_t)getpid(), .fd = table_fd, .slot = i, .dev = e->ctx->dev, .id = id};
      memcpy(x->who.magic, HANDLE_MAGIC, sizeof x->who.magic);
      e->ipc = x;
      return CUDA_SUCCESS;
    }
  }
  free(x);
  return CUDA_ERROR_OUT_OF_MEMORY; /* FK_IPC_SLOTS interprocess events live in this process */
}

/* Whether the event's slot still holds it (the exporter has not destroyed it). */
static int alive(const struct fk_ipc_event *x) {
  return atomic_load(&x->slot->id) == x->who.id;
}

void fk_ipc_event_drop(struct CUevent_st *e) {
  struct fk_ipc_event *x = e->ipc;
  if (x == NULL) {
    return;
  }
  if (x->map != NULL) {
    munmap(x->map, x->maplen);
  } else if (alive(x)) {
    atomic_store(&x->slot->id, 0); /* the exporter's event: its slot is free again */
  }
  free(x);
  e->ipc = NULL;
}

void fk_ipc_event_recorded(struct CUevent_st *e, int had_work) {
  struct fk_ipc_event *x = e->ipc;
  if (alive(x)) {
    uint64_t records = (atomic_load(&x->slot->state) >> 1) + 1;
    atomic_store(&x->slot->state, records << 1 | (uint64_t)(had_work != 0));
  }
}

CUresult fk_ipc_event_query(struct CUevent_st *e) {
  struct fk_ipc_event *x = e->ipc;
  if (!alive(x)) {
    return CUDA_ERROR_INVALID_HANDLE; /* the exporter destroyed it: undefined, refused here */
  }
  uint64_t state = atomic_load(&x->slot->state), records = state >> 1;
  if (records != x->seen && (state & 1) && ++x->polls < FK_POLLS_TO_COMPLETE) {
    return CUDA_ERROR_NOT_READY;
  }
  x->polls = 0;
  x->seen = records;
  return CUDA_SUCCESS;
}

CUresult fk_ipc_event_complete(struct CUevent_st *e) {
  struct fk_ipc_event *x = e->ipc;
  if (!alive(x)) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  x->polls = 0;
  x->seen = atomic_load(&x->slot->state) >> 1;
  return CUDA_SUCCESS;
}

static CUresult get_handle(CUipcEventHandle *out, CUevent he) {
  struct CUevent_st *e = fk_event_find(he);
  if (e == NULL) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (out == NULL || e->ipc == NULL) {
    return CUDA_ERROR_INVALID_VALUE; /* made without CU_EVENT_INTERPROCESS | DISABLE_TIMING */
  }
  memset(out, 0, sizeof *out);
  memcpy(out, &e->ipc->who, sizeof e->ipc->who);
  return CUDA_SUCCESS;
}

FK_API CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event) {
  FK_BODY(FK_NEED_INIT, get_handle(pHandle, event));
}

/* Maps the page of the exporter's table that holds h's slot into *x. */
static CUresult map_slot(const struct handle *h, struct fk_ipc_event *x) {
  char path[64];
  size_t page = (size_t)sysconf(_SC_PAGESIZE), at = h->slot * sizeof(struct slot);
  (void)snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    return CUDA_ERROR_INVALID_VALUE; /* the exporter is gone, or not ours to see */
  }
  void *p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)(at / page * page));
  close(fd);
  if (p == MAP_FAILED) {
    return CUDA_ERROR_MAP_FAILED;
  }
  x->map = p;
  x->maplen = page;
  x->slot = (struct slot *)((char *)p + at % page);
  x->who = *h;
  return CUDA_SUCCESS;
}

static CUresult open_handle(CUevent *out, const CUipcEventHandle *handle) {
  struct handle h;
  if (out == NULL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct CUctx_st *c;
  CUresult rc = fk_ctx_current(&c);
  if (rc != CUDA_SUCCESS) {
    return rc;
  }
  memcpy(&h, handle, sizeof h);
  if (memcmp(h.magic, HANDLE_MAGIC, sizeof h.magic) != 0 || h.pid <= 0 || h.fd < 0 ||
      h.slot >= FK_IPC_SLOTS || h.id == 0 || h.dev < 0 || h.dev >= fk.ndev) {
    return CUDA_ERROR_INVALID_VALUE; /* not a handle this driver made */
  }
  if (h.pid == getpid()) {
    return CUDA_ERROR_INVALID_CONTEXT; /* a process cannot open its own handles */
  }
  if (kill(h.pid, 0) != 0 && errno == ESRCH) {
    return CUDA_ERROR_INVALID_VALUE; /* the exporter is gone */
  }
  struct fk_ipc_event *x = calloc(1, sizeof *x);
  struct CUevent_st *e = calloc(1, sizeof *e);
  if (x == NULL || e == NULL) {
    free(x);
    free(e);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  rc = map_slot(&h, x);
  if (rc == CUDA_SUCCESS && !alive(x)) {
    munmap(x->map, x->maplen);
    rc = CUDA_ERROR_INVALID_VALUE; /* the exporter destroyed the event */
  }
  if (rc != CUDA_SUCCESS) {
    free(x);
    free(e);
    return rc;
  }
  /* "Behaves like a locally created event with CU_EVENT_DISABLE_TIMING" (cuda.h). */
  x->seen = atomic_load(&x->slot->state) >> 1;
  e->ctx = c;
  e->flags = CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  e->ipc = x;
  fk_event_add(e);
  *out = e;
  return CUDA_SUCCESS;
}

FK_API CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle) {
  FK_BODY(FK_NEED_INIT, open_handle(phEvent, &handle));
}
