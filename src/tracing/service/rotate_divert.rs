//! At a rotation cut, the packets a sequence wrote after it cleared its
//! incremental state belong to the new file.
//!
//! The service asks data sources to clear their incremental state before
//! the flush that precedes a cut. A sequence that honours it marks its next
//! packet SEQ_INCREMENTAL_STATE_CLEARED and emits its interned data afresh.
//! In the pass that drains the old file, that packet and every later one of
//! its sequence are held back and written at the start of the new file
//! (after its header). So each file holds, for each such sequence, a
//! complete incremental state: packets before the clear refer to the old
//! file's interned data, packets after it to the new file's.

use crate::protozero::decode::{read_varint, FieldIter};

/// `TracePacket.sequence_flags`, `.incremental_state_cleared` (legacy).
const SEQUENCE_FLAGS: u32 = 13;
const INCREMENTAL_STATE_CLEARED: u32 = 41;
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;

/// `TracePacket.trusted_packet_sequence_id`, in traced's trailer.
const TRUSTED_SEQUENCE_ID: u32 = super::trusted_trailer::TRUSTED_PACKET_SEQUENCE_ID_FIELD;

/// Packets held back from the old file, already framed as `Trace.packet`,
/// per sequence.
#[derive(Debug, Default, Clone)]
pub struct Divert {
    held: Vec<(u32, Vec<u8>)>,
}

/// Where a packet of the old file's last pass goes.
pub enum Route {
    /// Into the old file.
    Keep,
    /// Held for the new file, at `held[index]`.
    Hold(usize),
}

impl Divert {
    /// Routes a packet (`body` slices, then traced's `trailer`): a
    /// sequence is held from its latest clearing packet in the pass on.
    /// A later clearing packet of the same sequence releases what was held
    /// before it into `old` (it is complete there).
    pub fn route(&mut self, body: &[&[u8]], trailer: &[u8], old: &mut Vec<u8>) -> Route {
        let flat: Vec<u8> = body.concat();
        // Through a trace filter the trailer is inside the body (producers
        // cannot write the trusted sequence id: the validator drops such
        // packets).
        let Some(seq) = sequence_id(trailer).or_else(|| sequence_id(&flat)) else {
            return Route::Keep;
        };
        let at = self.held.iter().position(|h| h.0 == seq);
        match (at, clears(&flat)) {
            (Some(i), true) => {
                old.append(&mut self.held[i].1);
                Route::Hold(i)
            }
            (Some(i), false) => Route::Hold(i),
            (None, true) => {
                self.held.push((seq, Vec::new()));
                Route::Hold(self.held.len() - 1)
            }
            (None, false) => Route::Keep,
        }
    }

    pub fn held_mut(&mut self, index: usize) -> &mut Vec<u8> {
        &mut self.held[index].1
    }

    /// Everything held, for the new file.
    pub fn into_held(self) -> Vec<u8> {
        self.held.into_iter().flat_map(|h| h.1).collect()
    }
}

fn sequence_id(trailer: &[u8]) -> Option<u32> {
    FieldIter::new(trailer)
        .filter(|f| f.number == TRUSTED_SEQUENCE_ID && f.wire_type == 0)
        .find_map(|f| read_varint(f.value))
        .and_then(|(v, _)| u32::try_from(v).ok())
}

fn clears(packet: &[u8]) -> bool {
    FieldIter::new(packet).any(|f| {
        let v = || read_varint(f.value).map_or(0, |(v, _)| v);
        match (f.number, f.wire_type) {
            (SEQUENCE_FLAGS, 0) => v() & SEQ_INCREMENTAL_STATE_CLEARED != 0,
            (INCREMENTAL_STATE_CLEARED, 0) => v() != 0,
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protozero::{put_varint, VecStream};

    fn trailer(seq: u64) -> Vec<u8> {
        let mut s = VecStream::new();
        put_varint(&mut s, TRUSTED_SEQUENCE_ID, seq);
        s.into_bytes()
    }

    fn packet(flags: u64) -> Vec<u8> {
        let mut s = VecStream::new();
        put_varint(&mut s, 8, 7);
        put_varint(&mut s, SEQUENCE_FLAGS, flags);
        s.into_bytes()
    }

    #[test]
    fn holds_a_sequence_from_its_latest_clearing_packet_on() {
        let mut d = Divert::default();
        let mut old = Vec::new();
        let (needs, cleared) = (packet(2), packet(1));
        let mut route =
            |d: &mut Divert, body: &[&[u8]], seq: u64| match d.route(body, &trailer(seq), &mut old)
            {
                Route::Keep => None,
                Route::Hold(i) => {
                    d.held_mut(i).push(seq as u8);
                    Some(i)
                }
            };
        assert_eq!(route(&mut d, &[&needs], 3), None);
        // A clearing packet in two slices starts holding its sequence.
        assert_eq!(route(&mut d, &[&cleared[..2], &cleared[2..]], 3), Some(0));
        assert_eq!(route(&mut d, &[&needs], 3), Some(0));
        assert_eq!(route(&mut d, &[&needs], 4), None);
        assert_eq!(route(&mut d, &[&cleared], 5), Some(1));
        // A later clear of sequence 3 releases what it held before.
        assert_eq!(route(&mut d, &[&cleared], 3), Some(0));
        assert_eq!(old, vec![3, 3]);
        assert_eq!(d.into_held(), vec![3, 5]);
    }

    /// A trace filter hands the packet and its trailer as one body.
    #[test]
    fn a_filtered_packet_is_routed_by_the_sequence_in_its_body() {
        let mut d = Divert::default();
        let mut old = Vec::new();
        let mut cleared = packet(1);
        cleared.extend(trailer(3));
        assert!(matches!(
            d.route(&[&cleared], &[], &mut old),
            Route::Hold(0)
        ));
        let mut other = packet(2);
        other.extend(trailer(4));
        assert!(matches!(d.route(&[&other], &[], &mut old), Route::Keep));
    }

    #[test]
    fn a_service_packet_stays() {
        let mut d = Divert::default();
        assert!(matches!(
            d.route(&[&packet(1)], &[], &mut Vec::new()),
            Route::Keep
        ));
    }
}
