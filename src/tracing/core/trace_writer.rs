//! TraceWriter: one packet sequence writing TracePackets into SMB chunks.
//!
//! A writer owns at most one chunk at a time and writes packets into it
//! without locks. [`TraceWriter::new_packet`] returns a [`TracePacket`],
//! a protozero [`Stream`] whose bytes go straight into chunk memory:
//!
//! * each packet fragment starts with a 4-byte size, back-filled when the
//!   fragment ends (rewound to 1 byte for short packets);
//! * a packet that outgrows its chunk continues in the next one (flags
//!   "last continues" / "first continues"), the writer's chunk ids being
//!   consecutive;
//! * a nested length ([`LenSlot`]) reserved in a chunk that has since been
//!   returned becomes a pending patch (see `patch_list`), sent through the
//!   arbiter once the nested message ends;
//! * if no chunk is available (drop policy, or a stall that gave up), the
//!   packet in progress is marked with the drop size `0x0FFFFFFF` and the
//!   writer discards data until a later packet gets a chunk; that packet
//!   carries `previous_packet_dropped`.
//!
//! Packets end when the [`TracePacket`] is dropped (or `finish`ed).

use std::sync::Arc;

use super::arbiter::{Arbiter, BufferExhaustedPolicy, BufferId, WriterId};
use super::patch_list::PatchList;
use super::smb_abi::{
    Chunk, ChunkHeader, SmbAbi, FLAG_CHUNK_NEEDS_PATCHING,
    FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK, FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK,
    MAX_PACKETS_PER_CHUNK, PACKET_HEADER_SIZE, PACKET_SIZE_DROP_PACKET,
};
use crate::protozero::{self, redundant_varint, LenSlot, Stream, LEN_FIELD_SIZE};

/// A new packet needs its header plus this much room in the current chunk.
const MIN_PACKET_ROOM: usize = PACKET_HEADER_SIZE + 8;
/// While dropping, retry getting a chunk after this many discarded bytes.
const DROP_RETRY_BYTES: usize = 1024;
/// Largest fragment written with a 1-byte size.
const MAX_ONE_BYTE_SIZE: usize = 127;
/// TracePacket.previous_packet_dropped; value DATA_LOSS_PRESENT|SMB_FULL.
const FIELD_PREVIOUS_PACKET_DROPPED: u32 = 42;
const DATA_LOSS_PRESENT_SMB_FULL: u64 = 1 | 256;
/// TracePacket.first_packet_on_sequence.
const FIELD_FIRST_PACKET_ON_SEQUENCE: u32 = 87;

/// Where a reserved nested length lives.
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// At this absolute SMB offset, in the current chunk.
    InChunk(usize),
    /// In a chunk already returned: pending patch with this handle.
    Patch(u64),
    /// The packet is being dropped; nothing to fill.
    Dropped,
    /// Already filled (kept only until the slots above it are closed).
    Filled,
}

/// Per-writer counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TraceWriterStats {
    /// Packets fully written into the SMB.
    pub packets_written: u64,
    /// Packets discarded (started or aborted while no chunk was available).
    pub packets_dropped: u64,
    /// Times the writer entered the dropping state.
    pub drop_episodes: u64,
    /// Chunks filled and returned.
    pub chunks_returned: u64,
}

/// One sequence of packets. Not `Sync`; use one per thread.
pub struct TraceWriter {
    arbiter: Arc<Arbiter>,
    abi: SmbAbi,
    id: WriterId,
    target_buffer: BufferId,
    policy: BufferExhaustedPolicy,
    next_chunk_id: u32,

    cur: Option<Chunk>,
    /// Absolute SMB write position and end of the current chunk.
    wpos: usize,
    end: usize,
    /// The current chunk's packet count includes one packet not started yet
    /// (so a scraping service sees the last finished packet as complete).
    count_inflated: bool,
    reached_max_packets: bool,

    in_packet: bool,
    packet_dropped: bool,
    /// Absolute offset of the current fragment's 4-byte size, if any.
    fragment_header: Option<usize>,
    fragment_start: usize,
    packet_pos: u64,
    slots: Vec<Slot>,
    patches: PatchList,

    dropping: bool,
    garbage_left: usize,
    retry_after_packet: bool,
    first_packet: bool,
    emit_sequence_markers: bool,
    stats: TraceWriterStats,
}

impl std::fmt::Debug for TraceWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceWriter")
            .field("id", &self.id)
            .field("target_buffer", &self.target_buffer)
            .finish()
    }
}

