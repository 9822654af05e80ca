#!/usr/bin/env python3
"""Host check of funcgraph.sh: upstream's funcgraph_entry/exit events,
their functions named through the interned kernel symbols, as each
recording's filters and roots allow; no unknown fields anywhere."""
import collections
import os
import sys

from trace_walk import assert_no_unknown_fields, load_trace

out, arch = sys.argv[1], sys.argv[2]
n = int(open(os.path.join(out, "opens")).read())


def calls(name):
    """(entries, exits, failed_ftrace_events) of the opener: entries and
    exits as Counter of (function, depth)."""
    trace = load_trace(os.path.join(out, f"{name}.trace"))
    assert_no_unknown_fields(trace)
    opener = int(open(os.path.join(out, f"{name}.opener")).read())
    symbols = {}
    raw = []
    failed = []
    for p in trace.packet:
        for s in p.interned_data.kernel_symbols:
            symbols[(p.trusted_packet_sequence_id, s.iid)] = s.str
        if p.HasField("ftrace_events"):
            for e in p.ftrace_events.event:
                kind = e.WhichOneof("event")
                if kind in ("funcgraph_entry", "funcgraph_exit") and e.pid == opener:
                    f = getattr(e, kind)
                    raw.append((kind, p.trusted_packet_sequence_id, f.func, f.depth))
        if p.HasField("ftrace_stats") and p.ftrace_stats.phase == 2:
            failed += list(p.ftrace_stats.failed_ftrace_events)
    entries, exits = collections.Counter(), collections.Counter()
    for kind, seq, iid, depth in raw:
        fn = symbols.get((seq, iid), f"?{iid}")
        (entries if kind == "funcgraph_entry" else exits)[(fn, depth)] += 1
    return entries, exits, failed


entries, exits, failed = calls("filter")
assert set(entries) == {("do_sys_openat2", 0)}, entries
assert entries[("do_sys_openat2", 0)] == n, entries
assert exits == entries, (entries, exits)
assert any("no_such_function_tbx" in f for f in failed), failed

entries, exits, failed = calls("root")
assert entries[("do_sys_openat2", 0)] == n, entries
callees = {fn for (fn, d) in entries if d == 1}
assert callees, entries
assert max(d for (_, d) in entries) == 1, entries
for name in ("filter", "root"):
    log = open(os.path.join(out, f"{name}.log")).read()
    assert "Trace stats: nothing lost" in log, (name, log)
print(f"funcgraph {arch}: filter: {n} calls; root: callees {sorted(callees)[:6]}")
