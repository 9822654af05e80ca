# Shared shell helpers for scripts/sdk-interop.sh and scripts/bench-*.sh.
# Sourced, not run. Expects REPO to point at the repository root.
#
# Peers are swappable:
#   TRACED_CMD    service command; gets its sockets from
#                 PERFETTO_PRODUCER_SOCK_NAME / PERFETTO_CONSUMER_SOCK_NAME
#                 (default: real-traced, the real Perfetto service).
#   PRODUCER_CMD  command taking sdk-producer's flags (default: sdk-producer).
#   CONSUMER_CMD  consumer command (default: sdk-consumer).
#   CONSUMER_KIND "sdk" (sdk-consumer flags) or "perfetto" (perfetto CLI:
#                 `-c CONFIG.pb -o OUT`). Either way it is stopped by SIGTERM.
#   SOCK_STYLE    "path" (files in the run dir, default) or "abstract" (@names).
#   PRODUCER_API  "rust" (perfetto-sdk crate, default) or "c" (the C SDK's
#                 inline API): passed as --api to the producer when set.

INTEROP_DIR="$REPO/tests/sdk-interop"
BIN="$INTEROP_DIR/target/release"
: "${SOCK_STYLE:=path}"
: "${CONSUMER_KIND:=sdk}"
: "${KEEP_RUN_DIRS:=0}"

_TBX_PIDS=()
_TBX_DIRS=()
declare -A _TBX_WATCHDOG=()

log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# Kills everything we started, on any exit.
tbx_cleanup() {
    local pid
    for pid in "${_TBX_WATCHDOG[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${_TBX_PIDS[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
    done
    for pid in "${_TBX_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    _TBX_PIDS=()
    if [ "$KEEP_RUN_DIRS" != 1 ]; then
        local d
        for d in "${_TBX_DIRS[@]}"; do rm -rf "$d"; done
    fi
}
trap tbx_cleanup EXIT
trap 'exit 130' INT TERM

interop_build() {
    log "building tests/sdk-interop (release)"
    # From inside the crate so its .cargo/config.toml applies; own target dir
    # whatever CARGO_TARGET_DIR says.
    (cd "$INTEROP_DIR" && cargo build --release --locked --quiet --target-dir "$INTEROP_DIR/target")
    : "${TRACED_CMD:=$BIN/real-traced}"
    : "${PRODUCER_CMD:=$BIN/sdk-producer}"
    : "${CONSUMER_CMD:=$BIN/sdk-consumer}"
}

# new_run_dir NAME: private dir + socket names for one scenario (sets RUN,
# PERFETTO_PRODUCER_SOCK_NAME, PERFETTO_CONSUMER_SOCK_NAME).
new_run_dir() {
    RUN=$(mktemp -d "/tmp/tbx-sdk-$1.XXXXXX")
    _TBX_DIRS+=("$RUN")
    if [ "$SOCK_STYLE" = abstract ]; then
        local tag
        tag=$(basename "$RUN")
        export PERFETTO_PRODUCER_SOCK_NAME="@tbx-real-$tag-producer"
        export PERFETTO_CONSUMER_SOCK_NAME="@tbx-real-$tag-consumer"
    else
        export PERFETTO_PRODUCER_SOCK_NAME="$RUN/producer.sock"
        export PERFETTO_CONSUMER_SOCK_NAME="$RUN/consumer.sock"
    fi
}

# spawn SECONDS LOG CMD...: runs CMD in the background with a hard time
# limit; the command's own pid (not a wrapper's) ends up in SPAWNED_PID.
spawn() {
    local limit=$1 logf=$2
    shift 2
    "$@" >"$logf" 2>&1 &
    SPAWNED_PID=$!
    _TBX_PIDS+=("$SPAWNED_PID")
    local target=$SPAWNED_PID
    (
        sleep "$limit" &
        sp=$!
        trap 'kill $sp 2>/dev/null; exit 0' TERM
        wait $sp
        kill -KILL "$target" 2>/dev/null
    ) >/dev/null 2>&1 &
    _TBX_WATCHDOG[$target]=$!
}

# Ends the watchdog of a process that has exited.
_unwatch() {
    local wd=${_TBX_WATCHDOG[$1]:-}
    if [ -n "$wd" ]; then
        kill -TERM "$wd" 2>/dev/null || true
        wait "$wd" 2>/dev/null || true
        unset "_TBX_WATCHDOG[$1]"
    fi
}

