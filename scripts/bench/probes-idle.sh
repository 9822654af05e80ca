#!/usr/bin/env bash
# Idle cost of traced_probes: context switches (voluntary + involuntary,
# every thread, /proc/PID/task/*/status) while a session records only
# sched events of a quiet machine for DURATION_MS (5 s by default), and
# the CPU time it used meanwhile. Threads that start during the trace
# (splice workers) count from zero; each thread's last sample counts, so
# workers that exit at the stop are included up to ~20 ms before.
#
# Usage: scripts/bench/probes-idle.sh [RUNS]   (BIN=path/to/tracebox)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
bin=${BIN:-target/debug/tracebox}
[ -x "$bin" ] || cargo build -q
dur=${DURATION_MS:-5000}

for run in $(seq "$runs"); do
    d=$(mktemp -d)
    export PERFETTO_PRODUCER_SOCK_NAME=$d/p.sock PERFETTO_CONSUMER_SOCK_NAME=$d/c.sock
    "$bin" traced 2>"$d/traced.log" &
    traced=$!
    TRACED_PROBES_STATE_FILE=$d/state "$bin" traced_probes 2>"$d/probes.log" &
    probes=$!
    for _ in $(seq 100); do [ -S "$d/p.sock" ] && [ -S "$d/c.sock" ] && break; sleep 0.05; done
    sleep 1 # connected and idle
    cat >"$d/cfg.txt" <<CFG
duration_ms: $dur
buffers { size_kb: 16384 }
data_sources { config { name: "linux.ftrace" ftrace_config {
    ftrace_events: "sched/sched_switch" ftrace_events: "sched/sched_waking"
    buffer_size_kb: 2048 instance_name: "tbx_bench_idle" ${EXTRA_FTRACE:-} } } }
CFG
    "$bin" perfetto --txt -c "$d/cfg.txt" -o "$d/trace.pb" 2>"$d/perfetto.log" &
    perfetto=$!
    python3 - "$probes" "$perfetto" <<'PY'
import os, sys, time
pid, client = sys.argv[1], int(sys.argv[2])
def sample():
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tids:
        try:
            f = dict(l.split(":", 1) for l in open(f"/proc/{pid}/task/{t}/status") if ":" in l)
            st = open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cs = int(f["voluntary_ctxt_switches"]) + int(f["nonvoluntary_ctxt_switches"])
        out[t] = (f["Name"].strip(), cs, int(st[11]) + int(st[12]))
    return out
first = sample()
last = dict(first)
while os.path.exists(f"/proc/{client}") and open(f"/proc/{client}/stat").read().split()[2] != "Z":
    for t, v in sample().items():
        last[t] = v
    time.sleep(0.02)
total, ticks = 0, 0
by_name = {}
for t, (name, cs, cpu) in last.items():
    c0, p0 = (first[t][1], first[t][2]) if t in first else (0, 0)
    total += cs - c0
    ticks += cpu - p0
    by_name[name] = by_name.get(name, 0) + cs - c0
hz = os.sysconf("SC_CLK_TCK")
print(f"context switches {total} cpu {ticks / hz * 1000:.0f} ms  " +
      " ".join(f"{n}={c}" for n, c in sorted(by_name.items())))
PY
    wait "$perfetto" || true
    echo "  trace: $(stat -c %s "$d/trace.pb") bytes (busier machine, more sched events)"
    kill "$probes" "$traced" 2>/dev/null || true
    wait "$probes" "$traced" 2>/dev/null || true
    [ -n "${KEEP:-}" ] && echo "  kept $d" || rm -rf "$d"
done
