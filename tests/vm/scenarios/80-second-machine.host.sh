#!/usr/bin/env bash
# Host side of 80-second-machine: traced with the relay endpoint on the
# loopback port the guest's $HOST_RELAY reaches. Once the guest's
# producers registered, one consumer records both machines; 4 s after the
# guest's data first shows in the session the guest is killed (SIGKILL to
# qemu). After the boot: the trace
# has the guest's sched events, perf samples, system_info and clock sync
# stamped with its machine id, its data up to the commit window before
# the kill, and the end line names the disconnect and the window.
set -euo pipefail
phase="$1" dir="$2"
repo="$(cd "$(dirname "$0")/../../.." && pwd)"
tb="$TRACEBOX_HOST"
export PERFETTO_CONSUMER_SOCK_NAME="$dir/c.sock"

boottime_ns() { "$repo/.venv/bin/python" -c 'import time; print(time.clock_gettime_ns(time.CLOCK_BOOTTIME))'; }

guest_data_in_snapshot() {
    rm -f "$dir/snapshot.pftrace"
    "$tb" perfetto --clone-by-name second_machine -o "$dir/snapshot.pftrace" >/dev/null 2>&1 &&
        [ -s "$dir/snapshot.pftrace" ] && "$repo/.venv/bin/python" - "$dir/snapshot.pftrace" <<'PY'
import sys
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
t = pb.Trace()
t.ParseFromString(open(sys.argv[1], "rb").read())
sys.exit(0 if any(p.machine_id and p.HasField("sys_stats") for p in t.packet) else 1)
PY
}

driver() {
    set +e
    local i=0
    until "$tb" perfetto --query 2>/dev/null | grep -q linux.perf &&
        "$tb" perfetto --query 2>/dev/null | grep -q linux.ftrace; do
        i=$((i + 1))
        [ $i -le 1200 ] || { echo "the guest's producers never registered"; return 1; }
        sleep 0.2
    done
    cat >"$dir/config.pbtx" <<CFG
duration_ms: 60000
buffers { size_kb: 32768 }
data_sources { config { name: "linux.ftrace" ftrace_config {
    ftrace_events: "sched/sched_switch" ftrace_events: "sched/sched_waking" } } }
data_sources { config { name: "linux.sys_stats" sys_stats_config { meminfo_period_ms: 100 } } }
data_sources { config { name: "linux.system_info" } }
data_sources { config { name: "linux.perf" perf_event_config {
    timebase { frequency: 100 counter: SW_CPU_CLOCK } } } }
trace_all_machines: true
unique_session_name: "second_machine"
CFG
    "$tb" perfetto --txt -c "$dir/config.pbtx" -o "$dir/trace.pftrace" 2>"$dir/client.err" &
    local client=$!
    # A TCG guest may take seconds to set its data sources up: wait until
    # a snapshot of the session (a clone) holds the guest's samples, then
    # give the relay commits 4 s of their own before the kill.
    i=0
    until guest_data_in_snapshot; do
        i=$((i + 1))
        [ $i -le 120 ] || { echo "no guest data in the session"; kill "$client"; return 1; }
        sleep 0.5
    done
    sleep 4
    boottime_ns >"$dir/killed_at"
    kill -KILL "$(cat "$QEMU_PID_FILE")"
    echo "killed qemu"
    sleep 1
    kill -TERM "$client"
    wait "$client"
    local rc=$?
    echo "client exit $rc"
    return $rc
}

case "$phase" in
before)
    PERFETTO_PRODUCER_SOCK_NAME="$dir/p.sock,127.0.0.1:$VM_RELAY_PORT" \
        setsid "$tb" traced --enable-relay-endpoint >"$dir/traced.log" 2>&1 &
    echo $! >"$dir/traced.pid"
    i=0
    until [ -S "$dir/c.sock" ]; do
        i=$((i + 1)); [ $i -le 100 ] || { cat "$dir/traced.log"; exit 1; }; sleep 0.1
    done
    (driver >"$dir/driver.log" 2>&1; echo $? >"$dir/driver.rc") &
    disown
    ;;
after)
    i=0
    until [ -e "$dir/driver.rc" ]; do
        i=$((i + 1)); [ $i -le 600 ] || { echo "the recording never ended"; break; }; sleep 0.1
    done
    kill "$(cat "$dir/traced.pid")" 2>/dev/null || true
    cat "$dir/driver.log" "$dir/client.err" 2>/dev/null || true
    [ "$(cat "$dir/driver.rc" 2>/dev/null)" = 0 ] || exit 1
    PYTHONPATH="$repo/tests/vm:$repo/tests/py" "$repo/.venv/bin/python" - "$dir" <<'PY'
import sys
import vmcheck as v
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

d = sys.argv[1]
trace = v.load(f"{d}/trace.pftrace")
guest = [p for p in trace.packet if p.machine_id]
ids = {p.machine_id for p in guest}
v.expect(len(ids) == 1, f"guest machine ids {ids}")
switches = sum(1 for p in guest if p.HasField("ftrace_events")
               for e in p.ftrace_events.event if e.HasField("sched_switch"))
switches += sum(len(p.ftrace_events.compact_sched.switch_timestamp)
                for p in guest if p.HasField("ftrace_events"))
v.expect(switches >= 100, f"{switches} sched_switch events of the guest")
v.expect(any(p.HasField("perf_sample") for p in guest), "no perf samples of the guest")
infos = [p for p in guest if p.HasField("system_info")]
v.expect(infos and infos[0].system_info.utsname.sysname and infos[0].system_info.system_ram_bytes > 0,
         "no system_info (with RAM) of the guest")
syncs = [p for p in guest if p.HasField("remote_clock_sync")]
v.expect(syncs, "no remote_clock_sync of the guest")
# The guest's clock on the host's: the last synced pair's BOOTTIME.
if syncs:
    pair = syncs[-1].remote_clock_sync.synced_clocks[-1]
    clock = lambda snap: next(c.timestamp for c in snap.clocks if c.clock_id == 6)
    offset = clock(pair.host_clocks) - clock(pair.client_clocks)
    killed = int(open(f"{d}/killed_at").read())
    stats = sorted(p.timestamp + offset for p in guest if p.HasField("sys_stats"))
    # Committed every 1 s; TCG and the forward add their latency.
    # Every 100 ms asked; a TCG guest takes longer (aarch64: ~300 ms).
    v.expect(len(stats) >= 8, f"{len(stats)} sys_stats samples of the guest")
    if stats:
        late = killed - stats[-1]
        print(f"guest sys_stats: {len(stats)}, the newest {late / 1e6:.0f} ms before the kill")
        v.expect(late < 2_500_000_000, f"the guest's data stops {late / 1e6:.0f} ms before the kill")
line = v.end_line(f"{d}/client.err")
print(line)
v.expect("producer perfetto.traced_probes on machine vm-guest disconnected" in line
         and "data of the last \u2264 1000 ms before the disconnect may be missing" in line,
         f"end line {line!r}")
v.done()
PY
    ;;
esac
