#!/usr/bin/env bash
# `tracebox report` speed and memory vs `trace-cmd report`, same events.
#
# One recording run: trace-cmd (instance tbx_rpt_tc) and our autostarted
# tracebox (instance tbx_rpt_ours, compact sched) record at the same time
# while examples/bench_load.rs runs a pingpong (sched_switch/sched_waking
# storm) and writes markers to each instance's trace_marker at MARKER_RATE/s.
# Both files then hold the same kernel events. Each reader runs once per
# mode under /usr/bin/time:
#   tracecmd-report   trace-cmd report -i t.dat > /dev/null
#   tracecmd-stat     trace-cmd report --stat -i t.dat > /dev/null
#   ours-summary      tracebox report t.pftrace > /dev/null
#   ours-events       tracebox report --events t.pftrace > /dev/null
# Then our trace is repeated (concatenated; a valid trace) to BIG_MB and
# read again for MB/s and peak RSS on a big file (repeated timestamps are
# counted as out-of-order events, which costs nothing extra).
# Lines on stdout:
#   bench=report tool=.. file_bytes=.. events=.. cpu_s=.. wall_s=..
#     mb_per_s=.. events_per_s=.. peak_rss_kb=..   (per CPU second)
#   bench=report_ratio mode=summary|events events_per_s_ratio=ours/tracecmd
# Env: LOAD_S (3), MARKER_RATE (20000), BIG_MB (1024; 0 skips), KEEP.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
: "${LOAD_S:=3}"
: "${MARKER_RATE:=20000}"
: "${BIG_MB:=1024}"
TRACEFS=/sys/kernel/tracing
command -v trace-cmd >/dev/null || { apt-get update -qq && apt-get install -y -qq trace-cmd >/dev/null; }
cargo build --quiet --release --bin tracebox
cargo build --quiet --release --example bench_load
TB="$REPO/target/release/tracebox"
LOAD="$REPO/target/release/examples/bench_load"
WORK=$(mktemp -d /tmp/tbx-bench-report.XXXXXX)
cleanup() {
    rmdir "$TRACEFS/instances/tbx_rpt_tc" 2>/dev/null || true
    [ -n "${KEEP:-}" ] && echo "work dir: $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT

cat >"$WORK/ours.pbtx" <<CFG
buffers { size_kb: 65536 fill_policy: DISCARD }
write_into_file: true
file_write_period_ms: 500
duration_ms: 120000
data_sources { config { name: "linux.ftrace" ftrace_config {
  instance_name: "tbx_rpt_ours" buffer_size_kb: 8192
  ftrace_events: "sched/sched_switch" ftrace_events: "sched/sched_waking"
  ftrace_events: "ftrace/print" compact_sched { enabled: true } } } }
data_sources { config { name: "linux.process_stats"
  process_stats_config { scan_all_processes_on_start: true } } }
data_sources { config { name: "linux.system_info" } }
CFG
trace-cmd record -d --no-filter --compression none -o "$WORK/t.dat" -B tbx_rpt_tc -b 8192 \
    -e sched:sched_switch -e sched:sched_waking >"$WORK/tc.log" 2>&1 &
TC=$!
TRACED_PROBES_STATE_FILE="$WORK/state" "$TB" --private-sockets --txt -c "$WORK/ours.pbtx" \
    -o "$WORK/t.pftrace" >"$WORK/ours.log" 2>&1 &
OURS=$!
for inst in tbx_rpt_tc tbx_rpt_ours; do
    for _ in $(seq 200); do
        [ "$(cat "$TRACEFS/instances/$inst/tracing_on" 2>/dev/null)" = 1 ] && break
        sleep 0.1
    done
done
sleep 0.5
"$LOAD" pingpong "$LOAD_S" >/dev/null &
P=$!
"$LOAD" marker "$TRACEFS/instances/tbx_rpt_tc/trace_marker" 1 "$MARKER_RATE" "$LOAD_S" >/dev/null &
M1=$!
"$LOAD" marker "$TRACEFS/instances/tbx_rpt_ours/trace_marker" 1 "$MARKER_RATE" "$LOAD_S" >/dev/null &
M2=$!
wait $P $M1 $M2
sleep 1
kill -INT $TC
kill -TERM $OURS
wait $TC || true # exits 1 on this kernel after writing a complete file
wait $OURS

# measure TOOL EVENTS FILE CMD...: one run under /usr/bin/time.
measure() {
    local tool=$1 events=$2 file=$3
    shift 3
    local rc=0
    /usr/bin/time -f "%U %S %e %M" -o "$WORK/time" "$@" >/dev/null 2>"$WORK/err" || rc=$?
    # A reader that failed measured nothing worth a figure: say so.
    [ "$rc" -eq 0 ] || { echo "bench: $tool exited $rc: $(tail -c 300 "$WORK/err")" >&2; exit 1; }
    read -r u s e rss <"$WORK/time"
    awk -v t="$tool" -v b="$(stat -c %s "$file")" -v n="$events" -v u="$u" -v s="$s" -v e="$e" -v r="$rss" \
        'BEGIN { c = u + s; if (c <= 0) c = 0.001
          printf "bench=report tool=%s file_bytes=%d events=%d cpu_s=%.2f wall_s=%.2f mb_per_s=%.1f events_per_s=%.0f peak_rss_kb=%d\n",
            t, b, n, c, e, b / 1048576 / c, n / c, r }' | tee -a "$WORK/results"
}
tc_events=$(trace-cmd report -i "$WORK/t.dat" 2>/dev/null | grep -c '^ *tbx_rpt_tc:' || true)
our_events=$("$TB" report --json "$WORK/t.pftrace" | sed 's/.*"events":\([0-9]*\).*/\1/')
measure tracecmd-report "$tc_events" "$WORK/t.dat" trace-cmd report -i "$WORK/t.dat"
measure tracecmd-stat "$tc_events" "$WORK/t.dat" trace-cmd report --stat -i "$WORK/t.dat"
measure ours-summary "$our_events" "$WORK/t.pftrace" "$TB" report "$WORK/t.pftrace"
measure ours-events "$our_events" "$WORK/t.pftrace" "$TB" report --events "$WORK/t.pftrace"
rate() { awk -v t="$1" '$2 == "tool=" t { for (i = 1; i <= NF; i++) if ($i ~ /^events_per_s=/) { sub(/.*=/, "", $i); print $i } }' "$WORK/results"; }
for mode in summary events; do
    awk -v m="$mode" -v o="$(rate ours-$mode)" -v t="$(rate tracecmd-report)" \
        'BEGIN { printf "bench=report_ratio mode=%s events_per_s_ratio=%.2f\n", m, o / t }'
done

if [ "$BIG_MB" -gt 0 ]; then
    big="$WORK/big.pftrace"
    : >"$big"
    while [ "$(stat -c %s "$big")" -lt $((BIG_MB << 20)) ]; do cat "$WORK/t.pftrace" >>"$big"; done
    copies=$(($(stat -c %s "$big") / $(stat -c %s "$WORK/t.pftrace")))
    measure ours-summary-big $((our_events * copies)) "$big" "$TB" report "$big"
    measure ours-events-big $((our_events * copies)) "$big" "$TB" report --events "$big"
fi
