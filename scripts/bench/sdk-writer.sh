#!/usr/bin/env bash
# Reference figures for TraceWriter throughput: the real Perfetto SDK writing
# into a service over shared memory (1 thread), for 16 B, 100 B and 4 KiB
# payloads. One machine-readable line per API and size on stdout:
#   bench=sdk_writer api=c|rust payload_size=.. threads=1 packets=.. packet_bytes=.. write_s=..
#   packets_per_s=.. bytes_per_s=.. producer_cpu_s=.. producer_cpu_ns_per_packet=..
#   delivered=.. traced_cpu_s=..
# On a shared machine the CPU figures (process CPU time, including the SDK's
# IPC thread) are steadier than the wall-clock rates.
# write_s is the producer's write loop (ends when the last packet is in shared
# memory, stalling on a full SMB is included). delivered is counted in the
# trace read back; the run fails if any packet is missing.
# Env: TRACED_CMD / PRODUCER_CMD (see tests/sdk-interop/sh/lib.sh),
#      BENCH_SCALE (default 1; multiplies packet counts), SIZES,
#      SHMEM_KB (producer shared memory size hint; 0 = SDK default 256 KiB),
#      APIS (default "c rust": the C SDK's inline API, then the Rust crate's
#      bindings, which add per-message allocations on top).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../tests/sdk-interop/sh/lib.sh
. "$REPO/tests/sdk-interop/sh/lib.sh"

: "${BENCH_SCALE:=1}"
: "${SIZES:=16 100 4096}"
: "${SHMEM_KB:=0}"
: "${APIS:=c rust}"
interop_build

packets_for() {
    case $1 in
        16 | 100) echo $((500000 * BENCH_SCALE)) ;;
        *) echo $((20000 * BENCH_SCALE)) ;;
    esac
}

status=0
for api in $APIS; do
for size in $SIZES; do
    packets=$(packets_for "$size")
    ds="tbx.bench_writer"
    new_run_dir "writer-$size"
    start_traced
    # Big enough to hold every packet, so delivery is checked exactly.
    write_config "$ds" $((256 * 1024)) discard
    start_consumer
    PRODUCER_API=$api start_producer --data-source "$ds" --threads 1 --packets "$packets" --size "$size" --fixed-payload \
        --shmem-kb "$SHMEM_KB"
    wait_file "$RUN/done" 150 "$PRODUCER_PID" || { dump_logs; status=1; continue; }
    stop_consumer || true
    wait_pid "$PRODUCER_PID" 30 || true
    traced_usage=$(proc_usage "$TRACED_PID")
    stop_traced
    line=$(grep -h "sdk-producer result=" "$RUN/producer.log")
    check=$("$BIN/trace-check" --trace "$RUN/trace.pb" --threads 1 --packets "$packets" \
        --size "$size" --mode all --fixed-payload | head -1) || { echo "$check" >&2; status=1; }
    get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
    echo "bench=sdk_writer api=$api payload_size=$size threads=1 packets=$packets shmem_kb=$SHMEM_KB" \
        "packet_bytes=$(get packet_bytes "$line") write_s=$(get write_s "$line")" \
        "packets_per_s=$(get packets_per_s "$line") bytes_per_s=$(get bytes_per_s "$line")" \
        "producer_cpu_s=$(get cpu_s "$line")" \
        "producer_cpu_ns_per_packet=$(awk -v c="$(get cpu_s "$line")" -v n="$packets" 'BEGIN {printf "%.0f", c * 1e9 / n}')" \
        "delivered=$(get found "$check")" \
        "traced_$(cut -d' ' -f1 <<<"$traced_usage")"
done
done
exit $status
