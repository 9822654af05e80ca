//! Reading packets back, sequence by sequence.
//!
//! A sequence is the chunks of one `(producer_id, writer_id)`. Sequences
//! are visited in key order; within one, chunks are read in chunk-id order
//! starting at the oldest (the first id after the newest written, which
//! handles ids wrapping past `u32::MAX`) and only while ids are contiguous,
//! chunks are complete and none awaits patches. Whatever is not readable yet
//! stays for a later pass. Reads are destructive: each fragment is handed
//! out at most once.

use std::ops::Bound::{Excluded, Unbounded};

use std::collections::BTreeMap;

use super::index::{ChunkKey, ChunkMeta, SequenceKey, Slot};
use super::record::{self, RECORD_HEADER_SIZE};
use super::{BufferStats, ChunkPayloadHistogram, ClientIdentity, TraceBuffer};
use crate::tracing::core::smb_abi::{
    FLAG_CHUNK_NEEDS_PATCHING, FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK,
    FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK, PACKET_SIZE_DROP_PACKET,
};

/// Fragment size fields use at most 4 varint bytes.
const MAX_FRAGMENT_HEADER_SIZE: usize = 4;

/// A packet as read from the buffer: one slice per fragment, borrowed from
/// the buffer (so the buffer cannot change while the packet is alive).
/// Holds the buffer and the reader's reused range list, so reading a packet
/// allocates nothing. Never empty.
#[derive(Debug, Clone, Copy)]
pub struct TracePacket<'a> {
    data: &'a [u8],
    /// `(start, len)` of each fragment in `data`.
    ranges: &'a [(usize, usize)],
}

impl<'a> TracePacket<'a> {
    /// A packet made of the given ranges of `data` (ranges must be in bounds).
    pub fn from_ranges(data: &'a [u8], ranges: &'a [(usize, usize)]) -> Self {
        debug_assert!(ranges.iter().all(|&(s, l)| s + l <= data.len()));
        TracePacket { data, ranges }
    }

    /// The fragments, in order.
    pub fn slices(&self) -> impl ExactSizeIterator<Item = &'a [u8]> + 'a {
        let data = self.data;
        self.ranges.iter().map(move |&(s, l)| &data[s..s + l])
    }

    /// Total size in bytes over all slices.
    pub fn size(&self) -> usize {
        self.ranges.iter().map(|r| r.1).sum()
    }

    /// The packet's bytes, concatenated.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.size());
        self.slices().for_each(|s| v.extend_from_slice(s));
        v
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
    /// The chunk the sequence was entered at (its oldest).
    entry: Option<u32>,
    /// Index slot of `cur` and the index generation it was found at.
    slot: Option<(Slot, u64)>,
}

