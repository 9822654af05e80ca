/* Load generator of scripts/bench/vm-ftrace.sh inside a VM guest (the
 * guest has no Rust toolchain's examples/bench_load; these are the same
 * two loads):
 *   vm-load pingpong SECONDS          two threads bouncing a byte over a
 *                                     socket pair (SCHED_FIFO when allowed):
 *                                     a sched_switch / sched_waking storm;
 *                                     prints "round_trips=N"
 *   vm-load marker PATH RATE SECONDS  32-byte strings into PATH (a
 *                                     trace_marker) at RATE/s (0 = as fast
 *                                     as possible); prints "written=N failed=N"
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int set_fifo(void) {
  struct sched_param p = {.sched_priority = 1};
  return sched_setscheduler(0, SCHED_FIFO, &p) == 0;
}

static void *echo(void *arg) {
  int fd = *(int *)arg;
  char b;
  set_fifo();
  while (read(fd, &b, 1) == 1 && b != 0)
    if (write(fd, &b, 1) != 1) break;
  return NULL;
}

static int pingpong(double seconds) {
  int sv[2];
  pthread_t t;
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return perror("socketpair"), 1;
  pthread_create(&t, NULL, echo, &sv[1]);
  int fifo = set_fifo();
  double end = now() + seconds;
  unsigned long trips = 0;
  char b = 1;
  while (now() < end) {
    /* Few trips between clock reads: under TCG a trip takes milliseconds. */
    for (int i = 0; i < 16; i++) {
      if (write(sv[0], &b, 1) != 1 || read(sv[0], &b, 1) != 1) goto out;
    }
    trips += 16;
  }
out:
  b = 0;
  if (write(sv[0], &b, 1) != 1) perror("write");
  pthread_join(t, NULL);
  printf("load=pingpong round_trips=%lu fifo=%d\n", trips, fifo);
  return 0;
}

static int marker(const char *path, double rate, double seconds) {
  int fd = open(path, O_WRONLY);
  if (fd < 0) return perror(path), 1;
  const char *msg = "tbx-bench marker thread 00000000\n";
  size_t len = strlen(msg);
  double start = now(), end = start + seconds;
  unsigned long written = 0, failed = 0;
  for (;;) {
    for (int i = 0; i < 64; i++) {
      if (write(fd, msg, len) == (ssize_t)len)
        written++;
      else
        failed++;
    }
    double t = now();
    if (t >= end) break;
    if (rate > 0) {
      double due = start + (double)(written + failed) / rate;
      if (due > t) {
        double d = (due < end ? due : end) - t;
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        nanosleep(&ts, NULL);
      }
    }
  }
  printf("load=marker written=%lu failed=%lu\n", written, failed);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "pingpong") == 0) return pingpong(atof(argv[2]));
  if (argc == 5 && strcmp(argv[1], "marker") == 0) return marker(argv[2], atof(argv[3]), atof(argv[4]));
  fprintf(stderr, "usage: vm-load pingpong SECONDS | marker PATH RATE SECONDS\n");
  return 2;
}
