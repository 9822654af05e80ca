#!/usr/bin/env bash
# What rotation costs, in one run on one load (as root): the same marker
# flood plus the machine's scheduling, recorded into one streamed file and
# then with --rotate-size, by the same binary.
#   scripts/bench/rotation.sh [MARKERS] [ROTATE_SIZE]   (default 300000 1mb)
# Prints, per mode: CPU (user+sys) of traced + traced_probes + the client
# per marker event, the files and bytes per event, and for rotation the
# bytes each file spends on its own header (trace config, first clock
# snapshot, system info, uuid, sync markers, the full process tree scan and
# the trace stats).
# Also prints the full /proc scans each file holds (process_tree packets
# listing pid 1): one per file when a cut clears the data sources once.
# Uses $BIN, else target/release/tracebox (else target/debug), private
# sockets and a private tracefs instance per mode; reads the traces with
# perfetto_trace_pb2.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-300000}
SIZE=${2:-1mb}
TB=${BIN:-$PWD/target/release/tracebox}
[ -x "$TB" ] || TB=$PWD/target/debug/tracebox
PY=${TRACEBOX_PYTHON:-$PWD/.venv/bin/python}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
echo "tracebox: $TB ($(git rev-parse --short HEAD)), $N markers, --rotate-size $SIZE"

"$PY" - "$TB" "$DIR" "$N" "$SIZE" <<'PY'
import glob, os, signal, subprocess, sys, time
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

tb, top, n, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
tick = os.sysconf("SC_CLK_TCK")

def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick

# What each file starts (or ends) with on its own: the service's header
# packets, the full process tree scan (on-demand dumps of a few new pids
# are not header) and the trace stats.
HEADER = ("trace_config", "system_info", "trace_stats",
          "synchronization_marker", "trace_uuid")

def read(files):
    markers = header = total = 0
    scans = []
    for name in files:
        t = pb.Trace(); t.ParseFromString(open(name, "rb").read())
        clocks = 0
        scans.append(0)
        for p in t.packet:
            # An on-demand dump describes pids not described since the last
            # clear: never pid 1, which every full scan lists.
            full_scan = p.HasField("process_tree") and any(
                q.pid == 1 for q in p.process_tree.processes)
            scans[-1] += full_scan
            first_clock = p.HasField("clock_snapshot") and clocks == 0
            clocks += p.HasField("clock_snapshot")
            if full_scan or first_clock or any(p.HasField(h) for h in HEADER):
                header += p.ByteSize() + 3
            for e in p.ftrace_events.event:
                markers += e.HasField("print") and e.print.buf.startswith("tbx rot ")
        total += os.path.getsize(name)
    return markers, header, total, scans

def run(tag, extra):
    d = os.path.join(top, tag); os.mkdir(d)
    inst = f"tbx_bench_rot_{tag}_{os.getpid()}"
    env = dict(os.environ,
               PERFETTO_PRODUCER_SOCK_NAME=f"{d}/p.sock",
               PERFETTO_CONSUMER_SOCK_NAME=f"{d}/c.sock",
               TRACED_PROBES_STATE_FILE=f"{d}/state")
    null = subprocess.DEVNULL
    traced = subprocess.Popen([tb, "traced"], env=env, stderr=null)
    time.sleep(0.5)
    probes = subprocess.Popen([tb, "traced_probes"], env=env, stderr=null)
    time.sleep(1)
    cfg = f"{d}/c.pbtx"
    open(cfg, "w").write(f"""
write_into_file: true
file_write_period_ms: 500
buffers {{ size_kb: 65536 fill_policy: DISCARD }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "ftrace/print" ftrace_events: "sched/sched_switch"
    instance_name: "{inst}" buffer_size_kb: 8192 }} }} }}
data_sources {{ config {{ name: "linux.process_stats"
    process_stats_config {{ scan_all_processes_on_start: true }} }} }}
""")
    c0 = cpu_s(traced.pid) + cpu_s(probes.pid)
    client = subprocess.Popen([tb, "perfetto", "--txt", "-c", cfg, "-o", f"{d}/t"] + extra,
                              env=env, stderr=open(f"{d}/client.log", "w"), stdout=null)
    marker = f"/sys/kernel/tracing/instances/{inst}/trace_marker"
    while not os.path.exists(marker):
        time.sleep(0.05)
    time.sleep(1)
    fd = os.open(marker, os.O_WRONLY)
    for i in range(n):
        os.write(fd, b"tbx rot %d" % i)
        if i % 1000 == 999:
            time.sleep(0.005)
    os.close(fd)
    time.sleep(1)
    client.send_signal(signal.SIGTERM)
    _, status, ru = os.wait4(client.pid, 0)
    client.returncode = status
    cpu = cpu_s(traced.pid) + cpu_s(probes.pid) - c0 + ru.ru_utime + ru.ru_stime
    for p in (probes, traced):
        p.terminate(); p.wait()
    try:
        os.rmdir(f"/sys/kernel/tracing/instances/{inst}")
    except OSError:
        pass
    files = sorted(glob.glob(f"{d}/t.[0-9]*")) or [f"{d}/t"]
    markers, header, total, scans = read(files)
    return dict(cpu=cpu, markers=markers, files=len(files), header=header, total=total,
                scans=scans)

plain = run("plain", [])
rot = run("rotate", ["--rotate-size", size])
for tag, r in (("plain", plain), ("rotate", rot)):
    print(f"{tag}: {r['markers']} markers in {r['files']} file(s), "
          f"{r['cpu'] * 1e9 / max(r['markers'], 1):.0f} ns CPU/event, "
          f"{r['total'] / max(r['markers'], 1):.2f} B/event, "
          f"header {r['header'] / r['files']:.0f} B/file, "
          f"full /proc scans per file {r['scans']}")
print(f"cpu_ratio (rotate/plain, per event): {rot['cpu'] / max(rot['markers'], 1) / (plain['cpu'] / max(plain['markers'], 1)):.2f}")
cuts = rot['files'] - 1
if cuts:
    extra = rot['cpu'] / max(rot['markers'], 1) * plain['markers'] - plain['cpu']
    print(f"extra CPU per cut (same number of events): {extra * 1e3 / cuts:.1f} ms")
print(f"size_ratio (rotate/plain, per event): {rot['total'] / max(rot['markers'], 1) / (plain['total'] / max(plain['markers'], 1)):.3f}")
print(f"header overhead per rotated file: {rot['header'] / rot['files']:.0f} B "
      f"= {100 * rot['header'] / rot['total']:.2f} % of the rotated bytes")
PY