impl ReadIter {
    /// Moves to chunk `(id, slot)` found at index `generation`, or ends
    /// the sequence for this pass.
    fn move_to(&mut self, found: Option<(u32, Slot)>, generation: u64) {
        self.cur = found.map(|f| f.0);
        self.slot = found.map(|f| (f.1, generation));
    }
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

/// What walking a sequence's run of consumed chunks found, so that later
/// passes need not walk it again. Only reads happened since (no write or
/// patch: `generation`), and reads never touch chunks already consumed, so
/// the run is unchanged; the walk resumes where it stopped.
#[derive(Debug, Clone, Copy)]
struct SkipHint {
    /// The chunk the walk started at (the sequence's oldest).
    start: u32,
    /// Where the walk stopped: a chunk with unread fragments (or awaiting
    /// patches), or `None` if the sequence ended there.
    resume: Option<u32>,
    /// The continuity state carried over the run, if any chunk had one.
    skipped: Option<bool>,
}

/// Skip hints by sequence, all from one index generation.
#[derive(Debug, Default)]
pub(super) struct SkipHints {
    generation: u64,
    by_sequence: BTreeMap<SequenceKey, SkipHint>,
}

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
        self.bytes_written_at_read = self.stats.bytes_written;
        if self.skip_hints.generation != self.index_generation {
            self.skip_hints.by_sequence.clear();
            self.skip_hints.generation = self.index_generation;
        }
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
        let Some(info) = info else {
            self.rewind_if_drained();
            return None;
        };
        Some((
            TracePacket::from_ranges(&self.data, &self.read_scratch),
            info,
        ))
    }

    fn read_next_packet_ranges(&mut self, out: &mut Ranges) -> Option<PacketInfo> {
        if let Some(info) = self.read_next_in_current_chunk(out) {
            return Some(info);
        }
        self.read_next_packet_general(out)
    }

    /// The common case without an index search: the reader sits in a
    /// chunk it already handed a packet out of, and the next fragment is a
    /// whole packet. Does exactly what the general path does in that
    /// state; anything else (including an empty or corrupt fragment, once
    /// consumed) is left to the general path.
    fn read_next_in_current_chunk(&mut self, out: &mut Ranges) -> Option<PacketInfo> {
        let (key, slot) = self.current(&self.read_iter)?;
        let meta = self.index.at_mut(slot);
        let last_continues = meta.flags & FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK != 0;
        if meta.flags & FLAG_CHUNK_NEEDS_PATCHING != 0
            || meta.num_fragments_read == 0
            || !meta.has_unread_fragments()
            || (meta.num_fragments_read == meta.num_fragments - 1 && last_continues)
        {
            return None;
        }
        let previous_packet_dropped = meta.last_read_packet_skipped.unwrap_or(true);
        let client = meta.client;
        let frag = read_fragment_of(
            meta,
            key,
            &self.data,
            &mut self.stats,
            &mut self.writer_stats,
            Some(out),
        );
        match frag {
            Fragment::Read => Some(packet_info(key, client, previous_packet_dropped)),
            Fragment::Empty => None,
            Fragment::Invalid => {
                meta.last_read_packet_skipped = Some(true);
                None
            }
        }
    }

    fn read_next_packet_general(&mut self, out: &mut Ranges) -> Option<PacketInfo> {
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

            let (key, slot) = match self.current(&self.read_iter) {
                Some(found) => found,
                None => {
                    let next = self.next_sequence(self.read_iter.seq)?;
                    self.read_iter = self.iter_for_sequence(next);
                    previous_packet_dropped = self.continuity_before(next, self.read_iter.cur);
                    match self.current(&self.read_iter) {
                        Some(found) => found,
                        None => continue,
                    }
                }
            };
            // Found by a search at worst: later packets of this chunk
            // need none.
            self.read_iter.slot = Some((slot, self.index.generation()));

            let meta = self.index.at(slot);
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

            let (mut key, mut slot) = (key, slot);
            loop {
                let meta = self.index.at(slot);
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
                        self.read_fragment(key, slot, None);
                        self.mark_skipped(slot);
                        previous_packet_dropped = true;
                    }
                    Action::ReadOne => match self.read_fragment(key, slot, Some(out)) {
                        Fragment::Read => {
                            return Some(packet_info(key, client, previous_packet_dropped));
                        }
                        Fragment::Empty => {}
                        Fragment::Invalid => {
                            // The whole chunk was given up; move on.
                            self.mark_skipped(slot);
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
                            let Some(found) = self.current(&self.read_iter) else {
                                break;
                            };
                            (key, slot) = found;
                            self.mark_skipped(slot);
                            previous_packet_dropped = true;
                        }
                    },
                }
            }
        }
    }

    fn mark_skipped(&mut self, slot: Slot) {
        self.index.at_mut(slot).last_read_packet_skipped = Some(true);
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
        while let Some((key, slot)) = self.current(&it) {
            let meta = self.index.at(slot);
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
            while let Some((k, s)) = self.current(&self.read_iter) {
                if self.index.at(s).num_fragments > 0 {
                    corrupt |= matches!(self.read_fragment(k, s, Some(out)), Fragment::Invalid);
                }
                if self.read_iter.cur == it.cur {
                    break;
                }
                if self.read_iter.cur.map(|c| c.wrapping_add(1)) == it.cur {
                    // The walk above took this step already (and reads
                    // change no index entry's presence or completeness).
                    self.read_iter = it;
                    continue;
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
    fn read_fragment(&mut self, key: ChunkKey, slot: Slot, out: Option<&mut Ranges>) -> Fragment {
        read_fragment_of(
            self.index.at_mut(slot),
            key,
            &self.data,
            &mut self.stats,
            &mut self.writer_stats,
            out,
        )
    }

    /// From a fully consumed chunk, moves on to the next chunk that has
    /// unread fragments or awaits patches, exactly as repeated
    /// [`advance`](Self::advance) calls would, carrying the continuity
    /// state of each chunk passed. A run walked before (same start, no
    /// write since) is jumped over.
    fn skip_consumed_chunks(&mut self, it: &mut ReadIter, previous_packet_dropped: &mut bool) {
        let (Some(seq), Some(start)) = (it.seq, it.cur) else {
            return;
        };
        // Only runs from the sequence's entry point are worth remembering:
        // every pass walks those again.
        let hints_valid =
            self.skip_hints.generation == self.index_generation && it.entry == Some(start);
        let mut from = start;
        let mut skipped = None;
        if let Some(h) = self.skip_hints.by_sequence.get(&seq) {
            if hints_valid && h.start == start {
                skipped = h.skipped;
                match h.resume {
                    Some(r) => from = r,
                    None => {
                        if let Some(s) = skipped {
                            *previous_packet_dropped = s;
                        }
                        it.cur = None;
                        return;
                    }
                }
            }
        }
        let resume = self.walk_consumed(seq, from, it.wrapping_id, &mut skipped);
        if let Some(s) = skipped {
            *previous_packet_dropped = s;
        }
        it.move_to(resume, self.index.generation());
        if hints_valid {
            let hint = SkipHint {
                start,
                resume: resume.map(|r| r.0),
                skipped,
            };
            self.skip_hints.by_sequence.insert(seq, hint);
        }
    }

    /// Walks consumed chunks of `seq` from `from`; returns the first chunk
    /// with unread fragments or awaiting patches (`None`: the sequence ends
    /// first). `skipped` gets the last continuity state seen.
    fn walk_consumed(
        &self,
        seq: SequenceKey,
        from: u32,
        wrapping_id: u32,
        skipped: &mut Option<bool>,
    ) -> Option<(u32, Slot)> {
        // Ids ascend to u32::MAX and then wrap to 0.
        let tail = self
            .index
            .range_slots(seq_key(seq, from)..=seq_key(seq, u32::MAX));
        let head = self.index.range_slots(seq_key(seq, 0)..seq_key(seq, from));
        let mut expected = from;
        for (key, slot, meta) in tail.chain(head) {
            if key.chunk_id != expected {
                return None; // Gap.
            }
            if meta.flags & FLAG_CHUNK_NEEDS_PATCHING != 0 || meta.has_unread_fragments() {
                return Some((expected, slot));
            }
            if meta.last_read_packet_skipped.is_some() {
                *skipped = meta.last_read_packet_skipped;
            }
            if expected == wrapping_id || !meta.complete {
                return None;
            }
            expected = expected.wrapping_add(1);
        }
        None
    }

    /// The reader position for a sequence: its oldest chunk.
    fn iter_for_sequence(&self, seq: SequenceKey) -> ReadIter {
        let wrapping_id = self.last_chunk_id_written.get(&seq).copied().unwrap_or(0);
        let after_newest = if wrapping_id == u32::MAX {
            None
        } else {
            self.index
                .range_slots(seq_key(seq, wrapping_id + 1)..=seq_key(seq, u32::MAX))
                .next()
                .map(|(k, s, _)| (k.chunk_id, s))
        };
        let cur = after_newest.or_else(|| {
            self.index
                .range_slots(seq_key(seq, 0)..=seq_key(seq, u32::MAX))
                .next()
                .map(|(k, s, _)| (k.chunk_id, s))
        });
        let mut it = ReadIter {
            seq: Some(seq),
            wrapping_id,
            entry: cur.map(|c| c.0),
            ..ReadIter::default()
        };
        it.move_to(cur, self.index.generation());
        it
    }

    fn next_sequence(&self, after: Option<SequenceKey>) -> Option<SequenceKey> {
        let from = match after {
            None => Unbounded,
            Some(seq) => Excluded(seq_key(seq, u32::MAX)),
        };
        let mut range = self.index.range((from, Unbounded));
        range.next().map(|(k, _)| k.sequence())
    }

    /// The key and slot of the reader's chunk, if it is in the index
    /// (from the slot the reader remembers while that is still valid).
    /// Inlined: it runs once a packet, and out of line the call costs
    /// more than its body.
    #[inline(always)]
    fn current(&self, it: &ReadIter) -> Option<(ChunkKey, Slot)> {
        let key = seq_key(it.seq?, it.cur?);
        match it.slot {
            Some((slot, generation)) if generation == self.index.generation() => Some((key, slot)),
            _ => Some((key, self.index.slot(&key)?)),
        }
    }

    /// Moves to chunk id + 1 of the same sequence, or ends the sequence
    /// for this pass (gap, incomplete chunk, or back at the newest chunk).
    fn advance(&self, it: &mut ReadIter) {
        let Some((key, slot)) = self.current(it) else {
            it.cur = None;
            return;
        };
        if key.chunk_id == it.wrapping_id || !self.index.at(slot).complete {
            it.cur = None;
            return;
        }
        // Only the very next id continues the sequence.
        let next = ChunkKey {
            chunk_id: key.chunk_id.wrapping_add(1),
            ..key
        };
        let found = self.index.slot(&next).map(|s| (next.chunk_id, s));
        it.move_to(found, self.index.generation());
    }
}

/// [`TraceBuffer::read_fragment`] on an already looked-up chunk (the
/// buffer's fields passed apart so the caller can keep `meta` borrowed).
fn read_fragment_of(
    meta: &mut ChunkMeta,
    key: ChunkKey,
    data: &[u8],
    stats: &mut BufferStats,
    writer_stats: &mut BTreeMap<SequenceKey, ChunkPayloadHistogram>,
    out: Option<&mut Ranges>,
) -> Fragment {
    if !meta.has_unread_fragments() {
        // Only reachable when chunks arrive out of order and a piece
        // was already skipped: the packet cannot be completed.
        return Fragment::Invalid;
    }
    let off = meta.record_off as usize;
    let rec_size = record::size_at(data, off);
    let rec_end = off + rec_size as usize;
    let payload = off + RECORD_HEADER_SIZE;
    let begin = payload + meta.cur_fragment_offset as usize;

    let give_up = |meta: &mut ChunkMeta, stats: &mut BufferStats| {
        meta.cur_fragment_offset = 0;
        meta.num_fragments_read = meta.num_fragments;
        if meta.complete {
            stats.chunks_read += 1;
            stats.bytes_read += u64::from(rec_size);
        }
    };

    if begin >= rec_end {
        // More fragments claimed than the chunk holds.
        stats.abi_violations += 1;
        give_up(meta, stats);
        return Fragment::Invalid;
    }
    let header_end = (begin + MAX_FRAGMENT_HEADER_SIZE).min(rec_end);
    let parsed = parse_size_varint(&data[begin..header_end]);
    let (size, data_start) = match parsed {
        Some((size, n)) if (begin + n) as u64 + size <= rec_end as u64 => {
            (size as usize, begin + n)
        }
        _ => {
            // A writer that gives up on a fragmented packet marks it with
            // a special size: a loss, not a protocol violation.
            if matches!(parsed, Some((s, _)) if s == u64::from(PACKET_SIZE_DROP_PACKET)) {
                stats.trace_writer_packet_loss += 1;
            } else {
                stats.abi_violations += 1;
            }
            give_up(meta, stats);
            return Fragment::Invalid;
        }
    };

    let next = data_start + size;
    meta.cur_fragment_offset = (next - payload) as u16;
    meta.num_fragments_read += 1;
    if !meta.has_unread_fragments() && meta.complete {
        stats.chunks_read += 1;
        stats.bytes_read += u64::from(rec_size);
        let used = u64::from(meta.cur_fragment_offset);
        writer_stats.entry(key.sequence()).or_default().add(used);
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

fn packet_info(key: ChunkKey, client: ClientIdentity, previous_packet_dropped: bool) -> PacketInfo {
    PacketInfo {
        producer_id: key.producer_id,
        writer_id: key.writer_id,
        client,
        previous_packet_dropped,
    }
}
