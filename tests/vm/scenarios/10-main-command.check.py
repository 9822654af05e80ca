#!/usr/bin/env python3
"""README's main command: a trace of sched switches and process names, and
the end line word for word."""
import vmcheck as v

out, arch = v.args()
trace = v.load(f"{out}/trace.pftrace")
ev = v.event_counts(trace)
k = v.kinds(trace)
print("kinds:", dict(k), "events:", dict(ev))
v.expect(ev["sched_switch"] > 0, "no sched_switch")
v.expect(ev["sched_waking"] + ev["sched_wakeup"] > 0, "no wakeups")
v.expect(k["process_tree"] > 0, "no process_tree")
v.expect(k["system_info"] > 0, "no system_info")
v.run_checker("check_probes_trace.py", f"{out}/trace.pftrace", "--sched-switch", "--ftrace-stats",
              "--cpu-info", )
# The fields land where this kernel's format says (PREEMPT_RT kernels
# carry two more common fields): names are names, pids and CPUs in range.
names, bad = set(), []
for p in trace.packet:
    if p.HasField("ftrace_events"):
        cs = p.ftrace_events.compact_sched
        names.update(cs.intern_table)
        bad += [x for x in cs.switch_next_pid if not 0 <= x < 4194304]
        bad += [x for x in cs.waking_pid if not 0 < x < 4194304]
        bad += [x for x in cs.waking_target_cpu if not 0 <= x < 2]
        bad += [x for x in cs.switch_prev_state if not 0 <= x < 0x10000]
v.expect(not bad, f"out-of-range sched fields: {bad[:10]}")
v.expect(all(n.isprintable() and 0 < len(n) < 16 for n in names), f"odd task names: {sorted(names)}")
v.expect({"traced", "traced_probes"} & names, f"no daemon among the switch names: {sorted(names)}")
print("task names:", sorted(names))
v.expect_end_line(f"{out}/client.err", "Trace stats: nothing lost")
v.done()
