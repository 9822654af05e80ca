#!/usr/bin/env python3
"""Host check of kprobes.sh: the opener's do_sys_openat2 calls are all in
the trace, as upstream's kprobe_event (a BEGIN and an END per call), the
refused probe is named in failed_ftrace_events, kprobe_stats counted the
hits, every packet decodes against Perfetto's descriptors with no unknown
fields, and the client's end line says nothing was lost."""
import os
import sys

from trace_walk import assert_no_unknown_fields, load_trace

out, arch = sys.argv[1], sys.argv[2]
trace = load_trace(os.path.join(out, "trace"))
assert_no_unknown_fields(trace)
opener = int(open(os.path.join(out, "opener.pid")).read())
n = int(open(os.path.join(out, "opens")).read())
begins = ends = 0
names = set()
failed = []
hits = 0
for p in trace.packet:
    if p.HasField("ftrace_events"):
        for e in p.ftrace_events.event:
            if e.WhichOneof("event") != "kprobe_event":
                continue
            names.add(e.kprobe_event.name)
            if e.pid != opener:
                continue
            t = e.kprobe_event.type
            if t == e.kprobe_event.KPROBE_TYPE_BEGIN:
                begins += 1
            elif t == e.kprobe_event.KPROBE_TYPE_END:
                ends += 1
            else:
                raise AssertionError(f"kprobe type {t}")
    if p.HasField("ftrace_stats") and p.ftrace_stats.phase == 2:
        failed += list(p.ftrace_stats.failed_ftrace_events)
        hits = max(hits, p.ftrace_stats.kprobe_stats.hits)
assert names == {"do_sys_openat2"}, names
assert (begins, ends) == (n, n), (begins, ends, n)
assert any("not a function" in f for f in failed), failed
assert hits >= 2 * n, hits
log = open(os.path.join(out, "client.log")).read()
assert "Trace stats: nothing lost" in log, log
print(f"kprobes {arch}: {begins} begin + {ends} end events of pid {opener}, {hits} hits; failed: {failed}")
