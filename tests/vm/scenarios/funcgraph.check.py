#!/usr/bin/env python3
"""Host check of funcgraph.sh: upstream's funcgraph_entry/exit events,
their functions named through the interned kernel symbols, as each
recording's filters and roots allow; the end lines name exactly what was
refused; no field unknown to upstream's descriptors."""
import collections

import vmcheck as v

out, arch = v.args()
n = int(open(f"{out}/opens").read())


def calls(name):
    """Entries and exits of the opener, as Counters of (function, depth),
    and the failed_ftrace_events."""
    trace = v.load(f"{out}/{name}.pftrace")
    opener = int(open(f"{out}/{name}.opener").read())
    symbols, raw, failed = {}, [], []
    for p in trace.packet:
        for s in p.interned_data.kernel_symbols:
            symbols[(p.trusted_packet_sequence_id, s.iid)] = s.str.decode()
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
v.expect(entries == {("do_sys_openat2", 0): n}, f"filter: entries {dict(entries)}, want {n} of do_sys_openat2")
v.expect(exits == entries, f"filter: exits {dict(exits)}")
v.expect(any("no_such_function_tbx" in f for f in failed), f"filter: failed {failed}")
v.expect_end_line(
    f"{out}/filter.err",
    "Trace stats: no data lost, but INCOMPLETE: ftrace events that could not be enabled: "
    "function_filters: no_such_function_tbx (matches no traceable function)")

# The root and its two filtered callees, once per open each; path_openat
# (depth 2) is cut by the max depth.
entries, exits, failed = calls("root")
want = {("do_sys_openat2", 0): n, ("getname", 1): n, ("do_filp_open", 1): n}
v.expect(entries == want, f"root: entries {dict(entries)}, want {want}")
v.expect(exits == entries, f"root: exits {dict(exits)}")
v.expect_end_line(f"{out}/root.err", "Trace stats: nothing lost")

line = v.end_line(f"{out}/none.err")
v.expect(line is not None and line.endswith(
    "linux.ftrace setup error: enable_function_graph: none of function_filters "
    "(no_such_function_tbx) matches a traceable function"), f"none: end line {line!r}")
print(f"funcgraph {arch}: filter: {n} calls; root: {dict(entries)}")
v.done()
