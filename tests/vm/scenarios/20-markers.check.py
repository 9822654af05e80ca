#!/usr/bin/env python3
"""All 300 begin/end marker pairs written in the guest are in the trace,
each once, and nothing was lost."""
import collections

import vmcheck as v

out, arch = v.args()
trace = v.load(f"{out}/trace.pftrace")
p = collections.Counter(v.prints(trace))
begins = [b for b in p if "|vm_marker_" in b]
v.expect(len(begins) == 300, f"{len(begins)} distinct begin markers, want 300")
v.expect(all(p[b] == 1 for b in begins), "a begin marker seen twice")
ends = sum(n for b, n in p.items() if b.startswith("E|"))
v.expect(ends == 300, f"{ends} end markers, want 300")
v.expect(v.event_counts(trace)["sched_switch"] > 0, "no sched_switch")
v.expect_end_line(f"{out}/trace.err", "Trace stats: nothing lost")
v.done()
