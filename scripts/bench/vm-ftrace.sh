#!/usr/bin/env bash
# Issue 32's benchmark: ftrace recording in a VM guest (default aarch64,
# Debian's arm64 kernel under qemu TCG), our recorder against trace-cmd
# on the same loads in the same boot. TCG makes absolute speed
# meaningless; the ratios tell whether the architecture changes the
# picture of scripts/bench/ftrace.sh.
#
#   scripts/bench/vm-ftrace.sh [aarch64|x86_64]
#
# Boots through scripts/test-vm.sh (its kernel cache, image and 9p share)
# with the one scenario scripts/bench/vm-ftrace/ftrace.sh, whose header
# says what runs. The image gets Debian's trace-cmd of the guest's
# architecture and its shared libraries (trace-cmd, libtracefs1,
# libtraceevent1, libzstd1, libc6: `apt-get download`, extracted into the
# image, never installed on this host; cached with the kernels) and
# scripts/bench/vm-load.c (the loads: sched ping-pong, trace_marker
# writes) built static for it.
# Loads: pingpong; marker:RATE (one writer, RATE/s, 0 = as fast as it can).
# Lines on stdout (events counted on this host: trace-cmd report of its
# file, Perfetto's descriptors for ours):
#   bench=vm_ftrace arch=.. recorder=.. load=.. written=.. captured=..
#     kernel_lost=.. (overrun + dropped of the instance) missing=..
#     (markers written, not in the trace) cpu_s=.. (whole run) load_cpu_s=..
#     cpu_us_per_event=.. load_cpu_us_per_event=.. bytes_per_event=..
#   bench=vm_ftrace_ratio arch=.. load=.. cpu_per_event_ratio=ours/tracecmd
#     load_cpu_per_event_ratio=.. bytes_per_event_ratio=.. captured_ratio=..
#     ours_lost=.. tracecmd_lost=.. ours_missing=.. tracecmd_missing=..
# Env: LOAD_S (10), SCENARIOS ("pingpong marker:0 marker:5000"),
# TRACEBOX_VM_CACHE as for test-vm.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$PWD"

# test-vm.sh's image hook: vm-ftrace.sh --image TARGET ROOT CACHE.
if [ "${1:-}" = --image ]; then
    t="$2" root="$3" cache="$4"
    case "$t" in
    aarch64) debarch=arm64 cc=aarch64-linux-gnu-gcc ;;
    x86_64 | x86_64-rt) debarch=amd64 cc=gcc ;;
    *) echo "vm-ftrace: no trace-cmd image for $t" >&2; exit 1 ;;
    esac
    tests/vm/guest-debs.sh "$debarch" "$cache" "$root" trace-cmd -- usr/bin/trace-cmd
    mkdir -p "$root/vm/bin"
    "$cc" -O2 -static -pthread -o "$root/vm/bin/vm-load" scripts/bench/vm-load.c
    {
        echo "LOAD_S=${LOAD_S:-10}"
        echo "SCENARIOS=\"${SCENARIOS:-pingpong marker:0 marker:5000}\""
    } >"$root/vm/bench.env"
    exit 0
fi

t="${1:-aarch64}"
export TRACEBOX_VM_SCENARIOS=scripts/bench/vm-ftrace TRACEBOX_VM_IMAGE_EXTRA="$repo/scripts/bench/vm-ftrace.sh --image"
export TRACEBOX_VM_MEM_MB=1024 TRACEBOX_VM_KEEP=1 TRACEBOX_VM_RETRY_UNTIL=0
export LOAD_S="${LOAD_S:-10}" SCENARIOS="${SCENARIOS:-pingpong marker:0 marker:5000}"
scripts/test-vm.sh "$t" >&2 || { echo "vm-ftrace: the guest run failed (scripts/test-vm.sh above)" >&2; exit 1; }
out="$repo/target/vm/$t/ftrace/share/out/ftrace"
command -v trace-cmd >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq trace-cmd >/dev/null
PYTHONPATH="$repo/tests/vm:$repo/tests/py" "$repo/.venv/bin/python" - "$out" "$t" "$SCENARIOS" <<'PY'
import os, re, subprocess, sys
import vmcheck as v
out, arch, scenarios = sys.argv[1], sys.argv[2], sys.argv[3].split()

def kv(line):
    return dict(re.findall(r"(\w+)=(\S+)", line))

def count(rec, path):
    """(events, prints) in a recorder's file."""
    if rec == "tracecmd":
        r = subprocess.run(["trace-cmd", "report", "-i", path], capture_output=True, text=True)
        ev = [l for l in r.stdout.splitlines() if re.search(r" (sched_switch|sched_waking|print):", l)]
        return len(ev), sum(1 for l in ev if " print:" in l)
    c = v.event_counts(v.load(path))
    return sum(c.values()), c["print"]

res = {}
for sc in scenarios:
    load = sc.split(":")[0]
    for rec in ("tracecmd", "ours"):
        base = f"{out}/{sc}.{rec}"
        if not os.path.exists(base + ".line"):
            print(f"vm-ftrace: no result for {sc} {rec}", file=sys.stderr)
            continue
        f = kv(open(base + ".line").read())
        events, prints = count(rec, base + ".trace")
        written = int(f.get("written", f.get("round_trips", 0)))
        lost = int(f["overrun"]) + int(f["dropped"])
        missing = max(written - prints, 0) if load == "marker" else 0
        cpu, lcpu = int(f["whole_us"]) / 1e6, int(f["load_us"]) / 1e6
        size = os.path.getsize(base + ".trace")
        r = dict(captured=events, lost=lost, missing=missing, cpu=cpu, lcpu=lcpu,
                 cpe=cpu * 1e6 / max(events, 1), lcpe=lcpu * 1e6 / max(events, 1), bpe=size / max(events, 1))
        res[(sc, rec)] = r
        print(f"bench=vm_ftrace arch={arch} recorder={rec} load={sc} written={written} captured={events} "
              f"kernel_lost={lost} missing={missing} cpu_s={cpu:.3f} load_cpu_s={lcpu:.3f} "
              f"cpu_us_per_event={r['cpe']:.2f} load_cpu_us_per_event={r['lcpe']:.2f} bytes_per_event={r['bpe']:.1f}")
    if (sc, "ours") in res and (sc, "tracecmd") in res:
        o, q = res[(sc, "ours")], res[(sc, "tracecmd")]
        ratio = lambda k: f"{o[k] / q[k]:.2f}" if q[k] else "inf"
        print(f"bench=vm_ftrace_ratio arch={arch} load={sc} cpu_per_event_ratio={ratio('cpe')} "
              f"load_cpu_per_event_ratio={ratio('lcpe')} bytes_per_event_ratio={ratio('bpe')} "
              f"captured_ratio={ratio('captured')} ours_lost={o['lost']} tracecmd_lost={q['lost']} "
              f"ours_missing={o['missing']} tracecmd_missing={q['missing']}")
PY
