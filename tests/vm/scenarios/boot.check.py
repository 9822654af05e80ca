#!/usr/bin/env python3
"""Host check of boot.sh: the boot trace holds what the kernel recorded
before any daemon ran (the exec of /init by pid 1, and sched switches
before it), its timestamps convert to boot time consistently with the
guest's own clock, switches carry task names, the end-of-trace
ftrace_stats says the buffer was preserved, and no packet has a field
upstream's descriptors do not know."""
import vmcheck as v

out, arch = v.args()
trace = v.load(f"{out}/boot.pftrace")
uptime_ns = float(open(f"{out}/uptime").read()) * 1e9
# /proc/1/stat's start time is in USER_HZ (100) ticks.
init_start_ns = int(open(f"{out}/init_start_ticks").read()) * 1e7

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
v.expect(preserved, "no ftrace_stats with preserve_ftrace_buffer")
v.expect(init_exec is not None, "no exec of /init by pid 1 in the trace")
if init_exec is not None:
    before = [t for t in switches if t < init_exec]
    v.expect(before, f"no sched_switch before init ran ({len(switches)} switches)")
    # The clock: /init ran after pid 1 was made and before the scenario.
    v.expect(init_start_ns - 2e7 <= init_exec <= uptime_ns,
             f"/init exec at {init_exec} ns, pid 1 made at {init_start_ns}, uptime {uptime_ns}")
    # The kernel's default trace clock (local: sched_clock) may start
    # before CLOCK_BOOTTIME does (arm64's counter runs from power-on: its
    # earliest events convert to up to ~2 s before 0), never much more.
    v.expect(min(switches) > -5e9, f"a switch at {min(switches)} ns")
    v.expect(any(n.startswith("swapper") for n in names), f"task names {sorted(names)[:20]}")
    print(f"boot {arch}: /init exec at {init_exec / 1e9:.3f} s, {len(before)} switches before it "
          f"(first at {min(switches) / 1e9:.3f} s), {len(switches)} in all, {len(names)} task names")
v.done()
