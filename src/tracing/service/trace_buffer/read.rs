//! Reading packets back, sequence by sequence.
//!
//! A sequence is the chunks of one `(producer_id, writer_id)`. Sequences
//! are visited in key order; within one, chunks are read in chunk-id order
//! starting at the oldest (the first id after the newest written, which
//! handles ids wrapping past `u32::MAX`) and only while ids are contiguous,
//! chunks are complete and none awaits patches. Whatever is not readable yet
//! stays for a later pass. Reads are destructive: each fragment is handed
//! out at most once.

use std::ops::Bound::{Excluded, Included, Unbounded};

use super::index::{ChunkKey, SequenceKey};
use super::record::{RecordHeader, RECORD_HEADER_SIZE};
use super::{ClientIdentity, TraceBuffer};
use crate::tracing::core::smb_abi::{
    FLAG_CHUNK_NEEDS_PATCHING, FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK,
    FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK, PACKET_SIZE_DROP_PACKET,
};

/// Fragment size fields use at most 4 varint bytes.
const MAX_FRAGMENT_HEADER_SIZE: usize = 4;

/// A packet as read from the buffer: one slice per fragment, borrowed from
/// the buffer (so the buffer cannot change while the packet is alive).
/// Never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracePacket<'a> {
    slices: Vec<&'a [u8]>,
}

impl<'a> TracePacket<'a> {
    pub fn slices(&self) -> &[&'a [u8]] {
        &self.slices
    }

    /// Total size in bytes over all slices.
    pub fn size(&self) -> usize {
        self.slices.iter().map(|s| s.len()).sum()
    }

    /// The packet's bytes, concatenated.
    pub fn to_vec(&self) -> Vec<u8> {
        self.slices.concat()
    }
}

/// Where a packet came from, plus continuity information.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketInfo {
    pub producer_id: u16,
    pub writer_id: u16,
    /// Identity of the committing client (uid, pid, machine).
    pub client: ClientIdentity,
    /// Packets before this one on the same sequence may be missing: set on
    /// the first packet read from a sequence in a pass unless continuity
    /// is known, after skipped or corrupt packets, and after overwrites.
    pub previous_packet_dropped: bool,
}

/// Position of the reader. Keys, not references, so writes between reads
/// can never leave it dangling (a vanished chunk just ends its sequence).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ReadIter {
    /// Sequence being read; `None` before the first one of a pass.
    seq: Option<SequenceKey>,
    /// Current chunk id; `None` once this sequence is done for the pass.
    cur: Option<u32>,
    /// Newest chunk id written when the sequence was entered: iteration
    /// stops there after going round.
    wrapping_id: u32,
}

enum Fragment {
    Read,
    Empty,
    Invalid,
}

enum ReadAhead {
    Succeeded,
    /// Missing or unpatched continuation: retry the sequence next pass.
    FailedMoveToNextSequence,
    /// The packet was corrupt and dropped; go on in this sequence.
    FailedStayOnSameSequence,
}

enum Action {
    Skip,
    ReadOne,
    TryReadAhead,
}

/// Byte ranges `(start, len)` in `data` making up the packet being built.
pub(super) type Ranges = Vec<(usize, usize)>;

fn seq_key(seq: SequenceKey, chunk_id: u32) -> ChunkKey {
    ChunkKey::new(seq.0, seq.1, chunk_id)
}

