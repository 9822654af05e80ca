#!/bin/sh
# targets: x86_64 aarch64
# timeout: 240
# traced_perf's default user unwinding (UNWIND_DWARF: `callstack_sampling`
# without `user_frames`) on two programs built -O2 -fomit-frame-pointer
# from tests/data/perf/deep.c and deep_lib.c, running side by side:
# /vm/bin/deep, static, and /vm/bin/deep_dyn, whose lib_* frames are in
# the shared library /vm/lib/libdeep.so. Only .eh_frame knows the frames
# main -> app_run -> app_step -> lib_entry -> lib_mid -> leaf_three (3/4
# of the work) or leaf_one (1/4) -> spin.
# The same built by clang: on x86_64 /vm/bin/deep_clang (static) in the
# same recording; on aarch64 deep_clang and deep_clang_dyn (on
# /vm/lib/clang/libdeep.so) in a second one, while the gcc ones are
# stopped (four programs on two CPUs would halve each one's samples).
# Then all of them under the kernel's frame-pointer walk, whose stacks
# must stop short (so the first cannot pass by accident), and `tracebox
# report --profile` on the device.
# aarch64 also has Debian's perf (tests/vm/guest-debs.sh): `perf record
# --call-graph dwarf` samples deep_dyn during the first recording, and
# `perf report` on the device gives the shares the check compares.
set -eu
# Nice 19, a fixed period and long daemon timeouts: see 40-perf.sh.
low='renice -n 19 -p $$ >/dev/null && exec "$@"'
start() { # NAME: runs /vm/bin/NAME, its pid in $OUT/NAME.pid and $pid
    sh -c "$low" sh "/vm/bin/$1" 100000000 &
    pid=$!
    echo "$pid" >"$OUT/$1.pid"
}
first="deep deep_dyn" later=
if [ -x /vm/bin/deep_clang_dyn ]; then
    later="deep_clang deep_clang_dyn"
elif [ -x /vm/bin/deep_clang ]; then
    first="$first deep_clang"
fi
for p in $first; do start "$p"; done
pids_first=$(cd "$OUT" && cat $(for p in $first; do echo "$p.pid"; done))
dyn=$(cat "$OUT/deep_dyn.pid")
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
    callstack_sampling { scope { target_cmdline: "deep" target_cmdline: "deep_dyn" target_cmdline: "deep_clang" target_cmdline: "deep_clang_dyn" } $3 }
    ring_buffer_pages: 2048 ring_buffer_read_period_ms: 100 } } }
data_sources { config { name: "linux.process_stats" } }
CFG
    "$TRACEBOX" --txt -c "$OUT/$1.pbtx" -o "$OUT/$1.pftrace" 2>"$OUT/$1.err"
}
# Debian's perf runs on its own C library (tests/vm/guest-debs.sh); `env`
# execs it, so $! is perf's own pid (a backgrounded function would be a
# subshell that ignores the SIGINT).
perf_pid=
if [ -x /usr/bin/perf ]; then
    ma=$(cat /vm/multiarch)
    perf="env HOME=/tmp LD_LIBRARY_PATH=/lib/$ma:/usr/lib/$ma /usr/bin/perf"
    # perf's defaults (8,192 bytes of stack a sample) but the period: 10 ms
    # of CPU, twice our rate: a 75 % share's standard error is 1.4 points
    # over our ~1,000 samples, 1.0 over perf's ~2,000.
    $perf record -N -q -e cpu-clock -c 10000000 --call-graph dwarf \
        -p "$dyn" -o /tmp/perf.data 2>"$OUT/perf-record.err" &
    perf_pid=$!
fi
rc=0
record dwarf 24000 "" || rc=$?
if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid" 2>/dev/null || true
    # Stopped by SIGINT, perf record exits 130 after writing its file.
    prc=0
    wait "$perf_pid" || prc=$?
    [ $prc -eq 0 ] || [ $prc -eq 130 ] || { echo "perf record: exit $prc: $(cat "$OUT/perf-record.err")"; rc=1; }
fi
if [ -n "$later" ]; then
    # The clang programs alone: the gcc ones wait stopped.
    kill -STOP $pids_first
    for p in $later; do start "$p"; done
    [ $rc -ne 0 ] || record dwarf_clang 24000 "" || rc=$?
    kill -CONT $pids_first
fi
[ $rc -ne 0 ] || record kernel_fp 4000 "user_frames: UNWIND_KERNEL_FRAME_POINTER" || rc=$?
kill $(cd "$OUT" && cat *.pid)
# The profile view on the device, of the program with the shared library.
[ $rc -ne 0 ] || "$TRACEBOX" report --profile --pid "$dyn" "$OUT/dwarf.pftrace" >"$OUT/profile.txt" || rc=$?
# perf's view of the same program, unwound and named on the device
# (without inline frames: those need binutils' addr2line, which the
# guest lacks; perf would die of SIGPIPE).
if [ $rc -eq 0 ] && [ -n "$perf_pid" ]; then
    $perf report -i /tmp/perf.data --stdio --children --sort sym -q -g none --no-inline \
        >"$OUT/perf-report.txt" 2>"$OUT/perf-report.err" || rc=$?
    $perf report -i /tmp/perf.data --stats >"$OUT/perf-stats.txt" 2>&1 || true
    rm -f /tmp/perf.data
fi
cat "$OUT"/*.err
grep -E "unwind|stack" /var/log/tracebox.log | tail -n 5 || true
exit $rc
