#!/usr/bin/env python3
"""Checks rotated trace files with Perfetto's official descriptors.

Usage: check_rotation.py PREFIX FILE...
For each file (compressed_packets and zstd_compressed_packets opened) prints one line of counts: trace_config, clock_snapshot,
system_info packets, processes in process_tree packets, full /proc scans
(process_tree packets that list pid 1: an on-demand dump describes only
pids not described since the last clear, and pid 1 never is one), sched_switch events
(compact or not), markers (ftrace print buffers "PREFIX NNNNNN"),
compressed_packets and the top-level packets that are not ("plain"), the cpus with ftrace data, their events, and "early": events before
trace_processor's ftrace_latest_data_start_ns (the latest first bundle's
previous_bundle_end_timestamp over the cpus), which it would not import.
Then: union=N dups=D gaps=G lo=L hi=H over all files (a marker number in
two files is a duplicate; a number missing between lo and hi is a gap).
Exit status 1 if a file does not parse.
"""
import sys
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from no_unknown_fields import assert_known, decompressed


def expand(packets):
    """The packets, with compressed packets (zlib, zstd) opened in place."""
    for p in packets:
        raw = decompressed(p)
        if raw is not None:
            inner = pb.Trace()
            inner.ParseFromString(raw)
            yield from expand(inner.packet)
        else:
            yield p


def main():
    prefix, files = sys.argv[1], sys.argv[2:]
    seen = {}
    dups = 0
    for name in files:
        t = pb.Trace()
        with open(name, "rb") as f:
            data = f.read()
        t.ParseFromString(data)
        assert_known(data, name)
        c = dict(config=0, clocks=0, sysinfo=0, procs=0, scans=0, sched=0, markers=0,
                 zipped=sum(decompressed(p) is not None for p in t.packet))
        c["plain"] = len(t.packet) - c["zipped"]
        # cpu -> previous_bundle_end_timestamp of its first bundle; every
        # event timestamp of the file.
        starts, stamps = {}, []
        for p in expand(t.packet):
            if p.HasField("trace_config"):
                c["config"] += 1
            if p.HasField("clock_snapshot"):
                c["clocks"] += 1
            if p.HasField("system_info"):
                c["sysinfo"] += 1
            if p.HasField("process_tree"):
                c["procs"] += len(p.process_tree.processes)
                c["scans"] += any(q.pid == 1 for q in p.process_tree.processes)
            if not p.HasField("ftrace_events"):
                continue
            b = p.ftrace_events
            c["sched"] += len(b.compact_sched.switch_timestamp)
            if b.HasField("previous_bundle_end_timestamp"):
                starts.setdefault(b.cpu, b.previous_bundle_end_timestamp)
            ts = 0
            for d in b.compact_sched.switch_timestamp:
                ts += d
                stamps.append(ts)
            ts = 0
            for d in b.compact_sched.waking_timestamp:
                ts += d
                stamps.append(ts)
            stamps.extend(e.timestamp for e in b.event)
            for e in b.event:
                if e.HasField("sched_switch"):
                    c["sched"] += 1
                if e.HasField("print") and e.print.buf.startswith(prefix + " "):
                    n = int(e.print.buf.split()[1])
                    c["markers"] += 1
                    if n in seen:
                        dups += 1
                    seen[n] = name
        latest = max(starts.values(), default=0)
        c["cpus"] = len(starts)
        c["events"] = len(stamps)
        c["early"] = sum(ts < latest for ts in stamps)
        print(name, " ".join(f"{k}={v}" for k, v in c.items()))
    lo, hi = (min(seen), max(seen)) if seen else (0, -1)
    gaps = (hi - lo + 1) - len(seen)
    print(f"union={len(seen)} dups={dups} gaps={gaps} lo={lo} hi={hi}")


if __name__ == "__main__":
    main()
