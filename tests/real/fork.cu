/* fork: a child that does not use CUDA runs and exits (through exit(), so every exit handler
 * runs) without a word on stderr; a child that execs the program again uses CUDA as a fresh
 * process (its facts carry an "exec_" prefix); the parent's memory and bytes are untouched by
 * either, and it goes on allocating afterwards. */
#include <sys/wait.h>
#include <unistd.h>

#include "tests/real/real.h"

static const size_t N = MiB + 17;

static int fresh(void) {
  size_t total = real_total("exec_start");
  void *p = NULL;
  OK("exec_malloc", real_malloc(&p, N));
  real_put("exec", p, N, 52);
  real_get_ok("exec", p, N, 52);
  OK("exec_free", cudaFree(p));
  real_over_cap("exec_over", total);
  return real_end();
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "fresh") == 0) {
    return fresh();
  }
  size_t total = real_total("start");
  unsigned char *host = (unsigned char *)malloc(N);
  void *p = NULL;
  real_pattern(host, N, 51);
  OK("malloc", real_malloc(&p, N));
  real_put("parent", p, N, 51);

  /* A child without CUDA: its stderr goes to a pipe the parent reads. */
  int fds[2];
  CHECK("pipe", pipe(fds) == 0);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    unsigned sum = 0;
    for (size_t i = 0; i < N; i++) {
      sum += host[i];
    }
    exit(sum == 0 ? 1 : 0);
  }
  close(fds[1]);
  char err[256];
  ssize_t got = read(fds[0], err, sizeof err - 1);
  close(fds[0]);
  int status = -1;
  CHECK("plain_child_waited", waitpid(pid, &status, 0) == pid);
  CHECK("plain_child_exit_0", WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK("plain_child_silent", got == 0);
  if (got > 0) {
    err[got] = '\0';
    printf("plain_child_said=%s\n", err);
  }

  /* A child that execs this program: CUDA from scratch. */
  fflush(stdout);
  pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", argv[0], "fresh", (char *)NULL);
    _exit(127);
  }
  CHECK("exec_child_waited", waitpid(pid, &status, 0) == pid);
  CHECK("exec_child_exit_0", WIFEXITED(status) && WEXITSTATUS(status) == 0);

  /* The parent's memory is its own still. */
  real_get_ok("parent", p, N, 51);
  OK("free", cudaFree(p));
  real_fill("after_children", 4 * MiB, total);
  real_over_cap("over", total);
  free(host);
  return real_end();
}
