#!/usr/bin/env bash
# traced_perf against `perf record` on the same load, in the same run:
#   scripts/bench/perf.sh [SECONDS] [FREQ_HZ] [fp|dwarf]
# The load is tests/data/perf/hot.c (two busy threads), so both profilers
# see the same 2-core workload for SECONDS (default 10) at FREQ_HZ per CPU
# (default 1000), kernel and user callchains, every CPU.
#   fp (default): the load keeps frame pointers; the kernel walks them for
#     both (user_frames: UNWIND_KERNEL_FRAME_POINTER against `perf record -g`).
#   dwarf: the load is built -O2 -fomit-frame-pointer; traced_perf unwinds
#     each sample's copied stack on the device (UNWIND_DWARF, rings sized
#     from the stack copies, read every 20 ms) against `perf record --call-graph dwarf`,
#     which only copies stacks and unwinds in `perf report` afterwards: its
#     CPU is record plus report. Both profile the load's processes only
#     (scope target_cmdline "hot"; perf record of the load's command), so
#     other processes on a shared machine add no work to either.
# Prints per profiler: samples captured, samples lost, profiler CPU (user +
# system of the profiling processes), CPU per sample and bytes per sample;
# traced_perf's own CPU per sample from ring to packet (read, scope,
# resolve, intern, write; from its log); and the load's progress under each
# profiler against a run without one (runs of the load completed), which
# says whether profiling starves the workload.
# Run as root with a release build (cargo build --release).
# PERF_BENCH_KEEP=DIR keeps our trace and traced_perf's log there
# (ours.pftrace, perf.log) for a look at when samples were lost.
set -euo pipefail
secs="${1:-10}"
freq="${2:-1000}"
mode="${3:-fp}"
case "$mode" in
fp)
    cflags="-O0 -fno-omit-frame-pointer"
    ours_cfg="callstack_sampling { kernel_frames: true user_frames: UNWIND_KERNEL_FRAME_POINTER }"
    perf_cg=(-g)
    ;;
dwarf)
    cflags="-O2 -fomit-frame-pointer"
    # ring_buffer_pages unset: sized from the stack copies for the rate
    # (16 MiB per CPU at 1 kHz with 20 ms reads).
    ours_cfg="callstack_sampling { scope { target_cmdline: \"hot\" } kernel_frames: true }
  ring_buffer_read_period_ms: 20"
    perf_cg=(--call-graph dwarf)
    ;;
*) echo "mode is fp or dwarf" >&2; exit 1 ;;
esac
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${TRACEBOX_BIN:-$root/target/release/tracebox}"
py="${TRACEBOX_PYTHON:-$root/.venv/bin/python}"
command -v perf >/dev/null || { echo "needs perf (apt-get install linux-perf)" >&2; exit 1; }
[ -x "$bin" ] || { echo "build $bin first" >&2; exit 1; }
tmp="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

gcc $cflags -pthread -o "$tmp/hot" "$root/tests/data/perf/hot.c"
# Busy for about $secs: re-run the split load until the time is up; the
# number of runs completed goes to $tmp/runs.$1.
cat >"$tmp/load.sh" <<EOF
#!/usr/bin/env bash
end=\$((SECONDS + $secs)) runs=0
while [ \$SECONDS -lt \$end ]; do "$tmp/hot" split 200; runs=\$((runs + 1)); done
echo "\$runs" >"$tmp/runs.\$1"
EOF
chmod +x "$tmp/load.sh"
load() { "$tmp/load.sh" "$1"; }

echo "== no profiler ($secs s)"
load none

# CPU seconds (user + system) a pid has used.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"; }

echo "== tracebox traced_perf ($secs s, $freq Hz, every CPU, $mode)"
export PERFETTO_PRODUCER_SOCK_NAME="$tmp/p.sock" PERFETTO_CONSUMER_SOCK_NAME="$tmp/c.sock"
"$bin" traced 2>"$tmp/traced.log" & traced_pid=$!; pids+=($traced_pid)
while [ ! -S "$tmp/c.sock" ]; do sleep 0.05; done
TRACEBOX_LOG=info "$bin" traced_perf 2>"$tmp/perf.log" & perf_pid=$!; pids+=($perf_pid)
sleep 0.5
cat >"$tmp/cfg.txt" <<EOF
duration_ms: $((secs * 1000 + 1000))
buffers { size_kb: 131072 }
data_sources { config { name: "linux.perf" perf_event_config {
  timebase { frequency: $freq counter: SW_CPU_CLOCK }
  $ours_cfg
} } }
EOF
before="$(cpu_of "$perf_pid")"
before_traced="$(cpu_of "$traced_pid")"
"$bin" perfetto --txt -c "$tmp/cfg.txt" -o "$tmp/ours.pftrace" 2>"$tmp/client.err" &
client=$!
sleep 0.5
load ours
wait "$client"
after="$(cpu_of "$perf_pid")"
after_traced="$(cpu_of "$traced_pid")"
"$py" "$root/tests/py/check_perf_trace.py" "$tmp/ours.pftrace" >"$tmp/ours.txt"
ours_samples="$(grep -c '^sample ' "$tmp/ours.txt" || true)"
ours_lost="$(awk '$1 == "lost" {n += $3} END {print n + 0}' "$tmp/ours.txt")"
ours_bytes="$(stat -c %s "$tmp/ours.pftrace")"
ours_cpu="$(echo "$after - $before" | bc -l)"
all_cpu="$(echo "$ours_cpu + $after_traced - $before_traced" | bc -l)"
grep '^Trace stats' "$tmp/client.err" || true
if [ -n "${PERF_BENCH_KEEP:-}" ]; then
    mkdir -p "$PERF_BENCH_KEEP"
    cp "$tmp/ours.pftrace" "$tmp/perf.log" "$PERF_BENCH_KEEP/"
