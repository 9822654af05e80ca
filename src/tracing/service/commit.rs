//! CommitData: moving chunks out of a producer's SMB into session buffers,
//! applying out-of-band patches, acknowledging flushes.
//!
//! Everything in the request and in the SMB is untrusted. A bad entry costs
//! the producer only that entry and is counted; the rest of the request is
//! processed.

use crate::pb::protos::mod_CommitDataRequest::ChunksToMove as ChunkToMove;
use crate::pb::protos::CommitDataRequest;
use crate::tracing::core::smb_abi::{
    Chunk, ChunkHeader, SmbAbi, CHUNK_HEADER_SIZE, MAX_PACKET_COUNT, PACKET_COUNT_BITS, PATCH_SIZE,
};

use super::service::TracingService;
use super::trace_buffer::{ChunkPayload, Patch};
use super::types::*;

/// The body of a chunk the service holds (BeingRead, or scraped), read
/// straight out of the producer's shared memory into a trace buffer.
pub(super) struct SmbChunkPayload<'a> {
    pub smb: &'a SmbAbi,
    pub chunk: &'a Chunk,
}

impl ChunkPayload for SmbChunkPayload<'_> {
    fn len(&self) -> usize {
        self.chunk.payload_size()
    }

    fn copy_to(&self, dst: &mut [u8]) {
        // A chunk from the SMB's own layout is always in bounds; never
        // leave the record's old bytes (another producer's) behind anyway.
        if !self.smb.mem().read(self.chunk.payload_offset(), dst) {
            dst.fill(0);
        }
    }
}

/// Patches processed per ChunkToPatch entry (as upstream).
const MAX_PATCHES_PER_CHUNK: usize = 1024;

impl TracingService {
    pub fn commit_data(&mut self, now: u64, producer: ProducerId, req: &CommitDataRequest) {
        if !self.producers.contains_key(&producer) {
            return;
        }
        for mv in &req.chunks_to_move {
            let complete = !mv.chunk_incomplete.unwrap_or(false);
            match &mv.data {
                Some(data) => {
                    if let Some((header, body)) = self.chunk_from_request(data) {
                        self.note_inline_chunk(now, producer, mv.target_buffer, &header);
                        self.copy_chunk(producer, mv.target_buffer, &header, complete, &body);
                    }
                }
                None => self.move_chunk_from_smb(producer, mv, complete),
            }
        }
        for p in &req.chunks_to_patch {
            self.apply_patches(producer, p);
        }
        if let Some(ack) = req.flush_request_id.filter(|&id| id != 0) {
            self.on_flush_ack(now, producer, ack);
        }
        if std::mem::take(&mut self.buffer_half_full) {
            self.write_early(now);
        }
    }

