//! Checks a producer's TracePacket before the service forwards it.
//!
//! The service appends trusted fields (uid, pid, sequence id, ...) after
//! each producer packet. That is only safe if the producer's bytes are a
//! sequence of complete, well-formed top-level fields, none of which is a
//! field only the service may write. A truncated trailing field could
//! otherwise swallow the trailer, and a reserved field could spoof it.
//!
//! The packet may be split over several slices (one per chunk fragment);
//! it is validated in place, without concatenation. Only the top level is
//! inspected: nested message contents are skipped by length.

/// TracePacket fields only the service may write: trusted_uid,
/// trusted_packet_sequence_id, trace_config, trace_stats,
/// synchronization_marker, compressed_packets, service_event, trusted_pid,
/// machine_id, trace_provenance, protovms, zstd_compressed_packets.
pub const RESERVED_FIELD_IDS: [u64; 12] = [3, 10, 33, 35, 36, 50, 69, 79, 98, 124, 125, 133];

/// Longest length-delimited field accepted (2^28 - 1).
pub const MAX_FIELD_LENGTH: u64 = (1 << 28) - 1;

/// Largest protobuf field number.
const MAX_FIELD_ID: u64 = (1 << 29) - 1;

/// Why a packet was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidPacket {
    /// A field reserved to the service.
    ReservedField(u64),
    /// Field number above 2^29 - 1.
    FieldIdOutOfRange(u64),
    /// Groups (3, 4) or undefined wire types (6, 7).
    BadWireType(u8),
    /// Length-delimited field longer than [`MAX_FIELD_LENGTH`].
    FieldTooLong(u64),
    /// A varint longer than 10 bytes.
    VarintTooLong,
    /// The packet ends inside a field.
    Truncated,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Tag,
    VarintValue,
    Length,
}

