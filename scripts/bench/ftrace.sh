#!/usr/bin/env bash
# Issue 5: ftrace recording, trace-cmd vs our autostarted traced+traced_probes,
# same run, same load.
#
# Loads (examples/bench_load.rs, LOAD_S seconds each):
#   pingpong          two SCHED_FIFO threads bouncing a byte: sched_switch /
#                     sched_waking storm
#   marker:T:RATE     T threads writing 32 B strings to the recorder's own
#                     instance trace_marker at RATE/s in total (0 = max)
# Recorders, each in its own tracefs instance with 8 MiB per-CPU buffers and
# sched_switch, sched_waking enabled (trace_marker prints are always on):
#   tracecmd  trace-cmd record -d --no-filter --compression none -B tbx_bench_tc
#             ... (uncompressed, like ours; it exits 1
#             on this kernel after writing a complete file: ignored)
#   ours      target/release/tracebox --private-sockets --txt -c CFG -o OUT
#             (autostarts traced + traced_probes; write_into_file); pages
#             leave the kernel by splice() (worker threads, zero copy)
#   ours-read the same with TRACEBOX_FTRACE_READER=read: traced_probes uses
#             its non-blocking read() fallback on every cpu (not in the
#             default RECORDERS; for the splice vs read comparison)
# Each recorder runs in a fresh cpuacct cgroup, so its CPU includes every
# process it starts. Kernel per-CPU stats of the instance are sampled while
# it records; events lost = sum of `overrun` + `dropped events`.
# Lines on stdout:
#   bench=ftrace recorder=.. load=.. threads=.. rate=.. written=.. captured=..
#     kernel_overrun=.. kernel_dropped=.. missing=.. recorder_cpu_s=..
#     cpu_s_per_mevent=.. load_cpu_s=.. load_cpu_s_per_mevent=..
#     trace_bytes=.. bytes_per_event=.. peak_rss_kb=.. (sum of the recorder's
#     processes' VmHWM, read at the end of the load)
#   bench=ftrace_ratio recorder=ours|ours-read load=.. threads=.. rate=..
#     cpu_per_event_ratio=ours/tracecmd load_cpu_per_event_ratio=..
#     bytes_per_event_ratio=..
#     captured_ratio=.. ours_lost=.. tracecmd_lost=.. ours_missing=..
#     tracecmd_missing=.. peak_rss_ratio=..
# recorder_cpu_s is the recorder's whole run (start-up, load, stop: trace-cmd
# merges its per-cpu files into the output at the end); load_cpu_s only
# from the load's start to 1 s after its end (the drain), so fixed start and
# stop costs are left out.
# `written` is what the load generator wrote (markers) or its round trips
# (pingpong; the kernel writes >= 4 events per round trip). Other processes'
# sched events are captured too (the box is shared).
# `missing` (marker loads) is written minus the prints in the trace: loss
# anywhere (kernel, recorder, trace buffer, file), counted or not.
# Env: LOAD_S (3), SCENARIOS (default below), RECORDERS ("tracecmd ours"),
# BIN (the tracebox to run as "ours"; default: this tree's release build),
# KEEP (set: keep the work dir with traces and logs).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
: "${LOAD_S:=3}"
: "${SCENARIOS:=pingpong:1:0 marker:1:100000 marker:1:500000 marker:1:0 marker:2:100000 marker:2:500000 marker:2:0}"
: "${RECORDERS:=tracecmd ours}"
TRACEFS=/sys/kernel/tracing
CG_ROOT=/sys/fs/cgroup/cpuacct
BUF_KB=8192

command -v trace-cmd >/dev/null || {
    apt-get install -y -qq trace-cmd >/dev/null 2>&1 || {
        apt-get update -qq >/dev/null 2>&1
        apt-get install -y -qq trace-cmd >/dev/null
    }
}
cargo build --quiet --release
cargo build --quiet --profile bench-release --example bench_load --example bench_count_ftrace
TB="${BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/tracebox}"
LOAD="${CARGO_TARGET_DIR:-$REPO/target}/bench-release/examples/bench_load"
COUNT="${CARGO_TARGET_DIR:-$REPO/target}/bench-release/examples/bench_count_ftrace"