impl TraceWriter {
    /// Use [`Arbiter::create_trace_writer`].
    pub(crate) fn new(
        arbiter: Arc<Arbiter>,
        id: WriterId,
        target_buffer: BufferId,
        policy: BufferExhaustedPolicy,
    ) -> Self {
        let abi = arbiter.abi().clone();
        TraceWriter {
            arbiter,
            abi,
            id,
            target_buffer,
            policy,
            next_chunk_id: 0,
            cur: None,
            wpos: 0,
            end: 0,
            count_inflated: false,
            reached_max_packets: false,
            in_packet: false,
            packet_dropped: false,
            fragment_header: None,
            fragment_start: 0,
            packet_pos: 0,
            slots: Vec::new(),
            patches: PatchList::default(),
            dropping: false,
            garbage_left: DROP_RETRY_BYTES,
            retry_after_packet: false,
            first_packet: true,
            emit_sequence_markers: true,
            stats: TraceWriterStats::default(),
        }
    }

    pub fn writer_id(&self) -> WriterId {
        self.id
    }

    pub fn target_buffer(&self) -> BufferId {
        self.target_buffer
    }

    pub fn stats(&self) -> TraceWriterStats {
        self.stats
    }

    /// By default the writer adds `first_packet_on_sequence` to the first
    /// packet and `previous_packet_dropped` after a loss, as Perfetto's
    /// writer does. Turn off for non-TracePacket payloads (tests).
    pub fn set_emit_sequence_markers(&mut self, on: bool) {
        self.emit_sequence_markers = on;
    }

