#!/usr/bin/env python3
"""Independent check of a sdk-interop trace with the official schema
(PyPI `perfetto`'s perfetto_trace_pb2): the file must parse as a Trace, and
every for_testing packet must carry the payload src/payload.rs defines.

usage: check_trace_pb2.py TRACE THREADS PACKETS SIZE [--fixed-payload] [--gaps]
(--gaps: holes allowed, order still strictly increasing per sequence)
"""
import sys
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

ALPHABET = b"abcdefghijklmnopqrstuvwxyz0123456789"
M64 = (1 << 64) - 1


def payload(thread, seq, size):
    state = (thread << 32) | seq
    out = bytearray()
    while len(out) < size:
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        for i in range(8):
            out.append(ALPHABET[((z >> (i * 8)) & 0xFF) % len(ALPHABET)])
    return bytes(out[:size])


def main():
    path, threads, packets, size = sys.argv[1], *map(int, sys.argv[2:5])
    fixed = "--fixed-payload" in sys.argv[5:]
    gaps = "--gaps" in sys.argv[5:]
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    seqs = {}
    bad = 0
    stats = None
    for p in trace.packet:
        if p.HasField("trace_stats"):
            stats = p.trace_stats
        if not p.HasField("for_testing"):
            continue
        te = p.for_testing
        t, s = te.counter, te.seq_value
        want = payload(t, 0 if fixed else s, size).decode()
        if t >= threads or s >= packets or te.str != want:
            bad += 1
        seqs.setdefault(p.trusted_packet_sequence_id, []).append(s)
    found = sum(len(v) for v in seqs.values())
    if gaps:
        in_order = all(all(b > a for a, b in zip(v, v[1:])) for v in seqs.values())
    else:
        in_order = all(all(b == a + 1 for a, b in zip(v, v[1:])) for v in seqs.values())
    ok = bad == 0 and in_order and stats is not None
    bs = stats.buffer_stats[0] if stats and stats.buffer_stats else None
    print(
        "pb2-check result=%s packets=%d for_testing=%d sequences=%d bad_payloads=%d "
        "in_order=%s chunks_overwritten=%s chunks_discarded=%s"
        % ("PASS" if ok else "FAIL", len(trace.packet), found, len(seqs), bad, in_order,
           bs.chunks_overwritten if bs else "-", bs.chunks_discarded if bs else "-")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
