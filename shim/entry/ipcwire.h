/* The wire between a process that shares pooled blocks and the processes that open them
 * (shim/entry/ipc.c): unix SOCK_SEQPACKET sockets in the abstract namespace, one listening socket
 * per exporting process, named after its user, its pid and a random key. An abstract name is no
 * file: it goes with the last descriptor of the socket, so a process that dies, even by
 * SIGKILL, leaves nothing behind. File descriptors travel as SCM_RIGHTS. Each side checks the
 * other's credentials (SO_PEERCRED): the listener accepts its own user and root, a client talks
 * only to the process it named. Every descriptor made here is close-on-exec; sends never raise
 * SIGPIPE. No global state, no lock, no CUDA.
 */
#ifndef GPUCAP_SHIM_IPCWIRE_H
#define GPUCAP_SHIM_IPCWIRE_H

#include <stddef.h>
#include <stdint.h>

/* The most descriptors one message carries. */
#define IPCWIRE_MAX_FDS 64

/* A random key for a new listener (getrandom, else the clock and the pid: it need only differ
 * from a listener that a reused pid had before). */
uint64_t ipcwire_key(void);

/* Binds the name of (uid, pid, key) and listens; returns the socket, or -errno (EADDRINUSE:
 * the name is taken). */
int ipcwire_listen(uint32_t uid, int32_t pid, uint64_t key);

/* Accepts one connection on lfd from a process of user uid or of root; returns its socket, or
 * -errno (EPERM: another user's process, whose connection was closed). Blocks. */
int ipcwire_accept(int lfd, uint32_t uid);

/* Connects to the listener of (uid, pid, key) and checks that it is process pid of user uid;
 * returns the socket, or -errno (ECONNREFUSED: no such listener; EPERM: another process holds
 * the name). */
int ipcwire_connect(uint32_t uid, int32_t pid, uint64_t key);

/* Sends len bytes as one message with n descriptors (0 <= n <= IPCWIRE_MAX_FDS); 0 or -errno. */
int ipcwire_send(int sock, const void *buf, size_t len, const int *fds, int n);

/* Receives one message of exactly len bytes within timeout_ms, with up to max descriptors into
 * fds (close-on-exec; *n set to how many); 0, or -errno: ETIMEDOUT, ECONNRESET (the peer
 * closed), EPROTO (another size, or descriptors the kernel had to drop, all closed). */
int ipcwire_recv(int sock, void *buf, size_t len, int *fds, int max, int *n, int timeout_ms);

#endif
