#!/usr/bin/env bash
# A remote producer through traced_relay against the same producer local to
# traced, same load, same run: the real Perfetto SDK producer (sdk-producer,
# C API, one thread) writes PACKETS packets of SIZE bytes into our traced,
# either on traced's UNIX producer socket (shared memory) or on
# traced_relay's socket, forwarded over TCP on loopback (shared-memory
# emulation: every chunk travels inline in CommitData). Scenarios alternate
# REPEAT times. One machine-readable line per run on stdout:
#   bench=relay path=local|relay packets=.. payload_bytes=.. wall_s=.. mb_per_s=..
#   producer_cpu_s=.. traced_cpu_s=.. relay_cpu_s=.. cpu_s_per_mb=.. delivered=..
# wall_s runs from the producer's start to its done file (all packets
# written and flushed); MB are payload bytes (10^6). CPU is process CPU
# time from /proc (producer + traced + relay). Every packet must be in the
# trace read back, or the run fails.
# PRODUCER=probes measures our own producer instead: traced_probes records
# ftrace/print in a private instance while one thread writes 32-byte
# markers to its trace_marker for LOAD_S seconds at RATE markers/s (0, the
# default: as fast as it can; the ftrace bench's load), either on traced's
# socket or through the relay. traced writes the trace into the file as it
# goes (write_into_file), so no buffer caps what a path can deliver.
#   bench=relay producer=probes path=.. written=.. captured=.. lost=..
#   load_s=.. mb_per_s=.. probes_cpu_s=.. traced_cpu_s=.. relay_cpu_s=..
#   cpu_s_per_mb=..
# MB are the captured markers' 32 payload bytes (10^6); mb_per_s divides
# them by the load's seconds; CPU is probes + traced + relay over the whole
# session. The marker writer competes for the same CPUs, so a costlier
# path also shows as fewer markers written.
# Env: TRACEBOX (default target/release/tracebox), PRODUCER (sdk|probes),
#      PACKETS (200000), SIZE (100), REPEAT (3), LOAD_S (3), RATE (0), PATHS ("local
#      relay": one of them alone, e.g. to profile it).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../tests/sdk-interop/sh/lib.sh
. "$REPO/tests/sdk-interop/sh/lib.sh"

: "${TRACEBOX:=$REPO/target/release/tracebox}"
: "${PACKETS:=200000}"
: "${SIZE:=100}"
: "${REPEAT:=3}"
: "${PRODUCER:=sdk}"
: "${LOAD_S:=3}"
: "${RATE:=0}"
# The SDK peers: prebuilt (TRACEBOX_SDK_INTEROP_BIN) or built here.
if [ -n "${TRACEBOX_SDK_INTEROP_BIN:-}" ]; then
    BIN=$TRACEBOX_SDK_INTEROP_BIN
    : "${PRODUCER_CMD:=$BIN/sdk-producer}" "${CONSUMER_CMD:=$BIN/sdk-consumer}"
elif [ "$PRODUCER" = sdk ]; then
    interop_build
fi
[ -x "$TRACEBOX" ] || { echo "no $TRACEBOX: cargo build --release" >&2; exit 1; }

cpu_of() { proc_usage "$1" | sed 's/cpu_s=\([^ ]*\).*/\1/'; }
now() { date +%s.%N; }

# traced with its relay endpoint, and for the relay path traced_relay in
# front of it: sets the caller's producer_sock and relay_pid.
start_stack() {
    local run=$1 path=$2 port unix=$PERFETTO_PRODUCER_SOCK_NAME
    new_run_dir "$run"
    port=$((20000 + RANDOM % 20000))
    PERFETTO_PRODUCER_SOCK_NAME="$unix,127.0.0.1:$port" \
        spawn 240 "$RUN/traced.log" "$TRACEBOX" traced --enable-relay-endpoint
    TRACED_PID=$SPAWNED_PID
    wait_socket "$unix" 15 && wait_socket "$PERFETTO_CONSUMER_SOCK_NAME" 15
    producer_sock=$unix relay_pid=""
    if [ "$path" = relay ]; then
        producer_sock="$RUN/relay.sock"
        PERFETTO_PRODUCER_SOCK_NAME=$producer_sock PERFETTO_RELAY_SOCK_NAME="127.0.0.1:$port" \
            spawn 240 "$RUN/relay.log" "$TRACEBOX" traced_relay
        relay_pid=$SPAWNED_PID
        wait_socket "$producer_sock" 15
    fi
}

