/* The process's cgroup v2 directory and the small files in it (dmem.max, dmem.min), for the
 * discovered caps (config/discover.h). The files are not the environment, but like it they are
 * what the outside set for this process; config/ reads both so that the shim and the gpucap
 * command judge them with one parser (docs/design.md, "Caps the cluster already set").
 *
 * Nothing here allocates, prints or keeps state: buffers are the caller's or on the stack (at
 * most CFG_CGROUP_LINE_MAX bytes). Reentrant; errno unchanged.
 */
#ifndef GPUCAP_CONFIG_CGROUP_H
#define GPUCAP_CONFIG_CGROUP_H

#include <stddef.h>

/* Bytes of one line of /proc/self/mountinfo or /proc/self/cgroup read at a time; a longer line
 * is skipped. */
#define CFG_CGROUP_LINE_MAX 4096

/* Finds the directory of this process's cgroup v2 and writes its path into out[outlen]: `root`
 * (GPUCAP_CGROUP_ROOT; NULL or "" for the mount point of the cgroup2 file system that
 * /proc/self/mountinfo lists) joined with the path of the "0::" line of /proc/self/cgroup
 * (relative to the mount's own root, for a mount of a subtree). *rootlen receives the length of
 * the root part of out: the directories from out up to it are the cgroup and its ancestors.
 * Fails iff the process has no cgroup v2 path (a cgroup v1 system) or no cgroup2 file system is
 * mounted (-ENOENT), its cgroup lies outside the mounted subtree (-ENOENT), or the path does not
 * fit (-ENAMETOOLONG). Two small file reads. */
int cfg_cgroup_dir(const char *root, char *out, size_t outlen, size_t *rootlen);

/* Reads the whole file at `path` into buf[len], NUL-terminated. Fails iff it cannot be opened
 * (-ENOENT when it does not exist, else -errno), cannot be read (-errno), or does not fit in
 * len - 1 bytes (-EFBIG). */
int cfg_cgroup_read(const char *path, char *buf, size_t len);

#endif