# wait_socket NAME SECONDS: until a listening unix socket NAME exists.
wait_socket() {
    local name=$1 limit=$2 want
    want=$name
    local end=$((SECONDS + limit))
    while [ $SECONDS -lt "$end" ]; do
        if awk -v n="$want" 'NR>1 && $NF==n {found=1} END {exit !found}' /proc/net/unix; then
            return 0
        fi
        sleep 0.05
    done
    log "socket $name did not appear within ${limit}s"
    return 1
}

# wait_file PATH SECONDS [PID]: until PATH exists (fails early if PID dies).
wait_file() {
    local path=$1 limit=$2 pid=${3:-}
    local end=$((SECONDS + limit))
    while [ $SECONDS -lt "$end" ]; do
        [ -e "$path" ] && return 0
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            log "process $pid exited before $path appeared"
            return 1
        fi
        sleep 0.05
    done
    log "$path did not appear within ${limit}s"
    return 1
}

# wait_pid PID SECONDS: waits for exit, returns its status (124 on timeout).
wait_pid() {
    local pid=$1 limit=$2
    local end=$((SECONDS + limit))
    while kill -0 "$pid" 2>/dev/null; do
        if [ $SECONDS -ge "$end" ]; then
            log "pid $pid still running after ${limit}s; killing"
            kill -KILL "$pid" 2>/dev/null
            wait "$pid" 2>/dev/null
            _unwatch "$pid"
            return 124
        fi
        # A zombie child still answers kill -0; reap it through wait.
        if [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ]; then
            break
        fi
        sleep 0.05
    done
    local rc=0
    wait "$pid" || rc=$?
    _unwatch "$pid"
    return $rc
}

# proc_usage PID: prints "cpu_s=U+S user_s=U sys_s=S vmhwm_kb=K" for a live pid.
proc_usage() {
    local pid=$1 hz
    hz=$(getconf CLK_TCK)
    local stat
    stat=$(sed 's/^.*) //' "/proc/$pid/stat")
    local hwm
    hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status")
    echo "$stat" | awk -v hz="$hz" -v hwm="$hwm" \
        '{u=$12/hz; s=$13/hz; printf "cpu_s=%.2f user_s=%.2f sys_s=%.2f vmhwm_kb=%d\n", u+s, u, s, hwm}'
}

start_traced() {
    # shellcheck disable=SC2086
    spawn "${TRACED_LIMIT:-240}" "$RUN/traced.log" $TRACED_CMD
    TRACED_PID=$SPAWNED_PID
    wait_socket "$PERFETTO_PRODUCER_SOCK_NAME" 15 && wait_socket "$PERFETTO_CONSUMER_SOCK_NAME" 15 || {
        cat "$RUN/traced.log" >&2
        return 1
    }
}

stop_traced() {
    kill -TERM "$TRACED_PID" 2>/dev/null || true
    wait_pid "$TRACED_PID" 10 || true
}

# write_config DS BUFFER_KB FILL_POLICY: binary TraceConfig at $RUN/config.pb.
write_config() {
    "$BIN/sdk-consumer" --write-config "$RUN/config.pb" \
        --data-source "$1" --buffer-kb "$2" --fill-policy "$3"
}

start_consumer() {
    if [ "$CONSUMER_KIND" = perfetto ]; then
        # shellcheck disable=SC2086
        spawn "${CONSUMER_LIMIT:-180}" "$RUN/consumer.log" $CONSUMER_CMD -c "$RUN/config.pb" -o "$RUN/trace.pb"
    else
        # shellcheck disable=SC2086
        spawn "${CONSUMER_LIMIT:-180}" "$RUN/consumer.log" $CONSUMER_CMD \
            --config "$RUN/config.pb" --out "$RUN/trace.pb" --timeout-s "${CONSUMER_LIMIT:-180}"
    fi
    CONSUMER_PID=$SPAWNED_PID
}

# start_producer ARGS...: sdk-producer flags; it writes $RUN/done when flushed.
start_producer() {
    # shellcheck disable=SC2086
    local api=()
    [ -n "${PRODUCER_API:-}" ] && api=(--api "$PRODUCER_API")
    spawn "${PRODUCER_LIMIT:-180}" "$RUN/producer.log" $PRODUCER_CMD --done-file "$RUN/done" "${api[@]}" "$@"
    PRODUCER_PID=$SPAWNED_PID
}

# stop_consumer: SIGTERM, then wait for it to write the trace.
stop_consumer() {
    kill -TERM "$CONSUMER_PID" 2>/dev/null || true
    wait_pid "$CONSUMER_PID" 60
}

dump_logs() {
    local f
    for f in "$RUN"/*.log; do
        echo "---- $f" >&2
        tail -n 20 "$f" >&2
    done
}
