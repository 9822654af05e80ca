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
v.expect_end_line(f"{out}/client.err", "Trace stats: nothing lost")
v.done()
