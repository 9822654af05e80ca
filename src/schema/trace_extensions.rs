//! What tracebox writes beyond upstream's trace schema, carried as
//! upstream provides for it: extensions of `TracePacket` (whose range
//! 1000-1999 upstream leaves to extensions), declared in the trace by an
//! `extension_descriptor` packet (TracePacket field 72) that traced writes
//! with the trace's first packets. trace_processor adds such descriptors to
//! its pool, and a reader holding them (tests/py) decodes every packet with
//! no unknown field.
//!
//! * `tracebox_service_event` (1900): tracebox's service events, the
//!   `TracingServiceEvent` fields 1001-1008 of earlier versions renumbered
//!   1-8 (same payloads), and 9, `rotation_stopped`. Readers still accept
//!   the old numbering.
//! * `tracebox_ftrace_stats` (1901), in the packet of an `ftrace_stats`:
//!   per cpu, the sched_switch events the kernel never recorded (was
//!   `FtraceCpuStats` field 1001).

use crate::protozero::decode::FieldIter;
use crate::protozero::{begin_nested, end_nested, put_bytes, put_str, put_varint, VecStream};

/// `TracePacket.extension_descriptor`.
pub const EXTENSION_DESCRIPTOR: u32 = 72;
/// The TracePacket extension holding tracebox's service events.
pub const TRACEBOX_SERVICE_EVENT: u32 = 1900;
/// The TracePacket extension holding tracebox's ftrace counters.
pub const TRACEBOX_FTRACE_STATS: u32 = 1901;
/// Our service events were `TracingServiceEvent` fields above this.
const OLD_SERVICE_EVENT_BASE: u32 = 1000;

/// `TraceboxFtraceStats.cpu_stats` and its `cpu`, `unrecorded_switches`.
pub mod ftrace {
    pub const CPU_STATS: u32 = 1;
    pub const CPU: u32 = 1;
    pub const UNRECORDED_SWITCHES: u32 = 2;
}

/// Writes `tracebox_ftrace_stats` into an open TracePacket: the cpus with a
/// non-zero count (nothing if none).
pub fn write_unrecorded_switches<S: crate::protozero::Stream + ?Sized>(s: &mut S, per_cpu: &[u64]) {
    if per_cpu.iter().all(|&n| n == 0) {
        return;
    }
    let n = begin_nested(s, TRACEBOX_FTRACE_STATS);
    for (cpu, &count) in per_cpu.iter().enumerate().filter(|(_, n)| **n > 0) {
        let c = begin_nested(s, ftrace::CPU_STATS);
        put_varint(s, ftrace::CPU, cpu as u64);
        put_varint(s, ftrace::UNRECORDED_SWITCHES, count);
        end_nested(s, c);
    }
    end_nested(s, n);
}

/// Splits an encoded `TracingServiceEvent` (fields numbered as
/// `schema::service_events::field`) into upstream's fields and ours,
/// renumbered for `tracebox_service_event`. Either may be empty.
pub fn split_service_event(event: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let (mut upstream, mut ours) = (VecStream::new(), VecStream::new());
    let mut it = FieldIter::new(event);
    for f in &mut it {
        let (s, number) = match f.number.checked_sub(OLD_SERVICE_EVENT_BASE) {
            Some(n) if n > 0 => (&mut ours, n),
            _ => (&mut upstream, f.number),
        };
        match f.wire_type {
            0 => put_varint(
                s,
                number,
                crate::protozero::decode::read_varint(f.value).map_or(0, |v| v.0),
            ),
            2 => put_bytes(s, number, f.value),
            _ => {}
        }
    }
    (upstream.into_bytes(), ours.into_bytes())
}

/// A `tracebox_service_event` read back as the `TracingServiceEvent`
/// fields it stands for (the numbering readers know).
pub fn service_event_from_extension(ext: &[u8]) -> Vec<u8> {
    let mut s = VecStream::new();
    for f in FieldIter::new(ext) {
        let number = f.number.saturating_add(OLD_SERVICE_EVENT_BASE);
        match f.wire_type {
            0 => put_varint(
                &mut s,
                number,
                crate::protozero::decode::read_varint(f.value).map_or(0, |v| v.0),
            ),
            2 => put_bytes(&mut s, number, f.value),
            _ => {}
        }
    }
    s.into_bytes()
}

/// `FieldDescriptorProto` label and type numbers.
const OPTIONAL: u64 = 1;
const REPEATED: u64 = 3;
const UINT64: u64 = 4;
const STRING: u64 = 9;
const MESSAGE: u64 = 11;

/// One `FieldDescriptorProto` (field `at` of its parent).
#[allow(clippy::too_many_arguments)]
fn field(
    s: &mut VecStream,
    at: u32,
    name: &str,
    number: u32,
    label: u64,
    ty: u64,
    type_name: &str,
    extendee: &str,
) {
    let n = begin_nested(s, at);
    put_str(s, 1, name);
    if !extendee.is_empty() {
        put_str(s, 2, extendee);
    }
    put_varint(s, 3, number as u64);
    put_varint(s, 4, label);
    put_varint(s, 5, ty);
    if !type_name.is_empty() {
        put_str(s, 6, type_name);
    }
    end_nested(s, n);
}

