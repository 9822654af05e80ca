/* The shared library of deep.c: lib_entry -> lib_mid -> leaf_three or
 * leaf_one. Built -O2 -fomit-frame-pointer: only .eh_frame knows these
 * frames. The empty asm after each call keeps it from being a tail call
 * (which would drop the caller's frame from every stack). */
static volatile unsigned long sink;

__attribute__((noinline)) static void spin(long units) {
  for (long u = 0; u < units; u++)
    for (int i = 0; i < 500000; i++) sink += (unsigned long)i * 7;
}

__attribute__((noinline)) void leaf_three(long units) {
  spin(units);
  __asm__ volatile("");
}

__attribute__((noinline)) void leaf_one(long units) {
  spin(units);
  __asm__ volatile("");
}

__attribute__((noinline)) void lib_mid(long units, int three) {
  if (three)
    leaf_three(units);
  else
    leaf_one(units);
  __asm__ volatile("");
}

__attribute__((noinline)) void lib_entry(long units, int three) {
  lib_mid(units, three);
  __asm__ volatile("");
}
