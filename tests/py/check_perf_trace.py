"""Reads a linux.perf trace with perfetto_trace_pb2 the way trace_processor
does: interned data per packet sequence, cleared by
SEQ_INCREMENTAL_STATE_CLEARED. Every packet must parse and every interned
id a sample references must be defined earlier in the same sequence.

Prints, one per line:
  packets N
  error TEXT                 (an undefined id, a frame without mapping...)
  lost CPU N                 (PerfSample.kernel_records_lost)
  sample PID TID CPU MODE TS COUNT KFRAMES NAMES
                             (TS: the packet's timestamp; COUNT: the
                              timebase_count, '-' if absent; KFRAMES: frames in
                              the /kernel mapping; NAMES: function names root
                              first, ';'-joined, '?' for unnamed frames, '-'
                              for no callstack)
  clock ID                   (TracePacketDefaults.timestamp_clock_id of the
                              sequence's PerfSampleDefaults packet)
  mapping PATH BUILDID_HEX   (each distinct mapping)
  counts CPU TIMEBASE F1..   (samples with follower_counts: the group read)
  stopped REASON             (PerfSample.producer_event.source_stop_reason)
  followers COUNTER..        (PerfSampleDefaults.followers, once per sequence)
  unwind_error PID ERROR     (PerfSample.unwind_error of the sample before)
  skipped PID REASON         (PerfSample.sample_skipped_reason of the sample
                              before)
"""
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from no_unknown_fields import assert_known


def main(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        data = f.read()
    trace.ParseFromString(data)
    assert_known(data, path)
    print("packets", len(trace.packet))
    seqs = {}
    mappings_seen = set()
    for p in trace.packet:
        seq_id = p.trusted_packet_sequence_id
        fol = p.trace_packet_defaults.perf_sample_defaults.followers
        if fol and seq_id not in seqs:
            print("followers", *[f.counter for f in fol])
        if p.trace_packet_defaults.HasField("perf_sample_defaults") and seq_id not in seqs:
            print("clock", p.trace_packet_defaults.timestamp_clock_id)
        if p.sequence_flags & 1 or p.incremental_state_cleared:
            seqs[seq_id] = {k: {} for k in ("names", "bids", "paths", "maps", "frames", "stacks")}
        if p.HasField("interned_data"):
            st = seqs.get(seq_id)
            d = p.interned_data
            if st is None:
                if d.callstacks or d.frames or d.mappings:
                    print("error interned data before SEQ_INCREMENTAL_STATE_CLEARED")
                continue
            for s in d.function_names:
                st["names"][s.iid] = s.str.decode(errors="replace")
            for s in d.build_ids:
                st["bids"][s.iid] = s.str
            for s in d.mapping_paths:
                st["paths"][s.iid] = s.str.decode(errors="replace")
            for m in d.mappings:
                st["maps"][m.iid] = m
            for fr in d.frames:
                st["frames"][fr.iid] = fr
            for c in d.callstacks:
                st["stacks"][c.iid] = c
        if not p.HasField("perf_sample"):
            continue
        s = p.perf_sample
        if s.HasField("kernel_records_lost"):
            print("lost", s.cpu, s.kernel_records_lost)
            continue
        if s.HasField("producer_event"):
            print("stopped", s.producer_event.source_stop_reason)
            continue
        if s.follower_counts:
            print("counts", s.cpu, s.timebase_count, *s.follower_counts)
        if not p.sequence_flags & 2:
            print("error sample without SEQ_NEEDS_INCREMENTAL_STATE")
        st = seqs.get(seq_id)
        names = "-"
        kframes = 0
        if s.callstack_iid:
            if st is None or s.callstack_iid not in st["stacks"]:
                print("error undefined callstack", s.callstack_iid)
                continue
            out = []
            for fid in st["stacks"][s.callstack_iid].frame_ids:
                fr = st["frames"].get(fid)
                if fr is None:
                    print("error undefined frame", fid)
                    continue
                m = st["maps"].get(fr.mapping_id)
                if m is None:
                    print("error undefined mapping", fr.mapping_id)
                    continue
                for pid_ in m.path_string_ids:
                    if pid_ not in st["paths"]:
                        print("error undefined mapping path", pid_)
                if m.build_id and m.build_id not in st["bids"]:
                    print("error undefined build id", m.build_id)
                path = "/" + "/".join(st["paths"].get(i, "") for i in m.path_string_ids)
                kframes += path == "/kernel"
                bid = st["bids"].get(m.build_id, b"").hex()
                if (path, bid) not in mappings_seen:
                    mappings_seen.add((path, bid))
                    print("mapping", path, bid or "-")
                if fr.function_name_id:
                    if fr.function_name_id not in st["names"]:
                        print("error undefined function name", fr.function_name_id)
                        out.append("?")
                    else:
                        out.append(st["names"][fr.function_name_id])
                else:
                    out.append("?")
            names = ";".join(out) or "-"
        count = s.timebase_count if s.HasField("timebase_count") else "-"
        print("sample", s.pid, s.tid, s.cpu, s.cpu_mode, p.timestamp, count, kframes, names)
        if s.HasField("unwind_error"):
            print("unwind_error", s.pid, s.unwind_error)
        if s.HasField("sample_skipped_reason"):
            print("skipped", s.pid, s.sample_skipped_reason)


if __name__ == "__main__":
    main(sys.argv[1])
