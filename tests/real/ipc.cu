/* CUDA IPC between two processes: the program exports a device allocation (the second of two,
 * so under gpucap it lies inside a pool region or shares a unit of a VMM-backed pool), starts a copy of itself that opens the handle,
 * checks the exporter's bytes, writes its own and closes the handle; the exporter then sees the
 * importer's bytes. The importer's facts are printed with an "importer_" prefix. Both processes
 * must run under the same gpucap settings (docs/compatibility.md: IPC of pooled blocks needs
 * gpucap on both sides). */
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/real/real.h"

extern char **environ;
static const size_t N = 2 * MiB + 512;

static int importer(const char *hex) {
  cudaIpcMemHandle_t h;
  for (size_t i = 0; i < sizeof h.reserved; i++) {
    unsigned v = 0;
    sscanf(hex + 2 * i, "%2x", &v);
    h.reserved[i] = (char)v;
  }
  unsigned char *back = (unsigned char *)malloc(N);
  void *p = NULL;
  OK("importer_open", cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
  OK("importer_copy", cudaMemcpy(back, p, N, cudaMemcpyDeviceToHost));
  CHECK("importer_sees_exporter_bytes", real_pattern_ok(back, N, 21));
  real_pattern(back, N, 22);
  OK("importer_write", cudaMemcpy(p, back, N, cudaMemcpyHostToDevice));
  OK("importer_sync", cudaDeviceSynchronize());
  void *again = NULL;
  OK("importer_open_again", cudaIpcOpenMemHandle(&again, h, cudaIpcMemLazyEnablePeerAccess));
  CHECK("importer_same_address", again == p);
  OK("importer_close_again", cudaIpcCloseMemHandle(again));
  OK("importer_close", cudaIpcCloseMemHandle(p));
  free(back);
  return real_end();
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "import") == 0) {
    return importer(argv[2]);
  }
  fflush(stdout);
  void *first = NULL, *p = NULL;
  OK("malloc_first", real_malloc(&first, 1000));
  OK("malloc", real_malloc(&p, N));
  unsigned char *host = (unsigned char *)malloc(N);
  real_pattern(host, N, 21);
  OK("copy_h2d", cudaMemcpy(p, host, N, cudaMemcpyHostToDevice));
  cudaIpcMemHandle_t h;
  OK("get_handle", cudaIpcGetMemHandle(&h, p));
  cudaIpcMemHandle_t h2;
  OK("get_handle_again", cudaIpcGetMemHandle(&h2, p));
  CHECK("same_handle", memcmp(&h, &h2, sizeof h) == 0);
  char hex[2 * sizeof h.reserved + 1];
  for (size_t i = 0; i < sizeof h.reserved; i++) {
    snprintf(hex + 2 * i, 3, "%02x", (unsigned char)h.reserved[i]);
  }
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  self[len > 0 ? len : 0] = '\0';
  char *args[] = {self, (char *)"import", hex, NULL};
  fflush(stdout);
  pid_t pid;
  int status = -1;
  CHECK("spawn",
        posix_spawn(&pid, self, NULL, NULL, args, environ) == 0 && waitpid(pid, &status, 0) == pid);
  CHECK("importer_succeeded", WIFEXITED(status) && WEXITSTATUS(status) == 0);
  OK("copy_d2h", cudaMemcpy(host, p, N, cudaMemcpyDeviceToHost));
  CHECK("exporter_sees_importer_bytes", real_pattern_ok(host, N, 22));
  OK("free", cudaFree(p));
  OK("free_first", cudaFree(first));
  free(host);
  return real_end();
}
