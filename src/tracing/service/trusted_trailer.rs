//! The trailer the service appends to every producer packet it forwards.
//!
//! It carries what only the service knows: who wrote the packet and on
//! which sequence. It is appended (not prepended) after the validator made
//! sure the producer's bytes end on a field boundary and contain none of
//! these fields, so by protobuf's "last one wins" rule these values are
//! the ones readers see.

use crate::protozero::encode_varint;
use crate::tracing::service::trace_buffer::ClientIdentity;

/// TracePacket field numbers written here.
pub const TRUSTED_UID_FIELD: u32 = 3;
pub const TRUSTED_PACKET_SEQUENCE_ID_FIELD: u32 = 10;
pub const PREVIOUS_PACKET_DROPPED_FIELD: u32 = 42;
pub const TRUSTED_PID_FIELD: u32 = 79;
pub const MACHINE_ID_FIELD: u32 = 98;

/// Room for the worst case: uid and pid as negative int32 take 10-byte
/// varints (39 bytes in all). Typical trailers are 10 to 20 bytes.
pub const MAX_TRAILER_SIZE: usize = 48;

/// An encoded trailer, kept inline (no allocation).
#[derive(Clone, Copy)]
pub struct TrustedTrailer {
    buf: [u8; MAX_TRAILER_SIZE],
    len: usize,
}

impl std::fmt::Debug for TrustedTrailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("TrustedTrailer")
            .field(&self.as_bytes())
            .finish()
    }
}

impl TrustedTrailer {
    /// Encodes `trusted_uid`, `trusted_packet_sequence_id`, `trusted_pid`
    /// (if known), `machine_id` (if not the host, 0) and
    /// `previous_packet_dropped` (if set), in that order.
    pub fn new(client: &ClientIdentity, sequence_id: u32, previous_packet_dropped: bool) -> Self {
        let mut t = TrustedTrailer {
            buf: [0; MAX_TRAILER_SIZE],
            len: 0,
        };
        // int32 fields: negative values are sign-extended to 64 bits.
        t.put_varint(TRUSTED_UID_FIELD, client.uid as i32 as i64 as u64);
        t.put_varint(TRUSTED_PACKET_SEQUENCE_ID_FIELD, u64::from(sequence_id));
        if let Some(pid) = client.pid {
            t.put_varint(TRUSTED_PID_FIELD, pid as i64 as u64);
        }
        if client.machine_id != 0 {
            t.put_varint(MACHINE_ID_FIELD, u64::from(client.machine_id));
        }
        if previous_packet_dropped {
            t.put_varint(PREVIOUS_PACKET_DROPPED_FIELD, 1);
        }
        t
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    fn put_varint(&mut self, field: u32, value: u64) {
        let mut tmp = [0u8; 10];
        let n = encode_varint(u64::from(field) << 3, &mut tmp);
        self.buf[self.len..self.len + n].copy_from_slice(&tmp[..n]);
        self.len += n;
        let n = encode_varint(value, &mut tmp);
        self.buf[self.len..self.len + n].copy_from_slice(&tmp[..n]);
        self.len += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracing::service::packet_validator::{validate_packet, InvalidPacket};
    use quick_protobuf::BytesReader;

    fn fields(b: &[u8]) -> Vec<(u32, u64)> {
        let mut r = BytesReader::from_bytes(b);
        let mut out = Vec::new();
        while !r.is_eof() {
            let tag = r.next_tag(b).unwrap();
            assert_eq!(tag & 7, 0);
            out.push((tag >> 3, r.read_varint64(b).unwrap()));
        }
        out
    }

    #[test]
    fn minimal_trailer() {
        let c = ClientIdentity {
            uid: 1000,
            pid: None,
            machine_id: 0,
        };
        let t = TrustedTrailer::new(&c, 2, false);
        assert_eq!(fields(t.as_bytes()), vec![(3, 1000), (10, 2)]);
        assert_eq!(t.as_bytes(), &[0x18, 0xe8, 0x07, 0x50, 0x02]);
    }

    #[test]
    fn full_trailer_in_field_order() {
        let c = ClientIdentity {
            uid: 0,
            pid: Some(4242),
            machine_id: 7,
        };
        let t = TrustedTrailer::new(&c, 300, true);
        assert_eq!(
            fields(t.as_bytes()),
            vec![(3, 0), (10, 300), (79, 4242), (98, 7), (42, 1)]
        );
        assert!(t.as_bytes().len() <= 32);
    }

    #[test]
    fn worst_case_fits_and_is_sign_extended() {
        let c = ClientIdentity {
            uid: u32::MAX,
            pid: Some(-1),
            machine_id: u32::MAX,
        };
        let t = TrustedTrailer::new(&c, u32::MAX, true);
        let f = fields(t.as_bytes());
        assert_eq!(f[0], (3, u64::MAX)); // int32 -1
        assert_eq!(f[2], (79, u64::MAX));
        assert!(t.as_bytes().len() <= MAX_TRAILER_SIZE);
    }

    #[test]
    fn validator_rejects_a_forged_trailer() {
        let c = ClientIdentity {
            uid: 0,
            pid: Some(1),
            machine_id: 0,
        };
        let t = TrustedTrailer::new(&c, 1, false);
        assert_eq!(
            validate_packet([t.as_bytes()]),
            Err(InvalidPacket::ReservedField(3))
        );
    }
}
