#!/bin/sh
# targets: aarch64
# timeout: 150
# UNWIND_DWARF against hostile targets on aarch64 (tests/perf/unwinding.rs
# does the same on x86_64), three at once in one recording:
# `deep_dyn hostile` rewrites the dead part of its stack and maps and
# unmaps /vm/lib/libdeep_copy.so between rounds; `deep bigstack` runs
# under 24 frames of 4 KiB, more stack than any copy (the walk reads on
# in /proc/PID/mem); deep_bad's /vm/bad/libdeep.so has a scrambled
# .eh_frame. traced_perf goes on: every sample is in the trace, the cut
# ones with their unwind_error, as many as its log and the end line count.
set -eu
# Nice 19, a fixed period and long daemon timeouts: see 40-perf.sh.
low='renice -n 19 -p $$ >/dev/null && exec "$@"'
before=$(pidof traced_perf)
DEEP_LIB_COPY=/vm/lib/libdeep_copy.so sh -c "$low" sh /vm/bin/deep_dyn hostile 100000000 &
echo $! >"$OUT/hostile.pid"
sh -c "$low" sh /vm/bin/deep bigstack 100000000 &
echo $! >"$OUT/big.pid"
sh -c "$low" sh /vm/bin/deep_bad 100000000 &
echo $! >"$OUT/bad.pid"
cat >"$OUT/hostile.pbtx" <<CFG
duration_ms: 8000
flush_timeout_ms: 30000
data_source_stop_timeout_ms: 30000
buffers { size_kb: 32768 }
data_sources { config { name: "linux.perf" perf_event_config {
    timebase { period: 20000000 counter: SW_CPU_CLOCK }
    callstack_sampling { scope { target_cmdline: "deep_dyn" target_cmdline: "deep" target_cmdline: "deep_bad" } }
    ring_buffer_pages: 1024 ring_buffer_read_period_ms: 100 } } }
CFG
rc=0
"$TRACEBOX" --txt -c "$OUT/hostile.pbtx" -o "$OUT/hostile.pftrace" 2>"$OUT/hostile.err" || rc=$?
kill $(cat "$OUT/hostile.pid" "$OUT/big.pid" "$OUT/bad.pid")
# The stop's counters, and the daemon the same process as before.
grep "linux.perf: .* samples (" /var/log/tracebox.log | tail -n 1 >"$OUT/perf.stats"
after=$(pidof traced_perf)
echo "$before $after" >"$OUT/traced_perf.pids"
cat "$OUT/hostile.err" "$OUT/perf.stats"
exit $rc
