/* Load for the traced_perf tests, built at test time with frame pointers
 * in every function (gcc -O0 -fno-omit-frame-pointer).
 *   hot split N    two threads: hot_three() does 3N units of work,
 *                  hot_one() N units (a 3:1 split of CPU time)
 *   hot syscall N  one thread reading /dev/zero N times (kernel time)
 *   hot nap N      one thread sleeping 1 ms N times (context switches)
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile unsigned long sink;

/* A local accumulator: the two threads must not share a cache line, or
 * their overlap runs slower than the solo tail and the CPU split drifts
 * from 3:1 with the machine's load. */
__attribute__((noinline)) static void work_unit(void) {
  volatile unsigned long acc = 0;
  for (int i = 0; i < 100000; i++) acc += i * 7;
}

__attribute__((noinline)) void hot_three(long n) {
  for (long i = 0; i < 3 * n; i++) work_unit();
}

__attribute__((noinline)) void hot_one(long n) {
  for (long i = 0; i < n; i++) work_unit();
}

static void *three_main(void *arg) { hot_three((long)arg); return NULL; }
static void *one_main(void *arg) { hot_one((long)arg); return NULL; }

__attribute__((noinline)) void read_zero_loop(long n) {
  static char buf[1 << 16];
  int fd = open("/dev/zero", O_RDONLY);
  for (long i = 0; i < n; i++) sink += read(fd, buf, sizeof buf);
  close(fd);
}

__attribute__((noinline)) void nap_loop(long n) {
  for (long i = 0; i < n; i++) usleep(1000);
}

int main(int argc, char **argv) {
  long n = argc > 2 ? atol(argv[2]) : 100;
  if (argc > 1 && strcmp(argv[1], "nap") == 0) {
    nap_loop(n);
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "syscall") == 0) {
    read_zero_loop(n);
    return 0;
  }
  pthread_t a, b;
  pthread_create(&a, NULL, three_main, (void *)n);
  pthread_create(&b, NULL, one_main, (void *)n);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  return 0;
}
