"""Appends SDK TrackEvents on other clocks to a recorded trace, placed by
hand-computed clock arithmetic at known ftrace marker times.

usage: sdk_clock_events.py TRACE MARKER_A MARKER_B
Prints "custom NS" and "mono NS": the trace-clock (BOOTTIME) times the two
events must be reported at.

- `tbx_custom` (sequence 4242) is stamped with the sequence's own clock 64
  (microseconds, the sequence's default clock), declared by a ClockSnapshot
  of that sequence that pairs 64:1000 with BOOTTIME = MARKER_A's time; it is
  at 1003 us, so 3 us after MARKER_A.
- `tbx_mono` (sequence 4243) is stamped in CLOCK_MONOTONIC at MARKER_B's
  time, converted through the service's own ClockSnapshot (the latest one
  at or before it), so it lands exactly on MARKER_B.
"""

import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

BOOTTIME, MONOTONIC = 6, 3


def main():
    path, marker_a, marker_b = sys.argv[1], sys.argv[2], sys.argv[3]
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    marks, snaps, pid = {}, [], 0
    for p in trace.packet:
        if p.HasField("clock_snapshot"):
            c = {x.clock_id: x.timestamp for x in p.clock_snapshot.clocks}
            if BOOTTIME in c and MONOTONIC in c:
                snaps.append((c[BOOTTIME], c[MONOTONIC]))
        for e in p.ftrace_events.event:
            if e.HasField("print"):
                marks[e.print.buf.strip()] = e.timestamp
                pid = e.pid
    assert snaps, "no BOOTTIME/MONOTONIC snapshot in the trace"
    a, b = marks[marker_a], marks[marker_b]
    boot, mono = [s for s in snaps if s[0] <= b][-1]
    mono_b = b - boot + mono

    out = pb.Trace()
    d = out.packet.add()
    d.trusted_packet_sequence_id = 4242
    d.sequence_flags = 1  # SEQ_INCREMENTAL_STATE_CLEARED
    d.trace_packet_defaults.timestamp_clock_id = 64
    d.track_descriptor.uuid = 77
    d.track_descriptor.thread.pid = pid
    d.track_descriptor.thread.tid = pid
    n = d.interned_data.event_names.add()
    n.iid, n.name = 1, "tbx_custom"
    s = out.packet.add()
    s.trusted_packet_sequence_id = 4242
    c = s.clock_snapshot.clocks.add()
    c.clock_id, c.timestamp, c.unit_multiplier_ns = 64, 1000, 1000
    c = s.clock_snapshot.clocks.add()
    c.clock_id, c.timestamp = BOOTTIME, a
    e = out.packet.add()
    e.trusted_packet_sequence_id = 4242
    e.timestamp = 1003
    e.track_event.type = pb.TrackEvent.TYPE_INSTANT
    e.track_event.name_iid = 1
    e.track_event.track_uuid = 77
    m = out.packet.add()
    m.trusted_packet_sequence_id = 4243
    m.timestamp = mono_b
    m.timestamp_clock_id = MONOTONIC
    m.track_event.type = pb.TrackEvent.TYPE_INSTANT
    m.track_event.name = "tbx_mono"
    m.track_event.track_uuid = 77
    with open(path, "ab") as f:
        f.write(out.SerializeToString())
    print(f"custom {a + 3000}")
    print(f"mono {b}")


if __name__ == "__main__":
    main()
