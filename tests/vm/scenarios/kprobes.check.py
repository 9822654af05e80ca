#!/usr/bin/env python3
"""Host check of kprobes.sh: the opener's do_sys_openat2 calls are all in
the trace as upstream's kprobe_event (a BEGIN and an END per call), the
refused probe is named in failed_ftrace_events and is the one thing the
end line names, kprobe_stats counted the hits, and no packet has a field
upstream's descriptors do not know."""
import re

import vmcheck as v

out, arch = v.args()
trace = v.load(f"{out}/trace.pftrace")
opener = int(open(f"{out}/opener.pid").read())
n = int(open(f"{out}/opens").read())
begins = ends = 0
names = set()
for _, e in v.ftrace_events(trace):
    if e.WhichOneof("event") != "kprobe_event":
        continue
    names.add(e.kprobe_event.name)
    if e.pid == opener:
        t = e.kprobe_event.type
        begins += t == e.kprobe_event.KPROBE_TYPE_BEGIN
        ends += t == e.kprobe_event.KPROBE_TYPE_END
failed, hits = [], 0
for p in trace.packet:
    if p.HasField("ftrace_stats") and p.ftrace_stats.phase == 2:
        failed += list(p.ftrace_stats.failed_ftrace_events)
        hits = max(hits, p.ftrace_stats.kprobe_stats.hits)
v.expect(names == {"do_sys_openat2"}, f"kprobe names {names}")
v.expect((begins, ends) == (n, n), f"{begins} begins and {ends} ends of pid {opener}, want {n} each")
v.expect(any(f.endswith("/not a function (not a function name)") for f in failed), f"failed {failed}")
v.expect(hits >= 2 * n, f"kprobe_stats.hits {hits}, want at least {2 * n}")
line = v.end_line(f"{out}/trace.err")
v.expect(
    line is not None and re.fullmatch(
        r"Trace stats: no data lost, but INCOMPLETE: ftrace events that could not be enabled: "
        r"perfetto_kprobes_[0-9]+/not a function \(not a function name\)", line),
    f"end line {line!r}")
print(f"kprobes {arch}: {begins} begin + {ends} end events of pid {opener}, {hits} hits")
v.done()