/// Parses a varint of at most `b.len()` bytes: `(value, bytes used)`.
fn parse_size_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate() {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

impl TraceBuffer {
    /// Starts a new read pass from the first sequence. Call it before each
    /// batch of [`read_next_trace_packet`](Self::read_next_trace_packet)
    /// calls; a fresh buffer is already at the start of a pass.
    pub fn begin_read(&mut self) {
        self.read_iter = ReadIter::default();
    }

    /// Returns the next complete packet of this pass, or `None` when
    /// nothing more is readable now (call [`begin_read`](Self::begin_read)
    /// later to retry what was incomplete).
    pub fn read_next_trace_packet(&mut self) -> Option<(TracePacket<'_>, PacketInfo)> {
        // The range list is reused across calls to save an allocation.
        let mut ranges = std::mem::take(&mut self.read_scratch);
        ranges.clear();
        let info = self.read_next_packet_ranges(&mut ranges);
        self.read_scratch = ranges;
        let info = info?;
        let data = &self.data;
        let slices = self
            .read_scratch
            .iter()
            .map(|&(start, len)| &data[start..start + len])
            .collect();
        Some((TracePacket { slices }, info))
    }

    fn read_next_packet_ranges(&mut self, out: &mut Ranges) -> Option<PacketInfo> {
        // Until a chunk tells us otherwise, assume we lost track of what
        // preceded the packet we are about to return.
        let mut previous_packet_dropped = true;
        let mut advance = false;
        loop {
            if advance {
                let mut it = self.read_iter;
                self.advance(&mut it);
                self.read_iter = it;
            }
            advance = true;

            let key = match self.current_key(&self.read_iter) {
                Some(key) => key,
                None => {
                    let next = self.next_sequence(self.read_iter.seq)?;
                    self.read_iter = self.iter_for_sequence(next);
                    previous_packet_dropped = true;
                    match self.current_key(&self.read_iter) {
                        Some(key) => key,
                        None => continue,
                    }
                }
            };

            let meta = &self.index[&key];
            if meta.flags & FLAG_CHUNK_NEEDS_PATCHING != 0 {
                self.read_iter.cur = None;
                continue;
            }
            if !meta.has_unread_fragments() {
                // Typically the long run of chunks consumed in earlier
                // passes: walk it with one index iterator, not per-chunk
                // lookups.
                let mut it = self.read_iter;
                self.skip_consumed_chunks(&mut it, &mut previous_packet_dropped);
                self.read_iter = it;
                advance = false;
                continue;
            }
            // If a packet was already consumed from this chunk, whether it
            // made it out decides; otherwise the state from the previous
            // chunk of this sequence stands.
            if let Some(skipped) = meta.last_read_packet_skipped {
                previous_packet_dropped = skipped;
            }

            let mut key = key;
            loop {
                let meta = &self.index[&key];
                if !meta.has_unread_fragments() {
                    break;
                }
                let last_continues = meta.flags & FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK != 0;
                let action = if meta.num_fragments_read == 0 {
                    if meta.flags & FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK != 0 {
                        // We never saw this packet's start: it was lost.
                        Action::Skip
                    } else if meta.num_fragments == 1 && last_continues {
                        Action::TryReadAhead
                    } else {
                        Action::ReadOne
                    }
                } else if meta.num_fragments_read < meta.num_fragments - 1 || !last_continues {
                    Action::ReadOne
                } else {
                    Action::TryReadAhead
                };
                let client = meta.client;

                match action {
                    Action::Skip => {
                        self.read_fragment(key, None);
                        self.mark_skipped(key);
                        previous_packet_dropped = true;
                    }
                    Action::ReadOne => match self.read_fragment(key, Some(out)) {
                        Fragment::Read => {
                            return Some(packet_info(key, client, previous_packet_dropped));
                        }
                        Fragment::Empty => {}
                        Fragment::Invalid => {
                            // The whole chunk was given up; move on.
                            self.mark_skipped(key);
                            previous_packet_dropped = true;
                            break;
                        }
                    },
                    Action::TryReadAhead => match self.read_ahead(out) {
                        ReadAhead::Succeeded => {
                            self.stats.readaheads_succeeded += 1;
                            return Some(packet_info(key, client, previous_packet_dropped));
                        }
                        ReadAhead::FailedMoveToNextSequence => {
                            self.stats.readaheads_failed += 1;
                            self.read_iter.cur = None;
                            break;
                        }
                        ReadAhead::FailedStayOnSameSequence => {
                            // The reader now sits on the packet's last chunk.
                            let Some(k) = self.current_key(&self.read_iter) else {
                                break;
                            };
                            key = k;
                            self.mark_skipped(key);
                            previous_packet_dropped = true;
                        }
                    },
                }
            }
        }
    }

    fn mark_skipped(&mut self, key: ChunkKey) {
        if let Some(meta) = self.index.get_mut(&key) {
            meta.last_read_packet_skipped = Some(true);
        }
    }

    /// Collects a packet whose first fragment ends the current chunk by
    /// walking the following chunks of the sequence.
    fn read_ahead(&mut self, out: &mut Ranges) -> ReadAhead {
        let Some(start) = self.read_iter.cur else {
            return ReadAhead::FailedMoveToNextSequence;
        };
        let mut expected_id = start.wrapping_add(1);
        let mut it = self.read_iter;
        self.advance(&mut it);
        while let Some(key) = self.current_key(&it) {
            let meta = &self.index[&key];
            if meta.num_fragments == 0 {
                self.advance(&mut it);
                expected_id = expected_id.wrapping_add(1);
                continue;
            }
            if key.chunk_id != expected_id
                || meta.flags & FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK == 0
                || meta.flags & FLAG_CHUNK_NEEDS_PATCHING != 0
            {
                return ReadAhead::FailedMoveToNextSequence;
            }
            if meta.num_fragments == 1 && meta.flags & FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK != 0
            {
                // A middle piece of a packet spanning several chunks.
                self.advance(&mut it);
                expected_id = expected_id.wrapping_add(1);
                continue;
            }

            // Every piece is here: consume one fragment from each chunk.
            let mut corrupt = false;
            while let Some(k) = self.current_key(&self.read_iter) {
                if self.index[&k].num_fragments > 0 {
                    corrupt |= matches!(self.read_fragment(k, Some(out)), Fragment::Invalid);
                }
                if self.read_iter.cur == it.cur {
                    break;
                }
                let mut r = self.read_iter;
                self.advance(&mut r);
                self.read_iter = r;
            }
            if corrupt {
                out.clear();
                return ReadAhead::FailedStayOnSameSequence;
            }
            return ReadAhead::Succeeded;
        }
        ReadAhead::FailedMoveToNextSequence
    }

    /// Consumes the next fragment of a chunk, appending its bytes to `out`
    /// (if given). A malformed fragment gives up the rest of the chunk.
    fn read_fragment(&mut self, key: ChunkKey, out: Option<&mut Ranges>) -> Fragment {
        let Some(meta) = self.index.get_mut(&key) else {
            return Fragment::Invalid;
        };
        if !meta.has_unread_fragments() {
            // Only reachable when chunks arrive out of order and a piece
            // was already skipped: the packet cannot be completed.
            return Fragment::Invalid;
        }
        let off = meta.record_off as usize;
        let rec = RecordHeader::decode(&self.data[off..off + RECORD_HEADER_SIZE]);
        let rec_end = off + rec.size as usize;
        let payload = off + RECORD_HEADER_SIZE;
        let begin = payload + meta.cur_fragment_offset as usize;

        let give_up = |meta: &mut super::index::ChunkMeta, stats: &mut super::BufferStats| {
            meta.cur_fragment_offset = 0;
            meta.num_fragments_read = meta.num_fragments;
            if meta.complete {
                stats.chunks_read += 1;
                stats.bytes_read += u64::from(rec.size);
            }
        };

        if begin >= rec_end {
            // More fragments claimed than the chunk holds.
            self.stats.abi_violations += 1;
            give_up(meta, &mut self.stats);
            return Fragment::Invalid;
        }
        let header_end = (begin + MAX_FRAGMENT_HEADER_SIZE).min(rec_end);
        let parsed = parse_size_varint(&self.data[begin..header_end]);
        let (size, data_start) = match parsed {
            Some((size, n)) if (begin + n) as u64 + size <= rec_end as u64 => {
                (size as usize, begin + n)
            }
            _ => {
                // A writer that gives up on a fragmented packet marks it with
                // a special size: a loss, not a protocol violation.
                if matches!(parsed, Some((s, _)) if s == u64::from(PACKET_SIZE_DROP_PACKET)) {
                    self.stats.trace_writer_packet_loss += 1;
                } else {
                    self.stats.abi_violations += 1;
                }
                give_up(meta, &mut self.stats);
                return Fragment::Invalid;
            }
        };

        let next = data_start + size;
        meta.cur_fragment_offset = (next - payload) as u16;
        meta.num_fragments_read += 1;
        if !meta.has_unread_fragments() && meta.complete {
            self.stats.chunks_read += 1;
            self.stats.bytes_read += u64::from(rec.size);
            let used = u64::from(meta.cur_fragment_offset);
            self.writer_stats
                .entry(key.sequence())
                .or_default()
                .add(used);
        }
        if size == 0 {
            return Fragment::Empty;
        }
        meta.last_read_packet_skipped = Some(false);
        if let Some(out) = out {
            out.push((data_start, size));
        }
        Fragment::Read
    }

    /// From a fully consumed chunk, moves on to the next chunk that has
    /// unread fragments or awaits patches, exactly as repeated
    /// [`advance`](Self::advance) calls would, carrying the continuity
    /// state of each chunk passed.
    fn skip_consumed_chunks(&self, it: &mut ReadIter, previous_packet_dropped: &mut bool) {
        let (Some(seq), Some(start)) = (it.seq, it.cur) else {
            return;
        };
        // Ids ascend to u32::MAX and then wrap to 0.
        let tail = self
            .index
            .range(seq_key(seq, start)..=seq_key(seq, u32::MAX));
        let head = self.index.range(seq_key(seq, 0)..seq_key(seq, start));
        let mut expected = start;
        for (key, meta) in tail.chain(head) {
            if key.chunk_id != expected {
                it.cur = None; // Gap.
                return;
            }
            if meta.flags & FLAG_CHUNK_NEEDS_PATCHING != 0 || meta.has_unread_fragments() {
                it.cur = Some(expected);
                return;
            }
            if let Some(skipped) = meta.last_read_packet_skipped {
                *previous_packet_dropped = skipped;
            }
            if expected == it.wrapping_id || !meta.complete {
                it.cur = None;
                return;
            }
            expected = expected.wrapping_add(1);
        }
        it.cur = None;
    }

    /// The reader position for a sequence: its oldest chunk.
    fn iter_for_sequence(&self, seq: SequenceKey) -> ReadIter {
        let wrapping_id = self.last_chunk_id_written.get(&seq).copied().unwrap_or(0);
        let after_newest = if wrapping_id == u32::MAX {
            None
        } else {
            self.index
                .range(seq_key(seq, wrapping_id + 1)..=seq_key(seq, u32::MAX))
                .next()
                .map(|(k, _)| k.chunk_id)
        };
        let cur = after_newest.or_else(|| self.first_chunk_of(seq));
        ReadIter {
            seq: Some(seq),
            cur,
            wrapping_id,
        }
    }

    fn first_chunk_of(&self, seq: SequenceKey) -> Option<u32> {
        self.index
            .range(seq_key(seq, 0)..=seq_key(seq, u32::MAX))
            .next()
            .map(|(k, _)| k.chunk_id)
    }

    fn next_sequence(&self, after: Option<SequenceKey>) -> Option<SequenceKey> {
        let mut range = match after {
            None => self.index.range(..),
            Some(seq) => self
                .index
                .range((Excluded(seq_key(seq, u32::MAX)), Unbounded)),
        };
        range.next().map(|(k, _)| k.sequence())
    }

    fn current_key(&self, it: &ReadIter) -> Option<ChunkKey> {
        let key = seq_key(it.seq?, it.cur?);
        self.index.contains_key(&key).then_some(key)
    }

    /// Moves to chunk id + 1 of the same sequence, or ends the sequence
    /// for this pass (gap, incomplete chunk, or back at the newest chunk).
    fn advance(&self, it: &mut ReadIter) {
        let (Some(seq), Some(cur)) = (it.seq, it.cur) else {
            it.cur = None;
            return;
        };
        let key = seq_key(seq, cur);
        let complete = self.index.get(&key).is_some_and(|m| m.complete);
        if cur == it.wrapping_id || !complete {
            it.cur = None;
            return;
        }
        let next = self
            .index
            .range((Excluded(key), Included(seq_key(seq, u32::MAX))))
            .next()
            .map(|(k, _)| k.chunk_id)
            .or_else(|| self.first_chunk_of(seq));
        it.cur = next.filter(|&id| id == cur.wrapping_add(1));
    }
}

fn packet_info(key: ChunkKey, client: ClientIdentity, previous_packet_dropped: bool) -> PacketInfo {
    PacketInfo {
        producer_id: key.producer_id,
        writer_id: key.writer_id,
        client,
        previous_packet_dropped,
    }
}
