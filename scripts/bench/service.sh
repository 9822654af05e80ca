#!/usr/bin/env bash
# Service benchmark: CPU seconds and peak RSS of the tracing service while an
# SDK producer writes 1,000,000 packets of 100 B (on 1, then 2 threads) and a
# consumer reads the trace back. One machine-readable line per run:
#   bench=service traced=NAME threads=.. packets=.. payload_size=100
#   traced_cpu_s=.. traced_user_s=.. traced_sys_s=.. traced_vmhwm_kb=..
#   wall_s=.. producer_write_s=.. consumer_read_s=.. delivered=.. trace_bytes=..
# Service figures come from /proc/PID/{stat,status} just before it is
# stopped, so any TRACED_CMD can be measured the same way, e.g.
#   TRACED_CMD="$PWD/target/release/tracebox traced" scripts/bench/service.sh
# Env: BUFFER_KB (default 131072, holds every packet), PACKETS, THREADS_LIST.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../tests/sdk-interop/sh/lib.sh
. "$REPO/tests/sdk-interop/sh/lib.sh"

: "${BUFFER_KB:=131072}"
: "${PACKETS:=1000000}"
: "${THREADS_LIST:=1 2}"
interop_build
traced_name=$(basename "${TRACED_CMD%% *}")
[ "$TRACED_CMD" = "$BIN/real-traced" ] && traced_name=real-traced

status=0
for threads in $THREADS_LIST; do
    per_thread=$((PACKETS / threads))
    ds="tbx.bench_service"
    new_run_dir "service-$threads"
    start_traced
    write_config "$ds" "$BUFFER_KB" discard
    t0=$(date +%s.%N)
    start_consumer
    start_producer --data-source "$ds" --threads "$threads" --packets "$per_thread" --size 100 --fixed-payload
    wait_file "$RUN/done" 200 "$PRODUCER_PID" || { dump_logs; status=1; continue; }
    stop_consumer || true
    wait_pid "$PRODUCER_PID" 30 || true
    t1=$(date +%s.%N)
    usage=$(proc_usage "$TRACED_PID")
    stop_traced
    check=$("$BIN/trace-check" --trace "$RUN/trace.pb" --threads "$threads" --packets "$per_thread" \
        --size 100 --mode all --fixed-payload | head -1) || { echo "$check" >&2; status=1; }
    get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
    found=$(get found "$check")
    pline=$(grep -h "sdk-producer result=" "$RUN/producer.log" || true)
    cline=$(grep -h "result=" "$RUN/consumer.log" || true)
    echo "bench=service traced=$traced_name threads=$threads packets=$((per_thread * threads))" \
        "payload_size=100 $(sed 's/\([a-z_]*=\)/traced_\1/g' <<<"$usage")" \
        "wall_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')" \
        "producer_write_s=$(get write_s "$pline") consumer_read_s=$(get read_s "$cline")" \
        "delivered=$found trace_bytes=$(stat -c %s "$RUN/trace.pb")"
done
exit $status