    /// Shmem emulation: the chunk (header included) travels in the request;
    /// its payload is copied from there straight into the trace buffer.
    fn chunk_from_request<'a>(&mut self, data: &'a [u8]) -> Option<(ChunkHeader, &'a [u8])> {
        if data.len() < CHUNK_HEADER_SIZE {
            self.chunks_discarded += 1;
            return None;
        }
        let chunk_id = u32::from_le_bytes(data[0..4].try_into().ok()?);
        let writer_id = u16::from_le_bytes(data[4..6].try_into().ok()?);
        let packets = u16::from_le_bytes(data[6..8].try_into().ok()?);
        let packet_count = packets & MAX_PACKET_COUNT;
        let flags = (packets >> PACKET_COUNT_BITS) as u8;
        let header = ChunkHeader {
            chunk_id,
            writer_id,
            packet_count,
            flags,
        };
        Some((header, &data[CHUNK_HEADER_SIZE..]))
    }

    /// Takes a Complete chunk from the SMB, copies it straight into its
    /// target buffer and frees it.
    fn move_chunk_from_smb(&mut self, producer: ProducerId, mv: &ChunkToMove, complete: bool) {
        let Some(smb) = self.producers.get(&producer).and_then(|p| p.smb.clone()) else {
            self.chunks_discarded += 1;
            return;
        };
        let (Some(page_untrusted), Some(chunk_untrusted)) = (mv.page, mv.chunk) else {
            self.chunks_discarded += 1;
            return;
        };
        let (page_untrusted, chunk_untrusted) = (page_untrusted as usize, chunk_untrusted as usize);
        let Ok(c) = smb.try_acquire_chunk_for_reading(page_untrusted, chunk_untrusted) else {
            self.chunks_discarded += 1;
            return;
        };
        let header = smb.chunk_header(&c);
        let body = SmbChunkPayload {
            smb: &smb,
            chunk: &c,
        };
        self.copy_chunk(producer, mv.target_buffer, &header, complete, &body);
        // Failing to free it only hurts the producer (the chunk stays
        // BeingRead); the data was copied.
        let _ = smb.release_chunk_as_free(c);
    }

    /// ACL checks, then into the target buffer.
    fn copy_chunk(
        &mut self,
        producer: ProducerId,
        target_untrusted: Option<u32>,
        h: &ChunkHeader,
        complete: bool,
        payload: &dyn ChunkPayload,
    ) {
        let Some(p) = self.producers.get_mut(&producer) else {
            return;
        };
        let target = target_untrusted.and_then(|t| u16::try_from(t).ok());
        let allowed = target.filter(|t| p.allowed_buffers.contains(t));
        let writer_ok = match (allowed, p.writers.get(&h.writer_id)) {
            (Some(t), Some(&registered)) => registered == t,
            _ => true,
        };
        let (Some(target), true) = (allowed, writer_ok) else {
            self.chunks_discarded += 1;
            return;
        };
        let client = p.client_identity();
        let Some(buf) = self.buffers.get_mut(&target) else {
            self.chunks_discarded += 1;
            return;
        };
        buf.copy_chunk_from(
            producer,
            client,
            h.writer_id,
            h.chunk_id,
            h.packet_count,
            h.flags,
            complete,
            payload,
        );
        self.buffer_half_full |= buf.written_since_read() > buf.size() as u64 / 2;
    }

    /// Shared-memory emulation: a writer's chunks arrive in id order, so a
    /// jump forward means chunks the producer never sent (it skips one it
    /// cannot send inline); the sessions of the target buffer name them.
    fn note_inline_chunk(
        &mut self,
        now: u64,
        producer: ProducerId,
        target_untrusted: Option<u32>,
        h: &ChunkHeader,
    ) {
        use crate::protozero::{put_str, put_varint, VecStream};
        use crate::schema::service_events::field::CHUNKS_NEVER_ARRIVED;
        let Some(p) = self.producers.get_mut(&producer) else {
            return;
        };
        let step = p
            .inline_chunk_ids
            .get(&h.writer_id)
            .map(|&last| h.chunk_id.wrapping_sub(last));
        // Same id again (a rewrite) or older (out of order): no news.
        if !matches!(step, None | Some(1..=0x7fff_ffff)) {
            return;
        }
        p.inline_chunk_ids.insert(h.writer_id, h.chunk_id);
        let missing = step.map_or(0, |d| d - 1);
        let target = target_untrusted.and_then(|t| u16::try_from(t).ok());
        let Some(target) = target.filter(|t| missing > 0 && p.allowed_buffers.contains(t)) else {
            return;
        };
        if let Some(b) = self.buffers.get_mut(&target) {
            b.note_writer_packet_loss();
        }
        let mut e = VecStream::new();
        let mut m = VecStream::new();
        put_str(&mut m, 1, &p.label());
        put_varint(&mut m, 2, u64::from(missing));
        crate::protozero::put_bytes(&mut e, CHUNKS_NEVER_ARRIVED, m.as_bytes());
        let e = e.into_bytes();
        for s in self.sessions.values_mut() {
            if s.buffers.contains(&target) {
                s.read.faults.pending.push((now, e.clone()));
            }
        }
    }

    fn apply_patches(
        &mut self,
        producer: ProducerId,
        req: &crate::pb::protos::mod_CommitDataRequest::ChunkToPatch,
    ) {
        let Some(p) = self.producers.get_mut(&producer) else {
            return;
        };
        let target = req
            .target_buffer
            .and_then(|t| u16::try_from(t).ok())
            .filter(|t| p.allowed_buffers.contains(t));
        let writer = req
            .writer_id
            .and_then(|w| u16::try_from(w).ok())
            .filter(|&w| w != 0);
        let (Some(target), Some(writer), Some(chunk_id)) = (target, writer, req.chunk_id) else {
            self.patches_discarded += 1;
            return;
        };
        let mut patches = Vec::with_capacity(req.patches.len().min(MAX_PATCHES_PER_CHUNK));
        for patch in req.patches.iter().take(MAX_PATCHES_PER_CHUNK) {
            let data = patch.data.as_deref().unwrap_or(&[]);
            let (Some(offset), Ok(data)) = (patch.offset, <[u8; PATCH_SIZE]>::try_from(data))
            else {
                self.patches_discarded += 1;
                return;
            };
            patches.push(Patch {
                offset_untrusted: offset,
                data,
            });
        }
        let Some(buf) = self.buffers.get_mut(&target) else {
            self.patches_discarded += 1;
            return;
        };
        let more = req.has_more_patches.unwrap_or(false);
        // A failure is counted by the buffer (patches_failed).
        buf.try_patch_chunk_contents(producer, writer, chunk_id, &patches, more);
    }
}
