#!/usr/bin/env bash
# The SysV/BusyBox init script for real: stages tracebox into a temporary
# image root (DESTDIR, --init busybox), starts traced, traced_probes and
# traced_perf with the installed /etc/init.d/S60tracebox under BusyBox sh (paths and sockets from a temporary defaults file), records a trace of this
# kernel with the installed `perfetto`, stops, and checks that no tracebox
# process is left and ftrace is off; socket modes by default (producer 0666,
# consumer 0600) and from TRACED_ARGS. Then with TRACEBOX_GROUP set: the
# consumer socket's group and mode, a member records, a non-member is refused.
# Then relay mode (PERFETTO_RELAY_SOCK_NAME): traced_relay in traced's place,
# its traced_probes recorded by a central traced on a loopback TCP port.
#   scripts/test-initd.sh [BINARY]     (default: a fresh target/debug/tracebox)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ge 1 ]; then
    bin="$1"
else
    cargo build --locked --bin tracebox
    bin="${CARGO_TARGET_DIR:-$PWD/target}/debug/tracebox"
fi
scripts/ensure-tracefs.sh
scripts/setup-python.sh
py="$PWD/.venv/bin/python"
tracefs=/sys/kernel/tracing
[ -e $tracefs/trace ] || tracefs=/sys/kernel/debug/tracing

# Boards run it under BusyBox: so does this test.
if ! command -v busybox >/dev/null; then
    apt-get update -qq || echo "apt-get update reported errors; trying the install anyway" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox >/dev/null
fi
tmp="$(mktemp -d)"
# What BusyBox rcS runs: the script as install.sh names it for busybox.
init_script="$tmp/root/etc/init.d/S60tracebox"
run_init() { busybox sh "$init_script" "$@"; }
export TRACEBOX_DEFAULTS="$tmp/default"
# The TRACEBOX_GROUP check's group and member (unique names, removed at exit).
tgroup="tbxinitd$$"
tmember="tbxinitm$$"
central_pid=
cleanup() {
    run_init stop >/dev/null 2>&1 || true
    [ -z "$central_pid" ] || kill "$central_pid" 2>/dev/null || true
    userdel "$tmember" >/dev/null 2>&1 || true
    groupdel "$tgroup" >/dev/null 2>&1 || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "test-initd: $*" >&2; exit 1; }

DESTDIR="$tmp/root" scripts/install.sh --init busybox /usr "$bin"
[ -x "$init_script" ] || fail "install.sh --init busybox did not install $init_script"
for applet in traced traced_probes traced_perf perfetto report trigger_perfetto; do
    [ "$(readlink "$tmp/root/usr/bin/$applet")" = tracebox ] || fail "no $applet symlink"
done

group="$(id -gn)"
cat >"$tmp/default" <<EOF2
TRACEBOX_BIN_DIR=$tmp/root/usr/bin
TRACEBOX_PID_DIR=$tmp/run
PERFETTO_PRODUCER_SOCK_NAME=$tmp/producer.sock
PERFETTO_CONSUMER_SOCK_NAME=$tmp/consumer.sock
TRACED_PROBES_STATE_FILE=$tmp/probes.state
EOF2

echo "== start"
run_init start
run_init status || fail "status after start: $?"
for f in traced traced_probes traced_perf; do
    [ -s "$tmp/run/$f.pid" ] || fail "no pidfile for $f"
done
# The defaults: any user may produce, only root may consume.
[ "$(stat -c %a "$tmp/producer.sock")" = 666 ] || fail "producer socket mode $(stat -c %a "$tmp/producer.sock")"
[ "$(stat -c %a "$tmp/consumer.sock")" = 600 ] || fail "consumer socket mode $(stat -c %a "$tmp/consumer.sock")"
again="$(run_init start)"
[ "$(grep -c "already running" <<<"$again")" = 3 ] || fail "a second start did not see the running daemons: $again"

