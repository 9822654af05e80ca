#!/bin/sh
# targets: aarch64 x86_64
# timeout: 1500
# boot: own
# The guest half of scripts/bench/vm-ftrace.sh: trace-cmd and our
# recorder, one after the other in the same boot, on the same loads.
# Each recorder runs in a fresh cgroup (v2; cpu.stat's usage_usec counts
# every process it starts) with its own tracefs instance, 8 MiB per CPU,
# sched_switch and sched_waking on (trace_marker prints are always on).
# Per run, in $OUT: SCENARIO.REC.trace (the file it wrote) and
# SCENARIO.REC.line: the load's line, then whole_us= (the recorder's CPU,
# start to exit), load_us= (from the load's start to 1 s after its end),
# overrun= and dropped= (the instance's per-cpu stats summed, read after
# that drain, before the stop). The host counts the events.
set -eu
. /vm/lib.sh
T=$(tracefs)
LOAD_S=10
SCENARIOS="pingpong marker:0 marker:5000"
RECORDERS="tracecmd ours"
[ ! -r /vm/bench.env ] || . /vm/bench.env
BUF_KB=8192
export LD_LIBRARY_PATH=/lib/$(cat /vm/multiarch):/usr/lib/$(cat /vm/multiarch)

# The init script's daemons would only add noise: ours autostarts its own.
/etc/init.d/S60tracebox stop >/dev/null 2>&1 || true
grep -q " /sys/fs/cgroup cgroup2 " /proc/mounts || mount -t cgroup2 none /sys/fs/cgroup
trace-cmd --version 2>&1 | head -n 2 >"$OUT/tracecmd.version"
"$TRACEBOX" --version >"$OUT/tracebox.version" 2>&1 || true
uname -r >"$OUT/kernel"

usage() { sed -n 's/^usage_usec //p' "$1/cpu.stat"; }

run_one() { # SCENARIO REC
    sc="$1" rec="$2"
    cg="/sys/fs/cgroup/bench-$rec"
    mkdir "$cg"
    out="/tmp/$rec.trace"
    rm -f "$out" /tmp/"$rec".trace.cpu*
    case "$rec" in
    tracecmd)
        inst=tbx_bench_tc
        sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" \
            trace-cmd record -d --no-filter --compression none -o "$out" -B "$inst" -b "$BUF_KB" \
            -e sched:sched_switch -e sched:sched_waking >"$OUT/$sc.$rec.log" 2>&1 &
        ;;
    ours)
        inst=tbx_bench_ours
        cat >/tmp/ours.pbtx <<CFG
buffers { size_kb: 65536 fill_policy: DISCARD }
write_into_file: true
file_write_period_ms: 500
duration_ms: 600000
data_sources { config { name: "linux.ftrace" ftrace_config {
    instance_name: "$inst" buffer_size_kb: $BUF_KB
    ftrace_events: "sched/sched_switch" ftrace_events: "sched/sched_waking"
    ftrace_events: "ftrace/print" compact_sched { enabled: true } } } }
CFG
        sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" \
            "$TRACEBOX" --private-sockets --txt -c /tmp/ours.pbtx -o "$out" >"$OUT/$sc.$rec.log" 2>&1 &
        ;;
    esac
    rec_pid=$!
    i=0
    until [ "$(cat "$T/instances/$inst/tracing_on" 2>/dev/null)" = 1 ] &&
        [ "$(cat "$T/instances/$inst/events/sched/sched_switch/enable" 2>/dev/null)" = 1 ]; do
        i=$((i + 1))
        [ $i -le 600 ] || { echo "$rec did not start"; cat "$OUT/$sc.$rec.log"; return 1; }
        sleep 0.1
    done
    sleep 1
    before=$(usage "$cg")
    case "$sc" in
    pingpong) line=$(/vm/bin/vm-load pingpong "$LOAD_S") ;;
    marker:*) line=$(/vm/bin/vm-load marker "$T/instances/$inst/trace_marker" "${sc#marker:}" "$LOAD_S") ;;
    esac
    sleep 1
    load_us=$(($(usage "$cg") - before))
    overrun=$(cat "$T"/instances/$inst/per_cpu/cpu*/stats | awk '/^overrun:/ {s += $2} END {print s + 0}')
    dropped=$(cat "$T"/instances/$inst/per_cpu/cpu*/stats | awk '/^dropped events:/ {s += $3} END {print s + 0}')
    kill -INT "$rec_pid"
    wait "$rec_pid" || true
    # Autostarted daemons stop after the client; what is left goes.
    i=0
    while [ -s "$cg/cgroup.procs" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
    for p in $(cat "$cg/cgroup.procs"); do kill -KILL "$p" 2>/dev/null || true; done
    sleep 0.2
    whole_us=$(usage "$cg")
    rmdir "$cg"
    [ ! -d "$T/instances/$inst" ] || rmdir "$T/instances/$inst" 2>/dev/null || true
    echo "$line whole_us=$whole_us load_us=$load_us overrun=$overrun dropped=$dropped" >"$OUT/$sc.$rec.line"
    cat "$OUT/$sc.$rec.line"
    mv "$out" "$OUT/$sc.$rec.trace"
    rm -f /tmp/"$rec".trace.cpu*
}

for sc in $SCENARIOS; do
    for rec in $RECORDERS; do
        run_one "$sc" "$rec"
    done
done
