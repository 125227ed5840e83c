/* Unix sockets between an exporting process and its importers: see shim/entry/ipcwire.h. Each
 * function leaves errno as it found it and reports failures as its return value.
 */
#include "shim/entry/ipcwire.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* The abstract address of (uid, pid, key): a leading NUL, then the name (no trailing NUL). */
static socklen_t address(struct sockaddr_un *a, uint32_t uid, int32_t pid, uint64_t key) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "gpucap-ipc.%u.%d.%016llx",
                   (unsigned)uid, (int)pid, (unsigned long long)key);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

uint64_t ipcwire_key(void) {
  int saved = errno;
  uint64_t key = 0;
  if (getrandom(&key, sizeof key, GRND_NONBLOCK) != (ssize_t)sizeof key) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t mix = (uint64_t)t.tv_sec << 32 ^ (uint64_t)t.tv_nsec;
    key = mix * UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t)(uint32_t)getpid();
  }
  errno = saved;
  return key;
}

/* A socket listening at the name of (uid, pid, key) (listening), or connected to it; the
 * socket or -errno. */
static int named(uint32_t uid, int32_t pid, uint64_t key, bool listening) {
  struct sockaddr_un a;
  socklen_t len = address(&a, uid, pid, key);
  int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  bool ok = s >= 0 && (listening ? bind(s, (struct sockaddr *)&a, len) == 0 && listen(s, 64) == 0
                                 : connect(s, (struct sockaddr *)&a, len) == 0);
  int rc = ok ? s : -errno;
  if (!ok && s >= 0) {
    close(s);
  }
  return rc;
}

int ipcwire_listen(uint32_t uid, int32_t pid, uint64_t key) {
  int saved = errno;
  int rc = named(uid, pid, key, true);
  errno = saved;
  return rc;
}

/* The credentials of the process at the other end of sock; false when the kernel says none. */
static bool peer_of(int sock, struct ucred *who) {
  socklen_t len = sizeof *who;
  return getsockopt(sock, SOL_SOCKET, SO_PEERCRED, who, &len) == 0 && len == sizeof *who;
}

int ipcwire_accept(int lfd, uint32_t uid) {
  int saved = errno;
  int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
  int rc = s < 0 ? -errno : s;
  struct ucred who;
  if (s >= 0 && !(peer_of(s, &who) && (who.uid == uid || who.uid == 0))) {
    close(s);
    rc = -EPERM;
  }
  errno = saved;
  return rc;
}

int ipcwire_connect(uint32_t uid, int32_t pid, uint64_t key) {
  int saved = errno;
  int s = named(uid, pid, key, false);
  struct ucred who;
  if (s >= 0 && (!peer_of(s, &who) || who.pid != pid || who.uid != uid)) {
    close(s);
    s = -EPERM;
  }
  errno = saved;
  return s;
}

int ipcwire_send(int sock, const void *buf, size_t len, const int *fds, int n) {
  int saved = errno;
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int) * IPCWIRE_MAX_FDS)];
  } u;
  struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (n > 0) {
    memset(&u, 0, sizeof u);
    msg.msg_control = u.buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)n);
  }
  ssize_t sent;
  do {
    sent = sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  int rc = sent == (ssize_t)len ? 0 : sent < 0 ? -errno : -EPROTO;
  errno = saved;
  return rc;
}

/* Closes every descriptor a received message carried. */
static void drop_fds(struct msghdr *msg) {
  for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; i++) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        close(fd);
      }
    }
  }
}

int ipcwire_recv(int sock, void *buf, size_t len, int *fds, int max, int *n, int timeout_ms) {
  int saved = errno;
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int) * IPCWIRE_MAX_FDS)];
  } u;
  struct iovec iov = {.iov_base = buf, .iov_len = len};
  struct msghdr msg = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
  struct pollfd p = {.fd = sock, .events = POLLIN};
  int r, rc = 0;
  *n = 0;
  do {
    r = poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  ssize_t got = -1;
  if (r == 0) {
    rc = -ETIMEDOUT;
  } else if (r < 0) {
    rc = -errno;
  } else {
    do {
      got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    } while (got < 0 && errno == EINTR);
    rc = got < 0 ? -errno : got == 0 ? -ECONNRESET : 0;
  }
  if (got > 0) {
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    size_t k = c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS
                   ? (c->cmsg_len - CMSG_LEN(0)) / sizeof(int)
                   : 0;
    if ((size_t)got != len || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || k > (size_t)max ||
        (c && CMSG_NXTHDR(&msg, c))) {
      drop_fds(&msg);
      rc = -EPROTO;
    } else {
      if (k > 0) {
        memcpy(fds, CMSG_DATA(c), k * sizeof(int));
      }
      *n = (int)k;
    }
  }
  errno = saved;
  return rc;
}
