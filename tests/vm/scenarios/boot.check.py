#!/usr/bin/env python3
"""Host check of boot.sh: the boot trace holds what the kernel recorded
before any daemon ran (the exec of /init by pid 1, and sched switches
before it), its timestamps convert to boot time consistently with the
guest's own clock, switches carry task names, the end-of-trace
ftrace_stats says the buffer was preserved, and no packet has fields
unknown to Perfetto's descriptors."""
import os
import sys

from trace_walk import assert_no_unknown_fields, load_trace

out, arch = sys.argv[1], sys.argv[2]
trace = load_trace(os.path.join(out, "boot.trace"))
assert_no_unknown_fields(trace)
uptime_ns = float(open(os.path.join(out, "uptime")).read()) * 1e9
init_start_ns = int(open(os.path.join(out, "init_start_ticks")).read()) * 1e7

switches = []  # boot-time ns
names = set()
init_exec = None
preserved = False
for p in trace.packet:
    if p.HasField("ftrace_stats") and p.ftrace_stats.preserve_ftrace_buffer:
        preserved = True
    if not p.HasField("ftrace_events"):
        continue
    b = p.ftrace_events
    # To boot time: the bundle's clock pair when its clock is not boot.
    shift = b.boot_timestamp - b.ftrace_timestamp if b.ftrace_clock else 0
    ts = 0
    for d in b.compact_sched.switch_timestamp:
        ts += d
        switches.append(ts + shift)
    names.update(b.compact_sched.intern_table)
    for e in b.event:
        kind = e.WhichOneof("event")
        if kind == "sched_switch":
            switches.append(e.timestamp + shift)
            names.update([e.sched_switch.prev_comm, e.sched_switch.next_comm])
        elif kind == "sched_process_exec" and e.sched_process_exec.filename == "/init":
            if e.sched_process_exec.pid == 1:
                init_exec = e.timestamp + shift
assert preserved, "no ftrace_stats with preserve_ftrace_buffer"
assert init_exec is not None, "no exec of /init by pid 1 in the trace"
before = [t for t in switches if t < init_exec]
assert before, f"no sched_switch before init ran ({len(switches)} switches)"
# The clock: /init ran after pid 1 was made and before the scenario.
assert init_start_ns - 2e7 <= init_exec <= uptime_ns, (init_start_ns, init_exec, uptime_ns)
assert min(switches) > 0, min(switches)
assert any(n.startswith("swapper") for n in names), sorted(names)[:20]
print(
    f"boot {arch}: /init exec at {init_exec / 1e9:.3f} s, {len(before)} switches before it "
    f"(first at {min(switches) / 1e9:.3f} s), {len(switches)} in all, {len(names)} task names"
)
