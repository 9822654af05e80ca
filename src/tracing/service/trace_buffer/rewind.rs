//! Early wrap of a buffer that is read as it fills.
//!
//! With `write_into_file` or streaming reads, a read pass leaves behind at
//! most a few records per sequence: chunks whose last packet waits for its
//! continuation, chunks that may still grow or await patches. Moving those
//! to the front and writing on from there keeps the buffer in a few warm
//! pages: it never faults in (about 3 us per 4 KiB page) nor pins memory
//! it does not need, however long the trace runs.
//!
//! Consumed chunks tell the reader where a sequence resumes, so each
//! sequence still writing keeps its newest consumed chunk (moved along):
//! a chunk committed out of order then still finds the reader waiting
//! in front of the gap. All older consumed chunks leave the index, their
//! read state kept by `continuity`; their bytes stay where they are until
//! overwritten, no longer reachable.

use super::index::{ChunkKey, SequenceKey};
use super::record::{RecordHeader, RECORD_HEADER_SIZE};
use super::TraceBuffer;

/// Most records one rewind moves; more means reading is not keeping up
/// or many sequences are active, and the buffer just fills as usual.
const MAX_MOVED_RECORDS: usize = 16;

/// The records to move may take at most this fraction of the written
/// span, so the copy stays small next to the memory the rewind saves.
const MAX_MOVED_SHARE: usize = 4;

/// What a rewind does: records to move (key, offset, size), their total
/// size, and consumed chunks to drop from the index.
struct Plan {
    moves: Vec<(ChunkKey, usize, usize)>,
    total: usize,
    evict: Vec<ChunkKey>,
}

impl TraceBuffer {
    /// Called when a read pass found nothing more to read: moves the
    /// records still needed to offset 0 and writes on right after them.
    /// Offset 0 is a record boundary and chunks are found through the
    /// index, so this is an early wrap that loses nothing unread.
    pub(super) fn rewind_if_drained(&mut self) {
        if self.wptr == 0 || self.read_only {
            return;
        }
        let Some(plan) = self.plan_rewind() else {
            return;
        };
        for key in plan.evict {
            if let Some(meta) = self.index.remove(&key) {
                self.remember_evicted(key, &meta);
            }
        }
        self.wptr = 0;
        self.index_generation += 1;
        // Only stale records lie in front now; this just finds how far the
        // last of them reaches past the moved ones.
        let overhang = self.delete_next_chunks_for(plan.total).unwrap_or(0);
        for (key, off, size) in plan.moves {
            self.data.copy_within(off..off + size, self.wptr);
            // The old copy becomes padding, for overwrites to skip.
            self.data[off..off + RECORD_HEADER_SIZE]
                .copy_from_slice(&RecordHeader::padding(size).encode());
            if let Some(meta) = self.index.get_mut(&key) {
                meta.record_off = self.wptr as u32;
                meta.moved = true;
            }
            self.wptr += size;
        }
        if overhang > 0 {
            self.add_padding_record(overhang);
        }
    }

    /// `None` when a rewind would not pay off or is not safe.
    fn plan_rewind(&self) -> Option<Plan> {
        let mut plan = Plan {
            moves: Vec::new(),
            total: 0,
            evict: Vec::new(),
        };
        let mut entries = self.index.iter().peekable();
        while let Some((first, _)) = entries.peek() {
            let seq = first.sequence();
            let mut needed = Vec::new();
            let mut consumed = Vec::new();
            while let Some((key, meta)) = entries.next_if(|(k, _)| k.sequence() == seq) {
                if meta.has_unread_fragments() || !meta.complete {
                    needed.push(*key);
                } else {
                    consumed.push((*key, meta.moved));
                }
            }
            if let Some(newest) = self.newest(seq, &consumed) {
                for &(key, moved) in &consumed {
                    // Guard a sequence still being written; one idle since
                    // the last rewind lets go of its last consumed chunk.
                    if key == newest && (!needed.is_empty() || !moved) {
                        needed.push(key);
                    } else {
                        plan.evict.push(key);
                    }
                }
            }
            for key in needed {
                if plan.moves.len() == MAX_MOVED_RECORDS {
                    return None;
                }
                let off = self.index[&key].record_off as usize;
                plan.moves
                    .push((key, off, self.record_at(off).size as usize));
            }
        }
        plan.total = plan.moves.iter().map(|m| m.2).sum();
        let total = plan.total;
        // The front they move to must not overlap any of them.
        if total * MAX_MOVED_SHARE > self.wptr || plan.moves.iter().any(|m| m.1 < total) {
            return None;
        }
        // Record offsets are unique: unstable is the same order.
        plan.moves.sort_unstable_by_key(|m| m.1);
        Some(plan)
    }

    /// The newest of `consumed` (chunk ids wrap; the newest written is
    /// the reference).
    fn newest(&self, seq: SequenceKey, consumed: &[(ChunkKey, bool)]) -> Option<ChunkKey> {
        let last = self.last_chunk_id_written.get(&seq).copied().unwrap_or(0);
        let oldest_possible = last.wrapping_add(1);
        consumed
            .iter()
            .map(|c| c.0)
            .max_by_key(|k| k.chunk_id.wrapping_sub(oldest_possible))
    }
}

#[cfg(test)]
impl TraceBuffer {
    /// Where the next record goes.
    pub(super) fn write_offset(&self) -> usize {
        self.wptr
    }
}
