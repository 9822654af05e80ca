//! Writing into the buffer: chunk copies, wrap-around, overwrite and
//! discard accounting, and out-of-band patches.

use super::index::{ChunkKey, ChunkMeta};
use super::payload::ChunkPayload;
use super::record::{align_up, RecordHeader, RECORD_FLAGS_MASK, RECORD_HEADER_SIZE};
use super::{ClientIdentity, OverwritePolicy, TraceBuffer};
use crate::tracing::core::smb_abi::{
    FLAG_CHUNK_NEEDS_PATCHING, FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK, PATCH_SIZE,
};

/// One 4-byte patch; `offset_untrusted` counts from the first payload byte
/// (right after the 8-byte SMB chunk header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patch {
    pub offset_untrusted: u32,
    pub data: [u8; PATCH_SIZE],
}

/// Chunk ids are "newer" when ahead by less than half the id space.
pub(super) const HALF_CHUNK_ID_SPACE: u32 = u32::MAX / 2;

impl TraceBuffer {
    /// Copies one committed (or scraped) chunk into the buffer.
    ///
    /// * `producer_id_trusted` and `client` come from the service's own
    ///   connection state; everything else was read from the producer's
    ///   shared memory and is untrusted.
    /// * `chunk_flags_untrusted` is `packets >> 10` of the chunk header;
    ///   `num_fragments_untrusted` its packet count.
    /// * `chunk_complete` is false for chunks scraped while still being
    ///   written: their last fragment is then ignored.
    /// * `payload_untrusted` is the chunk body after the 8-byte chunk header
    ///   (normally the whole rest of the chunk). It is copied exactly once
    ///   and never read again, so a producer scribbling on it concurrently
    ///   can only corrupt its own data.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_chunk_untrusted(
        &mut self,
        producer_id_trusted: u16,
        client: ClientIdentity,
        writer_id_untrusted: u16,
        chunk_id_untrusted: u32,
        num_fragments_untrusted: u16,
        chunk_flags_untrusted: u8,
        chunk_complete: bool,
        payload_untrusted: &[u8],
    ) {
        self.copy_chunk_from(
            producer_id_trusted,
            client,
            writer_id_untrusted,
            chunk_id_untrusted,
            num_fragments_untrusted,
            chunk_flags_untrusted,
            chunk_complete,
            &payload_untrusted,
        );
    }

    /// [`copy_chunk_untrusted`](Self::copy_chunk_untrusted) from any
    /// [`ChunkPayload`], such as a chunk still in the producer's shared
    /// memory (copied once, straight into its record).
    #[allow(clippy::too_many_arguments)]
    pub fn copy_chunk_from(
        &mut self,
        producer_id_trusted: u16,
        client: ClientIdentity,
        writer_id_untrusted: u16,
        chunk_id_untrusted: u32,
        num_fragments_untrusted: u16,
        chunk_flags_untrusted: u8,
        chunk_complete: bool,
        payload_untrusted: &dyn ChunkPayload,
    ) {
        if self.read_only {
            return;
        }
        self.index_generation += 1;
        let record_size = align_up(payload_untrusted.len() + RECORD_HEADER_SIZE);
        if record_size > self.max_record_size {
            self.stats.abi_violations += 1;
            return;
        }
        self.has_data = true;

        let mut num_fragments = num_fragments_untrusted;
        let mut flags = chunk_flags_untrusted;
        // In an incomplete chunk the last fragment may still be in progress:
        // hide it, and with it the flags that only concern the last fragment.
        if !chunk_complete && num_fragments > 0 {
            num_fragments -= 1;
            flags &= !(FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK | FLAG_CHUNK_NEEDS_PATCHING);
        }
        let header = RecordHeader {
            chunk_id: chunk_id_untrusted,
            producer_id: producer_id_trusted,
            writer_id: writer_id_untrusted,
            num_fragments,
            size: record_size as u16,
            flags: flags & RECORD_FLAGS_MASK,
            is_padding: false,
        };
        let key = ChunkKey::new(producer_id_trusted, writer_id_untrusted, chunk_id_untrusted);

        if self.index.contains_key(&key) {
            self.recommit(key, header, flags, chunk_complete, payload_untrusted);
            return;
        }

        if self.consumed_and_evicted(key) {
            self.stats.chunks_committed_out_of_order += 1;
            return;
        }

        if self.discard_writes {
            self.discard_write();
            return;
        }

        // Not enough room before the end: clear the tail with a padding
        // record and continue from offset 0.
        let size_to_end = self.data.len() - self.wptr;
        if record_size > size_to_end {
            if self.delete_next_chunks_for(size_to_end).is_none() {
                self.discard_write();
                return;
            }
            self.add_padding_record(size_to_end);
            self.wptr = 0;
            self.stats.write_wrap_count += 1;
        }

        let Some(padding) = self.delete_next_chunks_for(record_size) else {
            self.discard_write();
            return;
        };

        self.stats.chunks_written += 1;
        self.stats.bytes_written += record_size as u64;
        let meta = ChunkMeta::new(
            self.wptr as u32,
            num_fragments,
            chunk_complete,
            flags,
            client,
        );
        self.index.insert(key, meta);
        self.write_record(self.wptr, &header, payload_untrusted);
        self.wptr += record_size;
        if self.wptr >= self.data.len() {
            self.wptr = 0;
            self.stats.write_wrap_count += 1;
        }

        // Commits may arrive out of order; only move forward, treating ids
        // less than half the id space ahead as newer (handles wrapping).
        // The first chunk seen of a sequence simply becomes its newest
        // (upstream compares against an implicit 0 and may count a
        // spurious out-of-order commit for writers starting at ids >= 2^31).
        let last = self
            .last_chunk_id_written
            .entry(key.sequence())
            .or_insert(chunk_id_untrusted);
        if chunk_id_untrusted.wrapping_sub(*last) < HALF_CHUNK_ID_SPACE {
            *last = chunk_id_untrusted;
        } else {
            self.stats.chunks_committed_out_of_order += 1;
        }

        if padding > 0 {
            self.add_padding_record(padding);
        }
    }

    /// Handles a chunk already in the index (scraped, then committed).
    fn recommit(
        &mut self,
        key: ChunkKey,
        header: RecordHeader,
        flags: u8,
        complete: bool,
        payload: &dyn ChunkPayload,
    ) {
        let meta = &self.index[&key];
        let off = meta.record_off as usize;
        let prev = self.record_at(off);
        // The chunk's size is fixed by the page layout; fragments only get
        // added and flags only get set while a chunk is being written.
        if prev.size != header.size
            || prev.num_fragments > header.num_fragments
            || (prev.flags & header.flags) != prev.flags
        {
            self.stats.abi_violations += 1;
            return;
        }
        if prev.num_fragments == header.num_fragments {
            return; // Nothing new.
        }
        // Rewriting chunk N after readers moved on to N+1 would return
        // packets out of order.
        let next = ChunkKey {
            chunk_id: key.chunk_id.wrapping_add(1),
            ..key
        };
        if self
            .index
            .get(&next)
            .is_some_and(|m| m.num_fragments_read > 0)
            || self.later_chunk_evicted(key)
        {
            self.stats.abi_violations += 1;
            return;
        }
        if meta.num_fragments_read > prev.num_fragments {
            return; // Read state inconsistent with the record; keep it.
        }
        let meta = self.index.get_mut(&key).expect("checked above");
        meta.num_fragments = header.num_fragments;
        meta.flags = flags;
        meta.complete = complete;
        self.write_record(off, &header, payload);
        self.stats.chunks_rewritten += 1;
    }

    fn discard_write(&mut self) {
        debug_assert_eq!(self.policy, OverwritePolicy::Discard);
        self.discard_writes = true;
        self.stats.chunks_discarded += 1;
    }

    /// Removes every record overlapping `[wptr, wptr + bytes)` from the
    /// index. Returns how far the last removed record extends past that
    /// range (to be covered by padding), or `None` if DISCARD forbids
    /// overwriting unread data (then nothing is changed).
    pub(super) fn delete_next_chunks_for(&mut self, bytes: usize) -> Option<usize> {
        if self.policy == OverwritePolicy::Discard && self.any_unread_in(bytes) {
            return None;
        }
        let end = self.wptr + bytes;
        let mut off = self.wptr;
        while off < end {
            let rec = self.record_at(off);
            if !rec.is_valid() {
                // Never-written memory: everything after it is zero too.
                break;
            }
            if rec.is_padding {
                self.stats.padding_bytes_cleared += u64::from(rec.size);
            } else if let Some(key) = self.live_record_at(off, &rec) {
                let meta = self.index.remove(&key).expect("live record");
                self.remember_evicted(key, &meta);
                if meta.has_unread_fragments() {
                    self.stats.chunks_overwritten += 1;
                    self.stats.bytes_overwritten += u64::from(rec.size);
                }
            }
            off += rec.size as usize;
        }
        // Records never straddle the end of the buffer, so `off` stays in
        // bounds; zero when the scan hit never-written memory.
        Some(off.saturating_sub(end))
    }

    /// Whether a record overlapping `[wptr, wptr + bytes)` has unread data.
    fn any_unread_in(&self, bytes: usize) -> bool {
        let end = self.wptr + bytes;
        let mut off = self.wptr;
        while off < end {
            let rec = self.record_at(off);
            if !rec.is_valid() {
                return false;
            }
            if let Some(key) = self.live_record_at(off, &rec) {
                if self.index[&key].has_unread_fragments() {
                    return true;
                }
            }
            off += rec.size as usize;
        }
        false
    }

    /// The index key of the chunk record `rec` read at `off`, if the index
    /// still holds that chunk there (a rewind leaves stale copies behind).
    fn live_record_at(&self, off: usize, rec: &RecordHeader) -> Option<ChunkKey> {
        if rec.is_padding {
            return None;
        }
        let key = ChunkKey::new(rec.producer_id, rec.writer_id, rec.chunk_id);
        let meta = self.index.get(&key)?;
        (meta.record_off as usize == off).then_some(key)
    }

    pub(super) fn record_at(&self, off: usize) -> RecordHeader {
        RecordHeader::decode(&self.data[off..off + RECORD_HEADER_SIZE])
    }

    /// Writes a padding record at `wptr` without moving it.
    pub(super) fn add_padding_record(&mut self, size: usize) {
        let header = RecordHeader::padding(size);
        self.data[self.wptr..self.wptr + RECORD_HEADER_SIZE].copy_from_slice(&header.encode());
        self.used_size = self.used_size.max(self.wptr + RECORD_HEADER_SIZE);
        self.stats.padding_bytes_written += size as u64;
    }

    /// Writes header + payload at `off`, zero-filling the alignment tail.
    fn write_record(&mut self, off: usize, header: &RecordHeader, payload: &dyn ChunkPayload) {
        let size = header.size as usize;
        let rec = &mut self.data[off..off + size];
        rec[..RECORD_HEADER_SIZE].copy_from_slice(&header.encode());
        let body = &mut rec[RECORD_HEADER_SIZE..];
        payload.copy_to(&mut body[..payload.len()]);
        body[payload.len()..].fill(0);
        self.used_size = self.used_size.max(off + size);
    }

    /// Applies 4-byte patches to a chunk still in the buffer. Offsets are
    /// relative to the chunk payload. When `other_patches_pending` is false
    /// the chunk stops needing patches and becomes readable.
    ///
    /// Returns false (and counts `patches_failed`) if the chunk is gone or
    /// any offset is out of bounds; patches before the bad one stay applied.
    pub fn try_patch_chunk_contents(
        &mut self,
        producer_id: u16,
        writer_id: u16,
        chunk_id: u32,
        patches: &[Patch],
        other_patches_pending: bool,
    ) -> bool {
        if self.read_only {
            return false;
        }
        self.index_generation += 1;
        let key = ChunkKey::new(producer_id, writer_id, chunk_id);
        let Some(meta) = self.index.get_mut(&key) else {
            self.stats.patches_failed += 1;
            return false;
        };
        let off = meta.record_off as usize;
        let rec = RecordHeader::decode(&self.data[off..off + RECORD_HEADER_SIZE]);
        let payload_start = off + RECORD_HEADER_SIZE;
        let payload_size = (rec.size as usize).saturating_sub(RECORD_HEADER_SIZE);
        for patch in patches {
            let at = patch.offset_untrusted as usize;
            if payload_size < PATCH_SIZE || at > payload_size - PATCH_SIZE {
                // A malicious producer, or the chunk was recycled meanwhile.
                self.stats.patches_failed += 1;
                return false;
            }
            self.data[payload_start + at..payload_start + at + PATCH_SIZE]
                .copy_from_slice(&patch.data);
        }
        self.stats.patches_succeeded += patches.len() as u64;
        if !other_patches_pending {
            meta.flags &= !FLAG_CHUNK_NEEDS_PATCHING;
            let stored = RecordHeader {
                flags: meta.flags & RECORD_FLAGS_MASK,
                ..rec
            };
            self.data[off..off + RECORD_HEADER_SIZE].copy_from_slice(&stored.encode());
        }
        true
    }
}
