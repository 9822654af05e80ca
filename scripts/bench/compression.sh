#!/usr/bin/env bash
# Bytes per ftrace marker event in a write_into_file trace, plain, with
# compression_type: COMPRESSION_TYPE_DEFLATE and with compression { zstd {} }
# at ZSTD_WRITER_LEVELS (default "0 1": libzstd's default 3, and 1), on one
# marker load (as root), against trace-cmd's zstd file of the same number of
# markers; and traced's CPU time (user + system, from /proc) for each.
#   scripts/bench/compression.sh [MARKERS]      (default 100000)
# Uses target/release/tracebox (else target/debug), private sockets and a
# private tracefs instance per run; counts markers with perfetto_trace_pb2.
# The deflate run also says what zstd would make of the same read passes
# (each `compressed_packets` inflated and recompressed by the zstd CLI at
# ZSTD_LEVELS, default "1 3"): the size a zstd writer of ours would take.
# trace-cmd (`--compression zstd`, libzstd's default level) runs twice: with
# the markers and with none, so its fixed header (event formats, kallsyms)
# is shown apart from the bytes the events add.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-100000}
TB=$PWD/target/release/tracebox
[ -x "$TB" ] || TB=$PWD/target/debug/tracebox
PY=${TRACEBOX_PYTHON:-$PWD/.venv/bin/python}
ZSTD_LEVELS=${ZSTD_LEVELS:-1 3}
ZSTD_WRITER_LEVELS=${ZSTD_WRITER_LEVELS:-0 1}
command -v zstd >/dev/null || apt-get install -y -qq zstd >/dev/null
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

# write_markers INSTANCE N: N markers "tbx marker I" into the instance.
write_markers() {
    python3 -c "
import os
fd = os.open('/sys/kernel/tracing/instances/$1/trace_marker', os.O_WRONLY)
for i in range($2):
    os.write(fd, b'tbx marker %d' % i)"
}

run() {
    local tag=$1 extra=$2 inst=tbx_bench_z_$1_$$
    export PERFETTO_PRODUCER_SOCK_NAME=@tbx-bench-z-$tag-$$-p PERFETTO_CONSUMER_SOCK_NAME=@tbx-bench-z-$tag-$$-c
    "$TB" traced 2>/dev/null & local t=$!
    TRACED_PROBES_STATE_FILE=$DIR/state-$tag "$TB" traced_probes 2>/dev/null & local p=$!
    sleep 1
    cat >"$DIR/$tag.pbtx" <<CFG
buffers { size_kb: 65536 }
data_sources { config { name: "linux.ftrace" ftrace_config { ftrace_events: "ftrace/print" instance_name: "$inst" buffer_size_kb: 8192 } } }
duration_ms: 600000
write_into_file: true
file_write_period_ms: 500
$extra
CFG
    "$TB" perfetto --txt -c "$DIR/$tag.pbtx" -o "$DIR/$tag.pftrace" 2>"$DIR/$tag.log" & local c=$!
    sleep 2
    write_markers "$inst" "$N"
    sleep 1
    kill -TERM $c; wait $c || true
    # traced's CPU over the whole session: the on-cpu time of each of its
    # threads (schedstat, ns; /proc/PID/stat counts in 10 ms ticks).
    local ns
    ns=$(cat /proc/$t/task/*/schedstat | awk '{s += $1} END {print s}')
    kill $p $t; wait $p $t 2>/dev/null || true
    rmdir "/sys/kernel/tracing/instances/$inst" 2>/dev/null || true
    echo "$tag: traced CPU $((ns / 1000000)) ms"
    ZSTD_LEVELS="$ZSTD_LEVELS" "$PY" - "$DIR/$tag.pftrace" "$tag" <<'PY'
import os, subprocess, sys, zlib
import zstandard
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
t = pb.Trace(); t.ParseFromString(open(sys.argv[1], "rb").read())
pk = list(t.packet)
passes = []
for p in t.packet:
    if p.HasField("compressed_packets"):
        raw = zlib.decompress(p.compressed_packets)
        passes.append((len(p.compressed_packets), raw))
        x = pb.Trace(); x.ParseFromString(raw); pk += list(x.packet)
    if p.HasField("zstd_compressed_packets"):
        raw = zstandard.ZstdDecompressor().decompressobj().decompress(p.zstd_compressed_packets)
        x = pb.Trace(); x.ParseFromString(raw); pk += list(x.packet)
n = sum(1 for p in pk if p.HasField("ftrace_events")
        for e in p.ftrace_events.event if e.HasField("print") and "tbx marker" in e.print.buf)
size = os.path.getsize(sys.argv[1])
print(f"{sys.argv[2]}: {n} markers, {size} bytes, {size / max(n, 1):.2f} B/event")
# The same passes through zstd: the file minus the deflate payloads plus
# the zstd ones (the tag and length framing stays within a byte or two).
for level in os.environ["ZSTD_LEVELS"].split() if passes else []:
    z = sum(len(subprocess.run(["zstd", f"-{level}", "-c", "-q"], input=raw,
                               capture_output=True, check=True).stdout) for _, raw in passes)
    est = size - sum(d for d, _ in passes) + z
    print(f"{sys.argv[2]} passes as zstd -{level}: {est} bytes, {est / max(n, 1):.2f} B/event")
PY
}

# trace-cmd with zstd on the same markers; $1 markers (0: header alone).
tracecmd() {
    local n=$1 inst=tbx_bench_ztc_$$ out=$DIR/tc-$1.dat
    command -v trace-cmd >/dev/null || apt-get install -y -qq trace-cmd >/dev/null
    # No event is needed but trace-cmd wants one: a rare one.
    trace-cmd record -d --no-filter --compression zstd -o "$out" -B "$inst" -b 8192 \
        -e sched:sched_process_exec >"$DIR/tc.log" 2>&1 & local c=$!
    while [ ! -e "/sys/kernel/tracing/instances/$inst/trace_marker" ]; do sleep 0.1; done
    sleep 1
    write_markers "$inst" "$n"
    sleep 1
    kill -INT $c; wait $c || true
    rmdir "/sys/kernel/tracing/instances/$inst" 2>/dev/null || true
    local got size
    got=$(trace-cmd report -i "$out" 2>/dev/null | grep -c 'tbx marker' || true)
    size=$(stat -c %s "$out")
    echo "$size $got"
}

run plain ""
run deflate "compression_type: COMPRESSION_TYPE_DEFLATE"
for level in $ZSTD_WRITER_LEVELS; do
    run "zstd$level" "compression { zstd { level: $level } }"
done
read -r tc_size tc_n < <(tracecmd "$N")
read -r tc_empty _ < <(tracecmd 0)
awk -v s="$tc_size" -v n="$tc_n" -v e="$tc_empty" 'BEGIN {
    printf "trace-cmd zstd: %d markers, %d bytes, %.2f B/event (%d of them its header: %.2f B/event without it)\n",
        n, s, s / (n > 0 ? n : 1), e, (s - e) / (n > 0 ? n : 1) }'
