use super::bytecode::checksum;
use super::*;

/// Test-side bytecode generator from an allowlist, following upstream's
/// format: per message, field words sorted by id, then an end word; the
/// checksum last.
#[derive(Clone, Copy)]
pub enum Allow {
    Simple(u32),
    Range(u32, u32),
    Nested(u32, u32),
    String(u32),
}

pub fn bytecode(messages: &[&[Allow]]) -> Vec<u8> {
    let mut words = Vec::new();
    for m in messages {
        for a in *m {
            match *a {
                Allow::Simple(f) => words.push(f << 3 | 1),
                Allow::Range(f, n) => words.extend([f << 3 | 2, n]),
                Allow::Nested(f, i) => words.extend([f << 3 | 3, i]),
                Allow::String(f) => words.push(f << 3 | 4),
            }
        }
        words.push(0);
    }
    let sum = checksum(&words);
    words.push(sum);
    let mut out = Vec::new();
    for w in words {
        let mut v = [0u8; 10];
        let n = encode_varint(w as u64, &mut v);
        out.extend_from_slice(&v[..n]);
    }
    out
}

fn field_varint(f: u32, v: u64, out: &mut Vec<u8>) {
    let mut b = [0u8; 10];
    let n = encode_varint((f as u64) << 3, &mut b);
    out.extend_from_slice(&b[..n]);
    let n = encode_varint(v, &mut b);
    out.extend_from_slice(&b[..n]);
}

fn field_bytes(f: u32, v: &[u8], out: &mut Vec<u8>) {
    let mut b = [0u8; 10];
    let n = encode_varint((f as u64) << 3 | 2, &mut b);
    out.extend_from_slice(&b[..n]);
    let n = encode_varint(v.len() as u64, &mut b);
    out.extend_from_slice(&b[..n]);
    out.extend_from_slice(v);
}

fn run(f: &TraceFilter, packet: &[u8]) -> Result<Vec<u8>, MalformedPacket> {
    let mut out = Vec::new();
    f.filter_packet(packet, &mut out).map(|_| out)
}

/// Upstream's test/configs/ftrace_with_filter.cfg bytecode (made by its
/// tools): Trace.packet -> {ftrace_events -> {cpu, event -> {timestamp,
/// pid, sched_switch -> fields 1..7}, lost_events}, timestamp, 10, 13, 42}.
const UPSTREAM_SCHED_SWITCH_ONLY: &[u8] = b"\x0b\x01\x00\x0b\x02\x41\x51\x69\xd1\x02\x00\x09\x13\x03\x19\x00\x0a\x02\x23\x04\x00\x0a\x07\x00\xbb\xe1\xdf\xe7\x0e";

#[test]
fn generator_matches_upstream_bytes() {
    use Allow::*;
    let ours = bytecode(&[
        &[Nested(1, 1)],
        &[Nested(1, 2), Simple(8), Simple(10), Simple(13), Simple(42)],
        &[Simple(1), Nested(2, 3), Simple(3)],
        &[Range(1, 2), Nested(4, 4)],
        &[Range(1, 7)],
    ]);
    assert_eq!(ours, UPSTREAM_SCHED_SWITCH_ONLY);
}

#[test]
fn upstream_bytecode_keeps_sched_switch_only() {
    let f = TraceFilter::from_bytecode(UPSTREAM_SCHED_SWITCH_ONLY, &[]).unwrap();
    // FtraceEvent{timestamp=5, pid=7, sched_switch(4){prev_comm(1)="a",
    // prev_pid(2)=7}} and FtraceEvent{timestamp=6, sched_waking(326){pid=1}}.
    let mut switch = Vec::new();
    field_bytes(1, b"a", &mut switch);
    field_varint(2, 7, &mut switch);
    let mut ev1 = Vec::new();
    field_varint(1, 5, &mut ev1);
    field_varint(2, 7, &mut ev1);
    field_bytes(4, &switch, &mut ev1);
    let mut waking = Vec::new();
    field_varint(1, 1, &mut waking);
    let mut ev2 = Vec::new();
    field_varint(1, 6, &mut ev2);
    field_bytes(326, &waking, &mut ev2);
    let mut bundle = Vec::new();
    field_varint(1, 3, &mut bundle); // cpu
    field_bytes(2, &ev1, &mut bundle);
    field_bytes(2, &ev2, &mut bundle);
    let mut packet = Vec::new();
    field_bytes(1, &bundle, &mut packet);
    field_varint(8, 99, &mut packet); // timestamp: kept
    field_varint(3, 1000, &mut packet); // trusted_uid: dropped
    field_bytes(2, b"\x08\x01", &mut packet); // process_tree: dropped

    let mut want_ev2 = Vec::new();
    field_varint(1, 6, &mut want_ev2);
    let mut want_bundle = Vec::new();
    field_varint(1, 3, &mut want_bundle);
    field_bytes(2, &ev1, &mut want_bundle);
    field_bytes(2, &want_ev2, &mut want_bundle);
    let mut want = Vec::new();
    field_bytes(1, &want_bundle, &mut want);
    field_varint(8, 99, &mut want);
    let got = run(&f, &packet).unwrap();
    // Same fields; lengths may be padded to their original size.
    assert_eq!(reencode(&got), want);
    assert!(got.len() < packet.len());
}

/// Re-encodes nested messages (all length-delimited fields that parse as
/// messages and are known message fields here) with minimal lengths.
fn reencode(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in FieldIter::new(b) {
        match f.wire_type {
            2 if matches!(f.number, 1 | 2 | 4) && f.value.len() > 1 => {
                field_bytes(f.number, &reencode(f.value), &mut out)
            }
            _ => {
                let mut w = Vec::new();
                if f.wire_type == 2 {
                    field_bytes(f.number, f.value, &mut w);
                } else {
                    w.extend_from_slice(f.whole);
                }
                out.extend_from_slice(&w);
            }
        }
    }
    out
}