WORK=$(mktemp -d /tmp/tbx-bench-ftrace.XXXXXX)
REC_PID="" SAMPLER_PID="" CG=""
cleanup() {
    [ -n "$SAMPLER_PID" ] && kill "$SAMPLER_PID" 2>/dev/null || true
    if [ -n "$REC_PID" ]; then
        kill -INT "$REC_PID" 2>/dev/null || true
        sleep 1
        kill -KILL "$REC_PID" 2>/dev/null || true
    fi
    wait 2>/dev/null || true
    if [ -n "$CG" ] && [ -d "$CG" ]; then
        # Anything the recorder left behind (daemons) goes too.
        for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
        sleep 0.2
        rmdir "$CG" 2>/dev/null || true
    fi
    for i in tbx_bench_tc tbx_bench_ours; do
        [ -d "$TRACEFS/instances/$i" ] && rmdir "$TRACEFS/instances/$i" 2>/dev/null || true
    done
    if [ -n "${KEEP:-}" ]; then echo "bench-ftrace: kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# sample_stats DIR OUT: copies the instance's per-CPU stats every 0.2 s.
sample_stats() {
    local dir=$1 out=$2
    while :; do
        if [ -d "$dir/per_cpu" ]; then
            cat "$dir"/per_cpu/cpu*/stats >"$out.tmp" 2>/dev/null && mv "$out.tmp" "$out"
        fi
        sleep 0.2
    done
}

# start_recorder NAME OUT: starts it in a fresh cgroup; sets REC_PID, CG, INST.
start_recorder() {
    local name=$1 out=$2
    CG="$CG_ROOT/tbx-bench-$$-$name"
    mkdir "$CG"
    case $name in
    tracecmd)
        INST=tbx_bench_tc
        (echo "$BASHPID" >"$CG/cgroup.procs" && exec trace-cmd record -d --no-filter --compression none -o "$out" \
            -B "$INST" -b "$BUF_KB" -e sched:sched_switch -e sched:sched_waking) \
            >"$WORK/$name.log" 2>&1 &
        ;;
    ours | ours-read)
        INST=tbx_bench_ours
        local mode=splice
        [ "$name" = ours-read ] && mode=read
        cat >"$WORK/ours.pbtx" <<EOF
buffers { size_kb: 65536 fill_policy: DISCARD }
write_into_file: true
file_write_period_ms: 500
duration_ms: 120000
data_sources {
  config {
    name: "linux.ftrace"
    ftrace_config {
      instance_name: "$INST"
      buffer_size_kb: $BUF_KB
      ftrace_events: "sched/sched_switch"
      ftrace_events: "sched/sched_waking"
      ftrace_events: "ftrace/print"
      compact_sched { enabled: true }
    }
  }
}
EOF
        (echo "$BASHPID" >"$CG/cgroup.procs" &&
            TRACEBOX_FTRACE_READER=$mode exec "$TB" --private-sockets --txt -c "$WORK/ours.pbtx" -o "$out") \
            >"$WORK/$name.log" 2>&1 &
        ;;
    esac
    REC_PID=$!
    # Ready when the instance records the events.
    local end=$((SECONDS + 20))
    until [ "$(cat "$TRACEFS/instances/$INST/tracing_on" 2>/dev/null)" = 1 ] &&
        [ "$(cat "$TRACEFS/instances/$INST/events/sched/sched_switch/enable" 2>/dev/null)" = 1 ]; do
        if [ $SECONDS -ge $end ] || ! kill -0 "$REC_PID" 2>/dev/null; then
            echo "bench-ftrace: $name did not start" >&2
            cat "$WORK/$name.log" >&2
            stop_recorder
            return 1
        fi
        sleep 0.1
    done
    sleep 0.5
}