fi

echo "== perf record ${perf_cg[*]} ($secs s, $freq Hz, every CPU)"
if [ "$mode" = dwarf ]; then
    # Attached to the load's shell (its children inherit the events), so
    # the time is perf's own, not the load's.
    "$tmp/load.sh" perf &
    loadpid=$!
    /usr/bin/time -f "%U %S" -o "$tmp/perf.time" \
        perf record -q "${perf_cg[@]}" -F "$freq" -o "$tmp/perf.data" -p "$loadpid" 2>"$tmp/perf.err" &
    timepid=$!
    wait "$loadpid"
    kill -INT "$(pgrep -P "$timepid")" 2>/dev/null || true
    wait "$timepid" || true
else
    /usr/bin/time -f "%U %S" -o "$tmp/perf.time" \
        perf record -q "${perf_cg[@]}" -a -F "$freq" -o "$tmp/perf.data" -- sleep $((secs + 1)) 2>"$tmp/perf.err" &
    perfrec=$!
    sleep 0.5
    load perf
    wait "$perfrec" || true
fi
perf_cpu="$(tail -1 "$tmp/perf.time" | awk '{print $1 + $2}')"
# What perf defers to its report (unwinding, symbolization), timed on the
# same samples: a flat profile with call chains.
/usr/bin/time -f "%U %S" -o "$tmp/report.time" \
    perf report -i "$tmp/perf.data" --stdio --children --sort sym >/dev/null 2>&1 || true
report_cpu="$(tail -1 "$tmp/report.time" | awk '{print $1 + $2}')"
perf_samples="$(perf report -i "$tmp/perf.data" --stats 2>/dev/null | awk '/SAMPLE events:/ {print $3; exit}')"
perf_lost="$(perf report -i "$tmp/perf.data" --stats 2>/dev/null | awk '/LOST events:/ {n += $3} END {print n + 0}')"
perf_bytes="$(stat -c %s "$tmp/perf.data")"

printf '\n%-16s %10s %8s %12s %14s %12s\n' profiler samples lost "cpu s" "us/sample" "B/sample"
row() {
    printf '%-16s %10s %8s %12.3f %14.1f %12.1f\n' "$1" "$2" "$3" "$4" \
        "$(echo "$4 * 1000000 / ($2 + ($2 == 0))" | bc -l)" "$(echo "$5 / ($2 + ($2 == 0))" | bc -l)"
}
row traced_perf "$ours_samples" "$ours_lost" "$ours_cpu" "$ours_bytes"
row "  + traced" "$ours_samples" "$ours_lost" "$all_cpu" "$ours_bytes"
row "perf record" "${perf_samples:-0}" "$perf_lost" "$perf_cpu" "$perf_bytes"
row "  + perf report" "${perf_samples:-0}" "$perf_lost" "$(echo "$perf_cpu + $report_cpu" | bc -l)" "$perf_bytes"
echo "(perf record's CPU includes writing perf.data, which keeps raw callchains (dwarf: raw"
echo " stack copies) and no names; '+ perf report' adds the report that names (and unwinds)"
echo " them; '+ traced' adds the service that stores our trace)"
ratio() { printf '%.2f' "$(echo "$1" | bc -l)"; }
per() { echo "($1) / ($2 + ($2 == 0))"; }
theirs="$(per "$perf_cpu + $report_cpu" "${perf_samples:-0}")"
cpu_ratio="$(ratio "$(per "$ours_cpu" "$ours_samples") / ($theirs)")"
all_ratio="$(ratio "$(per "$all_cpu" "$ours_samples") / ($theirs)")"
bytes_ratio="$(ratio "$(per "$ours_bytes" "$ours_samples") / ($(per "$perf_bytes" "${perf_samples:-0}"))")"
echo "ours/perf: CPU per sample ${cpu_ratio}x traced_perf (${all_ratio}x with traced) vs record + report," \
    "bytes per sample ${bytes_ratio}x"
echo "== no profiler again ($secs s)"
load none2
per_sample="$(grep -o '[0-9]* ns CPU per sample' "$tmp/perf.log" | tail -1)"
echo "traced_perf, ring to packet (read, scope, resolve, intern, write): ${per_sample:-not logged}"
# The baseline is the mean of a run before and a run after the profilers.
none="$(echo "($(cat "$tmp/runs.none") + $(cat "$tmp/runs.none2")) / 2" | bc -l)"
printf 'load runs completed in %s s: none %s and %s, under traced_perf %s (%.3fx), under perf record %s (%.3fx)\n' \
    "$secs" "$(cat "$tmp/runs.none")" "$(cat "$tmp/runs.none2")" "$(cat "$tmp/runs.ours")" "$(echo "$(cat "$tmp/runs.ours") / $none" | bc -l)" \
    "$(cat "$tmp/runs.perf")" "$(echo "$(cat "$tmp/runs.perf") / $none" | bc -l)"
