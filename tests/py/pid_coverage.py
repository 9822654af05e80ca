#!/usr/bin/env python3
"""Checks that the tasks seen in a trace's sched events are described in its
process tree, parsed with PyPI perfetto's official descriptors.

Usage: pid_coverage.py TRACE ALIVE REQUIRED
ALIVE and REQUIRED hold "tid tgid" lines. Every ALIVE task (alive when the
recording ended, so scannable whenever ftrace saw it) that appears in sched_switch / sched_waking must be in
process_tree with that tgid; every REQUIRED task must appear in sched events
and in process_tree with that tgid. Prints one line per failure, then a
summary line; exit 1 on any failure."""
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def read_pairs(path):
    out = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                tid, tgid = line.split()
                out[int(tid)] = int(tgid)
    return out


def main():
    trace = pb.Trace()
    with open(sys.argv[1], "rb") as f:
        trace.ParseFromString(f.read())
    alive = read_pairs(sys.argv[2])
    required = read_pairs(sys.argv[3])

    sched = set()
    tree = {}  # tid -> tgid as described by process_tree
    for p in trace.packet:
        kind = p.WhichOneof("data")
        if kind == "process_tree":
            for proc in p.process_tree.processes:
                tree[proc.pid] = proc.pid
            for t in p.process_tree.threads:
                tree[t.tid] = t.tgid
        elif kind == "ftrace_events":
            b = p.ftrace_events
            sched.update(b.compact_sched.switch_next_pid)
            sched.update(b.compact_sched.waking_pid)
            for e in b.event:
                ek = e.WhichOneof("event")
                if ek == "sched_switch":
                    sched.add(e.sched_switch.next_pid)
                    sched.add(e.sched_switch.prev_pid)
                elif ek == "sched_waking":
                    sched.add(e.sched_waking.pid)
    sched.discard(0)

    failures = []
    for tid, tgid in sorted(required.items()):
        if tid not in sched:
            failures.append(f"required {tid} (tgid {tgid}) never in sched events")
        if tree.get(tid) != tgid:
            failures.append(f"required {tid}: tree tgid {tree.get(tid)}, want {tgid}")
    checked = 0
    for tid in sorted(sched):
        if tid in alive:
            checked += 1
            if tree.get(tid) != alive[tid]:
                failures.append(f"alive {tid}: tree tgid {tree.get(tid)}, want {alive[tid]}")
    for f in failures:
        print(f)
    print(f"sched_pids={len(sched)} tree_tasks={len(tree)} alive_checked={checked} "
          f"required={len(required)} failures={len(failures)}")
    sys.exit(1 if failures or checked == 0 else 0)


if __name__ == "__main__":
    main()