echo "== record with the installed perfetto"
instance=tbx_initd
cat >"$tmp/config.txt" <<EOF2
buffers { size_kb: 4096 }
data_sources { config { name: "linux.ftrace" ftrace_config {
    ftrace_events: "sched/sched_switch" instance_name: "$instance" } } }
data_sources { config { name: "linux.system_info" } }
duration_ms: 1500
EOF2
export PERFETTO_PRODUCER_SOCK_NAME="$tmp/producer.sock" PERFETTO_CONSUMER_SOCK_NAME="$tmp/consumer.sock"
"$tmp/root/usr/bin/perfetto" --txt -c "$tmp/config.txt" -o "$tmp/trace.pftrace"
"$py" tests/py/check_probes_trace.py "$tmp/trace.pftrace" --sched-switch --ftrace-stats --cpu-info

echo "== restart with TRACED_ARGS naming the socket permissions"
echo "TRACED_ARGS=\"--set-socket-permissions $group:0660:$group:0660\"" >>"$tmp/default"
run_init restart
run_init status || fail "status after restart: $?"
[ "$(stat -c %a "$tmp/producer.sock")" = 660 ] || fail "producer socket mode $(stat -c %a "$tmp/producer.sock")"
[ "$(stat -c %a "$tmp/consumer.sock")" = 660 ] || fail "consumer socket mode $(stat -c %a "$tmp/consumer.sock")"

echo "== stop"
run_init stop
rc=0
run_init status || rc=$?
[ $rc = 3 ] || fail "status after stop: $rc, want 3"
[ ! -e "$tmp/run/traced.pid" ] && [ ! -e "$tmp/run/traced_probes.pid" ] && [ ! -e "$tmp/run/traced_perf.pid" ] || fail "pidfiles left"
[ ! -e "$tmp/producer.sock" ] && [ ! -e "$tmp/consumer.sock" ] || fail "socket files left: $(ls "$tmp")"
if pgrep -f "$tmp/root/usr/bin/" >/dev/null; then
    pgrep -af "$tmp/root/usr/bin/" >&2
    fail "tracebox processes left running"
fi
if [ -e "$tracefs/instances/$instance" ]; then
    [ "$(cat "$tracefs/instances/$instance/tracing_on")" = 0 ] || fail "instance $instance still tracing"
fi
# traced_probes --reset-ftrace turned the root buffer off at start.
[ "$(cat "$tracefs/tracing_on")" = 0 ] || fail "tracing_on is 1 at the tracefs root"
echo "== init.d script ok"

echo "== TRACEBOX_GROUP: the group's members may record, other users may not"
groupadd "$tgroup"
useradd -M -N -g nogroup -G "$tgroup" -s /bin/sh "$tmember"
chmod 0755 "$tmp" # members reach the sockets and the installed binary
mkdir "$tmp/member" && chown "$tmember" "$tmp/member"
cat >"$tmp/default" <<EOF2
TRACEBOX_BIN_DIR=$tmp/root/usr/bin
TRACEBOX_PID_DIR=$tmp/run
PERFETTO_PRODUCER_SOCK_NAME=$tmp/producer.sock
PERFETTO_CONSUMER_SOCK_NAME=$tmp/consumer.sock
TRACED_PROBES_STATE_FILE=$tmp/probes.state
TRACEBOX_GROUP=$tgroup
EOF2
run_init start
[ "$(stat -c '%a %G' "$tmp/consumer.sock")" = "660 $tgroup" ] || fail "consumer socket: $(stat -c '%a %G' "$tmp/consumer.sock")"
[ "$(stat -c '%a %G' "$tmp/producer.sock")" = "666 $tgroup" ] || fail "producer socket: $(stat -c '%a %G' "$tmp/producer.sock")"
as_user() { setpriv --reuid="$1" --regid=nogroup --init-groups -- "${@:2}"; }
as_user "$tmember" "$tmp/root/usr/bin/perfetto" --query >"$tmp/member.out" 2>"$tmp/member.err" ||
    fail "a member of $tgroup cannot query: $(cat "$tmp/member.err")"
