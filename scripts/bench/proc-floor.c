/* Floor for scripts/bench/proc-scan.sh: the CPU cost of the bare syscalls
 * of a process-tree scan, per syscall set, without any parsing. Each file is
 * read with one read() (a short read is the end of a /proc file). Sets:
 *   status+cmdline             the status path (names, ppid, uid, NSpid,
 *                              Threads, Kthread in one file)
 *   pidfd+ns+cmdline+task      the pidfd path: PIDFD_GET_INFO, ns/pid link,
 *                              cmdline, stat() of task/ (thread count)
 *   pidfd+ns+cmdline+comm+task the pidfd path when the main thread's name
 *                              is recorded
 *   pidfd+cmdline              ppid/uid/argv only (no namespace check, no
 *                              thread count, no name): not a full scan
 *   scan                       every syscall of the default full scan with
 *                              thread names: the /proc listing (timed here,
 *                              untimed in the sets above), status and
 *                              cmdline of each process (no cmdline for a
 *                              kernel thread, `Kthread: 1`; kernels before
 *                              6.4 lack the line), and for a process
 *                              with more than one thread (the `Threads:`
 *                              line of its status) the listing of task/
 *                              and each other thread's comm
 *   scan_at                    the same syscalls in the form the scan
 *                              makes them: every per-pid file and task/
 *                              opened with openat() relative to an open
 *                              /proc (one path lookup fewer per file than
 *                              open("/proc/PID/...")), directories read
 *                              with getdents64 into one buffer
 * The sets take turns every iteration. Prints one line per set in the bench
 * format: name processes threads us_per_iter us_per_proc. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

struct pidfd_info_v0 {
  uint64_t mask, cgroupid;
  uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
  int32_t exit_code;
};
#define GET_INFO _IOWR(0xFF, 11, struct pidfd_info_v0)

static double cpu_us(void) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec * 1e6 + r.ru_utime.tv_usec + r.ru_stime.tv_sec * 1e6 + r.ru_stime.tv_usec;
}

static char buf[16384];

static void read_file(int pid, const char* name) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", pid, name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  read(fd, buf, sizeof buf);
  close(fd);
}

static void pidfd_info(int pid) {
  int fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) return;
  struct pidfd_info_v0 info = {.mask = 3};
  ioctl(fd, GET_INFO, &info);
  close(fd);
}

static void ns_link(int pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/ns/pid", pid);
  readlink(path, buf, 64);
}

static void task_nlink(int pid) {
  char path[64];
  struct stat st;
  snprintf(path, sizeof path, "/proc/%d/task", pid);
  stat(path, &st);
}

#define NSETS 6
static const char* names[NSETS] = {"floor_status+cmdline", "floor_pidfd+ns+cmdline+task",
                                   "floor_pidfd+ns+cmdline+comm+task", "floor_pidfd+cmdline",
                                   "floor_scan", "floor_scan_at"};

/* The `Threads:` count of the status just read into `buf` (0 if absent). */
static int status_threads(int n) {
  if (n <= 0) return 0;
  buf[n < (int)sizeof buf ? n : (int)sizeof buf - 1] = 0;
  const char* t = strstr(buf, "\nThreads:");
  return t ? atoi(t + 9) : 0;
}

/* Whether the status just read into `buf` (NUL-terminated by
 * status_threads) is a kernel thread's: the scan reads no cmdline then. */
static int status_kthread(int n) { return n > 0 && strstr(buf, "\nKthread:\t1") != NULL; }

/* The scan's per-process syscalls: status, cmdline (not for kernel
 * threads), and the other threads' names when there are other threads. */
static void scan_process(int pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/status", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  int n = read(fd, buf, sizeof buf);
  int threads = status_threads(n);
  int kthread = status_kthread(n);
  close(fd);
  if (!kthread) read_file(pid, "cmdline");
  if (threads <= 1) return;
  snprintf(path, sizeof path, "/proc/%d/task", pid);
  DIR* d = opendir(path);
  struct dirent* e;
  while (d && (e = readdir(d))) {
    int tid = atoi(e->d_name);
    if (tid <= 0 || tid == pid) continue;
    char comm[64];
    snprintf(comm, sizeof comm, "task/%d/comm", tid);
    read_file(pid, comm);
  }
  if (d) closedir(d);
}

