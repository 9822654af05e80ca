"""Helpers of the VM stage's host checks (tests/vm/scenarios/*.check.py):
traces parsed with PyPI perfetto's own descriptors, no unknown fields
anywhere, the client's end line, ftrace events by kind."""
import collections
import os
import subprocess
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

HERE = os.path.dirname(os.path.abspath(__file__))
PY_CHECKERS = os.path.join(os.path.dirname(HERE), "py")
sys.path.insert(0, PY_CHECKERS)
import no_unknown_fields  # noqa: E402  (tests/py: extensions declared by the trace are known)

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def expect(cond, msg):
    if not cond:
        fail(msg)
    return cond


def done():
    """Exit status of the check: 1 if any expectation failed."""
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("ok")
    sys.exit(0)


def load(path):
    """The trace at PATH; records a failure for every packet holding a
    field upstream's descriptors do not know."""
    with open(path, "rb") as f:
        data = f.read()
    trace = pb.Trace()
    trace.ParseFromString(data)
    expect(len(trace.packet) > 0, f"{path}: no packets")
    unknown = no_unknown_fields.unknown_fields(data)
    expect(not unknown, f"{path}: fields unknown to upstream's descriptors at {unknown[:5]}")
    return trace


def kinds(trace):
    return collections.Counter(p.WhichOneof("data") for p in trace.packet)


def ftrace_events(trace):
    """(cpu, FtraceEvent) of every full-format ftrace event."""
    for p in trace.packet:
        if p.HasField("ftrace_events"):
            for e in p.ftrace_events.event:
                yield p.ftrace_events.cpu, e


def event_counts(trace):
    """Events by kind; compact sched_switch/sched_waking counted too."""
    c = collections.Counter()
    for p in trace.packet:
        if p.HasField("ftrace_events"):
            b = p.ftrace_events
            c["sched_switch"] += len(b.compact_sched.switch_timestamp)
            c["sched_waking"] += len(b.compact_sched.waking_timestamp)
            for e in b.event:
                c[e.WhichOneof("event") or "unknown"] += 1
    return c


def prints(trace):
    """The ftrace/print buffers, trailing newline removed."""
    return [e.print.buf.rstrip("\n") for _, e in ftrace_events(trace) if e.HasField("print")]


def end_line(path):
    """The client's last `Trace stats:` line in the file it wrote stderr to."""
    lines = [ln.rstrip("\n") for ln in open(path, errors="replace") if ln.startswith("Trace stats:")]
    expect(lines, f"{path}: no 'Trace stats:' end line")
    return lines[-1] if lines else None


def expect_end_line(path, want):
    got = end_line(path)
    expect(got == want, f"end line {got!r}, want {want!r}")


def run_checker(script, *args):
    """Runs one of tests/py's checkers; a non-zero exit is a failure."""
    r = subprocess.run([sys.executable, os.path.join(PY_CHECKERS, script), *map(str, args)],
                       capture_output=True, text=True)
    sys.stdout.write(r.stdout)
    sys.stdout.write(r.stderr)
    expect(r.returncode == 0, f"{script} {' '.join(map(str, args))}: exit {r.returncode}")
    return r.stdout


def args():
    """(OUTDIR, ARCH) from the command line."""
    return sys.argv[1], sys.argv[2]
