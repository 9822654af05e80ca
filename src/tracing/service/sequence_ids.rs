//! Per-session packet sequence ids (`trusted_packet_sequence_id`).
//!
//! Each `(machine_id, producer_id, writer_id)` gets its own id the first
//! time one of its packets is read. Id 1 belongs to the service's own
//! packets, so producers' ids start at 2.

use std::collections::BTreeMap;

/// `trusted_packet_sequence_id` of packets the service writes itself.
pub const SERVICE_SEQUENCE_ID: u32 = 1;

/// Hands out sequence ids for one tracing session.
#[derive(Debug, Clone)]
pub struct SequenceIdAllocator {
    ids: BTreeMap<(u32, u16, u16), u32>,
    last: u32,
}

impl Default for SequenceIdAllocator {
    fn default() -> Self {
        SequenceIdAllocator {
            ids: BTreeMap::new(),
            last: SERVICE_SEQUENCE_ID,
        }
    }
}

impl SequenceIdAllocator {
    pub fn new() -> Self {
        Self::default()
    }

    /// The id of this writer's sequence, assigning the next free one on
    /// first sight. Producer ids are 16-bit and writer ids 15-bit, so the
    /// 32-bit space cannot run out.
    pub fn get_or_assign(&mut self, machine_id: u32, producer_id: u16, writer_id: u16) -> u32 {
        let next = self.last + 1;
        let id = *self
            .ids
            .entry((machine_id, producer_id, writer_id))
            .or_insert(next);
        if id == next {
            self.last = next;
        }
        id
    }

    /// The id already assigned, if any.
    pub fn get(&self, machine_id: u32, producer_id: u16, writer_id: u16) -> Option<u32> {
        self.ids.get(&(machine_id, producer_id, writer_id)).copied()
    }

    /// All assignments as `((machine_id, producer_id, writer_id), id)`,
    /// e.g. for `trace_provenance`.
    pub fn iter(&self) -> impl Iterator<Item = ((u32, u16, u16), u32)> + '_ {
        self.ids.iter().map(|(k, v)| (*k, *v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_start_at_two_and_are_stable() {
        let mut a = SequenceIdAllocator::new();
        assert_eq!(a.get(0, 1, 1), None);
        assert_eq!(a.get_or_assign(0, 1, 1), 2);
        assert_eq!(a.get_or_assign(0, 1, 2), 3);
        assert_eq!(a.get_or_assign(0, 2, 1), 4);
        assert_eq!(a.get_or_assign(0, 1, 1), 2);
        // Same producer/writer on another machine is another sequence.
        assert_eq!(a.get_or_assign(5, 1, 1), 5);
        assert_eq!(a.get(0, 1, 2), Some(3));
        assert_eq!(a.iter().count(), 4);
        // A fresh session starts over.
        assert_eq!(SequenceIdAllocator::new().get_or_assign(0, 2, 1), 2);
    }
}
