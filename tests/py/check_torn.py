#!/usr/bin/env python3
"""Reads a trace file packet by packet with Perfetto's official descriptors,
as trace_processor does: every whole Trace.packet is parsed; bytes after the
last whole packet (a write cut short by SIGKILL) are counted, not parsed.

Usage: check_torn.py PREFIX FILE
Prints: packets=N torn=B markers=M dups=D whole=0|1, where whole=1 means the
file also parses in one piece (perfetto_trace_pb2.Trace).
"""
import sys
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def varint(b, i):
    v = s = 0
    while i < len(b):
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i
    return None, i


def main():
    prefix, name = sys.argv[1], sys.argv[2]
    data = open(name, "rb").read()
    i = packets = 0
    seen, dups = set(), 0
    while i < len(data):
        tag, j = varint(data, i)
        if tag is None:
            break
        n, k = varint(data, j)
        if n is None or k + n > len(data):
            break
        if tag == 0x0A:
            p = pb.TracePacket.FromString(data[k:k + n])
            packets += 1
            for e in p.ftrace_events.event:
                if e.HasField("print") and e.print.buf.startswith(prefix + " "):
                    m = int(e.print.buf.split()[1])
                    dups += m in seen
                    seen.add(m)
        i = k + n
    whole = 1
    try:
        pb.Trace().ParseFromString(data)
    except Exception:
        whole = 0
    print(f"packets={packets} torn={len(data) - i} markers={len(seen)} dups={dups} whole={whole}")


if __name__ == "__main__":
    main()