grep -q "^Service: .*(tracebox " "$tmp/member.out" || fail "member's query: $(cat "$tmp/member.out")"
as_user "$tmember" "$tmp/root/usr/bin/perfetto" --txt -c "$tmp/config.txt" -o "$tmp/member/t.pftrace" 2>"$tmp/member.err" ||
    fail "a member of $tgroup cannot record: $(cat "$tmp/member.err")"
"$py" tests/py/check_probes_trace.py "$tmp/member/t.pftrace" --sched-switch
rc=0
as_user nobody "$tmp/root/usr/bin/perfetto" --query >/dev/null 2>"$tmp/nobody.err" || rc=$?
[ $rc != 0 ] || fail "nobody (not in $tgroup) could query"
grep -q "Permission denied (EACCES).*$tmp/consumer.sock\|$tmp/consumer.sock.*Permission denied (EACCES)" "$tmp/nobody.err" ||
    fail "nobody's refusal does not say permission denied on the consumer socket: $(cat "$tmp/nobody.err")"
run_init stop
echo "== TRACEBOX_GROUP ok"

echo "== relay mode: traced_relay serves the producer socket, a central traced records"
port="$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
relay_addr="127.0.0.1:$port"
# The central machine's traced: a private UNIX producer socket plus the
# relay endpoint. Started from the build, not the image, so that the
# image's processes are only the init script's.
central_pid="$(PERFETTO_PRODUCER_SOCK_NAME="$tmp/central-producer.sock,$relay_addr" \
    PERFETTO_CONSUMER_SOCK_NAME="$tmp/central-consumer.sock" \
    "$bin" traced --background --enable-relay-endpoint-on "$relay_addr")"
cat >"$tmp/default" <<EOF2
TRACEBOX_BIN_DIR=$tmp/root/usr/bin
TRACEBOX_PID_DIR=$tmp/run
PERFETTO_PRODUCER_SOCK_NAME=$tmp/producer.sock
PERFETTO_CONSUMER_SOCK_NAME=$tmp/consumer.sock
TRACED_PROBES_STATE_FILE=$tmp/probes.state
TRACEBOX_LOG_FILE=$tmp/relay-mode.log
PERFETTO_RELAY_SOCK_NAME=$relay_addr
PERFETTO_MACHINE_NAME=board-initd
EOF2
# Logs to the file even where a syslogd runs: the test reads them.
TRACEBOX_SYSLOG_SOCKET="$tmp/no-syslog" run_init start
run_init status || fail "status in relay mode: $?"
[ -s "$tmp/run/traced_relay.pid" ] && [ ! -e "$tmp/run/traced.pid" ] || fail "relay mode pidfiles: $(ls "$tmp/run")"
[ "$(stat -c %a "$tmp/producer.sock")" = 666 ] || fail "relay's producer socket mode $(stat -c %a "$tmp/producer.sock")"
# traced cannot start beside the relay (both would bind the producer socket).
sed '/^PERFETTO_RELAY_SOCK_NAME=/d' "$tmp/default" >"$tmp/default.central"
rc=0
TRACEBOX_DEFAULTS="$tmp/default.central" run_init start >/dev/null 2>"$tmp/both.err" || rc=$?
[ $rc != 0 ] && grep -q "traced_relay is running" "$tmp/both.err" || fail "traced started beside the relay: $rc $(cat "$tmp/both.err")"

# The central traced has no producer of its own: wait for the relayed
# traced_probes to register there, and for the relay's first clock sync
# (the trace's remote_clock_sync).
central() { PERFETTO_CONSUMER_SOCK_NAME="$tmp/central-consumer.sock" "$@"; }
n=0
until central "$tmp/root/usr/bin/perfetto" --query 2>/dev/null | grep -q "perfetto.traced_probes" &&
    grep -q "^[0-9-]*T[0-9:.]*Z \[traced_relay\] I: clocks synced" "$tmp/relay-mode.log" 2>/dev/null; do
    n=$((n + 1))
    [ $n -lt 600 ] || fail "no relayed traced_probes or clock sync at the central traced: $(cat "$tmp/relay-mode.log")"
    sleep 0.1
