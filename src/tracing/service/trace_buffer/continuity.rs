//! What a sequence's read state was when its newest consumed chunk left
//! the index (overwritten, or written over after a rewind).
//!
//! Continuity (`previous_packet_dropped`) is carried by the index entries
//! of consumed chunks. Once the last of them is overwritten, the next
//! chunk of the sequence would look like the start of a new sequence and
//! its first packet would be flagged as following a loss. Keeping the
//! evicted tail per sequence avoids that, and it lets a drained buffer
//! restart at offset 0 without losing track.

use super::index::{ChunkKey, ChunkMeta, SequenceKey};
use super::write::HALF_CHUNK_ID_SPACE;
use super::TraceBuffer;

/// The newest fully consumed chunk of a sequence that left the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct EvictedTail {
    pub chunk_id: u32,
    /// Whether the last packet consumed up to that chunk was dropped.
    pub dropped: bool,
}

impl TraceBuffer {
    /// Notes a chunk leaving the index. Chunks with unread data are a
    /// loss and are not remembered (what follows them was dropped).
    pub(super) fn remember_evicted(&mut self, key: ChunkKey, meta: &ChunkMeta) {
        if meta.has_unread_fragments() || !meta.complete {
            return;
        }
        let seq = key.sequence();
        let prev = self.evicted.get(&seq).copied();
        if let Some(p) = prev {
            if key.chunk_id.wrapping_sub(p.chunk_id) >= HALF_CHUNK_ID_SPACE {
                return; // Older than what is already remembered.
            }
        }
        let dropped = match meta.last_read_packet_skipped {
            Some(s) => s,
            // Only empty packets here: the state before it stands.
            None => match prev {
                Some(p) if p.chunk_id.wrapping_add(1) == key.chunk_id => p.dropped,
                _ => true,
            },
        };
        self.evicted.insert(
            seq,
            EvictedTail {
                chunk_id: key.chunk_id,
                dropped,
            },
        );
    }

    /// `previous_packet_dropped` for the first packet read from chunk
    /// `entry` of `seq` when no consumed chunk precedes it in the index.
    pub(super) fn continuity_before(&self, seq: SequenceKey, entry: Option<u32>) -> bool {
        match (self.evicted.get(&seq), entry) {
            (Some(t), Some(id)) if t.chunk_id.wrapping_add(1) == id => t.dropped,
            _ => true,
        }
    }

    /// Whether `key` itself or a later chunk of its sequence was already
    /// consumed and evicted: a copy arriving now (a retransmit, or a
    /// commit after a scrape) would be read a second time, or would hold
    /// the reader at a gap in front of the sequence's newer chunks.
    pub(super) fn consumed_and_evicted(&self, key: ChunkKey) -> bool {
        self.evicted
            .get(&key.sequence())
            .is_some_and(|t| t.chunk_id.wrapping_sub(key.chunk_id) < HALF_CHUNK_ID_SPACE)
    }

    /// A writer id being registered starts a new sequence: whatever was
    /// remembered of an earlier writer with that id no longer applies.
    pub fn forget_evicted(&mut self, producer_id: u16, writer_id: u16) {
        self.evicted.remove(&(producer_id, writer_id));
    }

    /// Whether a chunk after `key` of its sequence was already consumed
    /// and evicted (rewriting `key` would return packets out of order).
    pub(super) fn later_chunk_evicted(&self, key: ChunkKey) -> bool {
        self.evicted.get(&key.sequence()).is_some_and(|t| {
            let ahead = t.chunk_id.wrapping_sub(key.chunk_id);
            ahead != 0 && ahead < HALF_CHUNK_ID_SPACE
        })
    }
}
