//! Encoders for the packets the service writes itself. They all carry
//! `trusted_uid` = the service's uid and `trusted_packet_sequence_id` = 1,
//! and, except the sync marker, a BOOTTIME timestamp.

use crate::protozero::{begin_nested, end_nested, put_bytes, put_str, put_varint, VecStream};

use super::session::ReceivedTrigger;
use super::types::CLOCK_BOOTTIME;
use crate::schema::trace_extensions;

/// TracePacket field numbers used here.
mod field {
    pub const CLOCK_SNAPSHOT: u32 = 6;
    pub const TIMESTAMP: u32 = 8;
    pub const TRUSTED_UID: u32 = 3;
    pub const TRUSTED_PACKET_SEQUENCE_ID: u32 = 10;
    pub const TRACE_CONFIG: u32 = 33;
    pub const TRACE_STATS: u32 = 35;
    pub const SYNCHRONIZATION_MARKER: u32 = 36;
    pub const SYSTEM_INFO: u32 = 45;
    pub const TRIGGER: u32 = 46;
    pub const CLONE_SNAPSHOT_TRIGGER: u32 = 113;
    pub const TIMESTAMP_CLOCK_ID: u32 = 58;
    pub const SERVICE_EVENT: u32 = 69;
    pub const TRACE_UUID: u32 = 89;
}

/// Sequence id of the service's own packets.
pub const SERVICE_SEQUENCE_ID: u64 = 1;

/// Marks a point readers can resynchronise on in a corrupt stream.
pub const SYNC_MARKER: [u8; 16] = [
    0x82, 0x47, 0x7a, 0x76, 0xb2, 0x8d, 0x42, 0xba, 0x81, 0xdc, 0x33, 0x32, 0x6d, 0x57, 0xa0, 0x79,
];

fn packet(uid: u32, ts: Option<u64>, body: impl FnOnce(&mut VecStream)) -> Vec<u8> {
    let mut s = VecStream::new();
    body(&mut s);
    if let Some(ts) = ts {
        put_varint(&mut s, field::TIMESTAMP, ts);
        put_varint(&mut s, field::TIMESTAMP_CLOCK_ID, CLOCK_BOOTTIME as u64);
    }
    put_varint(&mut s, field::TRUSTED_UID, uid as u64);
    put_varint(
        &mut s,
        field::TRUSTED_PACKET_SEQUENCE_ID,
        SERVICE_SEQUENCE_ID,
    );
    s.into_bytes()
}

/// `clocks` is `(BuiltinClock id, ns)`, BOOTTIME first.
pub fn clock_snapshot(uid: u32, clocks: &[(u32, u64)], primary_clock: Option<u32>) -> Vec<u8> {
    let ts = clocks.iter().find(|c| c.0 == CLOCK_BOOTTIME).map(|c| c.1);
    packet(uid, ts, |s| {
        let n = begin_nested(s, field::CLOCK_SNAPSHOT);
        for &(id, t) in clocks {
            let c = begin_nested(s, 1);
            put_varint(s, 1, id as u64);
            put_varint(s, 2, t);
            end_nested(s, c);
        }
        if let Some(p) = primary_clock {
            put_varint(s, 2, p as u64);
        }
        end_nested(s, n);
    })
}

pub fn sync_marker(uid: u32) -> Vec<u8> {
    packet(uid, None, |s| {
        put_bytes(s, field::SYNCHRONIZATION_MARKER, &SYNC_MARKER)
    })
}

pub fn trace_config(uid: u32, ts: u64, config_raw: &[u8]) -> Vec<u8> {
    packet(uid, Some(ts), |s| {
        put_bytes(s, field::TRACE_CONFIG, config_raw)
    })
}

pub fn trigger(uid: u32, t: &ReceivedTrigger) -> Vec<u8> {
    trigger_as(uid, t, field::TRIGGER)
}