#[test]
fn simple_nested_string_and_ranges_by_wire_type() {
    use Allow::*;
    let code = bytecode(&[
        &[Nested(1, 1)],
        &[Simple(1), Nested(2, 2), String(3), Range(5, 3), Simple(200)],
        &[Simple(1)],
    ]);
    let f = TraceFilter::from_bytecode(&code, &[]).unwrap();
    let mut p = Vec::new();
    field_varint(1, 1, &mut p); // simple varint: kept
    field_bytes(2, b"\x08\x05\x10\x06", &mut p); // nested: field 2 inside dropped
    field_varint(2, 3, &mut p); // nested declared, varint sent: dropped
    field_bytes(3, b"secret?", &mut p); // string: kept (no string rules)
    field_varint(3, 4, &mut p); // string declared, varint sent: dropped
    field_varint(5, 5, &mut p);
    field_varint(7, 7, &mut p);
    field_varint(8, 8, &mut p); // just past the range: dropped
    field_varint(200, 9, &mut p);
    field_varint(201, 9, &mut p);
    p.extend_from_slice(&[0x0d, 1, 2, 3, 4]); // fixed32 field 1: kept
    let mut want = Vec::new();
    field_varint(1, 1, &mut want);
    field_bytes(2, b"\x08\x05", &mut want);
    field_bytes(3, b"secret?", &mut want);
    field_varint(5, 5, &mut want);
    field_varint(7, 7, &mut want);
    field_varint(200, 9, &mut want);
    want.extend_from_slice(&[0x0d, 1, 2, 3, 4]);
    assert_eq!(run(&f, &p).unwrap(), want);
}

#[test]
fn malformed_packets_are_errors_and_leave_output_alone() {
    use Allow::*;
    let f =
        TraceFilter::from_bytecode(&bytecode(&[&[Nested(1, 1)], &[Nested(1, 1)]]), &[]).unwrap();
    let mut out = vec![42];
    assert_eq!(
        f.filter_packet(&[0x0a, 5, 1], &mut out),
        Err(MalformedPacket)
    );
    assert_eq!(out, [42]);
    // A dropped field's bytes are not parsed; an allowed nested one is.
    assert_eq!(run(&f, &[0x12, 2, 0xff, 0xff]).unwrap(), Vec::<u8>::new());
    assert_eq!(run(&f, &[0x0a, 2, 0xff, 0xff]), Err(MalformedPacket));
    // Self-nesting beyond the depth bound is an error, not a stack overflow.
    let mut deep = Vec::new();
    field_varint(2, 1, &mut deep);
    for _ in 0..200 {
        let mut outer = Vec::new();
        field_bytes(1, &deep, &mut outer);
        deep = outer;
    }
    assert_eq!(run(&f, &deep), Err(MalformedPacket));
}

#[test]
fn malformed_bytecode_is_refused_with_a_reason() {
    use Allow::*;
    let good = bytecode(&[&[Nested(1, 1)], &[Simple(1)]]);
    assert!(TraceFilter::from_bytecode(&good, &[]).is_ok());
    let mut bad_sum = good.clone();
    *bad_sum.last_mut().unwrap() ^= 1;
    let e = TraceFilter::from_bytecode(&bad_sum, &[]).unwrap_err();
    assert!(e.contains("checksum"), "{e}");
    let e = TraceFilter::from_bytecode(&[], &[]).unwrap_err();
    assert!(e.contains("empty"), "{e}");
    let e = TraceFilter::from_bytecode(&[0x80], &[]).unwrap_err();
    assert!(e.contains("truncated"), "{e}");
    // Nested index out of range.
    let e = TraceFilter::from_bytecode(&bytecode(&[&[Nested(1, 5)]]), &[]).unwrap_err();
    assert!(e.contains("out of range"), "{e}");
    // Root without Trace.packet as a message.
    let e = TraceFilter::from_bytecode(&bytecode(&[&[Simple(1)]]), &[]).unwrap_err();
    assert!(e.contains("Trace.packet"), "{e}");
    // Overlapping ranges above the direct table.
    let e = TraceFilter::from_bytecode(
        &bytecode(&[&[Nested(1, 1)], &[Range(200, 10), Range(205, 2)]]),
        &[],
    )
    .unwrap_err();
    assert!(e.contains("overlapping"), "{e}");
}

#[test]
fn overlay_adds_and_upgrades_fields() {
    use Allow::*;
    let base = bytecode(&[&[Nested(1, 1)], &[Simple(2), Nested(5, 1)]]);
    // Overlay: message 1 gets field 1 (simple) and field 5 upgraded to a
    // string field.
    let mut words = vec![1, 1 << 3 | 1, 0, 1, 5 << 3 | 4, 0];
    words.push(checksum(&words));
    let mut overlay = Vec::new();
    for w in words {
        let mut v = [0u8; 10];
        let n = encode_varint(w as u64, &mut v);
        overlay.extend_from_slice(&v[..n]);
    }
    let f = TraceFilter::from_bytecode(&base, &overlay).unwrap();
    assert_eq!(f.tables.query(1, 1), FieldRule::Simple);
    assert_eq!(f.tables.query(1, 2), FieldRule::Simple);
    assert_eq!(f.tables.query(1, 5), FieldRule::String);
    assert_eq!(f.tables.query(1, 3), FieldRule::Dropped);
}
