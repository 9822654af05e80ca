#!/usr/bin/env bash
# Profiles one service run of scripts/bench/service-ratio.sh with perf.
#
#   scripts/bench/service-profile.sh [ingest|readback|all]   (default readback)
#
# Runs TRACED_CMD (default: target/bench-release/tracebox traced, built with
# symbols) with the same producer/consumer setup as the ratio benchmark and
# records `perf record -g` on the service during the chosen phase. Writes
# the report to $OUT (default /tmp/tbx-service-<phase>.perf.txt) and prints
# its head. Env: PACKETS (1000000), THREADS (1), BUFFER_KB (131072),
# PRODUCER_API (c), PERF_ARGS (-g).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../tests/sdk-interop/sh/lib.sh
. "$REPO/tests/sdk-interop/sh/lib.sh"

phase=${1:-readback}
: "${BUFFER_KB:=131072}" "${PACKETS:=1000000}" "${THREADS:=1}" "${PRODUCER_API:=c}"
: "${PERF_ARGS:=-g}"
: "${OUT:=/tmp/tbx-service-$phase.perf.txt}"
export PRODUCER_API
: "${TRACED_CMD:=${CARGO_TARGET_DIR:-$REPO/target}/bench-release/tracebox traced}"
: "${PRODUCER_CMD:=$BIN/sdk-producer}" "${CONSUMER_CMD:=$BIN/sdk-consumer}"

perf_pid=""
perf_start() {
    # shellcheck disable=SC2086
    perf record $PERF_ARGS -o "$RUN/perf.data" -p "$TRACED_PID" >"$RUN/perf.log" 2>&1 &
    perf_pid=$!
    sleep 0.5
}
perf_stop() {
    kill -INT "$perf_pid" 2>/dev/null || true
    wait "$perf_pid" 2>/dev/null || true
}

new_run_dir "svc-prof"
start_traced
write_config tbx.bench_service "$BUFFER_KB" discard
start_consumer
[ "$phase" = readback ] || perf_start
start_producer --data-source tbx.bench_service --threads "$THREADS" \
    --packets $((PACKETS / THREADS)) --size 100 --fixed-payload --policy stall-drop
wait_file "$RUN/done" 200 "$PRODUCER_PID"
[ "$phase" = ingest ] && perf_stop
[ "$phase" = readback ] && perf_start
stop_consumer || true
[ "$phase" = ingest ] || perf_stop
echo "$(proc_usage "$TRACED_PID")" >&2
wait_pid "$PRODUCER_PID" 30 || true
stop_traced
perf report -i "$RUN/perf.data" --no-children --percent-limit 0.5 --stdio 2>/dev/null >"$OUT" || true
perf report -i "$RUN/perf.data" --no-children --sort symbol --percent-limit 0.5 --stdio -g none 2>/dev/null |
    grep -v '^#' | grep -v '^$' | head -40
echo "full report: $OUT" >&2
