#!/bin/sh
# targets: x86_64 aarch64
# timeout: 180
# traced_perf's default user unwinding (UNWIND_DWARF: `callstack_sampling`
# without `user_frames`) on two programs built -O2 -fomit-frame-pointer
# from tests/data/perf/deep.c and deep_lib.c, running side by side:
# /vm/bin/deep, static, and /vm/bin/deep_dyn, whose lib_* frames are in
# the shared library /vm/lib/libdeep.so. Only .eh_frame knows the frames
# main -> app_run -> app_step -> lib_entry -> lib_mid -> leaf_three (3/4
# of the work) or leaf_one (1/4) -> spin.
# On x86_64 a third, /vm/bin/deep_clang: deep built static by clang.
# Then the same programs under the kernel's frame-pointer walk, whose
# stacks must stop short (so the first cannot pass by accident), and
# `tracebox report --profile` on the device.
set -eu
# Nice 19, a fixed period and long daemon timeouts: see 40-perf.sh.
low='renice -n 19 -p $$ >/dev/null && exec "$@"'
sh -c "$low" sh /vm/bin/deep 100000000 &
deep=$!
sh -c "$low" sh /vm/bin/deep_dyn 100000000 &
dyn=$!
echo "$deep" >"$OUT/deep.pid"
echo "$dyn" >"$OUT/deep_dyn.pid"
clang_pid=
if [ -x /vm/bin/deep_clang ]; then
    sh -c "$low" sh /vm/bin/deep_clang 100000000 &
    clang_pid=$!
    echo "$clang_pid" >"$OUT/deep_clang.pid"
fi
# DWARF copies 65,280 bytes of user stack with every sample: 2,048 pages
# (8 MiB) a CPU hold ~120 of them; at one sample per 20 ms of CPU and a
# read every 100 ms the ring holds ~20 read periods (1,024 pages lost
# records when traced_perf took 4 ms of emulated CPU per sample).
# 24 s of DWARF samples: 600-1,000 per program, for the 75/25 split within 5
# points (10 s gave ~350-450 and splits up to 77.8 %; 16 s on x86_64, three
# programs, ~400 and 71.9 %).
record() { # NAME DURATION_MS USER_FRAMES_LINE
    cat >"$OUT/$1.pbtx" <<CFG
duration_ms: $2
flush_timeout_ms: 30000
data_source_stop_timeout_ms: 30000
buffers { size_kb: 32768 }
data_sources { config { name: "linux.perf" perf_event_config {
    timebase { period: 20000000 counter: SW_CPU_CLOCK }
    callstack_sampling { scope { target_cmdline: "deep" target_cmdline: "deep_dyn" target_cmdline: "deep_clang" } $3 }
    ring_buffer_pages: 2048 ring_buffer_read_period_ms: 100 } } }
data_sources { config { name: "linux.process_stats" } }
CFG
    "$TRACEBOX" --txt -c "$OUT/$1.pbtx" -o "$OUT/$1.pftrace" 2>"$OUT/$1.err"
}
rc=0
record dwarf 24000 "" || rc=$?
[ $rc -ne 0 ] || record kernel_fp 4000 "user_frames: UNWIND_KERNEL_FRAME_POINTER" || rc=$?
kill "$deep" "$dyn" $clang_pid
# The profile view on the device, of the program with the shared library.
[ $rc -ne 0 ] || "$TRACEBOX" report --profile --pid "$dyn" "$OUT/dwarf.pftrace" >"$OUT/profile.txt" || rc=$?
cat "$OUT"/*.err
grep -E "unwind|stack" /var/log/tracebox.log | tail -n 5 || true
exit $rc