    /// Starts a packet. It ends when the handle is dropped.
    pub fn new_packet(&mut self) -> TracePacket<'_> {
        self.begin_packet();
        TracePacket { w: self }
    }

    /// Starts a packet written through the writer's own [`Stream`]
    /// (ending the one in progress, if any); [`end_packet`](Self::end_packet)
    /// ends it. For a caller that streams one packet over many calls
    /// without holding a [`TracePacket`] (ftrace bundles).
    pub fn begin_packet(&mut self) {
        self.finish_packet();
        let was_dropping = self.dropping;
        let need_chunk = match self.cur {
            Some(_) => self.end - self.wpos < MIN_PACKET_ROOM || self.reached_max_packets,
            None => {
                !self.dropping || self.retry_after_packet || self.garbage_left < MIN_PACKET_ROOM
            }
        };
        if need_chunk {
            self.get_new_chunk(false);
        }
        if self.patches.front_ready() {
            self.arbiter
                .send_patches(self.id, self.target_buffer, &mut self.patches);
        }
        self.in_packet = true;
        self.packet_pos = 0;
        self.slots.clear();
        self.packet_dropped = self.cur.is_none();
        if let Some(c) = &self.cur {
            let header = self.wpos;
            self.abi.mem().fill(header, PACKET_HEADER_SIZE, 0);
            self.wpos += PACKET_HEADER_SIZE;
            self.fragment_header = Some(header);
            self.fragment_start = self.wpos;
            let count = if self.count_inflated {
                self.count_inflated = false;
                self.abi.chunk_header(c).packet_count
            } else {
                self.abi.increment_packet_count(c)
            };
            self.reached_max_packets = count >= MAX_PACKETS_PER_CHUNK;
        } else {
            self.fragment_header = None;
            self.discard(PACKET_HEADER_SIZE);
        }
        if self.emit_sequence_markers {
            if was_dropping && !self.packet_dropped {
                protozero::put_varint(
                    self,
                    FIELD_PREVIOUS_PACKET_DROPPED,
                    DATA_LOSS_PRESENT_SMB_FULL,
                );
            }
            if self.first_packet {
                protozero::put_varint(self, FIELD_FIRST_PACKET_ON_SEQUENCE, 1);
            }
        }
        self.first_packet = false;
    }

    /// Ends the packet of [`begin_packet`](Self::begin_packet).
    pub fn end_packet(&mut self) {
        self.finish_packet();
    }

    /// Convenience: one packet from already-encoded TracePacket bytes.
    pub fn write_packet(&mut self, bytes: &[u8]) {
        self.new_packet().write(bytes);
    }

    /// Returns the current chunk as Complete (between packets), committed
    /// as the arbiter batches commits: what was written reaches traced
    /// without waiting for a flush, and survives this process's death.
    pub fn commit_current_chunk(&mut self) {
        if self.cur.is_some() {
            self.return_chunk();
        }
    }

    /// Returns the current chunk as Complete and sends pending commits.
    pub fn flush(&mut self) {
        if self.cur.is_some() {
            self.return_chunk();
        }
        self.arbiter.flush_pending_commits();
    }

    fn discard(&mut self, n: usize) {
        if n >= self.garbage_left {
            self.retry_after_packet = true;
            self.garbage_left = DROP_RETRY_BYTES;
        } else {
            self.garbage_left -= n;
        }
    }

    fn return_chunk(&mut self) {
        let Some(c) = self.cur.take() else { return };
        if self.count_inflated {
            // Make the phantom packet a real, empty one (1-byte size 0).
            self.abi.mem().fill(self.wpos, 1, 0);
            self.wpos += 1;
            self.count_inflated = false;
        }
        self.stats.chunks_returned += 1;
        self.arbiter
            .return_completed_chunk(c, self.id, self.target_buffer, &mut self.patches);
    }

    /// Switches to a new chunk; `fragmenting` if a packet is in progress.
    fn get_new_chunk(&mut self, fragmenting: bool) {
        if fragmenting && self.dropping {
            self.retry_after_packet = true;
            return;
        }
        let header = ChunkHeader {
            chunk_id: self.next_chunk_id,
            writer_id: self.id,
            packet_count: u16::from(fragmenting),
            flags: if fragmenting {
                FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK
            } else {
                0
            },
        };
        let Some(new_chunk) = self.arbiter.get_new_chunk(&header, self.policy) else {
            self.enter_dropping(fragmenting);
            return;
        };
        if let (true, Some(old)) = (fragmenting, &self.cur) {
            let partial = (self.wpos - self.fragment_start) as u32;
            self.abi
                .set_chunk_flags(old, FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK);
            if let Some(h) = self.fragment_header {
                self.abi.mem().write(h, &redundant_varint(partial));
            }
            // Open nested lengths in the old chunk become patches.
            let payload = old.payload_offset();
            let old_id = self.abi.chunk_header(old).chunk_id;
            let mut any = false;
            for slot in self.slots.iter_mut() {
                if let Slot::InChunk(abs) = *slot {
                    *slot = Slot::Patch(self.patches.push(old_id, (abs - payload) as u16));
                    any = true;
                }
            }
            if any {
                self.abi.set_chunk_flags(old, FLAG_CHUNK_NEEDS_PATCHING);
            }
        }
        if self.cur.is_some() {
            self.return_chunk();
        }
        self.dropping = false;
        self.reached_max_packets = false;
        self.retry_after_packet = false;
        self.next_chunk_id = self.next_chunk_id.wrapping_add(1);
        self.wpos = new_chunk.payload_offset();
        self.end = new_chunk.end();
        self.cur = Some(new_chunk);
        self.count_inflated = false;
        self.fragment_header = None;
        if fragmenting {
            self.abi.mem().fill(self.wpos, PACKET_HEADER_SIZE, 0);
            self.fragment_header = Some(self.wpos);
            self.wpos += PACKET_HEADER_SIZE;
            self.fragment_start = self.wpos;
        }
    }

    fn enter_dropping(&mut self, fragmenting: bool) {
        if fragmenting {
            if let Some(h) = self.fragment_header.take() {
                self.abi
                    .mem()
                    .write(h, &redundant_varint(PACKET_SIZE_DROP_PACKET));
            }
            for slot in self.slots.iter_mut() {
                if let Slot::InChunk(_) = slot {
                    *slot = Slot::Dropped;
                }
            }
            self.packet_dropped = true;
        }
        if self.cur.is_some() {
            self.return_chunk();
        }
        if !self.dropping {
            self.stats.drop_episodes += 1;
        }
        self.dropping = true;
        self.reached_max_packets = false;
        self.retry_after_packet = false;
        self.garbage_left = DROP_RETRY_BYTES;
        self.fragment_header = None;
    }

    fn finish_packet(&mut self) {
        if !self.in_packet {
            return;
        }
        self.in_packet = false;
        if let Some(h) = self.fragment_header.take() {
            let size = self.wpos - self.fragment_start;
            if size <= MAX_ONE_BYTE_SIZE {
                let mem = self.abi.mem();
                mem.copy_within(self.fragment_start, h + 1, size);
                mem.fill(h, 1, size as u8);
                self.wpos -= PACKET_HEADER_SIZE - 1;
            } else {
                self.abi.mem().write(h, &redundant_varint(size as u32));
            }
        }
        self.slots.clear();
        if self.packet_dropped {
            self.stats.packets_dropped += 1;
        } else {
            self.stats.packets_written += 1;
        }
        if let Some(c) = &self.cur {
            if !self.count_inflated {
                if self.wpos >= self.end {
                    self.return_chunk();
                } else {
                    self.abi.increment_packet_count(c);
                    self.count_inflated = true;
                }
            }
        }
        if self.patches.front_ready() {
            self.arbiter
                .send_patches(self.id, self.target_buffer, &mut self.patches);
        }
    }

    // ---- Stream implementation (through TracePacket) ----

    fn stream_write(&mut self, bytes: &[u8]) {
        self.packet_pos += bytes.len() as u64;
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.cur.is_none() {
                self.discard(rest.len());
                return;
            }
            let n = rest.len().min(self.end - self.wpos);
            self.abi.mem().write(self.wpos, &rest[..n]);
            self.wpos += n;
            rest = &rest[n..];
            if !rest.is_empty() {
                self.get_new_chunk(true);
            }
        }
    }

    fn stream_reserve_len(&mut self) -> LenSlot {
        self.packet_pos += LEN_FIELD_SIZE as u64;
        if self.cur.is_some() && self.end - self.wpos < LEN_FIELD_SIZE {
            self.get_new_chunk(true);
        }
        let slot = if self.cur.is_some() {
            let abs = self.wpos;
            self.abi.mem().fill(abs, LEN_FIELD_SIZE, 0);
            self.wpos += LEN_FIELD_SIZE;
            Slot::InChunk(abs)
        } else {
            self.discard(LEN_FIELD_SIZE);
            Slot::Dropped
        };
        self.slots.push(slot);
        LenSlot((self.slots.len() - 1) as u32)
    }

    fn stream_fill_len(&mut self, slot: LenSlot, len: u32) {
        let idx = slot.0 as usize;
        let Some(s) = self.slots.get_mut(idx) else {
            return;
        };
        match *s {
            Slot::InChunk(abs) => {
                self.abi.mem().write(abs, &redundant_varint(len));
            }
            Slot::Patch(seq) => self.patches.fill(seq, redundant_varint(len)),
            Slot::Dropped | Slot::Filled => {}
        }
        *s = Slot::Filled;
        while matches!(self.slots.last(), Some(Slot::Filled)) {
            self.slots.pop();
        }
    }
}