stop_recorder() {
    kill -INT "$REC_PID" 2>/dev/null || true
    local end=$((SECONDS + 60))
    while kill -0 "$REC_PID" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.1; done
    kill -KILL "$REC_PID" 2>/dev/null || true
    wait "$REC_PID" 2>/dev/null || true
    REC_PID=""
    # Daemons stop after the client; give them a moment, then read the cgroup.
    local n=0
    while [ -s "$CG/cgroup.procs" ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
    for p in $(cat "$CG/cgroup.procs"); do kill -KILL "$p" 2>/dev/null || true; done
    REC_CPU=$(awk '{printf "%.3f", $1 / 1e9}' "$CG/cpuacct.usage")
    sleep 0.2
    rmdir "$CG"
    CG=""
}

get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $2"; }

# Sum of the peak RSS (VmHWM) of every process the recorder runs (shared
# pages count once per process), read while it still records.
peak_rss_kb() {
    local total=0 v
    for p in $(cat "$CG/cgroup.procs" 2>/dev/null); do
        v=$(awk '/^VmHWM:/ {print $2}' "/proc/$p/status" 2>/dev/null || true)
        total=$((total + ${v:-0}))
    done
    echo "$total"
}

status=0
for sc in $SCENARIOS; do
    IFS=: read -r load threads rate <<<"$sc"
    declare -A res=()
    for rec in $RECORDERS; do
        out="$WORK/$rec.trace"
        rm -f "$out" "$WORK/stats"
        # The previous recorder's file must not be written back to disk
        # during this one's run (at the maximum rates each writes ~1 GB).
        sync
        start_recorder "$rec" "$out" || { status=1; continue; }
        sample_stats "$TRACEFS/instances/$INST" "$WORK/stats" &
        SAMPLER_PID=$!
        cpu_before=$(cat "$CG/cpuacct.usage")
        if [ "$load" = pingpong ]; then
            lline=$("$LOAD" pingpong "$LOAD_S")
            written=$(get round_trips "$lline")
        else
            lline=$("$LOAD" marker "$TRACEFS/instances/$INST/trace_marker" "$threads" "$rate" "$LOAD_S")
            written=$(get written "$lline")
        fi
        sleep 1 # let the recorder drain
        load_cpu=$(awk -v a="$cpu_before" -v b="$(cat "$CG/cpuacct.usage")" 'BEGIN {printf "%.3f", (b - a) / 1e9}')
        hwm=$(peak_rss_kb)
        kill "$SAMPLER_PID" 2>/dev/null || true
        wait "$SAMPLER_PID" 2>/dev/null || true
        SAMPLER_PID=""
        stop_recorder
        overrun=$(awk '/^overrun:/ {s += $2} END {print s + 0}' "$WORK/stats" 2>/dev/null || echo 0)
        dropped=$(awk '/^dropped events:/ {s += $3} END {print s + 0}' "$WORK/stats" 2>/dev/null || echo 0)
        if [ "$rec" = tracecmd ]; then
            counts=$(trace-cmd report -i "$out" 2>/dev/null |
                awk '/ (sched_switch|sched_waking|print):/ {c++} / print:/ {p++} END {print "events=" c + 0, "prints=" p + 0}')
            captured=$(get events "$counts")
            prints=$(get prints "$counts")
        else
            counts=$("$COUNT" "$out")
            captured=$(get events "$counts")
            # Only prints are non-compact events in this config.
            prints=$(get generic_events "$counts")
        fi
        # Markers written but not in the trace (lost anywhere: kernel,
        # recorder, file), whether or not a counter saw it.
        missing=0
        [ "$load" = marker ] && missing=$((written > prints ? written - prints : 0))
        bytes=$(stat -c %s "$out" 2>/dev/null || echo 0)
        line=$(awk -v r="$rec" -v l="$load" -v t="$threads" -v rt="$rate" -v w="$written" -v c="${captured:-0}" \
            -v o="$overrun" -v d="$dropped" -v ms="$missing" -v cpu="$REC_CPU" -v lc="$load_cpu" -v b="$bytes" -v m="$hwm" 'BEGIN {
            printf "bench=ftrace recorder=%s load=%s threads=%s rate=%s written=%s captured=%d kernel_overrun=%d kernel_dropped=%d missing=%d recorder_cpu_s=%.3f cpu_s_per_mevent=%.3f load_cpu_s=%.3f load_cpu_s_per_mevent=%.3f trace_bytes=%d bytes_per_event=%.2f peak_rss_kb=%d\n",
                r, l, t, rt, w, c, o, d, ms, cpu, (c > 0 ? cpu * 1e6 / c : 0), lc, (c > 0 ? lc * 1e6 / c : 0), b, (c > 0 ? b / c : 0), m }')
        echo "$line"
        res[$rec]=$line
    done
    for ours in ours ours-read; do
        [ -n "${res[$ours]:-}" ] && [ -n "${res[tracecmd]:-}" ] || continue
        o=${res[$ours]} q=${res[tracecmd]}
        awk -v rec="$ours" -v l="$load" -v t="$threads" -v rt="$rate" \
            -v oc="$(get cpu_s_per_mevent "$o")" -v qc="$(get cpu_s_per_mevent "$q")" \
            -v olc="$(get load_cpu_s_per_mevent "$o")" -v qlc="$(get load_cpu_s_per_mevent "$q")" \
            -v ob="$(get bytes_per_event "$o")" -v qb="$(get bytes_per_event "$q")" \
            -v oe="$(get captured "$o")" -v qe="$(get captured "$q")" \
            -v ol="$(get kernel_overrun "$o")" -v ql="$(get kernel_overrun "$q")" \
            -v om2="$(get missing "$o")" -v qm2="$(get missing "$q")" \
            -v om="$(get peak_rss_kb "$o")" -v qm="$(get peak_rss_kb "$q")" 'function r(a, b) { return b > 0 ? sprintf("%.2f", a / b) : "inf" }
            BEGIN { printf "bench=ftrace_ratio recorder=%s load=%s threads=%s rate=%s cpu_per_event_ratio=%s load_cpu_per_event_ratio=%s bytes_per_event_ratio=%s captured_ratio=%s ours_lost=%s tracecmd_lost=%s ours_missing=%s tracecmd_missing=%s peak_rss_ratio=%s\n",
                rec, l, t, rt, r(oc, qc), r(olc, qlc), r(ob, qb), r(oe, qe), ol, ql, om2, qm2, r(om, qm) }'
    done
    unset res
done
exit $status