run_one() {
    local path=$1 producer_sock relay_pid
    start_stack "relay-$path" "$path"
    # Holds every packet (delivery is checked exactly); remote data
    # sources start only with trace_all_machines (field 43 = true).
    write_config tbx.bench_relay $((256 * 1024)) discard
    printf '\xd8\x02\x01' >>"$RUN/config.pb"
    start_consumer
    sleep 0.5 # let the session start before the producer registers
    local t0 t1
    t0=$(now)
    PRODUCER_API=c PERFETTO_PRODUCER_SOCK_NAME=$producer_sock start_producer \
        --data-source tbx.bench_relay --threads 1 --packets "$PACKETS" --size "$SIZE" --fixed-payload
    wait_file "$RUN/done" 200 "$PRODUCER_PID" || { dump_logs; return 1; }
    t1=$(now)
    local producer_cpu traced_cpu relay_cpu=0
    producer_cpu=$(cpu_of "$PRODUCER_PID")
    stop_consumer || true
    wait_pid "$PRODUCER_PID" 30 || true
    traced_cpu=$(cpu_of "$TRACED_PID")
    if [ -n "$relay_pid" ]; then
        relay_cpu=$(cpu_of "$relay_pid")
        kill -TERM "$relay_pid" 2>/dev/null || true
        wait_pid "$relay_pid" 10 || true
    fi
    stop_traced
    local check found
    check=$("$BIN/trace-check" --trace "$RUN/trace.pb" --threads 1 --packets "$PACKETS" \
        --size "$SIZE" --mode all --fixed-payload | head -1) || { echo "$check" >&2; return 1; }
    found=$(sed -n 's/.* found=\([^ ]*\).*/\1/p' <<<"$check")
    awk -v path="$path" -v n="$PACKETS" -v size="$SIZE" -v t0="$t0" -v t1="$t1" \
        -v p="$producer_cpu" -v t="$traced_cpu" -v r="$relay_cpu" -v found="$found" 'BEGIN {
        mb = n * size / 1e6; wall = t1 - t0
        printf "bench=relay path=%s packets=%d payload_bytes=%d wall_s=%.3f mb_per_s=%.2f ", path, n, size, wall, mb / wall
        printf "producer_cpu_s=%.2f traced_cpu_s=%.2f relay_cpu_s=%.2f cpu_s_per_mb=%.4f delivered=%s\n", p, t, r, (p + t + r) / mb, found
    }'
}

# traced_probes (ftrace/print markers) instead of the SDK producer.
run_probes() {
    local path=$1 instance=tbx_bench_relay_$$ producer_sock relay_pid
    start_stack "relay-probes-$path" "$path"
    PERFETTO_PRODUCER_SOCK_NAME=$producer_sock TRACED_PROBES_STATE_FILE=$RUN/probes.state \
        spawn 240 "$RUN/probes.log" "$TRACEBOX" traced_probes
    local probes_pid=$SPAWNED_PID
    sleep 1 # registered
    cat >"$RUN/config.txt" <<CFG
duration_ms: $((LOAD_S * 1000 + 4000))
trace_all_machines: true
write_into_file: true
file_write_period_ms: 250
buffers { size_kb: 65536 fill_policy: RING_BUFFER }
data_sources { config { name: "linux.ftrace" ftrace_config {
    ftrace_events: "ftrace/print" buffer_size_kb: 8192 instance_name: "$instance" } } }
CFG
    spawn 240 "$RUN/consumer.log" "$TRACEBOX" perfetto --txt -c "$RUN/config.txt" -o "$RUN/trace.pb"
    local consumer=$SPAWNED_PID
    local marker=/sys/kernel/tracing/instances/$instance/trace_marker
    for _ in $(seq 100); do [ -e "$marker" ] && break; sleep 0.05; done
    sleep 0.5
    local load written
    load=$("$LOAD" marker "$marker" 1 "$RATE" "$LOAD_S")
    written=$(sed -n 's/.* written=\([0-9]*\).*/\1/p' <<<"$load")
    wait_pid "$consumer" 60 || true
    local probes_cpu traced_cpu relay_cpu=0
    probes_cpu=$(cpu_of "$probes_pid")
    traced_cpu=$(cpu_of "$TRACED_PID")
    [ -z "$relay_pid" ] || relay_cpu=$(cpu_of "$relay_pid")
    kill -TERM "$probes_pid" $relay_pid 2>/dev/null || true
    wait_pid "$probes_pid" 10 || true
    [ -z "$relay_pid" ] || wait_pid "$relay_pid" 10 || true
    stop_traced
    local captured
    captured=$("$COUNT" "$RUN/trace.pb" | sed -n 's/.* generic_events=\([0-9]*\).*/\1/p')
    awk -v path="$path" -v rate="$RATE" -v w="$written" -v c="${captured:-0}" -v s="$LOAD_S" \
        -v p="$probes_cpu" -v t="$traced_cpu" -v r="$relay_cpu" 'BEGIN {
        mb = c * 32 / 1e6
        printf "bench=relay producer=probes path=%s rate=%s written=%d captured=%d lost=%d load_s=%s mb_per_s=%.2f ", path, rate, w, c, w - c, s, mb / s
        printf "probes_cpu_s=%.2f traced_cpu_s=%.2f relay_cpu_s=%.2f cpu_s_per_mb=%.4f\n", p, t, r, (p + t + r) / (mb ? mb : 1)
    }'
}

if [ "$PRODUCER" = probes ]; then
    # The load and the counter (optimized, without the shipping fat LTO);
    # LOAD / COUNT may name prebuilt ones.
    ex=${CARGO_TARGET_DIR:-$REPO/target}/release/examples
    : "${LOAD:=$ex/bench_load}" "${COUNT:=$ex/bench_count_ftrace}"
    [ -x "$LOAD" ] && [ -x "$COUNT" ] ||
        CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
            cargo build -q --release --example bench_load --example bench_count_ftrace
fi

status=0
for _ in $(seq "$REPEAT"); do
    for path in ${PATHS:-local relay}; do
        if [ "$PRODUCER" = probes ]; then
            run_probes "$path" || status=1
            continue
        fi
        run_one "$path" || status=1
    done
done
exit $status
