/* Floor for scripts/bench-proc-scan.sh: the CPU cost of the bare syscalls
 * a process-tree scan cannot avoid (open+read+close of /proc/<pid>/status
 * and /proc/<pid>/cmdline for every pid), without any parsing. Prints one
 * line in the bench format: name processes threads us_per_iter us_per_proc. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

static double cpu_us(void) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec * 1e6 + r.ru_utime.tv_usec + r.ru_stime.tv_sec * 1e6 + r.ru_stime.tv_usec;
}

int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 20;
  static int pids[65536];
  static char buf[16384];
  int n = 0;
  DIR* d = opendir("/proc");
  struct dirent* e;
  while (d && (e = readdir(d)) && n < 65536) {
    int p = atoi(e->d_name);
    if (p > 0) pids[n++] = p;
  }
  if (d) closedir(d);
  const char* files[] = {"status", "cmdline"};
  double t = cpu_us();
  for (int it = 0; it < iters; it++) {
    for (int i = 0; i < n; i++) {
      for (int f = 0; f < 2; f++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/%s", pids[i], files[f]);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        while (read(fd, buf, sizeof buf) > 0) {
        }
        close(fd);
      }
    }
  }
  double per_iter = (cpu_us() - t) / iters;
  printf("floor_status+cmdline %d - %.0f %.2f\n", n, per_iter, per_iter / (n ? n : 1));
  return 0;
}
