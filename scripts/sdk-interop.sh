#!/usr/bin/env bash
# Interop scenarios against real Perfetto code (tests/sdk-interop).
#
#   scripts/sdk-interop.sh [MODE...]     MODE: build basic large ring discard smb-loss all
#                                        (default: all = every scenario)
#
#   basic     2 threads x 5000 x 100 B into a 32 MiB buffer: everything arrives
#   large     2 threads x 300 x 10000 B: packets fragmented across chunks
#   ring      256 KiB RING_BUFFER overflowed: a contiguous tail per sequence
#   discard   256 KiB DISCARD buffer overflowed: a contiguous head per sequence
#   smb-loss  8 KiB shared memory, drop policy: the SDK drops packets; every
#             hole must be flagged by previous_packet_dropped (or counted in
#             trace_writer_packet_loss)
#   multi     2 producer processes x 2 threads, started before the session,
#             one data source name: 4 complete sequences
#
# Each scenario: service ($TRACED_CMD, default real-traced = the real Perfetto
# service) on private sockets + producer ($PRODUCER_CMD, default sdk-producer,
# 2 threads) + consumer ($CONSUMER_CMD, default sdk-consumer) -> trace-check
# (and perfetto_trace_pb2 when a venv with PyPI `perfetto` exists).
# To test our own binaries, e.g.:
#   TRACED_CMD="$PWD/target/release/tracebox traced" scripts/sdk-interop.sh
#   CONSUMER_KIND=perfetto CONSUMER_CMD="$PWD/target/release/tracebox perfetto" ...
# See tests/sdk-interop/sh/lib.sh for every knob. Exit status: 0 iff all pass.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=../tests/sdk-interop/sh/lib.sh
. "$REPO/tests/sdk-interop/sh/lib.sh"

PY=${TRACEBOX_PYTHON:-}
if [ -z "$PY" ]; then
    for cand in "$REPO/.venv/bin/python"; do
        [ -x "$cand" ] && { PY=$cand; break; }
    done
fi

# scenario NAME THREADS PACKETS SIZE BUFFER_KB FILL(ring|discard) EXPECT(all|ring|discard|gaps)
# An EXPECT other than "all" also requires loss to have happened.
# Extra producer flags come from the PRODUCER_EXTRA array.
PRODUCER_EXTRA=()
scenario() {
    local name=$1 threads=$2 packets=$3 size=$4 buffer_kb=$5 fill=$6 expect=$7
    local loss=()
    [ "$expect" != all ] && loss=(--expect-loss)
    local ds="tbx.sdk_test.$name"
    log "scenario $name: $threads threads x $packets packets x ${size}B, ${buffer_kb} KiB $fill buffer"
    new_run_dir "$name"
    start_traced || { dump_logs; return 1; }
    write_config "$ds" "$buffer_kb" "$fill"
    start_consumer
    start_producer --data-source "$ds" --threads "$threads" --packets "$packets" --size "$size" \
        "${PRODUCER_EXTRA[@]}"
    if ! wait_file "$RUN/done" 120 "$PRODUCER_PID"; then
        dump_logs
        stop_traced
        return 1
    fi
    local rc=0
    stop_consumer || rc=$?
    wait_pid "$PRODUCER_PID" 30 || rc=$?
    stop_traced
    if [ $rc -ne 0 ] || [ ! -s "$RUN/trace.pb" ]; then
        log "scenario $name: peers failed (rc=$rc)"
        dump_logs
        return 1
    fi
    grep -h "result=" "$RUN/producer.log" "$RUN/consumer.log" >&2 || true
    local check_rc=0
    "$BIN/trace-check" --trace "$RUN/trace.pb" --threads "$threads" --packets "$packets" \
        --size "$size" --mode "$expect" "${loss[@]}" --producer-pid "$PRODUCER_PID" | tee "$RUN/check.txt" || check_rc=$?
    if [ -n "$PY" ]; then
        local pyflags=()
        [ "$expect" = gaps ] && pyflags=(--gaps)
        "$PY" "$INTEROP_DIR/check_trace_pb2.py" "$RUN/trace.pb" "$threads" "$packets" "$size" \
            "${pyflags[@]}" || check_rc=1
    fi
    if [ $check_rc -ne 0 ]; then
        log "scenario $name: FAIL"
        dump_logs
        return 1
    fi
    log "scenario $name: PASS"
}

# Two producer processes that register before the session exists.
scenario_multi() {
    local threads=2 packets=3000 size=200 ds="tbx.sdk_test.multi"
    log "scenario multi: 2 producers x $threads threads x $packets packets x ${size}B"
    new_run_dir multi
    start_traced || { dump_logs; return 1; }
    write_config "$ds" 32768 ring
    local pids=() p
    for p in 0 1; do
        # shellcheck disable=SC2086
        spawn "${PRODUCER_LIMIT:-180}" "$RUN/producer$p.log" $PRODUCER_CMD --done-file "$RUN/done$p" \
            --data-source "$ds" --threads "$threads" --thread-base $((p * threads)) \
            --packets "$packets" --size "$size"
        pids+=("$SPAWNED_PID")
    done
    for p in 0 1; do
        wait_file "$RUN/producer$p.log" 10 "${pids[$p]}" || true
    done
    start_consumer
    local rc=0
    for p in 0 1; do
        wait_file "$RUN/done$p" 120 "${pids[$p]}" || rc=1
    done
    stop_consumer || rc=$?
    for p in 0 1; do
        wait_pid "${pids[$p]}" 30 || rc=$?
    done
    stop_traced
    if [ $rc -ne 0 ] || [ ! -s "$RUN/trace.pb" ]; then
        log "scenario multi: peers failed (rc=$rc)"
        dump_logs
        return 1
    fi
    if ! "$BIN/trace-check" --trace "$RUN/trace.pb" --threads $((2 * threads)) --packets "$packets" \
        --size "$size" --mode all; then
        log "scenario multi: FAIL"
        dump_logs
        return 1
    fi
    log "scenario multi: PASS"
}

modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(all)
interop_build
failed=()
for m in "${modes[@]}"; do
    case $m in
        build) echo "sdk-interop: binaries in $BIN" ;;
        basic) scenario basic 2 5000 100 32768 ring all || failed+=(basic) ;;
        large) scenario large 2 300 10000 32768 ring all || failed+=(large) ;;
        ring) scenario ring 2 20000 100 256 ring ring || failed+=(ring) ;;
        discard) scenario discard 2 20000 100 256 discard discard || failed+=(discard) ;;
        smb-loss)
            PRODUCER_EXTRA=(--policy drop --shmem-kb 8)
            scenario smb-loss 2 20000 1000 65536 ring gaps || failed+=(smb-loss)
            PRODUCER_EXTRA=()
            ;;
        multi) scenario_multi || failed+=(multi) ;;
        all)
            for s in basic large ring discard smb-loss multi; do
                "$0" "$s" || failed+=("$s")
            done
            ;;
        *) echo "unknown mode $m" >&2; exit 2 ;;
    esac
done
if [ ${#failed[@]} -ne 0 ]; then
    echo "sdk-interop: FAILED: ${failed[*]}"
    exit 1
fi
echo "sdk-interop: all passed (${modes[*]})"