/// Validates a packet given as consecutive slices.
pub fn validate_packet<'a, I>(slices: I) -> Result<(), InvalidPacket>
where
    I: IntoIterator<Item = &'a [u8]>,
{
    let mut state = State::Tag;
    let mut varint = 0u64;
    let mut varint_bytes = 0u32;
    // Payload bytes still to skip (fixed-size or length-delimited values).
    let mut skip = 0u64;

    for slice in slices {
        let mut i = 0;
        while i < slice.len() {
            if skip > 0 {
                let n = skip.min((slice.len() - i) as u64);
                i += n as usize;
                skip -= n;
                continue;
            }
            let byte = slice[i];
            i += 1;
            if varint_bytes == 9 && byte & 0x80 != 0 {
                return Err(InvalidPacket::VarintTooLong);
            }
            varint |= u64::from(byte & 0x7f) << (7 * varint_bytes);
            if byte & 0x80 != 0 {
                varint_bytes += 1;
                continue;
            }
            let value = varint;
            varint = 0;
            varint_bytes = 0;

            match state {
                State::Tag => {
                    let field_id = value >> 3;
                    if RESERVED_FIELD_IDS.contains(&field_id) {
                        return Err(InvalidPacket::ReservedField(field_id));
                    }
                    if field_id > MAX_FIELD_ID {
                        return Err(InvalidPacket::FieldIdOutOfRange(field_id));
                    }
                    match value & 7 {
                        0 => state = State::VarintValue,
                        1 => skip = 8,
                        2 => state = State::Length,
                        5 => skip = 4,
                        wire => return Err(InvalidPacket::BadWireType(wire as u8)),
                    }
                }
                State::VarintValue => state = State::Tag,
                State::Length => {
                    if value > MAX_FIELD_LENGTH {
                        return Err(InvalidPacket::FieldTooLong(value));
                    }
                    skip = value;
                    state = State::Tag;
                }
            }
        }
    }
    if skip > 0 || varint_bytes > 0 || state != State::Tag {
        return Err(InvalidPacket::Truncated);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protozero::{put_bytes, put_fixed32, put_fixed64, put_varint, VecStream};

    fn one(b: &[u8]) -> Result<(), InvalidPacket> {
        validate_packet([b])
    }

    /// Every way of cutting `b` into three slices gives the same verdict.
    fn all_splits(b: &[u8]) -> Result<(), InvalidPacket> {
        let whole = one(b);
        for i in 0..=b.len() {
            for j in i..=b.len() {
                assert_eq!(
                    validate_packet([&b[..i], &b[i..j], &b[j..]]),
                    whole,
                    "split {i},{j}"
                );
            }
        }
        whole
    }

    fn sample_packet() -> Vec<u8> {
        let mut s = VecStream::new();
        put_varint(&mut s, 8, 123_456_789); // timestamp
        put_fixed64(&mut s, 1001, u64::MAX);
        put_fixed32(&mut s, 1002, 7);
        put_bytes(&mut s, 1, &[0x08, 0x01, 0x12, 0x00]); // ftrace_events
        put_varint(&mut s, 58, u64::MAX); // 10-byte varint
        put_bytes(&mut s, 900, b"");
        s.into_bytes()
    }

    #[test]
    fn accepts_well_formed_fields_across_any_split() {
        assert_eq!(all_splits(&sample_packet()), Ok(()));
        assert_eq!(one(&[]), Ok(()));
        assert_eq!(validate_packet(Vec::<&[u8]>::new()), Ok(()));
    }

    #[test]
    fn rejects_every_reserved_field_whatever_its_wire_type() {
        for id in RESERVED_FIELD_IDS {
            for wire in [0u64, 2] {
                let mut s = VecStream::new();
                put_varint(&mut s, 8, 1);
                if wire == 0 {
                    put_varint(&mut s, id as u32, 5);
                } else {
                    put_bytes(&mut s, id as u32, b"xy");
                }
                assert_eq!(
                    all_splits(s.as_bytes()),
                    Err(InvalidPacket::ReservedField(id))
                );
            }
        }
        // Neighbours of reserved ids are fine (42 = previous_packet_dropped
        // is written by writers too, 87 = first_packet_on_sequence).
        for id in [2u32, 4, 9, 11, 34, 42, 87, 97, 99, 132, 134] {
            let mut s = VecStream::new();
            put_varint(&mut s, id, 1);
            assert_eq!(one(s.as_bytes()), Ok(()), "field {id}");
        }
    }

    #[test]
    fn rejects_groups_and_undefined_wire_types() {
        for wire in [3u8, 4, 6, 7] {
            let tag = (1 << 3) | wire;
            assert_eq!(one(&[tag, 0]), Err(InvalidPacket::BadWireType(wire)));
        }
    }

    #[test]
    fn rejects_truncated_fields() {
        let p = sample_packet();
        for cut in 1..p.len() {
            // Cutting at a field boundary is still valid; elsewhere never.
            let r = all_splits(&p[..cut]);
            assert!(
                r == Ok(()) || r == Err(InvalidPacket::Truncated),
                "cut {cut}: {r:?}"
            );
        }
        assert_eq!(one(&[0x08]), Err(InvalidPacket::Truncated)); // tag, no value
        assert_eq!(one(&[0x08, 0x80]), Err(InvalidPacket::Truncated)); // open varint
        assert_eq!(one(&[0x0d, 1, 2, 3]), Err(InvalidPacket::Truncated)); // fixed32
        assert_eq!(
            one(&[0x09, 1, 2, 3, 4, 5, 6, 7]),
            Err(InvalidPacket::Truncated)
        );
        assert_eq!(one(&[0x0a, 3, 1, 2]), Err(InvalidPacket::Truncated)); // bytes
        assert_eq!(one(&[0x0a]), Err(InvalidPacket::Truncated)); // no length
    }

    #[test]
    fn varints_are_at_most_ten_bytes() {
        let mut ten = vec![0x08];
        ten.extend([0xff; 9]);
        ten.push(0x01);
        assert_eq!(one(&ten), Ok(()));
        let mut eleven = vec![0x08];
        eleven.extend([0xff; 10]);
        eleven.push(0x01);
        assert_eq!(one(&eleven), Err(InvalidPacket::VarintTooLong));
        // Also in a tag.
        assert_eq!(one(&[0xff; 11]), Err(InvalidPacket::VarintTooLong));
    }

    #[test]
    fn length_limit_and_field_id_range() {
        // 2^28 - 1 is allowed (then truncated here), 2^28 is not.
        assert_eq!(
            one(&[0x0a, 0xff, 0xff, 0xff, 0x7f]),
            Err(InvalidPacket::Truncated)
        );
        assert_eq!(
            one(&[0x0a, 0x80, 0x80, 0x80, 0x80, 0x01]),
            Err(InvalidPacket::FieldTooLong(1 << 28))
        );
        // Field number 2^29 (would alias small ids in decoders that truncate).
        let mut s = VecStream::new();
        put_varint(&mut s, 0, 0); // field 0: tolerated like upstream
        assert_eq!(one(s.as_bytes()), Ok(()));
        let tag: u64 = (1u64 << 32 | 3) << 3;
        let mut b = [0u8; 10];
        let n = crate::protozero::encode_varint(tag, &mut b);
        let mut p = b[..n].to_vec();
        p.push(1);
        assert!(matches!(one(&p), Err(InvalidPacket::FieldIdOutOfRange(_))));
    }
}
