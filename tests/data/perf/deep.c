/* Load for traced_perf's unwinding tests, built -O2 -fomit-frame-pointer
 * against deep_lib.c (a shared library). One thread, a known call tree
 * 7 frames deep from main:
 *   main -> app_run -> app_step -> lib_entry -> lib_mid -> leaf_three
 *                                                       -> leaf_one
 *                                               (each -> spin)
 * leaf_three gets 3 units of work for every 1 of leaf_one: 75 % / 25 %
 * of the CPU time below lib_mid.
 *   deep N          N rounds (about 1 ms of work per unit)
 *   deep hostile N  as above, and between rounds rewrites the dead part
 *                   of its stack with garbage and maps/unmaps a copy of
 *                   the library named by $DEEP_LIB_COPY (stale maps
 *                   mid-sample)
 *   deep bigstack N N rounds under 24 frames of 4 KiB each: more stack
 *                   than a sample copies (the copy is always full)
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

void lib_entry(long units, int three);

static int hostile;
static int bigstack;

__attribute__((noinline)) static void scribble(void) {
  /* Garbage where the next frames will be: a walker that trusts stale
   * words finds pointers into nowhere. */
  volatile unsigned long junk[512];
  for (int i = 0; i < 512; i++) junk[i] = 0x7fff00000000ul + (unsigned long)i * 8;
  __asm__ volatile("" ::"r"(junk) : "memory");
}

__attribute__((noinline)) static void app_step(int round) {
  lib_entry(3, 1);
  lib_entry(1, 0);
  if (hostile) {
    scribble();
    void *h = dlopen(getenv("DEEP_LIB_COPY"), RTLD_NOW | RTLD_LOCAL);
    if (h) dlclose(h);
  }
  __asm__ volatile("" ::"r"(round));
}

__attribute__((noinline)) static void deep_frames(int depth, int round) {
  volatile char pad[4096];
  pad[0] = (char)depth;
  if (depth > 0)
    deep_frames(depth - 1, round);
  else
    app_step(round);
  __asm__ volatile("" ::"r"(pad) : "memory");
}

__attribute__((noinline)) static void app_run(long rounds) {
  for (long r = 0; r < rounds; r++) {
    if (bigstack)
      deep_frames(24, (int)r);
    else
      app_step((int)r);
  }
  __asm__ volatile("");
}

int main(int argc, char **argv) {
  long rounds = 200;
  if (argc > 2 && strcmp(argv[1], "hostile") == 0) {
    hostile = 1;
    rounds = atol(argv[2]);
  } else if (argc > 2 && strcmp(argv[1], "bigstack") == 0) {
    bigstack = 1;
    rounds = atol(argv[2]);
  } else if (argc > 1) {
    rounds = atol(argv[1]);
  }
  app_run(rounds);
  return 0;
}
