#!/bin/sh
# traced_perf (started at boot) samples a known program, /vm/bin/hot
# (tests/data/perf/hot.c, with symbols): callstacks unwound by the kernel,
# named on the device from the binary's .symtab and /proc/kallsyms.
set -eu
# Long-lived: a process gone before traced_perf reads its samples can no
# longer be named (its maps are gone).
/vm/bin/hot split 100000000 &
split=$!
/vm/bin/hot syscall 1000000000 &
sys=$!
cat >"$OUT/config.pbtx" <<CFG
duration_ms: 4000
buffers { size_kb: 16384 }
data_sources { config { name: "linux.perf" perf_event_config {
    timebase { frequency: 250 counter: SW_CPU_CLOCK }
    callstack_sampling { scope { target_cmdline: "hot" } kernel_frames: true }
    ring_buffer_pages: 64 ring_buffer_read_period_ms: 100 } } }
data_sources { config { name: "linux.process_stats" } }
CFG
rc=0
"$TRACEBOX" --txt -c "$OUT/config.pbtx" -o "$OUT/trace.pftrace" 2>"$OUT/client.err" || rc=$?
kill "$split" "$sys"
cat "$OUT/client.err"
exit $rc
