#!/bin/sh
# traced_perf (started at boot) samples a known program, /vm/bin/hot
# (tests/data/perf/hot.c, with symbols): callstacks unwound by the kernel
# (asked for: DWARF, the default, copies 64 KiB of stack per sample and
# would need far larger rings than this small one),
# named on the device from the binary's .symtab and /proc/kallsyms.
set -eu
# A fixed period (every 50 ms of CPU), not a frequency: under TCG the
# kernel lowers perf_event_max_sample_rate and a frequency never settles,
# and in the aarch64 guest traced_perf needs 1-2 ms of CPU per sample and
# ~3 s to load kallsyms. The load runs at nice 19 so that the daemons are
# not starved by three busy threads on two emulated CPUs.
# Long-lived: a process gone before traced_perf reads its samples can no
# longer be named (its maps are gone).
# (BusyBox here has renice, not nice: the shell lowers itself, then execs.)
low='renice -n 19 -p $$ >/dev/null && exec "$@"'
sh -c "$low" sh /vm/bin/hot split 100000000 &
split=$!
sh -c "$low" sh /vm/bin/hot syscall 1000000000 &
sys=$!
# The timeouts: an emulated board under a loaded host can stall a daemon
# for seconds (its first kernel frame waits for kallsyms, seconds to load
# here), as a slow board's config would allow for.
cat >"$OUT/config.pbtx" <<CFG
duration_ms: 8000
flush_timeout_ms: 30000
data_source_stop_timeout_ms: 30000
buffers { size_kb: 16384 }
data_sources { config { name: "linux.perf" perf_event_config {
    timebase { period: 50000000 counter: SW_CPU_CLOCK }
    callstack_sampling { scope { target_cmdline: "hot" } kernel_frames: true
        user_frames: UNWIND_KERNEL_FRAME_POINTER }
    ring_buffer_pages: 64 ring_buffer_read_period_ms: 100 } } }
data_sources { config { name: "linux.process_stats" } }
CFG
rc=0
"$TRACEBOX" --txt -c "$OUT/config.pbtx" -o "$OUT/trace.pftrace" 2>"$OUT/client.err" || rc=$?
kill "$split" "$sys"
cat "$OUT/client.err"
exit $rc
