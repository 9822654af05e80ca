#!/usr/bin/env bash
# Issue 4: our traced vs real-traced, same run, same SDK producer.
#
# For THREADS in 1 2, for each service (ours = target/release/tracebox traced,
# real = tests/sdk-interop real-traced): the SDK producer (PRODUCER_API, C by
# default) writes PACKETS packets of 100 B split over THREADS threads under
# the stall policy into a buffer that holds them all; then the consumer
# (sdk-consumer) stops the session and reads the trace back. Service CPU is
# sampled from /proc/PID/stat when the producer's flush is acked (ingest) and
# after the consumer has the whole trace (read-back = the difference).
# Peak RSS is VmHWM. trace-check counts the packets in the trace.
# Lines on stdout:
#   bench=service traced=ours|real threads=.. packets=.. ingest_cpu_s=..
#     readback_cpu_s=.. total_cpu_s=.. vmhwm_kb=.. delivered=.. lost=..
#     writer_drops=.. producer_write_s=.. trace_bytes=..
#   bench=service_ratio threads=.. ingest_cpu_ratio=ours/real
#     readback_cpu_ratio=.. total_cpu_ratio=.. vmhwm_ratio=.. ours_lost=.. real_lost=..
# Goals: total_cpu_ratio <= 0.5, vmhwm_ratio <= 1, lost = 0.
# Env: PACKETS (1000000), THREADS_LIST ("1 2"), BUFFER_KB (131072),
#      PRODUCER_API (c), OURS_CMD (target/release/tracebox traced),
#      INTEROP_BUILD (1; 0 = use the sdk-interop binaries already in
#      tests/sdk-interop/target/release, e.g. from a worktree whose target
#      links to another checkout's build).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../tests/sdk-interop/sh/lib.sh
. "$REPO/tests/sdk-interop/sh/lib.sh"

: "${BUFFER_KB:=131072}"
: "${PACKETS:=1000000}"
: "${THREADS_LIST:=1 2}"
: "${PRODUCER_API:=c}"
export PRODUCER_API
(cd "$REPO" && cargo build --release --quiet)
: "${OURS_CMD:=${CARGO_TARGET_DIR:-$REPO/target}/release/tracebox traced}"
if [ "${INTEROP_BUILD:-1}" = 1 ]; then
    interop_build
else
    : "${PRODUCER_CMD:=$BIN/sdk-producer}" "${CONSUMER_CMD:=$BIN/sdk-consumer}"
fi
REAL_CMD="$BIN/real-traced"

# cpu_s PID: user+sys seconds of a live process.
cpu_s() {
    awk -v hz="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz}' "/proc/$1/stat"
}

get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

# run_one NAME CMD THREADS: one measurement; sets LINE.
run_one() {
    local name=$1 cmd=$2 threads=$3
    local per_thread=$((PACKETS / threads)) ds="tbx.bench_service"
    new_run_dir "svc-$name-$threads"
    TRACED_CMD=$cmd start_traced
    write_config "$ds" "$BUFFER_KB" discard
    start_consumer
    start_producer --data-source "$ds" --threads "$threads" --packets "$per_thread" --size 100 \
        --fixed-payload --policy stall-drop
    wait_file "$RUN/done" 200 "$PRODUCER_PID" || { dump_logs; return 1; }
    local ingest
    ingest=$(cpu_s "$TRACED_PID")
    stop_consumer || true
    wait_pid "$PRODUCER_PID" 30 || true
    local total hwm
    total=$(cpu_s "$TRACED_PID")
    hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$TRACED_PID/status")
    stop_traced
    local check found pline
    check=$("$BIN/trace-check" --trace "$RUN/trace.pb" --threads "$threads" --packets "$per_thread" \
        --size 100 --mode all --fixed-payload 2>&1 | head -1) || true
    found=$(get found " $check")
    [ -n "$found" ] || found=0
    pline=$(grep -h "sdk-producer result=" "$RUN/producer.log" || true)
    LINE="bench=service traced=$name threads=$threads packets=$((per_thread * threads))"
    LINE+=" ingest_cpu_s=$ingest readback_cpu_s=$(awk -v a="$ingest" -v b="$total" 'BEGIN {printf "%.2f", b - a}')"
    LINE+=" total_cpu_s=$total vmhwm_kb=$hwm delivered=$found lost=$((per_thread * threads - found))"
    LINE+=" writer_drops=$(get writer_drops "$pline") producer_write_s=$(get write_s "$pline")"
    LINE+=" trace_bytes=$(stat -c %s "$RUN/trace.pb" 2>/dev/null || echo 0)"
}

status=0
for threads in $THREADS_LIST; do
    declare -A r=()
    for name in ours real; do
        if [ $name = ours ]; then cmd=$OURS_CMD; else cmd=$REAL_CMD; fi
        LINE=""
        run_one "$name" "$cmd" "$threads" || status=1
        [ -n "$LINE" ] || continue
        echo "$LINE"
        r[$name]=$LINE
    done
    [ -n "${r[ours]:-}" ] && [ -n "${r[real]:-}" ] || { status=1; continue; }
    o=${r[ours]} q=${r[real]}
    awk -v t="$threads" \
        -v oi="$(get ingest_cpu_s "$o")" -v ri="$(get ingest_cpu_s "$q")" \
        -v orb="$(get readback_cpu_s "$o")" -v rrb="$(get readback_cpu_s "$q")" \
        -v ot="$(get total_cpu_s "$o")" -v rt="$(get total_cpu_s "$q")" \
        -v oh="$(get vmhwm_kb "$o")" -v rh="$(get vmhwm_kb "$q")" \
        -v ol="$(get lost "$o")" -v rl="$(get lost "$q")" 'function r(a, b) { return b > 0 ? sprintf("%.2f", a / b) : "inf" }
        BEGIN { printf "bench=service_ratio threads=%s ingest_cpu_ratio=%s readback_cpu_ratio=%s total_cpu_ratio=%s vmhwm_ratio=%s ours_lost=%s real_lost=%s\n",
            t, r(oi, ri), r(orb, rrb), r(ot, rt), r(oh, rh), ol, rl }'
    unset r
done
exit $status
