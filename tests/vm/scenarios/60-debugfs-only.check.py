#!/usr/bin/env python3
"""A recording with tracefs only under debugfs: sched switches, all 50
markers, nothing lost."""
import vmcheck as v

out, arch = v.args()
trace = v.load(f"{out}/trace.pftrace")
v.expect(v.event_counts(trace)["sched_switch"] > 0, "no sched_switch")
n = sum(1 for b in v.prints(trace) if "|vm_debugfs_" in b)
v.expect(n == 50, f"{n} begin markers, want 50")
v.expect_end_line(f"{out}/trace.err", "Trace stats: nothing lost")
v.done()
