/* target: finding the command and telling whether the loader will preload into it (contracts
 * in target.h). The rules are the loader's and the kernel's: ld.so ignores LD_PRELOAD entries
 * with a '/' in secure-execution mode (AT_SECURE: set-ID or file capabilities, unless the
 * process cannot gain privileges); a program without PT_INTERP never runs ld.so; execve follows
 * `#!` up to 4 interpreters and hands a file with neither to /bin/sh through execvp.
 */
#include "scripts/target.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#define DEFAULT_PATH "/bin:/usr/bin" /* what execvp searches when PATH is unset */
#define MAX_DEPTH 4                  /* interpreters the kernel follows */
#define SHEBANG_MAX 256              /* the kernel reads this much of a `#!` line */
#define PHDR_MAX 4096                /* more program headers than any real program has */

/* The ELF identity a program must share with the library for the loader to load it. */
typedef struct elfid {
  unsigned char cls, data;
  uint16_t machine;
} elfid_t;

/* What one check is about: the command as named, and the program in question (the command
 * itself, or the interpreter it runs through). */
typedef struct subject {
  const char *command;
  char *why;
  size_t whylen;
} subject_t;

/* Writes "'COMMAND' WHAT" or "'COMMAND' runs through 'PROGRAM', which WHAT" into s->why. */
__attribute__((format(printf, 3, 4))) static int say(const subject_t *s, const char *program,
                                                     const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (strcmp(program, s->command) == 0) {
    snprintf(s->why, s->whylen, "'%s' %s", s->command, what);
  } else {
    snprintf(s->why, s->whylen, "'%s' runs through '%s', which %s", s->command, program, what);
  }
  return 1;
}

static bool executable_file(const char *path, bool *exists) {
  struct stat st;
  *exists = stat(path, &st) == 0;
  return *exists && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

int target_find(const char *name, char *out, size_t outlen) {
  bool exists = false;
  if (strchr(name, '/') != NULL) {
    if (strlen(name) >= outlen) {
      return -ENAMETOOLONG;
    }
    strcpy(out, name);
    return executable_file(name, &exists) ? 0 : exists ? -EACCES : -ENOENT;
  }
  const char *path = getenv("PATH");
  if (path == NULL) {
    path = DEFAULT_PATH;
  }
  bool denied = false;
  for (const char *p = path;; p++) {
    const char *end = strchrnul(p, ':');
    int n = snprintf(out, outlen, "%.*s%s%s", (int)(end - p), p, end == p ? "" : "/", name);
    if (n >= 0 && (size_t)n < outlen) {
      if (executable_file(out, &exists)) {
        return 0;
      }
      denied |= exists;
    }
    if (*end == '\0') {
      break;
    }
    p = end;
  }
  return denied ? -EACCES : -ENOENT;
}

static int read_elfid(const char *path, elfid_t *id) {
  unsigned char ident[EI_NIDENT + 4];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return -1;
  }
  ssize_t n = pread(fd, ident, sizeof ident, 0);
  close(fd);
  if (n < (ssize_t)sizeof ident || memcmp(ident, ELFMAG, SELFMAG) != 0) {
    return -1;
  }
  id->cls = ident[EI_CLASS];
  id->data = ident[EI_DATA];
  // e_machine follows e_type at offset 18 in both classes; the library is native-endian.
  memcpy(&id->machine, ident + 18, sizeof id->machine);
  return 0;
}

/* Set-ID and file capabilities: AT_SECURE, unless privileges cannot be gained at all. */
static int check_secure(const subject_t *s, const char *program) {
  struct stat st;
  struct statvfs fs;
  if (stat(program, &st) != 0 || prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1 ||
      (statvfs(program, &fs) == 0 && (fs.f_flag & ST_NOSUID))) {
    return 0;
  }
  static const char tail[] = "the loader then ignores LD_PRELOAD (secure-execution mode)";
  if ((st.st_mode & S_ISUID) && st.st_uid != getuid()) {
    return say(s, program, "is set-user-ID (owner uid %u): %s", (unsigned)st.st_uid, tail);
  }
  if ((st.st_mode & S_ISGID) && (st.st_mode & S_IXGRP) && st.st_gid != getgid()) {
    return say(s, program, "is set-group-ID (group gid %u): %s", (unsigned)st.st_gid, tail);
  }
  if (getxattr(program, "security.capability", NULL, 0) > 0) {
    return say(s, program, "has file capabilities: %s", tail);
  }
  return 0;
}

/* Whether `program` is the dynamic loader itself (ld-linux-x86-64.so.2, ld-2.28.so), which has
 * no PT_INTERP of its own but honours LD_PRELOAD for the program it is asked to run. */
static bool is_loader(const char *program) {
  char real[PATH_MAX];
  const char *p = realpath(program, real) != NULL ? real : program;
  const char *base = strrchr(p, '/') != NULL ? strrchr(p, '/') + 1 : p;
  return strncmp(base, "ld-", 3) == 0 && strstr(base, ".so") != NULL;
}

