#!/usr/bin/env bash
# Cross builds under emulation: for each TARGET (default aarch64 and armv7)
# builds the static binary (scripts/build-static.sh), then under
# qemu-user-static, with real syscalls against this kernel:
#   1. `--list`, and autostart under a private empty binfmt_misc (a new
#      user namespace's own) fails with the `Exec format error` hint;
#   2. traced --background + `perfetto --query` on private sockets;
#   3. an autostart trace: `tracebox --txt -c CFG -o OUT` starts traced and
#      traced_probes itself (re-exec of the foreign binary needs binfmt_misc,
#      registered here), records sched_switch plus atrace markers written to
#      the ftrace instance, and is checked with Perfetto's own schema.
# Without binfmt_misc (no permission to mount it) step 3 starts the daemons
# explicitly under qemu instead, and says so (TRACEBOX_CROSS_NO_BINFMT=1
# forces that path).
#   scripts/test-cross.sh [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(aarch64-unknown-linux-musl armv7-unknown-linux-musleabihf)

scripts/ensure-tracefs.sh
scripts/setup-python.sh
py="$PWD/.venv/bin/python"
tracefs=/sys/kernel/tracing
[ -e $tracefs/trace ] || tracefs=/sys/kernel/debug/tracing

if ! command -v qemu-aarch64-static >/dev/null || ! command -v qemu-arm-static >/dev/null; then
    apt-get update -qq || echo "apt-get update reported errors; trying the install anyway" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static >/dev/null
fi

# Registers qemu for foreign ELF files (as Debian's binfmt.d files say:
# flags P keep argv[0], which picks the applet, F opens the interpreter now).
binfmt_ready() {
    local name="$1" bfm=/proc/sys/fs/binfmt_misc
    [ -e "$bfm/register" ] || mount -t binfmt_misc binfmt_misc "$bfm" 2>/dev/null || return 1
    [ -e "$bfm/$name" ] && [ "$(head -1 "$bfm/$name")" = enabled ] && return 0
    [ -r "/usr/lib/binfmt.d/$name.conf" ] || return 1
    cat "/usr/lib/binfmt.d/$name.conf" >"$bfm/register" 2>/dev/null || return 1
    [ -e "$bfm/$name" ]
}

work="$(mktemp -d)"
pids_to_kill=()
cleanup() {
    for p in "${pids_to_kill[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# Waits (bounded) until FILE exists and holds CONTENT.
wait_for() {
    local file="$1" want="$2" n=0
    while [ "$(cat "$file" 2>/dev/null)" != "$want" ]; do
        n=$((n + 1))
        [ $n -le 600 ] || { echo "test-cross: $file never became $want" >&2; return 1; }
        sleep 0.1
    done
}

for target in "${targets[@]}"; do
    case "$target" in
    aarch64-*) qemu=qemu-aarch64-static binfmt=qemu-aarch64 ;;
    armv7-*) qemu=qemu-arm-static binfmt=qemu-arm ;;
    *) echo "test-cross: no emulator for $target" >&2; exit 2 ;;
    esac
    echo "== $target: build"
    # Not `tee /dev/stderr`: reopening stderr truncates it when it is a file.
    built=$(scripts/build-static.sh "$target")
    printf '%s\n' "$built" >&2
    bin="$PWD/$(printf '%s\n' "$built" | sed -n 's/^built: //p')"
    [ -x "$bin" ] || { echo "test-cross: build-static named no binary" >&2; exit 1; }
    tag="${target%%-*}"
    dir="$work/$tag"
    mkdir -p "$dir"

    echo "== $target: --list under $qemu"
    list="$($qemu "$bin" --list)"
    for applet in traced traced_probes perfetto report trigger_perfetto; do
        grep -qx "$applet" <<<"$list" || { echo "test-cross: --list lacks $applet" >&2; exit 1; }
    done

    echo "== $target: autostart without binfmt_misc names the way out"
    # A private, empty binfmt_misc (Linux >= 6.7 lets a new user namespace
    # mount its own): the client's re-exec of $bin fails with ENOEXEC as on
    # a host without binfmt (glibc's posix_spawn under qemu cannot pass the
    # errno back: the armv7 child exits 127, "could not be executed"), and
    # the global registrations stay as they are.
    # shellcheck disable=SC2016
    if unshare --user --map-root-user --mount sh -c \
        'mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc' 2>/dev/null; then
        set +e
        # shellcheck disable=SC2016
        unshare --user --map-root-user --mount sh -c \
            'mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc && exec "$@"' sh \
            $qemu "$bin" --private-sockets -t 1s sched -o "$dir/noexec.pftrace" 2>"$dir/noexec.err"
        rc=$?
        set -e
        if ! { [ $rc -eq 1 ] && grep -Eq "Exec format error|could not be executed" "$dir/noexec.err" &&
            grep -q "Register the emulator with binfmt_misc, or start the daemons by hand" "$dir/noexec.err"; }; then
            cat "$dir/noexec.err" >&2
            echo "test-cross: no Exec format error hint (exit $rc)" >&2
            exit 1
        fi
        sed -n 's/^/    /p' "$dir/noexec.err"
    else
        echo "(skipped: this kernel ($(uname -r)) lets no user namespace mount its own binfmt_misc; needs Linux >= 6.7)"
    fi

    echo "== $target: traced --background, perfetto --query"
    export PERFETTO_PRODUCER_SOCK_NAME="$dir/producer" PERFETTO_CONSUMER_SOCK_NAME="$dir/consumer"
    traced_pid="$($qemu "$bin" traced --background)"
    pids_to_kill+=("$traced_pid")
    $qemu "$bin" perfetto --query-raw >"$dir/query.pb"
    "$py" - "$dir/query.pb" <<'PY'