const DATA_SOURCES: &str = ".perfetto.protos.TracingServiceEvent.DataSources";

/// The `ExtensionDescriptor` (TracePacket field 72's payload): one file,
/// `tracebox/trace_extensions.proto`, package `tracebox`, declaring the
/// messages and the two TracePacket extensions above.
pub fn extension_descriptor() -> Vec<u8> {
    let mut s = VecStream::new();
    let set = begin_nested(&mut s, 1); // extension_set: FileDescriptorSet
    let file = begin_nested(&mut s, 1); // file
    put_str(&mut s, 1, "tracebox/trace_extensions.proto");
    put_str(&mut s, 2, "tracebox");
    put_str(&mut s, 3, "protos/perfetto/trace/perfetto_trace.proto");
    // message TraceboxServiceEvent
    let m = begin_nested(&mut s, 4);
    put_str(&mut s, 1, "TraceboxServiceEvent");
    let ds = |s: &mut VecStream, name: &str, n: u32| {
        field(s, 2, name, n, OPTIONAL, MESSAGE, DATA_SOURCES, "")
    };
    ds(&mut s, "producer_disconnected", 1);
    ds(&mut s, "data_sources_not_offered", 2);
    ds(&mut s, "data_sources_not_set_up", 3);
    field(
        &mut s,
        2,
        "config_fields_ignored",
        4,
        OPTIONAL,
        STRING,
        "",
        "",
    );
    field(
        &mut s,
        2,
        "relay_connections_dropped",
        5,
        OPTIONAL,
        UINT64,
        "",
        "",
    );
    field(
        &mut s,
        2,
        "chunks_never_arrived",
        6,
        OPTIONAL,
        MESSAGE,
        ".tracebox.TraceboxServiceEvent.ChunksNeverArrived",
        "",
    );
    ds(&mut s, "data_sources_stop_timed_out", 7);
    field(
        &mut s,
        2,
        "uncommitted_window_ms",
        8,
        OPTIONAL,
        UINT64,
        "",
        "",
    );
    field(&mut s, 2, "rotation_stopped", 9, OPTIONAL, STRING, "", "");
    let nested = begin_nested(&mut s, 3);
    put_str(&mut s, 1, "ChunksNeverArrived");
    field(&mut s, 2, "producer", 1, OPTIONAL, STRING, "", "");
    field(&mut s, 2, "chunks", 2, OPTIONAL, UINT64, "", "");
    end_nested(&mut s, nested);
    end_nested(&mut s, m);
    // message TraceboxFtraceStats
    let m = begin_nested(&mut s, 4);
    put_str(&mut s, 1, "TraceboxFtraceStats");
    field(
        &mut s,
        2,
        "cpu_stats",
        ftrace::CPU_STATS,
        REPEATED,
        MESSAGE,
        ".tracebox.TraceboxFtraceStats.CpuStats",
        "",
    );
    let nested = begin_nested(&mut s, 3);
    put_str(&mut s, 1, "CpuStats");
    field(&mut s, 2, "cpu", ftrace::CPU, OPTIONAL, UINT64, "", "");
    field(
        &mut s,
        2,
        "unrecorded_switches",
        ftrace::UNRECORDED_SWITCHES,
        OPTIONAL,
        UINT64,
        "",
        "",
    );
    end_nested(&mut s, nested);
    end_nested(&mut s, m);
    // extend perfetto.protos.TracePacket
    let packet = ".perfetto.protos.TracePacket";
    field(
        &mut s,
        7,
        "tracebox_service_event",
        TRACEBOX_SERVICE_EVENT,
        OPTIONAL,
        MESSAGE,
        ".tracebox.TraceboxServiceEvent",
        packet,
    );
    field(
        &mut s,
        7,
        "tracebox_ftrace_stats",
        TRACEBOX_FTRACE_STATS,
        OPTIONAL,
        MESSAGE,
        ".tracebox.TraceboxFtraceStats",
        packet,
    );
    end_nested(&mut s, file);
    end_nested(&mut s, set);
    s.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::service_events::{data_sources_event, field};

    #[test]
    fn our_service_events_move_to_the_extension_and_back() {
        let ours = data_sources_event(field::PRODUCER_DISCONNECTED, &[("p".into(), "d".into())]);
        let mut event = vec![0x10, 0x01]; // upstream tracing_started
        event.extend_from_slice(&ours);
        let (upstream, ext) = split_service_event(&event);
        assert_eq!(upstream, [0x10, 0x01]);
        assert_eq!(FieldIter::new(&ext).next().unwrap().number, 1);
        let back = service_event_from_extension(&ext);
        let (a, b) = (
            FieldIter::new(&back).next().unwrap(),
            FieldIter::new(&ours).next().unwrap(),
        );
        assert_eq!((a.number, a.value), (b.number, b.value));
    }

    #[test]
    fn only_non_zero_counts_are_written() {
        let mut s = VecStream::new();
        write_unrecorded_switches(&mut s, &[0, 0]);
        assert!(s.as_bytes().is_empty());
        write_unrecorded_switches(&mut s, &[0, 3]);
        let f = FieldIter::new(s.as_bytes()).next().unwrap();
        assert_eq!(f.number, TRACEBOX_FTRACE_STATS);
    }
}