/* The scan set: lists /proc itself, inside the timing. */
static void scan_all(void) {
  DIR* d = opendir("/proc");
  struct dirent* e;
  while (d && (e = readdir(d))) {
    int p = atoi(e->d_name);
    if (p > 0) scan_process(p);
  }
  if (d) closedir(d);
}

/* scan_at: read `rel` below the open /proc `proc` with one read(). */
static int read_at(int proc, const char* rel) {
  int fd = openat(proc, rel, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int n = read(fd, buf, sizeof buf);
  close(fd);
  return n;
}

static char dents[32768];

/* The numeric subdirectories of `rel` below `proc` into ids[] (at most
 * max); their count. Listed first, then visited, as the scan does. */
static int list_at(int proc, const char* rel, int* ids, int max) {
  int fd = openat(proc, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return 0;
  int count = 0;
  for (;;) {
    long n = syscall(SYS_getdents64, fd, dents, sizeof dents);
    if (n <= 0) break;
    for (long at = 0; at < n;) {
      unsigned short reclen;
      memcpy(&reclen, dents + at + 16, 2);
      int id = atoi(dents + at + 19);
      if (id > 0 && dents[at + 18] == DT_DIR && count < max) ids[count++] = id;
      at += reclen;
    }
  }
  close(fd);
  return count;
}

static void process_at(int proc, int pid) {
  static int tids[65536];
  char rel[64];
  snprintf(rel, sizeof rel, "%d/status", pid);
  int n = read_at(proc, rel);
  int threads = status_threads(n);
  snprintf(rel, sizeof rel, "%d/cmdline", pid);
  if (!status_kthread(n)) read_at(proc, rel);
  if (threads <= 1) return;
  snprintf(rel, sizeof rel, "%d/task", pid);
  int count = list_at(proc, rel, tids, 65536);
  for (int i = 0; i < count; i++) {
    if (tids[i] == pid) continue;
    snprintf(rel, sizeof rel, "%d/task/%d/comm", pid, tids[i]);
    read_at(proc, rel);
  }
}

/* The scan_at set: the /proc listing timed, like scan. */
static void scan_all_at(int proc) {
  static int pids[65536];
  int n = list_at(proc, ".", pids, 65536);
  for (int i = 0; i < n; i++) process_at(proc, pids[i]);
}

static void scan_one(int set, int pid) {
  switch (set) {
    case 0: read_file(pid, "status"); read_file(pid, "cmdline"); break;
    case 1: pidfd_info(pid); ns_link(pid); read_file(pid, "cmdline"); task_nlink(pid); break;
    case 2: pidfd_info(pid); ns_link(pid); read_file(pid, "cmdline"); read_file(pid, "comm"); task_nlink(pid); break;
    case 3: pidfd_info(pid); read_file(pid, "cmdline"); break;
  }
}

int main(int argc, char** argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 20;
  static int pids[65536];
  int n = 0;
  DIR* d = opendir("/proc");
  struct dirent* e;
  while (d && (e = readdir(d)) && n < 65536) {
    int p = atoi(e->d_name);
    if (p > 0) pids[n++] = p;
  }
  if (d) closedir(d);
  int proc = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  double total[NSETS] = {0};
  for (int it = 0; it < iters; it++) {
    for (int s = 0; s < NSETS; s++) {
      double t = cpu_us();
      if (s == 4)
        scan_all();
      else if (s == 5)
        scan_all_at(proc);
      else
        for (int i = 0; i < n; i++) scan_one(s, pids[i]);
      total[s] += cpu_us() - t;
    }
  }
  for (int s = 0; s < NSETS; s++) {
    double per_iter = total[s] / iters;
    printf("%s %d - %.0f %.2f\n", names[s], n, per_iter, per_iter / (n ? n : 1));
  }
  return 0;
}
