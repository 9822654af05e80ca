#!/usr/bin/env bash
# Bytes per ftrace marker event in a write_into_file trace, plain and with
# compression_type: COMPRESSION_TYPE_DEFLATE, on one marker load (as root).
#   scripts/bench/compression.sh [MARKERS]      (default 100000)
# Uses target/release/tracebox (else target/debug), private sockets and a
# private tracefs instance per run; counts markers with perfetto_trace_pb2.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-100000}
TB=$PWD/target/release/tracebox
[ -x "$TB" ] || TB=$PWD/target/debug/tracebox
PY=${TRACEBOX_PYTHON:-$PWD/.venv/bin/python}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

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
    python3 -c "
import os, sys
fd = os.open('/sys/kernel/tracing/instances/$inst/trace_marker', os.O_WRONLY)
for i in range($N):
    os.write(fd, b'tbx marker %d' % i)"
    sleep 1
    kill -TERM $c; wait $c || true
    kill $p $t; wait $p $t 2>/dev/null || true
    rmdir "/sys/kernel/tracing/instances/$inst" 2>/dev/null || true
    "$PY" - "$DIR/$tag.pftrace" "$tag" <<'PY'
import os, sys, zlib
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
t = pb.Trace(); t.ParseFromString(open(sys.argv[1], "rb").read())
pk = list(t.packet)
for p in t.packet:
    if p.HasField("compressed_packets"):
        x = pb.Trace(); x.ParseFromString(zlib.decompress(p.compressed_packets)); pk += list(x.packet)
n = sum(1 for p in pk if p.HasField("ftrace_events")
        for e in p.ftrace_events.event if e.HasField("print") and "tbx marker" in e.print.buf)
size = os.path.getsize(sys.argv[1])
print(f"{sys.argv[2]}: {n} markers, {size} bytes, {size / max(n, 1):.2f} B/event")
PY
}

run plain ""
run deflate "compression_type: COMPRESSION_TYPE_DEFLATE"