/// The trigger a CLONE_SNAPSHOT clone was made for.
pub fn clone_snapshot_trigger(uid: u32, t: &ReceivedTrigger) -> Vec<u8> {
    trigger_as(uid, t, field::CLONE_SNAPSHOT_TRIGGER)
}

fn trigger_as(uid: u32, t: &ReceivedTrigger, field: u32) -> Vec<u8> {
    packet(uid, Some(t.boot_time_ns), |s| {
        let n = begin_nested(s, field);
        put_str(s, 1, &t.name);
        put_str(s, 2, &t.producer_name);
        put_varint(s, 3, t.producer_uid as u64);
        put_varint(s, 4, t.stop_delay_ms as u64);
        end_nested(s, n);
    })
}

pub fn trace_uuid(uid: u32, ts: u64, msb: i64, lsb: i64) -> Vec<u8> {
    packet(uid, Some(ts), |s| {
        let n = begin_nested(s, field::TRACE_UUID);
        put_varint(s, 1, msb as u64);
        put_varint(s, 2, lsb as u64);
        end_nested(s, n);
    })
}

pub fn system_info(uid: u32, ts: u64, system_info_raw: &[u8]) -> Vec<u8> {
    packet(uid, Some(ts), |s| {
        put_bytes(s, field::SYSTEM_INFO, system_info_raw)
    })
}

/// A `TracingServiceEvent` with one boolean event field set.
pub fn service_event(uid: u32, event_field: u32, ts: u64) -> Vec<u8> {
    packet(uid, Some(ts), |s| {
        let n = begin_nested(s, field::SERVICE_EVENT);
        put_varint(s, event_field, 1);
        end_nested(s, n);
    })
}

/// A `TracingServiceEvent` given as its encoded fields; tracebox's own
/// fields go into the `tracebox_service_event` extension of the packet
/// (see schema::trace_extensions), so upstream's readers find no unknown
/// field.
pub fn service_event_raw(uid: u32, ts: u64, event_fields: &[u8]) -> Vec<u8> {
    let (upstream, ours) = trace_extensions::split_service_event(event_fields);
    packet(uid, Some(ts), |s| {
        if !upstream.is_empty() || ours.is_empty() {
            put_bytes(s, field::SERVICE_EVENT, &upstream);
        }
        if !ours.is_empty() {
            put_bytes(s, trace_extensions::TRACEBOX_SERVICE_EVENT, &ours);
        }
    })
}

/// The `extension_descriptor` declaring tracebox's TracePacket extensions.
pub fn extension_descriptor(uid: u32, ts: u64) -> Vec<u8> {
    packet(uid, Some(ts), |s| {
        put_bytes(
            s,
            trace_extensions::EXTENSION_DESCRIPTOR,
            &trace_extensions::extension_descriptor(),
        )
    })
}

/// `trace_stats_raw` is an encoded TraceStats message.
pub fn trace_stats(uid: u32, ts: u64, trace_stats_raw: &[u8]) -> Vec<u8> {
    packet(uid, Some(ts), |s| {
        put_bytes(s, field::TRACE_STATS, trace_stats_raw)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::protos::TracePacket;
    use crate::protozero::decode::decode_message;

    #[test]
    fn packets_decode_with_trusted_fields() {
        let p = clock_snapshot(0, &[(6, 100), (1, 5)], None);
        let d: TracePacket = decode_message(&p).unwrap();
        assert_eq!(d.timestamp, Some(100));
        assert_eq!(d.timestamp_clock_id, Some(6));
        let t = ReceivedTrigger {
            name: "t".into(),
            producer_name: "p".into(),
            producer_uid: 7,
            boot_time_ns: 9,
            stop_delay_ms: 3,
        };
        let d: TracePacket = decode_message(&trigger(1000, &t)).unwrap();
        assert_eq!(d.timestamp, Some(9));
        let d: TracePacket = decode_message(&service_event(0, 2, 50)).unwrap();
        assert_eq!(d.timestamp, Some(50));
        let d: TracePacket = decode_message(&sync_marker(0)).unwrap();
        assert_eq!(d.timestamp, None);
    }
}