static int check_file(const subject_t *s, const char *program, const elfid_t *lib, int depth);

/* A `#!` line: the interpreter, or with `env` the program env runs (found in PATH). */
static int check_script(const subject_t *s, char *line, const elfid_t *lib, int depth) {
  char *save = NULL;
  char *interp = strtok_r(line, " \t", &save);
  if (interp == NULL) {
    return 0;
  }
  const char *base = strrchr(interp, '/') != NULL ? strrchr(interp, '/') + 1 : interp;
  if (strcmp(base, "env") == 0) {
    // env [-S] [-i] [NAME=VALUE]... PROGRAM: env is dynamic; what it runs is the program.
    for (char *w = strtok_r(NULL, " \t", &save); w != NULL; w = strtok_r(NULL, " \t", &save)) {
      if (w[0] == '-' || strchr(w, '=') != NULL) {
        continue;
      }
      static char found[PATH_MAX];
      return target_find(w, found, sizeof found) == 0 ? check_file(s, found, lib, depth + 1) : 0;
    }
  }
  return check_file(s, interp, lib, depth + 1);
}

/* An ELF program whose first `headlen` bytes are in head[]. */
static int check_elf(const subject_t *s, const char *program, int fd, const unsigned char *head,
                     size_t headlen, const elfid_t *lib) {
  if (headlen < EI_NIDENT) {
    return 0;
  }
  if (head[EI_CLASS] != lib->cls || head[EI_DATA] != lib->data) {
    return say(s, program, "is a %s program and the library is %s: the loader skips it",
               head[EI_CLASS] == ELFCLASS32 ? "32-bit" : "differently built",
               lib->cls == ELFCLASS64 ? "64-bit" : "32-bit");
  }
  Elf64_Ehdr eh;
  if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) {
    return 0;
  }
  if (eh.e_machine != lib->machine) {
    return say(s, program,
               "is built for another machine (ELF machine %u) than the library (%u): the "
               "loader skips it",
               eh.e_machine, lib->machine);
  }
  if ((eh.e_type != ET_EXEC && eh.e_type != ET_DYN) || eh.e_phentsize != sizeof(Elf64_Phdr) ||
      eh.e_phnum == 0 || eh.e_phnum > PHDR_MAX) {
    return 0;
  }
  for (unsigned i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph;
    if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + i * sizeof ph)) != (ssize_t)sizeof ph) {
      return 0;
    }
    if (ph.p_type != PT_INTERP) {
      continue;
    }
    char interp[PATH_MAX] = "";
    size_t n = ph.p_filesz < sizeof interp - 1 ? ph.p_filesz : sizeof interp - 1;
    if (pread(fd, interp, n, (off_t)ph.p_offset) != (ssize_t)n) {
      return 0;
    }
    interp[n] = '\0';
    const char *base = strrchr(interp, '/') != NULL ? strrchr(interp, '/') + 1 : interp;
    if (strncmp(base, "ld-musl", 7) == 0) {
      return say(s, program,
                 "uses musl's loader ('%s'), which cannot load a library built for glibc", interp);
    }
    return 0;
  }
  if (is_loader(program)) {
    return 0;
  }
  return say(s, program,
             "is statically linked: no loader runs, so no library can be preloaded into it");
}

static int check_file(const subject_t *s, const char *program, const elfid_t *lib, int depth) {
  if (depth > MAX_DEPTH) {
    return 0;
  }
  int fd = open(program, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    // Execute-only: the kernel can run only a binary so; its set-ID bits still count.
    return check_secure(s, program);
  }
  char head[SHEBANG_MAX + 1];
  ssize_t n = pread(fd, head, SHEBANG_MAX, 0);
  int rc = 0;
  if (n >= 2 && head[0] == '#' && head[1] == '!') {
    head[n] = '\0';
    head[strcspn(head, "\n")] = '\0';
    rc = check_script(s, head + 2, lib, depth);
  } else if (n >= SELFMAG && memcmp(head, ELFMAG, SELFMAG) == 0) {
    rc = check_secure(s, program);
    rc = rc != 0 ? rc : check_elf(s, program, fd, (const unsigned char *)head, (size_t)n, lib);
  } else if (n >= 0) {
    // Neither: execvp hands the file to /bin/sh (ENOEXEC), which is then the program.
    rc = check_file(s, "/bin/sh", lib, depth + 1);
  }
  close(fd);
  return rc;
}

int target_check(const char *path, const char *lib, char *why, size_t whylen) {
  elfid_t id;
  if (whylen > 0) {
    why[0] = '\0';
  }
  if (read_elfid(lib, &id) != 0) {
    return 0;
  }
  subject_t s = {path, why, whylen};
  return check_file(&s, path, &id, 0);
}