impl Drop for TraceWriter {
    fn drop(&mut self) {
        if self.cur.is_some() || !self.patches.is_empty() {
            self.flush();
        }
        self.arbiter.release_writer_id(self.id);
    }
}

// Writers move to their thread; the arbiter is shared by all of them.
const _: () = {
    const fn send<T: Send>() {}
    const fn send_sync<T: Send + Sync>() {}
    send::<TraceWriter>();
    send_sync::<Arbiter>();
};

/// A packet being written; a protozero [`Stream`] into SMB chunks.
/// The packet is finished when this handle is dropped.
pub struct TracePacket<'a> {
    w: &'a mut TraceWriter,
}

impl TracePacket<'_> {
    /// Ends the packet (same as dropping the handle).
    pub fn finish(self) {}

    /// True if this packet is being discarded (SMB full).
    pub fn is_dropped(&self) -> bool {
        self.w.packet_dropped
    }
}

impl std::fmt::Debug for TracePacket<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracePacket")
            .field("writer", &self.w.id)
            .field("pos", &self.w.packet_pos)
            .finish()
    }
}

/// The packet of [`TraceWriter::begin_packet`]; only between it and
/// [`TraceWriter::end_packet`].
impl Stream for TraceWriter {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        debug_assert!(self.in_packet, "write outside begin_packet/end_packet");
        self.stream_write(bytes)
    }
    #[inline]
    fn reserve_len(&mut self) -> LenSlot {
        debug_assert!(
            self.in_packet,
            "reserve_len outside begin_packet/end_packet"
        );
        self.stream_reserve_len()
    }
    #[inline]
    fn fill_len(&mut self, slot: LenSlot, len: u32) {
        self.stream_fill_len(slot, len)
    }
    #[inline]
    fn position(&self) -> u64 {
        self.packet_pos
    }
}

impl Stream for TracePacket<'_> {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.w.stream_write(bytes)
    }
    #[inline]
    fn reserve_len(&mut self) -> LenSlot {
        self.w.stream_reserve_len()
    }
    #[inline]
    fn fill_len(&mut self, slot: LenSlot, len: u32) {
        self.w.stream_fill_len(slot, len)
    }
    #[inline]
    fn position(&self) -> u64 {
        self.w.packet_pos
    }
}

impl Drop for TracePacket<'_> {
    fn drop(&mut self) {
        self.w.finish_packet();
    }
}
