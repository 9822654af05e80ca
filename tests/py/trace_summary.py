#!/usr/bin/env python3
"""Prints a JSON summary of a trace, parsed with PyPI perfetto's official
descriptors: packet kinds, trigger names, service events, for_testing
payload count, process tree pids, ftrace events by kind and print buffers,
chunks the buffers discarded (per the last trace_stats).
Fails (exit 1) if the file does not parse as a Trace."""
import collections
import json
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def main():
    trace = pb.Trace()
    with open(sys.argv[1], "rb") as f:
        trace.ParseFromString(f.read())
    kinds = collections.Counter()
    out = {"packets": len(trace.packet), "triggers": [], "service_events": [],
           "for_testing": 0, "for_testing_ts": [], "pids": [], "threads": [],
           "ftrace": collections.Counter(), "prints": [], "trigger_ts": [],
           "tracing_started_ts": [], "uuid": None, "compact_switches": 0,
           "chunks_discarded": 0, "ftrace_span_ms": 0}
    ts_min, ts_max = None, None

    def seen_ts(t):
        nonlocal ts_min, ts_max
        ts_min = t if ts_min is None else min(ts_min, t)
        ts_max = t if ts_max is None else max(ts_max, t)
    for p in trace.packet:
        kind = p.WhichOneof("data")
        kinds[kind or "none"] += 1
        if kind == "trigger":
            out["triggers"].append(p.trigger.trigger_name)
            out["trigger_ts"].append(p.timestamp)
        elif kind == "service_event":
            for f, v in p.service_event.ListFields():
                out["service_events"].append(f.name)
                if f.name == "tracing_started":
                    out["tracing_started_ts"].append(p.timestamp)
        elif kind == "for_testing":
            out["for_testing"] += 1
            out["for_testing_ts"].append(p.timestamp)
        elif kind == "process_tree":
            out["pids"] += [x.pid for x in p.process_tree.processes]
            out["threads"] += [[t.tid, t.name] for t in p.process_tree.threads]
        elif kind == "trace_stats":
            out["chunks_discarded"] = sum(
                b.chunks_discarded for b in p.trace_stats.buffer_stats)
        elif kind == "trace_uuid":
            out["uuid"] = [p.trace_uuid.msb, p.trace_uuid.lsb]
        elif kind == "ftrace_events":
            b = p.ftrace_events
            out["compact_switches"] += len(b.compact_sched.switch_timestamp)
            # Compact sched timestamps are deltas, the first from zero.
            t = 0
            for d in b.compact_sched.switch_timestamp:
                t += d
                seen_ts(t)
            for e in b.event:
                ek = e.WhichOneof("event") or "unknown"
                seen_ts(e.timestamp)
                out["ftrace"][ek] += 1
                if ek == "print":
                    out["prints"].append(e.print.buf)
    if ts_min is not None:
        out["ftrace_span_ms"] = (ts_max - ts_min) // 1_000_000
    out["kinds"] = kinds
    for k in ("for_testing_ts", "trigger_ts", "tracing_started_ts"):
        out[k] = [min(out[k]) if out[k] else None]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