import sys
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
s = pb.TracingServiceState()
s.ParseFromString(open(sys.argv[1], "rb").read())
assert "(tracebox " in s.tracing_service_version, s
print("query-raw: service", s.tracing_service_version)
PY
    kill -TERM "$traced_pid"
    while kill -0 "$traced_pid" 2>/dev/null; do sleep 0.1; done

    echo "== $target: end-to-end trace of this kernel"
    instance="tbx_cross_$tag"
    rmdir "$tracefs/instances/$instance" 2>/dev/null || true
    cat >"$dir/config.txt" <<CFG
buffers { size_kb: 8192 }
data_sources { config { name: "linux.ftrace" ftrace_config {
    ftrace_events: "sched/sched_switch" ftrace_events: "ftrace/print"
    instance_name: "$instance" } } }
data_sources { config { name: "linux.process_stats"
    process_stats_config { scan_all_processes_on_start: true } } }
data_sources { config { name: "linux.system_info" } }
duration_ms: 120000
CFG
    export PERFETTO_PRODUCER_SOCK_NAME="$dir/producer2" PERFETTO_CONSUMER_SOCK_NAME="$dir/consumer2"
    export TRACED_PROBES_STATE_FILE="$dir/probes.state"
    daemons=()
    if [ -z "${TRACEBOX_CROSS_NO_BINFMT:-}" ] && binfmt_ready "$binfmt"; then
        echo "(binfmt_misc: the client re-executes $bin for traced and traced_probes)"
    else
        echo "(no binfmt_misc here: starting traced and traced_probes explicitly under $qemu)"
        daemons+=("$($qemu "$bin" traced --background)")
        daemons+=("$($qemu "$bin" traced_probes --background --reset-ftrace)")
        pids_to_kill+=("${daemons[@]}")
    fi
    $qemu "$bin" --txt -c "$dir/config.txt" -o "$dir/trace.pftrace" &
    client=$!
    pids_to_kill+=("$client")
    # A new instance starts with tracing_on=1; traced_probes turns it off,
    # enables the events at setup, and on again at start: wait in that order.
    wait_for "$tracefs/instances/$instance/events/sched/sched_switch/enable" 1
    wait_for "$tracefs/instances/$instance/tracing_on" 1
    echo "B|$$|tracebox_cross_$tag" >"$tracefs/instances/$instance/trace_marker"
    sleep 0.5
    echo "E|$$" >"$tracefs/instances/$instance/trace_marker"
    sleep 0.5
    kill -INT "$client"
    wait "$client"
    for d in "${daemons[@]}"; do
        kill -TERM "$d"
        while kill -0 "$d" 2>/dev/null; do sleep 0.1; done
    done
    "$py" tests/py/check_probes_trace.py "$dir/trace.pftrace" --sched-switch --ftrace-stats \
        --cpu-info --pid $$ --marker "B|$$|tracebox_cross_$tag" --marker "E|$$"
    echo "== $target: report reads the trace on the target"
    $qemu "$bin" report "$dir/trace.pftrace" >"$dir/report.txt"
    grep -q "tracebox_cross_$tag" "$dir/report.txt" || { cat "$dir/report.txt" >&2; echo "test-cross: report lacks the marker slice" >&2; exit 1; }
    if [ -e "$tracefs/instances/$instance" ]; then
        echo "test-cross: ftrace instance $instance left behind" >&2
        exit 1
    fi
    # Autostarted daemons exit by themselves once idle (slower under qemu).
    for _ in $(seq 300); do
        pgrep -f "$bin" >/dev/null || break
        sleep 0.1
    done
    if pgrep -f "$bin" >/dev/null; then
        echo "test-cross: processes of $bin left running:" >&2
        pgrep -af "$bin" >&2
        exit 1
    fi
    unset PERFETTO_PRODUCER_SOCK_NAME PERFETTO_CONSUMER_SOCK_NAME TRACED_PROBES_STATE_FILE
    pids_to_kill=() # all waited for: none of these pids is ours any more
    echo "== $target: ok"
done
