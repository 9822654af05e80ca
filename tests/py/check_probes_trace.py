#!/usr/bin/env python3
"""Checks a trace recorded through traced_probes with the official schema
(PyPI `perfetto`'s perfetto_trace_pb2).

usage: check_probes_trace.py TRACE [--pid PID] [--marker TEXT]... [--meminfo]
       [--cpu-info] [--sched-switch] [--ftrace-stats] [--no-sched-switch]
       [--no-prints]

--pid: a process_tree must describe PID. --marker: ftrace/print events must
contain TEXT exactly once. --meminfo: a sys_stats packet with meminfo.
--cpu-info: a cpu_info packet with cpus. --sched-switch: sched_switch events
(compact or full). --ftrace-stats: ftrace_stats of both phases.
--no-sched-switch / --no-prints: none of those events. --unknown-event E:
ftrace_stats lists E in unknown_ftrace_events. --process-stats: periodic
process_stats samples.
Every process_tree / sys_stats / cpu_info packet must carry a timestamp.
"""
import argparse
import collections
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from no_unknown_fields import assert_known


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--pid", type=int, action="append", default=[])
    ap.add_argument("--marker", action="append", default=[])
    ap.add_argument("--meminfo", action="store_true")
    ap.add_argument("--cpu-info", action="store_true")
    ap.add_argument("--sched-switch", action="store_true")
    ap.add_argument("--ftrace-stats", action="store_true")
    ap.add_argument("--no-sched-switch", action="store_true")
    ap.add_argument("--no-prints", action="store_true")
    ap.add_argument("--unknown-event", action="append", default=[])
    ap.add_argument("--process-stats", action="store_true")
    a = ap.parse_args()

    trace = pb.Trace()
    with open(a.trace, "rb") as f:
        data = f.read()
    trace.ParseFromString(data)
    assert_known(data, a.trace)

    counts = collections.Counter()
    pids = set()
    prints = collections.Counter()
    switches = 0
    phases = set()
    unknown = set()
    meminfo = 0
    cpus = 0
    errors = []
    for p in trace.packet:
        kind = p.WhichOneof("data")
        counts[kind] += 1
        if kind in ("process_tree", "sys_stats", "cpu_info", "process_stats") and p.timestamp == 0:
            errors.append(f"{kind} packet without timestamp")
        if kind == "process_tree":
            pids.update(proc.pid for proc in p.process_tree.processes)
        elif kind == "sys_stats":
            meminfo = max(meminfo, len(p.sys_stats.meminfo))
        elif kind == "cpu_info":
            cpus = max(cpus, len(p.cpu_info.cpus))
        elif kind == "ftrace_stats":
            phases.add(p.ftrace_stats.phase)
            unknown.update(p.ftrace_stats.unknown_ftrace_events)
        elif kind == "ftrace_events":
            b = p.ftrace_events
            switches += len(b.compact_sched.switch_timestamp)
            for ev in b.event:
                if ev.HasField("print"):
                    prints[ev.print.buf.rstrip("\n")] += 1
                if ev.HasField("sched_switch"):
                    switches += 1

    print("packets:", dict(counts))
    print(f"pids={len(pids)} meminfo={meminfo} cpus={cpus} switches={switches} "
          f"prints={sum(prints.values())} ftrace_stats_phases={sorted(phases)}")
    for pid in a.pid:
        if pid not in pids:
            errors.append(f"pid {pid} not in any process_tree")
    for m in a.marker:
        if prints[m] != 1:
            errors.append(f"marker {m!r} seen {prints[m]} times")
    if a.meminfo and meminfo == 0:
        errors.append("no sys_stats meminfo")
    if a.cpu_info and cpus == 0:
        errors.append("no cpu_info cpus")
    if a.sched_switch and switches == 0:
        errors.append("no sched_switch events")
    if a.ftrace_stats and not {1, 2} <= phases:
        errors.append(f"ftrace_stats phases {sorted(phases)}, want start and end")
    if a.no_sched_switch and switches:
        errors.append(f"{switches} sched_switch events, want none")
    if a.no_prints and prints:
        errors.append(f"{sum(prints.values())} print events, want none")
    if a.process_stats and not any(
            len(p.process_stats.processes) for p in trace.packet if p.HasField("process_stats")):
        errors.append("no process_stats samples")
    for u in a.unknown_event:
        if u not in unknown:
            errors.append(f"{u} not reported in unknown_ftrace_events {sorted(unknown)}")
    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
