/* Passing a file descriptor to another process over a unix socket (SCM_RIGHTS), for the tests
 * of shareable memory handles. Header-only. */
#ifndef GPUCAP_TESTS_FDPASS_H
#define GPUCAP_TESTS_FDPASS_H

#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

union fdpass_control {
  struct cmsghdr h;
  char buf[CMSG_SPACE(sizeof(int))];
};

/* Sends fd (and one byte) over sock. Returns 0, or -1 with errno set. */
__attribute__((unused)) static int fdpass_send(int sock, int fd) {
  char byte = 'f';
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  union fdpass_control u;
  memset(&u, 0, sizeof u);
  struct msghdr msg = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return sendmsg(sock, &msg, 0) == 1 ? 0 : -1;
}

/* Receives a descriptor sent by fdpass_send: a new descriptor of this process, or -1. */
__attribute__((unused)) static int fdpass_recv(int sock) {
  char byte;
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  union fdpass_control u;
  struct msghdr msg = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
  if (recvmsg(sock, &msg, 0) != 1) {
    return -1;
  }
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  if (c == NULL || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
    return -1;
  }
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

#endif