done
grep -q "^[0-9-]*T[0-9:.]*Z \[traced_relay\] I: started in the background, logging to $tmp/relay-mode.log" "$tmp/relay-mode.log" ||
    fail "traced_relay did not log like the other daemons: $(cat "$tmp/relay-mode.log")"
cat >"$tmp/relay-config.txt" <<EOF2
buffers { size_kb: 4096 }
trace_all_machines: true
data_sources { config { name: "linux.process_stats"
    process_stats_config { scan_all_processes_on_start: true } } }
data_sources { config { name: "linux.system_info" } }
duration_ms: 1500
EOF2
central "$tmp/root/usr/bin/perfetto" --txt -c "$tmp/relay-config.txt" -o "$tmp/relay.pftrace"
"$py" - "$tmp/relay.pftrace" <<'PY'
import sys
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
trace = pb.Trace()
trace.ParseFromString(open(sys.argv[1], "rb").read())
trees = [p for p in trace.packet if p.HasField("process_tree") and p.process_tree.processes]
assert trees, "no process_tree from the relayed traced_probes"
remote = {p.machine_id for p in trees}
assert remote and 0 not in remote, f"process_tree packets on machines {remote}, want the relayed one only"
infos = [p for p in trace.packet if p.HasField("system_info") and p.machine_id in remote]
assert infos, f"no system_info of machine {remote}"
print(f"relayed process_tree: {len(trees)} packets on machine {remote}")
PY
"$py" tests/py/check_machines.py "$tmp/relay.pftrace" 1

run_init stop
rc=0
run_init status >/dev/null || rc=$?
[ $rc = 3 ] || fail "status after the relay mode's stop: $rc, want 3"
if pgrep -f "$tmp/root/usr/bin/" >/dev/null; then
    pgrep -af "$tmp/root/usr/bin/" >&2
    fail "processes left running after the relay mode's stop"
fi
[ ! -e "$tmp/run/traced_relay.pid" ] || fail "traced_relay pidfile left"
kill "$central_pid"
central_pid=
echo "== relay mode ok"

# What tracebox-replace.rc relies on: init's listening sockets, inherited by traced
# as ANDROID_SOCKET_traced_{producer,consumer}.
echo "== Android init sockets (tracebox-replace.rc): traced adopts inherited listeners"
"$py" - "$tmp" "$tmp/root/usr/bin/traced" "$tmp/root/usr/bin/perfetto" <<'PY'
import os, socket, subprocess, sys
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
tmp, traced, perfetto = sys.argv[1:4]
socks = {}
for name in ("traced_producer", "traced_consumer"):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(f"{tmp}/dev_socket_{name}")
    s.listen(8)
    socks[name] = s
env = dict(os.environ)
for name, s in socks.items():
    env[f"ANDROID_SOCKET_{name}"] = str(s.fileno())
# Were the inherited sockets ignored, traced would bind these instead.
env["PERFETTO_PRODUCER_SOCK_NAME"] = f"{tmp}/not_adopted_p"
env["PERFETTO_CONSUMER_SOCK_NAME"] = f"{tmp}/not_adopted_c"
d = subprocess.Popen([traced], env=env, pass_fds=[s.fileno() for s in socks.values()])
try:
    cenv = dict(os.environ, PERFETTO_CONSUMER_SOCK_NAME=f"{tmp}/dev_socket_traced_consumer")
    raw = subprocess.run([perfetto, "--query-raw"], env=cenv, capture_output=True,
                         timeout=60, check=True).stdout
    state = pb.TracingServiceState()
    state.ParseFromString(raw)
    assert "(tracebox " in state.tracing_service_version, state
    assert not os.path.exists(f"{tmp}/not_adopted_c"), "traced bound its own socket"
    print("inherited consumer socket serves", state.tracing_service_version)
finally:
    d.terminate()
    d.wait()
PY
