#!/usr/bin/env python3
"""Reads a trace file field by field with Perfetto's official descriptors,
as trace_processor does: every whole Trace.packet is parsed, other fields
(traced's padding) are skipped; bytes after the last whole field (a write
cut short) are counted, not parsed.

Usage: check_torn.py PREFIX FILE
Prints: packets=N torn=B pad=P markers=M dups=D whole=0|1, where P counts
padding bytes and whole=1 means the file also parses in one piece
(perfetto_trace_pb2.Trace).
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
    i = packets = pad = 0
    seen, dups = set(), 0
    while i < len(data):
        tag, j = varint(data, i)
        if tag is None:
            break
        if tag & 7 == 0:
            _, k = varint(data, j)
            if _ is None:
                break
            pad += k - i
            i = k
            continue
        n, k = varint(data, j)
        if tag & 7 != 2 or n is None or k + n > len(data):
            break
        if tag == 0x0A:
            p = pb.TracePacket.FromString(data[k:k + n])
            packets += 1
            for e in p.ftrace_events.event:
                if e.HasField("print") and e.print.buf.startswith(prefix + " "):
                    m = int(e.print.buf.split()[1])
                    dups += m in seen
                    seen.add(m)
        else:
            pad += k + n - i
        i = k + n
    whole = 1
    try:
        pb.Trace().ParseFromString(data)
    except Exception:
        whole = 0
    print(f"packets={packets} torn={len(data) - i} pad={pad} markers={len(seen)} dups={dups} whole={whole}")


if __name__ == "__main__":
    main()
