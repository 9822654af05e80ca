#!/usr/bin/env python3
"""Checks a trace written by traced (tests/service/session.rs) with PyPI
perfetto's own TracePacket descriptors: the file parses as a Trace, the
service packets come in the documented order, and every producer packet
carries the trusted fields.

usage: check_trace.py TRACE_FILE EXPECTED_PRODUCER_PACKETS
"""
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from no_unknown_fields import assert_known


def main():
    path, want = sys.argv[1], int(sys.argv[2])
    trace = pb.Trace()
    with open(path, "rb") as f:
        data = f.read()
    trace.ParseFromString(data)
    assert_known(data, path)
    pkts = list(trace.packet)
    assert pkts, "empty trace"
    first = pkts[0]
    assert first.HasField("clock_snapshot"), first
    assert first.clock_snapshot.clocks[0].clock_id == 6, "BOOTTIME first"
    assert first.trusted_packet_sequence_id == 1
    kinds = [p.WhichOneof("data") for p in pkts]
    for k in ("trace_config", "trace_uuid", "system_info", "service_event", "synchronization_marker"):
        assert k in kinds, f"no {k} packet: {kinds}"
    assert kinds.index("synchronization_marker") < kinds.index("trace_config") < kinds.index("trace_uuid")
    cfg = pkts[kinds.index("trace_config")].trace_config
    assert cfg.buffers[0].size_kb > 0, cfg
    assert cfg.data_sources[0].config.name == "test.ds", cfg
    events = [p.service_event.WhichOneof("event_type") for p in pkts if p.HasField("service_event")]
    assert "tracing_started" in events and "tracing_disabled" in events, events
    producer = [p for p in pkts if p.trusted_packet_sequence_id >= 2]
    assert len(producer) == want, (len(producer), want)
    for p in producer:
        assert p.HasField("trusted_uid") and p.HasField("trusted_pid"), p
        assert p.timestamp >= 1000
    assert pkts[-1].HasField("trace_stats"), kinds[-3:]
    assert pkts[-1].trace_stats.buffer_stats[0].chunks_written > 0
    print(f"check_trace: ok ({len(pkts)} packets, {len(producer)} from the producer)")


if __name__ == "__main__":
    main()
